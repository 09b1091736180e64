"""Overlapping capture ranges of one process (``stream.claims``): the host states of each CPU
thread never overlap, cover the union of the reports' spans, the overlap keeps the earlier
report's states, and the summary's per-thread host time is the trace's Running time."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from prvstream.daemon.cli.main import cli
from prvstream.daemon.synthetic.spec import SynthSpec
from prvstream.daemon.synthetic.synth import write_export
from tests.compat.basicanalysis import analyse
from tests.daemon.overlap import host_states, one_state_at_a_time, overlapping_parts

__all__: list[str] = []


@pytest.mark.parametrize("cuts", [((0.0, 0.7), (0.3, 1.0)), ((0.0, 1.0), (0.2, 0.6))])
def test_overlapping_reports_of_one_process_write_no_overlappinghost_states(
        cuts: tuple[tuple[float, float], ...], tmp_path: Path) -> None:
    parts = overlapping_parts(tmp_path, cuts)
    spans = {}
    for part in parts:
        single = tmp_path / f"single-{part.stem}"
        assert cli("convert", str(part), "-o", str(single), "--no-progress") == 0
        spans[part.stem] = json.loads(single.with_name(single.name + ".summary.json")
                                      .read_text())["captured_ns"]
    out = tmp_path / "both"
    assert cli("convert", *map(str, parts), "-o", str(out), "--no-progress") == 0
    prv = out.with_name(out.name + ".prv")
    states = host_states(prv)
    assert states, "the synthetic export has host threads with CUDA runtime calls"
    summary = json.loads(out.with_name(out.name + ".summary.json").read_text())
    covered = []
    one_state_at_a_time(states)
    for recs in states.values():
        covered.append(sum(e - b for b, e, _ in recs))
    # each thread is covered over the union of the two reports' spans, never more
    union = summary["captured_ns"]
    assert union < sum(spans.values())  # the reports do overlap
    assert all(c == union for c in covered), (covered, union)
    # the summary counts per thread what the trace shows: Running = useful, over the union
    ba = analyse(prv)
    (row,) = summary["host_metrics"]["hosts"]
    assert row["threads"] == ba.host_threads == len(states)
    assert row["thread_captured_ns"] == len(states) * union
    assert row["thread_useful_ns"] == ba.host_useful_ns
    assert summary["host_metrics"]["device_offload_efficiency"] == pytest.approx(
        ba.offload(union), rel=1e-12)


def test_host_time_of_several_reports_is_each_ones_alone(tmp_path: Path) -> None:
    """A multi-report conversion spools each report's feed, host calls included."""
    spec = SynthSpec(ranks=2, steps=4)
    exports = [write_export(tmp_path / f"r{r}.sqlite", spec, r) for r in range(2)]
    alone = []
    for export in exports:
        out = tmp_path / f"alone-{export.stem}"
        assert cli("convert", str(export), "-o", str(out), "--no-progress") == 0
        alone += json.loads(out.with_name(out.name + ".summary.json").read_text())[
            "host_metrics"]["hosts"]
    out = tmp_path / "both"
    assert cli("convert", *map(str, exports), "-o", str(out), "--no-progress") == 0
    both = json.loads(out.with_name(out.name + ".summary.json").read_text())
    rows = both["host_metrics"]["hosts"]
    assert all(r["runtime_ns"] > 0 and r["thread_runtime_ns"] > 0 for r in rows)
    assert sorted(rows, key=lambda r: r["pid"]) == sorted(alone, key=lambda r: r["pid"])


@pytest.mark.parametrize("cuts", [((0.0, 0.7), (0.3, 1.0)), ((0.0, 1.0), (0.2, 0.6)),
                                  ((0.0, 0.5), (0.2, 0.8), (0.4, 1.0))])
def test_gpu_activity_of_overlapping_reports_counts_once(
        cuts: tuple[tuple[float, float], ...], tmp_path: Path) -> None:
    """Capture ranges of one process that together hold one run: the summary's device
    measures are those of the run converted whole (the repeated kernels and copies count
    once, ``efficiency.repeats``), so PE stays a share of the captured time. A later report
    sweeps the rows an earlier one holds too, and counts what its own rows add to them: a
    copy hidden under a kernel only the earlier report counted stays hidden (before, with
    three ranges here, communication was 1.7 % off at the edges of the ranges)."""
    whole, *parts = overlapping_parts(tmp_path, ((0.0, 1.0), *cuts))
    out = {}
    for name, inputs in (("whole", [whole]), ("parts", parts)):
        assert cli("convert", *map(str, inputs), "-o", str(tmp_path / name),
                   "--no-progress") == 0
        out[name] = json.loads((tmp_path / f"{name}.summary.json").read_text())
    exact = ("useful_ns", "captured_ns", "comm_ns", "idle_ns", "overlap_ns", "inflight_ns")
    for w, p in zip(out["whole"]["devices"], out["parts"]["devices"], strict=True):
        assert {k: p[k] for k in exact} == {k: w[k] for k in exact}
    assert out["parts"]["metrics"] == out["whole"]["metrics"]


@pytest.mark.parametrize("cuts", [((0.0, 0.7), (0.3, 1.0)), ((0.0, 0.5), (0.2, 0.8), (0.4, 1.0))])
def test_a_record_overlapping_reports_both_hold_is_written_once(
        cuts: tuple[tuple[float, float], ...], tmp_path: Path) -> None:
    """The trace of overlapping capture ranges that together hold one run has the run's
    events and links, each once, and its GPU rows' states (``stream.dedupe``); the host
    states differ, cut where a range's span ends, and so does an NVTX push/pop range that
    ends where a later range holds its end but not the push of the range around it: that
    one writes 0 beside the earlier range's restoring value (three ranges here)."""
    whole, *parts = overlapping_parts(tmp_path, ((0.0, 1.0), *cuts))
    lines = {}
    for name, inputs in (("whole", [whole]), ("parts", parts)):
        assert cli("convert", *map(str, inputs), "-o", str(tmp_path / name),
                   "--no-progress") == 0
        prv = tmp_path / f"{name}.prv"
        lines[name] = prv.read_text().splitlines()[1:]
        host = host_states(prv)
        lines[name + " gpu states"] = [ln for ln in lines[name] if ln.startswith("1:") and
                                       tuple(map(int, ln.split(":")[3:5])) not in host]
    whole_events = {ln.rsplit(":", 1)[0] for ln in lines["whole"] if ln.startswith("2:")}
    for kind in ("2:", "3:"):
        got = sorted(ln for ln in lines["parts"] if ln.startswith(kind)
                     and not (re.fullmatch(r"2:0:1:\d+:\d+:\d+:9\d00:0", ln)
                              and ln.rsplit(":", 1)[0] in whole_events
                              and ln not in lines["whole"]))
        assert got == sorted(ln for ln in lines["whole"] if ln.startswith(kind)), kind
    assert sorted(lines["parts gpu states"]) == sorted(lines["whole gpu states"])
    assert (tmp_path / "parts.row").read_text() == (tmp_path / "whole.row").read_text()
