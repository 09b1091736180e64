"""Batch conversion of real and bad exports: records in = records out, valid, deterministic."""

from __future__ import annotations

import itertools
import shutil
import sqlite3
from pathlib import Path

import pytest

from prvstream.daemon.cli.main import cli
from prvstream.daemon.config import load_settings
from prvstream.daemon.stream.batch import convert
from prvstream.sinks.paraver import format as pv
from tests.conftest import real_export_params, real_exports
from tests.prv_check import validate


def _count(path: Path, table: str) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name=?", (table,)).fetchone():
            return 0
        return int(con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        con.close()


@pytest.fixture
def settings(tmp_path: Path):
    return load_settings(None, {"state_dir": str(tmp_path / "state")}, environ={})


@pytest.mark.parametrize("export", real_export_params())
def test_real_export_records_in_equal_records_out(export: Path, tmp_path: Path, settings) -> None:
    out = tmp_path / "trace"
    result = convert([str(export)], out, settings)
    stats = validate(out.with_suffix(".prv"), globally_sorted=True)
    assert stats.begins(pv.EV_KERNEL, pv.EV_NCCL) == _count(export, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert stats.events[(pv.EV_KERNEL, False)] + stats.events[(pv.EV_NCCL, False)] == \
        _count(export, "CUPTI_ACTIVITY_KIND_KERNEL")
    memops = _count(export, "CUPTI_ACTIVITY_KIND_MEMCPY") + _count(
        export, "CUPTI_ACTIVITY_KIND_MEMSET")
    assert stats.begins(pv.EV_MEMOP) == memops
    assert stats.begins(pv.EV_API) == _count(export, "CUPTI_ACTIVITY_KIND_RUNTIME")
    assert stats.begins(pv.EV_SYNC) == _count(export, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    assert stats.begins(pv.EV_OSRT) == _count(export, "OSRT_API")
    # one state per kernel and memory operation on the stream threads; on the CPU threads of
    # a report with CUDA runtime calls, states cover the report from its first to its last
    # record: Running outside the calls, the call's state inside
    rows = out.with_suffix(".row").read_text().split("LEVEL THREAD SIZE")[1].splitlines()[1:]
    cpu = {i for i, name in enumerate(rows) if name.startswith("THREAD ")}
    stream_states = 0
    first = stats.end_time
    host: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    index = {}
    for task, n in enumerate(stats.threads_per_task, 1):
        for thread in range(1, n + 1):
            index[(task, thread)] = len(index)
    for line in out.with_suffix(".prv").read_text().splitlines()[1:]:
        f = line.split(":")
        first = min(first, int(f[5]))
        if f[0] != "1":
            continue
        key = (int(f[3]), int(f[4]))
        if index[key] in cpu:
            host.setdefault(key, []).append((int(f[5]), int(f[6]), int(f[7])))
        else:
            stream_states += 1
    assert stream_states == _count(export, "CUPTI_ACTIVITY_KIND_KERNEL") + memops
    assert bool(host) == (_count(export, "CUPTI_ACTIVITY_KIND_RUNTIME") > 0)
    for states in host.values():
        assert states[0][0] == first and states[-1][1] == stats.end_time
        assert all(a[1] == b[0] for a, b in itertools.pairwise(states))  # no gap, no overlap
        assert {st for _, _, st in states} <= {pv.STATE_RUNNING, pv.STATE_SYNC, pv.STATE_MEMORY,
                                               pv.STATE_SCHEDULING, pv.STATE_OTHERS}
    assert result.rows["kernel"] == _count(export, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert result.records == stats.records


@pytest.mark.parametrize("export", real_export_params())
def test_conversion_is_deterministic(export: Path, tmp_path: Path, settings) -> None:
    outputs = []
    for name in ("a", "b"):
        convert([str(export)], tmp_path / name, settings)
        outputs.append([(tmp_path / f"{name}{ext}").read_bytes()
                        for ext in (".prv", ".pcf", ".row")])
    assert outputs[0] == outputs[1]


def test_nvtx_push_pop_nesting_restores_outer_value(tmp_path: Path, settings) -> None:
    exports = [p for p in real_exports() if "torchrun" in p.name]
    if not exports:
        pytest.skip("real torchrun export not available")
    out = tmp_path / "t"
    convert([str(exports[0])], out, settings)
    begun: dict[tuple[str, str], set[str]] = {}
    restores = 0
    for line in out.with_suffix(".prv").read_text().splitlines()[1:]:
        f = line.split(":")
        if f[0] != "2" or f[6] != str(pv.EV_NVTX_PUSHPOP_BASE):
            continue
        assert len(f) == 8
        opened = begun.setdefault((f[3], f[4]), set())
        if f[7] != "0" and f[7] in opened:
            restores += 1  # an end restoring an enclosing range's value
        opened.add(f[7])
    assert restores > 0


def test_multiple_reports_order_independent(tmp_path: Path, settings) -> None:
    found = real_exports()
    if len(found) < 2:
        pytest.skip("needs at least two real exports")
    a, b = str(found[0]), str(found[-1])
    convert([a, b], tmp_path / "ab", settings)
    convert([b, a], tmp_path / "ba", settings)
    for ext in (".prv", ".pcf", ".row"):
        assert (tmp_path / f"ab{ext}").read_bytes() == (tmp_path / f"ba{ext}").read_bytes()
    stats = validate(tmp_path / "ab.prv", globally_sorted=True)
    assert len(stats.threads_per_task) >= 2
    assert stats.nodes == 2


def test_multi_pass_merge_matches_single_pass(tmp_path: Path, settings) -> None:
    found = real_exports()
    if len(found) < 3:
        pytest.skip("needs at least three real exports")
    paths = [str(p) for p in found]
    convert(paths, tmp_path / "wide", settings)
    narrow = load_settings(None, {"fan_in": 2, "chunk_rows": 97}, environ={})
    convert(paths, tmp_path / "narrow", narrow)
    assert (tmp_path / "wide.prv").read_bytes() == (tmp_path / "narrow.prv").read_bytes()


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"this is not a database\n", id="text-file"),
        pytest.param(b"SQLite format 3\x00" + b"\x00" * 50, id="truncated-header"),
        pytest.param(bytes(range(256)) * 64, id="random-bytes"),
    ],
)
def test_bad_input_is_reported_and_others_converted(
    content: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = real_exports()
    if not good:
        pytest.skip("real exports not available")
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(content)
    status = cli("convert", str(bad), str(good[0]), "-o", str(tmp_path / "out"),
                 "--no-progress")
    assert status == 1
    captured = capsys.readouterr()
    assert f"prvstream: error: skipped {bad}: " in captured.err
    assert "(1 input skipped)" in captured.out
    validate(tmp_path / "out.prv")


def test_truncated_copy_of_real_export_is_rejected(tmp_path: Path) -> None:
    good = real_exports()
    if not good:
        pytest.skip("real exports not available")
    copy = tmp_path / "cut.sqlite"
    data = good[0].read_bytes()
    copy.write_bytes(data[: len(data) // 3])
    status = cli("convert", str(copy), "-o", str(tmp_path / "out"), "--no-progress")
    assert status != 0
    assert not (tmp_path / "out.prv").exists()


def test_missing_input_exit_status(tmp_path: Path) -> None:
    status = cli("convert", str(tmp_path / "nope.sqlite"), "-o", str(tmp_path / "o"))
    assert status != 0


def test_directory_input(tmp_path: Path, settings) -> None:
    found = real_exports()
    if not found:
        pytest.skip("real exports not available")
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(found[0], job / "r0.sqlite")
    result = convert([str(job)], tmp_path / "o", settings)
    assert len(result.reports) == 1


def test_gpu_metrics_become_events_on_a_gpu_thread(tmp_path: Path, settings) -> None:
    """GPU_METRICS samples -> event 9400+metricId on the owning process's GPU metrics thread."""
    from prvstream.daemon.synthetic.synth import SynthSpec, write_export

    export = write_export(tmp_path / "r0.sqlite", SynthSpec(ranks=1, steps=2), 0)
    con = sqlite3.connect(export)
    start, end = con.execute(
        "SELECT MIN(start), MAX(end) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    con.execute("CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER NOT NULL, sourceId "
                "INTEGER NOT NULL, typeName TEXT NOT NULL, metricId INTEGER NOT NULL, "
                "metricName TEXT NOT NULL)")
    con.execute("CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER NOT NULL, "
                "metricId INTEGER NOT NULL, value INTEGER NOT NULL)")
    con.executemany("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (0, 0, 'GA100', ?, ?)",
                    [(1, "SM Active [Throughput %]"), (4, "DRAM Read Bandwidth [%]")])
    samples = [(t, 0, m, (t // 1000) % 100) for t in range(start, end, (end - start) // 50)
               for m in (1, 4)]
    con.executemany("INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?)", samples)
    con.commit()
    con.close()
    out = tmp_path / "t"
    result = convert([str(export)], out, settings)
    stats = validate(out.with_suffix(".prv"), globally_sorted=True)
    assert result.rows["gpu_metrics"] == len(samples)
    per_type = stats.events[(pv.EV_GPU_METRIC_BASE + 1, True)] + stats.events[
        (pv.EV_GPU_METRIC_BASE + 1, False)]
    assert per_type == len(samples) // 2
    pcf = out.with_suffix(".pcf").read_text()
    assert "GPU metric: SM Active [Throughput %]" in pcf
    assert "Metrics GPU0" in out.with_suffix(".row").read_text()


@pytest.mark.parametrize(
    ("update", "where"),
    [
        pytest.param("SET start = 'abc'", "planning", id="text-in-start"),
        pytest.param("SET correlationId = 'x'", "streaming", id="text-in-a-column"),
    ],
)
def test_hostile_values_give_a_clear_error(update: str, where: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A file whose columns hold text where nsys writes integers is refused by name, whether
    planning or streaming meets the value, and no partial output is left."""
    found = [p for p in real_exports() if "torch_tiny" in p.name]
    if not found:
        pytest.skip("real exports not available")
    hostile = tmp_path / "hostile.sqlite"
    shutil.copy(found[0], hostile)
    con = sqlite3.connect(hostile)
    con.execute(f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL {update}")
    con.commit()
    con.close()
    status = cli("convert", str(hostile), "-o", str(tmp_path / "out"), "--no-progress",
                 "--log-json")
    captured = capsys.readouterr()
    assert status != 0
    assert "hostile.sqlite" in captured.out + captured.err
    assert "Traceback" not in captured.err
    assert not (tmp_path / "out.prv").exists()
    assert not list(tmp_path.glob(".out.prv.*"))


@pytest.mark.parametrize("reader", [True, False], ids=["reader-process", "in-process"])
def test_an_export_replaced_while_it_is_converted_fails_and_writes_nothing(
        tmp_path: Path, reader: bool) -> None:
    """Connections opened by path after planning (the reader process, the compiled row
    reader, a reopen) must not read another file than the one planned: a conversion whose
    export is replaced while its rows are read fails with ``ExportChanged`` and leaves no
    output behind."""
    import os

    from prvstream.daemon.synthetic.spec import SynthSpec, export_name
    from prvstream.daemon.synthetic.synth import write_export
    from prvstream.sinks.efficiency import EfficiencyModel
    from prvstream.sinks.errors import ExportChanged

    spec = SynthSpec(ranks=2, steps=40, layers=4, seed=3)
    (tmp_path / "src").mkdir()
    path, other = (write_export(tmp_path / "src" / export_name(spec, r), spec, r)
                   for r in range(2))
    settings = load_settings(None, {"state_dir": str(tmp_path / "state"), "chunk_rows": 512,
                                    "reader": reader}, environ={})
    replaced: list[int] = []

    def replace_once(done: int, total: int) -> None:
        if not replaced:
            spare = tmp_path / "spare.sqlite"
            shutil.copyfile(other, spare)
            os.replace(spare, path)
            replaced.append(done)

    out = tmp_path / "out" / "trace"
    with pytest.raises(ExportChanged, match="changed while it was read"):
        convert([str(path)], out, settings, EfficiencyModel("job"), progress=replace_once,
                summary_jsonl=out.with_name("trace.summary.jsonl"))
    assert replaced and replaced[0] < 10 ** 6
    assert sorted(p.name for p in out.parent.iterdir()) == []
    # the file now at the path converts as itself
    convert([str(path)], out, settings, EfficiencyModel("job"))
    assert out.with_name("trace.prv").stat().st_size > 0
