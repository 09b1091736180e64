"""Summary records: JSON round trips, the crash-safe writer, readers, table, Prometheus, plot."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import msgspec
import numpy as np
import pytest

from prvstream.sinks.base import (
    ACTIVITY_DTYPE,
    PHASE_DTYPE,
    ActivityKind,
    DeviceInfo,
    ProcessInfo,
    ReportInfo,
)
from prvstream.sinks.efficiency import EfficiencyModel, feed_report
from prvstream.sinks.errors import OutputConflict, PrvstreamError
from prvstream.sinks.summary import (
    SCHEMA_VERSION,
    DeviceRow,
    Metrics,
    SummaryRecord,
    SummaryState,
    SummaryWriter,
    decode_state,
    encode_record,
    fold,
    load_summary,
    plot_summary,
    prometheus_text,
    read_records,
    render_table,
    verdict,
    write_prom_file,
)

C, N, M = int(ActivityKind.COMPUTE), int(ActivityKind.NCCL), int(ActivityKind.MEMCPY)


def _inputs() -> list[tuple[ReportInfo, np.ndarray, np.ndarray]]:
    """Two ranks: rank 1 computes half as long (load imbalance), both with some NCCL."""
    out = []
    for rank, work in ((0, 800), (1, 400)):
        info = ReportInfo(
            report_id=f"rank{rank}.sqlite",
            processes=[ProcessInfo(host=f"node{rank}", pid=100 + rank, rank=rank)],
            devices=[DeviceInfo(host=f"node{rank}", device=0, process=0, rank=rank)],
            origin_wall_ns=1_700_000_000_000_000_000, start_ns=0, end_ns=1000,
            phase_names=["step"])
        act = np.array([(0, work, 0, 0, C), (work, work + 100, 0, 1, N),
                        (work + 50, work + 120, 0, 2, M)], dtype=ACTIVITY_DTYPE)
        ph = np.array([(0, 500, 0, 0), (500, 1000, 0, 0)], dtype=PHASE_DTYPE)
        out.append((info, act, ph))
    return out


def _feed(path: Path) -> tuple[EfficiencyModel, SummaryWriter, list[int]]:
    model = EfficiencyModel("job1", window_ns=500, gap_threshold_ns=10)
    writer = SummaryWriter(path)
    lengths = []
    for info, act, ph in _inputs():
        feed_report(model, info, act, ph)
        lengths.append(writer.append_many(model.take_updates()))
    return model, writer, lengths


def test_record_and_state_round_trip_through_json(tmp_path: Path) -> None:
    model, _, _ = _feed(tmp_path / "summary.jsonl")
    state = model.state()
    SummaryWriter.write_state(state, tmp_path / "summary.json")
    back = decode_state((tmp_path / "summary.json").read_bytes())
    assert back == state
    for rec in [*state.windows, *state.phases]:
        assert msgspec.json.decode(encode_record(rec), type=SummaryRecord) == rec
    raw = msgspec.json.decode((tmp_path / "summary.json").read_bytes())
    # the fixed keys tools read
    assert raw["schema"] == SCHEMA_VERSION and raw["job"] == "job1" and raw["span_ns"] == 1000
    assert set(raw["metrics"]) == {"load_balance", "communication_efficiency",
                                   "orchestration_efficiency", "parallel_efficiency"}
    assert {"host", "device", "useful_ns", "comm_ns", "idle_ns", "overlap_ns"} <= set(
        raw["devices"][0])
    assert all(isinstance(raw["devices"][0][k], int) for k in ("useful_ns", "comm_ns"))


def test_readers_accept_newer_and_older_records() -> None:
    newer = (b'{"schema":7,"job":"j","view":"cumulative","start_ns":0,"end_ns":5,"span_ns":5,'
             b'"metrics":{"load_balance":1.0,"communication_efficiency":1.0,'
             b'"orchestration_efficiency":1.0,"parallel_efficiency":1.0,"future":2},'
             b'"devices":[{"host":"h","device":0,"useful_ns":5,"comm_ns":0,"idle_ns":0,'
             b'"overlap_ns":0,"energy_j":3}],"brand_new":[1,2]}')
    state = decode_state(newer)
    assert state.schema == 7 and state.devices[0].useful_ns == 5
    assert state.devices[0].inflight_ns == [0, 0, 0, 0, 0] and state.windows == []


def test_writer_lengths_truncate_and_recompute_are_byte_identical(tmp_path: Path) -> None:
    path = tmp_path / "summary.jsonl"
    _, writer, lengths = _feed(path)
    full = path.read_bytes()
    assert lengths[-1] == len(full) == writer.length
    # crash after report 2 was written but before the journal committed it
    writer.truncate_to(lengths[0])
    assert path.stat().st_size == lengths[0]
    # recovery: re-feed report 1 silently, then report 2 for real
    model = EfficiencyModel("job1", window_ns=500, gap_threshold_ns=10)
    reopened = SummaryWriter(path)
    assert reopened.length == lengths[0]
    (first, second) = _inputs()
    feed_report(model, *first)
    model.take_updates()
    feed_report(model, *second)
    assert reopened.append_many(model.take_updates()) == lengths[1]
    assert path.read_bytes() == full


def test_writer_refuses_symlinks_and_foreign_files(tmp_path: Path) -> None:
    foreign = tmp_path / "notes.jsonl"
    foreign.write_text("my own notes\n")
    with pytest.raises(OutputConflict, match="not a prvstream summary"):
        SummaryWriter(foreign)
    link = tmp_path / "summary.jsonl"
    link.symlink_to(foreign)
    with pytest.raises(OutputConflict, match="symlink"):
        SummaryWriter(link)
    with pytest.raises(OutputConflict, match="symlink"):
        write_prom_file(link, fold([]))
    assert foreign.read_text() == "my own notes\n"


def test_read_records_leaves_a_partial_line_for_later(tmp_path: Path) -> None:
    path = tmp_path / "summary.jsonl"
    _feed(path)
    data = path.read_bytes()
    cut = data.rfind(b"\n", 0, len(data) - 1) + 20
    path.write_bytes(data[:cut])
    recs, offset = read_records(path)
    assert offset == data.rfind(b"\n", 0, len(data) - 1) + 1
    path.write_bytes(data)
    more, end = read_records(path, offset)
    assert len(more) == 1 and end == len(data)
    assert fold(recs + more) == load_summary(path)[0]


def test_fold_keeps_latest_cumulative_and_every_window_and_phase(tmp_path: Path) -> None:
    path = tmp_path / "summary.jsonl"
    model, _, _ = _feed(path)
    state, history = load_summary(path)
    assert state == model.state()
    assert [h.reports for h in history] == [1, 2]
    assert [w.index for w in state.windows] == [3_400_000_000_000_000, 3_400_000_000_000_001]
    assert [(p.name, p.index) for p in state.phases] == [("step", 0), ("step", 1)]


def _state(lb: float, ce: float, oe: float) -> SummaryState:
    return SummaryState(
        schema=1, job='job"1', view="cumulative", start_ns=0, end_ns=2_000_000_000,
        span_ns=2_000_000_000, reports=2,
        metrics=Metrics(load_balance=lb, communication_efficiency=ce,
                        orchestration_efficiency=oe, parallel_efficiency=lb * ce * oe),
        devices=[DeviceRow(host="a", device=0, useful_ns=1_500_000_000, comm_ns=250_000_000,
                           idle_ns=250_000_000, overlap_ns=0),
                 DeviceRow(host="b", device=1, useful_ns=500_000_000, comm_ns=0,
                           idle_ns=1_500_000_000, overlap_ns=0, rank=3)])


@pytest.mark.parametrize(("lb", "ce", "oe", "expected"), [
    pytest.param(0.5, 0.9, 0.95, "load imbalance (LB  50.0%)", id="lb"),
    pytest.param(0.9, 0.6, 0.95, "communication (CE  60.0%)", id="ce"),
    pytest.param(0.9, 0.9, 0.3, "orchestration (OE  30.0%)", id="oe"),
])
def test_verdict_names_the_smallest_factor(lb: float, ce: float, oe: float,
                                           expected: str) -> None:
    m = _state(lb, ce, oe).metrics
    assert verdict(m) == f"verdict: dominant loss is {expected}"
    assert verdict(m, 0) == "verdict: no data yet"


def test_table_shows_percentages_and_devices_worst_first() -> None:
    text = render_table(_state(0.5, 0.9, 0.95))
    lines = text.splitlines()
    assert lines[0] == 'job job"1: 2 report(s), 2 device(s), span 2.000 s'
    assert "  parallel efficiency         42.8%" in lines
    assert "dominant loss is load imbalance" in text
    rows = [ln for ln in lines if ln.startswith("  a ") or ln.startswith("  b ")]
    assert [r.split()[0] for r in rows] == ["b", "a"]  # lowest useful first
    assert rows[0].split()[3] == "25.0%"


def test_prometheus_text_exact_lines(tmp_path: Path) -> None:
    state = _state(0.5, 1.0, 1.0)
    text = prometheus_text(state)
    assert 'prvstream_parallel_efficiency{job="job\\"1"} 0.5' in text.splitlines()
    assert "# TYPE prvstream_load_balance gauge" in text
    assert 'prvstream_device_useful_seconds{job="job\\"1",host="b",device="1"} 0.5' in text
    assert 'prvstream_device_idle_seconds{job="job\\"1",host="b",device="1"} 1.5' in text
    assert 'prvstream_span_seconds{job="job\\"1"} 2.0' in text
    prom = tmp_path / "prvstream.prom"
    write_prom_file(prom, state)
    assert prom.read_text() == text
    assert os.listdir(tmp_path) == ["prvstream.prom"]  # no temp files left behind


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    _feed(tmp_path / "summary.jsonl")
    state, history = load_summary(tmp_path / "summary.jsonl")
    plot_summary(state, history, tmp_path / "out.png")
    assert (tmp_path / "out.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_install(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PrvstreamError, match=r"pip install matplotlib .*\.\[plot\]"):
        plot_summary(_state(1, 1, 1), [], tmp_path / "out.png")


def test_append_many_streams_a_generator_and_rolls_back_a_failure(tmp_path: Path) -> None:
    model = EfficiencyModel("j", window_ns=250)
    for info, act, ph in _inputs():
        feed_report(model, info, act, ph)
    records = model.take_updates()
    writer = SummaryWriter(tmp_path / "summary.jsonl")
    length = writer.append_many(r for r in records)
    assert length == sum(len(encode_record(r)) for r in records)
    assert read_records(writer.path)[0] == records

    def broken():  # type: ignore[no-untyped-def]
        yield from records
        raise RuntimeError("model failed mid-way")

    with pytest.raises(RuntimeError):
        writer.append_many(broken())
    assert writer.path.stat().st_size == writer.length == length  # nothing half-committed
    assert writer.append_many(iter(())) == length


def test_state_lists_name_totals_and_older_readers_still_end_on_cumulative(
        tmp_path: Path) -> None:
    model = EfficiencyModel("j", window_ns=250, recent=1)
    for info, act, ph in _inputs():
        feed_report(model, info, act, ph)
    records = model.take_updates()
    # a reader before schema 2 took any unknown view for the cumulative one: each update
    # still ends its non-window, non-phase records on the cumulative record
    last_other = [r.view for r in records if r.view not in ("window", "phase")][-1]
    assert last_other == "cumulative"
    state = model.state()
    assert state.recent == 1 and [p.index for p in state.phases] == [1]
    assert [w.index for w in state.windows] == [6_800_000_000_000_003]
    (total,) = state.phase_totals
    assert (total.view, total.name, total.index, total.span_ns) == ("phase_total", "step", 2,
                                                                     1000)
    assert decode_state(msgspec.json.encode(state)) == state
    table = render_table(state, "phase")
    assert "per phase name, all instances" in table and "step" in table
    prom = prometheus_text(state)
    assert 'prvstream_phase_parallel_efficiency{job="j",phase="step"}' in prom
    assert 'prvstream_phase_instances{job="j",phase="step"} 2.0' in prom
    # an older state (schema 1) without the new fields still loads
    raw = msgspec.json.decode(msgspec.json.encode(state))
    for key in ("phase_totals", "recent"):
        raw.pop(key)
    raw["schema"] = 1
    old = decode_state(msgspec.json.encode(raw))
    assert old.phase_totals == [] and old.recent == 0


def test_the_kept_records_wait_on_disk_and_summary_json_is_spliced_from_them(
        tmp_path: Path) -> None:
    """The model's folded state holds keys, not records; its ``summary.json`` bytes are those
    of the decoded state, its head (``convert``'s closing lines) is the state's, and a folder
    restored from them continues identically."""
    from prvstream.sinks.summary.spill import SpilledFolder

    model, _, _ = _feed(tmp_path / "summary.jsonl")
    folder = model._folder
    assert isinstance(folder, SpilledFolder)
    held = [*folder.windows.values(), *folder.totals.values(),
            *(r for by_occ in folder.phases.values() for r in by_occ.values())]
    assert held and all(not r.devices for r in held)  # placeholders: nothing per device
    state = model.state()
    assert len(state.windows) == 2 and len(state.phases) == 2 and state.devices
    assert model.state_json() == encode_record(state)
    for m, st in ((model, state), (EfficiencyModel("none"), EfficiencyModel("none").state())):
        head = m.head()  # what convert prints, decoded from the cumulative record alone
        assert (head.span_ns, head.metrics, head.verdict, head.notes, len(head.devices)) == (
            st.span_ns, st.metrics, st.verdict, st.notes, len(st.devices))
    again = SpilledFolder(state, recent=1)
    assert again.state_json() == encode_record(fold([], state, recent=1))
    small = SpilledFolder(recent=1)
    for r in [*state.windows, *state.phases]:
        small.add(r)
    assert [w.index for w in small.state().windows] == [state.windows[-1].index]
    assert small.state_json() == encode_record(small.state())


def test_the_spilled_records_file_is_rewritten_without_its_dead_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prvstream.sinks.summary import spill

    monkeypatch.setattr(spill, "_COMPACT_BYTES", 0)
    model, _, _ = _feed(tmp_path / "summary.jsonl")
    state = model.state()
    folder = spill.SpilledFolder(recent=2)
    for _ in range(5):  # every record replaced: the file keeps only the latest of each
        for r in [*state.windows, *state.phases, *state.phase_totals]:
            folder.add(r)
    assert folder._live == sum(r.length for r in folder.refs.values())
    assert folder._file.end <= 2 * folder._live  # 5 copies of each were written: dead ones dropped
    assert folder.state().windows == state.windows and folder.state().phases == state.phases
