"""Host metrics (BasicAnalysis / TALP) on hand-computed jobs: CUDA runtime and MPI time per
host process, device offload efficiency, MPI load balance and communication efficiency."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

import numpy as np
import pytest

from prvstream.daemon.config import load_settings
from prvstream.daemon.stream.batch import convert
from prvstream.sinks.base import HOST_DTYPE, HostKind, ProcessInfo, feed_interleaved
from prvstream.sinks.efficiency import EfficiencyModel, merge
from prvstream.sinks.efficiency.host import host_metrics
from prvstream.sinks.report import render_html
from prvstream.sinks.summary.views import pct, render_table
from tests.conftest import real_export_params, real_exports
from tests.sinks.test_efficiency import C, acts, phases, report
from tests.sinks.test_report import _dom, _text

RT, MPI = int(HostKind.RUNTIME), int(HostKind.MPI)


def calls(rows: list[tuple[int, ...]]) -> np.ndarray:
    """(start, end, process, kind[, thread]) rows (thread 0 when not given)."""
    return np.array([(*r, 0)[:5] for r in rows], dtype=HOST_DTYPE)


def _run(model: EfficiencyModel, rid: str, pid: int, start: int, end: int,
         host_rows: list[tuple[int, ...]], *, rank: int | None = None) -> None:
    model.begin_report(report(rid, "n0", pid, rank, [pid], start, end))
    model.add_activity(acts([(start, start + 1, 0, 0, C)]))
    model.add_host(calls(sorted(host_rows)))  # in start order, as the pipeline feeds them
    model.end_report()


def test_runtime_time_is_the_union_over_threads_and_doe_follows() -> None:
    model = EfficiencyModel("j", window_ns=50)
    # overlapping calls of two threads: union [10, 30) + [60, 65) = 25 ns of 100
    _run(model, "a", 1, 0, 100, [(10, 20, 0, RT), (15, 30, 0, RT), (60, 65, 0, RT)])
    hm = model.state().host_metrics
    assert hm is not None
    (row,) = hm.hosts
    assert (row.captured_ns, row.runtime_ns, row.mpi_ns, row.useful_ns) == (100, 25, 0, 75)
    assert hm.device_offload_efficiency == pytest.approx(75 / 100)
    assert hm.parallel_efficiency == hm.device_offload_efficiency  # no MPI: PE = DOE
    assert hm.mpi_parallel_efficiency is hm.load_balance is hm.communication_efficiency is None
    windows = {w.index: w.host_metrics for w in model.state().windows}
    assert windows[0] is not None and windows[1] is not None
    assert windows[0].hosts[0].runtime_ns == 20  # [10, 30) in [0, 50)
    assert windows[1].hosts[0].runtime_ns == 5
    assert windows[0].device_offload_efficiency == pytest.approx(30 / 50)


def test_offload_efficiency_counts_every_host_thread_and_the_process_unit_is_kept() -> None:
    model = EfficiencyModel("j", window_ns=1000)
    info = report("a", "n0", 1, None, [1], 0, 100)
    # threads 7 (launcher), 8 (a helper also in the runtime) and 9 (idle, given states)
    info.processes[0] = ProcessInfo(host="n0", pid=1, threads=[7, 8, 9])
    model.begin_report(info)
    model.add_activity(acts([(0, 1, 0, 0, C)]))
    model.add_host(calls([(10, 60, 0, RT, 7), (40, 90, 0, RT, 8)]))
    model.end_report()
    hm = model.state().host_metrics
    assert hm is not None
    (row,) = hm.hosts
    assert (row.runtime_ns, row.useful_ns) == (80, 20)  # process: union [10, 90)
    assert (row.threads, row.thread_captured_ns, row.thread_runtime_ns,
            row.thread_useful_ns) == (3, 300, 100, 200)
    assert hm.device_offload_efficiency == pytest.approx(200 / 300)
    assert hm.process_offload_efficiency == pytest.approx(20 / 100)
    assert hm.parallel_efficiency == hm.device_offload_efficiency


def test_mpi_load_balance_and_communication_over_two_ranks() -> None:
    model = EfficiencyModel("j", window_ns=1000)
    _run(model, "r0", 1, 0, 100, [(0, 10, 0, RT), (50, 70, 0, MPI)], rank=0)
    _run(model, "r1", 2, 0, 100, [(0, 30, 0, RT), (60, 70, 0, MPI)], rank=1)
    hm = model.state().host_metrics
    assert hm is not None
    useful = [100 - 10 - 20, 100 - 30 - 10]  # 70, 60
    assert [r.useful_ns for r in hm.hosts] == useful
    assert [r.rank for r in hm.hosts] == [0, 1]
    doe = sum(useful) / (sum(useful) + 10 + 30)
    lb = (sum(useful) / 2) / max(useful)
    ce = max(useful) / 100
    assert hm.device_offload_efficiency == pytest.approx(doe)
    assert hm.load_balance == pytest.approx(lb)
    assert hm.communication_efficiency == pytest.approx(ce)
    assert hm.mpi_parallel_efficiency == pytest.approx(lb * ce)
    assert hm.parallel_efficiency == pytest.approx(lb * ce * doe)


def test_calls_outside_the_report_are_clipped_and_slices_add_captured_time() -> None:
    model = EfficiencyModel("j", window_ns=1000)
    _run(model, "s0", 1, 100, 200, [(90, 110, 0, RT)])
    _run(model, "s1", 1, 500, 600, [(590, 650, 0, RT)])
    hm = model.state().host_metrics
    assert hm is not None
    (row,) = hm.hosts
    assert (row.captured_ns, row.runtime_ns) == (200, 20)  # the gap [200, 500) not captured


def test_phases_count_each_process_inside_its_own_occurrence() -> None:
    model = EfficiencyModel("j", window_ns=1000)
    for pid, (a, b) in ((1, (10, 50)), (2, (20, 80))):
        model.begin_report(report(f"r{pid}", "n0", pid, pid - 1, [pid], 0, 100,
                                  phase_names=["step#0"]))
        model.add_activity(acts([(0, 1, 0, 0, C)]))
        model.add_phases(phases([(a, b, 0, 0)]))
        # runtime [0, 30) and [40, 60): inside the phase [10, 30) + [40, 50) for pid 1 (30 of
        # 40), [20, 30) + [40, 60) for pid 2 (30 of 60)
        model.add_host(calls([(0, 30, 0, RT), (40, 60, 0, RT)]))
        model.end_report()
    state = model.state()
    (inst,) = state.phases
    hm = inst.host_metrics
    assert hm is not None
    assert [(r.captured_ns, r.runtime_ns) for r in hm.hosts] == [(40, 30), (60, 30)]
    assert hm.device_offload_efficiency == pytest.approx(40 / 100)
    (total,) = state.phase_totals
    assert total.host_metrics == hm  # one instance: the total is that instance


def test_degenerate_cases() -> None:
    empty = host_metrics([], mpi=False)
    assert empty.parallel_efficiency is None and empty.device_offload_efficiency is None
    idle = host_metrics([("h", 1, None, 0, 0, 0)], mpi=True)
    assert idle.hosts[0].device_offload_efficiency is None
    all_mpi = host_metrics([("h", 1, 0, 10, 0, 10), ("h", 2, 1, 10, 0, 10)], mpi=True)
    assert all_mpi.load_balance == 1.0 and all_mpi.communication_efficiency == 0.0
    assert all_mpi.parallel_efficiency is None  # no useful and no runtime time: DOE unknown


def _runtime_union(export: Path, per_thread: bool = False) -> dict[int, int]:
    """pid -> length of the union of its CUDA runtime/driver call intervals, from SQL (with
    ``per_thread``: the sum over its threads of each thread's union)."""
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    by_key: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for gtid, start, end in con.execute(
            "SELECT globalTid, start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start"):
        key = ((gtid >> 24) & 0xFFFFFF, gtid & 0xFFFFFF if per_thread else 0)
        by_key.setdefault(key, []).append((start, max(end, start)))
    con.close()
    out: dict[int, int] = {}
    for (pid, _), calls_ in by_key.items():
        total, reach = 0, None
        for start, end in calls_:
            if reach is None or start >= reach:
                total += end - start
                reach = end
            elif end > reach:
                total += end - reach
                reach = end
        out[pid] = out.get(pid, 0) + total
    return out


@pytest.mark.parametrize("export", real_export_params())
def test_real_export_runtime_time_matches_sql_per_process(export: Path, tmp_path: Path) -> None:
    settings = load_settings(None, {}, environ={})
    model = EfficiencyModel("real")
    convert([str(export)], tmp_path / "t", settings, model=model)
    hm = model.state().host_metrics
    assert hm is not None
    expected = _runtime_union(export)
    assert {r.pid: r.runtime_ns for r in hm.hosts} == expected
    assert all(r.mpi_ns == 0 for r in hm.hosts)  # no MPI tables in these exports
    assert hm.mpi_parallel_efficiency is None and hm.load_balance is None
    useful = [r.captured_ns - r.runtime_ns for r in hm.hosts]
    assert [r.useful_ns for r in hm.hosts] == useful
    pdoe = sum(useful) / (sum(useful) + sum(expected.values()))
    assert hm.process_offload_efficiency == pytest.approx(pdoe, rel=1e-12)
    # per host thread (BasicAnalysis): each thread's own union; every CPU thread counts
    per_thread = _runtime_union(export, per_thread=True)
    assert {r.pid: r.thread_runtime_ns for r in hm.hosts} == per_thread
    assert all(r.thread_captured_ns == r.threads * r.captured_ns for r in hm.hosts)
    t_useful = [r.thread_captured_ns - r.thread_runtime_ns for r in hm.hosts]
    assert [r.thread_useful_ns for r in hm.hosts] == t_useful
    doe = sum(t_useful) / (sum(t_useful) + sum(per_thread.values()))
    assert hm.device_offload_efficiency == pytest.approx(doe, rel=1e-12)
    assert hm.parallel_efficiency == hm.device_offload_efficiency


def test_text_view_and_html_report_show_the_host_metrics(tmp_path: Path) -> None:
    model = EfficiencyModel("j", window_ns=1000)
    _run(model, "r0", 1, 0, 100, [(0, 10, 0, RT), (50, 70, 0, MPI)], rank=0)
    _run(model, "r1", 2, 0, 100, [(0, 30, 0, RT), (60, 70, 0, MPI)], rank=1)
    state = model.state()
    hm = state.host_metrics
    assert hm is not None and hm.device_offload_efficiency is not None
    text = render_table(state)
    assert f"device offload eff.      {pct(hm.device_offload_efficiency)}" in text
    assert f"MPI load balance       {pct(130 / 2 / 70)}" in text
    assert "host PE" in render_table(state, "window")
    html = render_html(state)
    assert f'id="host-doe">{100 * hm.device_offload_efficiency:.1f}%<' in html
    assert 'id="host-lb">92.9%<' in html  # 65 / 70
    no_mpi = EfficiencyModel("j")
    _run(no_mpi, "a", 1, 0, 100, [(10, 20, 0, RT)])
    assert 'id="host-mpi-pe">n/a<' in render_html(no_mpi.state())
    assert "MPI parallel efficiency     n/a" in render_table(no_mpi.state())


def test_chromium_shows_the_host_metrics(tmp_path: Path) -> None:
    model = EfficiencyModel("j")
    _run(model, "a", 1, 0, 100, [(10, 20, 0, RT)])
    page = tmp_path / "report.html"
    page.write_text(render_html(model.state()), encoding="utf-8")
    dom = _dom(page, tmp_path)
    assert _text(dom, "host-doe") == "90.0%" and _text(dom, "host-pe") == "90.0%"
    assert _text(dom, "host-lb") == "n/a"


def test_merging_slices_renumbers_the_host_phase_occurrences() -> None:
    def run(slices: list[tuple[int, int]]) -> EfficiencyModel:
        model = EfficiencyModel("j", window_ns=1000)
        for k, start in slices:
            model.begin_report(report(f"s{k}", "h", 1, 0, [0], start, start + 100,
                                      phase_names=["step"]))
            feed_interleaved(model, acts([(start, start + 1, 0, 0, C)]),
                             phases([(start + 10, start + 50, 0, 0)]), 4)
            model.add_host(calls([(start, start + 30 + k, 0, RT)]))
            model.end_report()
        return model

    whole = run([(0, 0), (1, 200)])
    merged = merge(run([(1, 200)]).partial(), run([(0, 0)]).partial())
    assert merged.hosts == whole.partial().hosts
    assert merged.hosts[0].instances["step"].values == [20, 0, 21, 0]
    rebuilt = EfficiencyModel.from_partial(merged).state()
    assert [p.host_metrics for p in rebuilt.phases] == [p.host_metrics
                                                        for p in whole.state().phases]


def test_real_export_phase_runtime_time_matches_sql() -> None:
    export = next((p for p in real_exports() if "saxpy" in p.name), None)
    if export is None:
        pytest.skip("the saxpy export (NVTX 'saxpy' ranges) is not among the real exports")
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    ranges = con.execute(
        "SELECT n.start, n.end FROM NVTX_EVENTS AS n LEFT JOIN StringIds AS s "
        "ON s.id = n.textId WHERE COALESCE(n.text, s.value) = 'saxpy' ORDER BY n.start"
    ).fetchall()
    runtime = sorted(con.execute("SELECT start, max(end, start) FROM "
                                 "CUPTI_ACTIVITY_KIND_RUNTIME").fetchall())
    con.close()
    merged: list[list[int]] = []
    for start, end in runtime:  # one process: the union of its calls
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    inside = sum(max(0, min(e, b) - max(s, a)) for s, e in ranges for a, b in merged)
    settings = load_settings(None, {"phase_pattern": "^saxpy$"}, environ={})
    model = EfficiencyModel("real")
    with tempfile.TemporaryDirectory() as out:
        convert([str(export)], Path(out) / "t", settings, model=model)
    (total,) = model.state().phase_totals
    assert total.host_metrics is not None
    (row,) = total.host_metrics.hosts
    assert (row.captured_ns, row.runtime_ns) == (sum(e - s for s, e in ranges), inside)
    assert len(ranges) == total.index == 5 and inside > 0
