"""The efficiency model: hand-computed cases, the three views, and invariants under hypothesis."""

from __future__ import annotations

import math

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prvstream.sinks.base import (
    ACTIVITY_DTYPE,
    PHASE_DTYPE,
    ActivityKind,
    DeviceInfo,
    ProcessInfo,
    ReportInfo,
)
from prvstream.sinks.efficiency import EfficiencyModel, feed_report, job_metrics, summarize
from prvstream.sinks.summary import Metrics, SummaryRecord

C, N, M, S = (int(ActivityKind.COMPUTE), int(ActivityKind.NCCL), int(ActivityKind.MEMCPY),
              int(ActivityKind.MEMSET))


def acts(rows: list[tuple[int, int, int, int, int]]) -> np.ndarray:
    """(start, end, device, stream, kind) rows."""
    return np.array(rows, dtype=ACTIVITY_DTYPE)


def phases(rows: list[tuple[int, int, int, int]]) -> np.ndarray:
    """(start, end, process, name) rows."""
    return np.array(rows, dtype=PHASE_DTYPE)


def report(rid: str, host: str, pid: int, rank: int | None, gpus: list[int], start: int,
           end: int, origin: int = 0, phase_names: list[str] | None = None) -> ReportInfo:
    return ReportInfo(
        report_id=rid, processes=[ProcessInfo(host=host, pid=pid, rank=rank)],
        devices=[DeviceInfo(host=host, device=g, process=0, rank=rank) for g in gpus],
        origin_wall_ns=origin, start_ns=start, end_ns=end, phase_names=phase_names or [])


def dev(record: SummaryRecord, host: str, device: int):  # type: ignore[no-untyped-def]
    (row,) = [d for d in record.devices if d.host == host and d.device == device]
    return row


def assert_identity(m: Metrics) -> None:
    for v in (m.load_balance, m.communication_efficiency, m.orchestration_efficiency,
              m.parallel_efficiency):
        assert 0.0 <= v <= 1.0 + 1e-12
    assert math.isclose(m.parallel_efficiency,
                        m.load_balance * m.communication_efficiency * m.orchestration_efficiency,
                        rel_tol=1e-9, abs_tol=1e-12)


# --- hand-computed ground truth ----------------------------------------------------------------

#: GPU 0: compute on streams 0 and 1 overlapping, a memcpy half hidden under compute, an NCCL
#: kernel; GPU 1: a memset only (communication only); GPU 2: nothing (idle device)
HAND = acts([
    (0, 40, 0, 0, C), (10, 60, 0, 1, C), (20, 30, 1, 0, S), (50, 70, 0, 2, M), (80, 90, 0, 0, N),
])


def test_hand_computed_devices_and_metrics() -> None:
    info = report("r0", "h", 1, 0, [0, 1, 2], 0, 100)
    state = summarize("j", [(info, HAND, None)], window_ns=50, gap_threshold_ns=5)
    assert (state.start_ns, state.end_ns, state.span_ns) == (0, 100, 100)
    d0, d1, d2 = dev(state, "h", 0), dev(state, "h", 1), dev(state, "h", 2)
    # GPU 0: compute union [0,60) = 60; memcpy [50,70) minus compute = 10, NCCL 10 -> comm 20;
    # hidden comm [50,60) = 10 of 30 total; busy [0,70)+[80,90): gaps [70,80) and [90,100)
    assert (d0.useful_ns, d0.comm_ns, d0.idle_ns, d0.overlap_ns) == (60, 20, 20, 10)
    assert d0.overlap_share == pytest.approx(1 / 3)
    # kernels in flight: 1 on [0,10)+[40,60)+[80,90) = 40, 2 on [10,40) = 30, 0 elsewhere = 30
    assert d0.inflight_ns == [30, 40, 30, 0, 0]
    assert (d0.gaps, d0.gap_ns) == (2, 20)
    assert (d1.useful_ns, d1.comm_ns, d1.idle_ns, d1.overlap_ns) == (0, 10, 90, 0)
    assert (d1.gaps, d1.gap_ns) == (2, 90)  # [0,20) and [30,100)
    assert (d2.useful_ns, d2.comm_ns, d2.idle_ns, d2.gaps, d2.gap_ns) == (0, 0, 100, 1, 100)
    assert d2.inflight_ns == [100, 0, 0, 0, 0]
    m = state.metrics
    # useful = [60, 0, 0]: LB = 20/60; CE = 60/80; OE = 80/100; PE = 60/300
    assert m.load_balance == pytest.approx(1 / 3)
    assert m.communication_efficiency == pytest.approx(0.75)
    assert m.orchestration_efficiency == pytest.approx(0.8)
    assert m.parallel_efficiency == pytest.approx(0.2)
    assert_identity(m)
    assert [h.name for h in state.hosts] == ["h"] and [r.name for r in state.ranks] == ["0"]


def test_windows_split_time_at_wall_clock_multiples() -> None:
    # origin 1000 ns past a multiple of 50: local t=0 is wall 1000 -> windows 20 and 21
    info = report("r0", "h", 1, 0, [0, 1, 2], 0, 100, origin=1000)
    state = summarize("j", [(info, HAND, None)], window_ns=50, gap_threshold_ns=5)
    assert [w.index for w in state.windows] == [20, 21]
    w0, w1 = state.windows
    assert (w0.start_ns, w0.end_ns, w1.start_ns, w1.end_ns) == (1000, 1050, 1050, 1100)
    a, b = dev(w0, "h", 0), dev(w1, "h", 0)
    assert (a.useful_ns, a.comm_ns, a.overlap_ns) == (50, 0, 0)
    assert (b.useful_ns, b.comm_ns, b.overlap_ns) == (10, 20, 10)
    assert a.inflight_ns == [0, 20, 30, 0, 0] and b.inflight_ns == [30, 20, 0, 0, 0]
    # GPU 1's gap [30,100) is split between the windows and counted in both
    assert (dev(w0, "h", 1).gaps, dev(w0, "h", 1).gap_ns) == (2, 40)
    assert (dev(w1, "h", 1).gaps, dev(w1, "h", 1).gap_ns) == (1, 50)
    # windows partition the cumulative measures exactly
    for g in (0, 1, 2):
        assert dev(w0, "h", g).useful_ns + dev(w1, "h", g).useful_ns == dev(state, "h",
                                                                             g).useful_ns
    for w in state.windows:
        assert_identity(w.metrics)


def test_two_ranks_on_two_hosts_align_by_wall_clock_and_report_per_host_and_rank() -> None:
    # rank 1's clock origin is 30 ns later: its local [0,50) is wall [30,80)
    r0 = report("a", "n0", 10, 0, [0], 0, 100, origin=0)
    r1 = report("b", "n1", 20, 1, [0], 0, 50, origin=30)
    a0 = acts([(0, 80, 0, 0, C), (80, 100, 0, 0, N)])
    a1 = acts([(0, 40, 0, 0, C), (40, 50, 0, 0, N)])
    model = EfficiencyModel("j", window_ns=1000, gap_threshold_ns=0)
    feed_report(model, r0, a0)
    first = model.take_updates()
    assert [r.view for r in first] == ["cumulative", "window"]
    assert first[0].reports == 1 and first[0].metrics.load_balance == 1.0
    feed_report(model, r1, a1)
    cum = model.take_updates()[0]
    assert (cum.start_ns, cum.end_ns, cum.reports, cum.last_report) == (0, 100, 2, "b")
    # rank 1 was captured over [30, 80) only: the time before its report is not idle
    assert [(d.host, d.useful_ns, d.comm_ns, d.idle_ns, d.captured_ns) for d in cum.devices] \
        == [("n0", 80, 20, 0, 100), ("n1", 40, 10, 0, 50)]
    assert (cum.span_ns, cum.captured_ns) == (100, 100)
    # shares of captured time: useful (0.8, 0.8), useful + comm (1.0, 1.0)
    assert cum.metrics.load_balance == pytest.approx(1.0)
    assert cum.metrics.communication_efficiency == pytest.approx(0.8)
    assert cum.metrics.orchestration_efficiency == pytest.approx(1.0)
    assert cum.metrics.parallel_efficiency == pytest.approx(0.8)
    # rank 1's leading idle [0,30) is outside its report: not a gap; its own span has none
    assert [d.gaps for d in cum.devices] == [0, 0]
    assert [h.name for h in cum.hosts] == ["n0", "n1"]
    assert [(r.name, r.metrics.parallel_efficiency) for r in cum.ranks] == [
        ("0", pytest.approx(0.8)), ("1", pytest.approx(0.8))]


def test_phases_one_row_per_instance_each_device_counts_its_own_process() -> None:
    names = ["step"]
    r0 = report("a", "n0", 10, 0, [0], 0, 100, phase_names=names)
    r1 = report("b", "n1", 20, 1, [0], 0, 100, phase_names=names)
    a0 = acts([(0, 30, 0, 0, C), (30, 40, 0, 0, N), (50, 90, 0, 0, C)])
    a1 = acts([(5, 25, 0, 0, C), (25, 45, 0, 0, N), (55, 70, 0, 0, C)])
    p0 = phases([(0, 50, 0, 0), (50, 100, 0, 0)])
    p1 = phases([(5, 48, 0, 0), (52, 95, 0, 0)])
    state = summarize("j", [(r0, a0, p0), (r1, a1, p1)], window_ns=10_000, gap_threshold_ns=0)
    assert [(p.name, p.index, p.start_ns, p.end_ns) for p in state.phases] == [
        ("step", 0, 0, 50), ("step", 1, 50, 100)]
    s0, s1 = state.phases
    assert [(d.useful_ns, d.comm_ns, d.idle_ns) for d in s0.devices] == [(30, 10, 10),
                                                                         (20, 20, 10)]
    # rank 1's kernel [55,70) lies inside its own range [52,95); rank 0's [50,90) inside its own
    assert [(d.useful_ns, d.comm_ns) for d in s1.devices] == [(40, 0), (15, 0)]
    assert s0.metrics.load_balance == pytest.approx(25 / 30)
    assert s0.metrics.communication_efficiency == pytest.approx(30 / 40)
    assert s0.metrics.orchestration_efficiency == pytest.approx(40 / 50)
    for p in state.phases:
        assert_identity(p.metrics)


def test_phase_clips_to_its_process_range_and_capture_slices_continue_occurrences() -> None:
    names = ["iteration"]
    # one process captured in two slices (two reports, same device, disjoint in time)
    s1 = report("slice1", "h", 7, None, [0], 0, 100, phase_names=names)
    s2 = report("slice2", "h", 7, None, [0], 200, 300, phase_names=names)
    a1 = acts([(0, 100, 0, 0, C)])
    a2 = acts([(200, 260, 0, 0, C)])
    state = summarize("j", [(s1, a1, phases([(20, 60, 0, 0)])),
                            (s2, a2, phases([(250, 300, 0, 0)]))], gap_threshold_ns=0)
    assert [(p.index, p.span_ns) for p in state.phases] == [(0, 40), (1, 50)]
    assert [p.devices[0].useful_ns for p in state.phases] == [40, 10]
    assert state.devices[0].useful_ns == 160 and state.span_ns == 300
    assert state.devices[0].rank is None
    assert [r.name for r in state.ranks] == ["h:7"]


def test_updates_order_and_recompute_is_identical() -> None:
    names = ["step"]
    inputs = [(report("a", "n0", 1, 0, [0, 1], 0, 25_000, phase_names=names),
               acts([(0, 9000, 0, 0, C), (100, 12_000, 1, 0, M), (15_000, 24_000, 0, 0, N)]),
               phases([(0, 12_000, 0, 0), (12_000, 25_000, 0, 0)])),
              (report("b", "n1", 2, 1, [0], 3000, 22_000, phase_names=names),
               acts([(3000, 9000, 0, 0, C)]), phases([(3000, 10_000, 0, 0)]))]

    def run() -> list[bytes]:
        model = EfficiencyModel("j", window_ns=10_000, gap_threshold_ns=100, flush_rows=1)
        out: list[bytes] = []
        for info, a, p in inputs:
            feed_report(model, info, a, p, chunk_rows=1)
            out += [msgspec.json.encode(r) for r in model.take_updates()]
        out.append(msgspec.json.encode(model.state()))
        return out

    first = run()
    assert first == run()
    views = [msgspec.json.decode(b)["view"] for b in first[:-1]]
    # phase name totals come first so that readers older than schema 2, which take any view
    # they do not know for the cumulative one, still end each update on the cumulative record
    assert views == ["phase_total", "cumulative", "window", "window", "window", "phase",
                     "phase", "phase_total", "cumulative", "window", "window", "window", "phase"]


def test_out_of_order_batches_are_refused() -> None:
    model = EfficiencyModel("j")
    model.begin_report(report("a", "h", 1, 0, [0], 0, 100))
    model.add_activity(acts([(50, 60, 0, 0, C)]))
    with pytest.raises(ValueError, match="non-decreasing"):
        model.add_activity(acts([(10, 20, 0, 0, C)]))


def test_job_metrics_degenerate_cases_keep_the_identity() -> None:
    for useful, comm, span in [([], [], 10), ([0, 0], [0, 0], 10), ([0, 0], [5, 0], 10),
                               ([3], [0], 0), ([10, 5], [0, 5], 10)]:
        assert_identity(job_metrics(useful, comm, span))
    assert job_metrics([0, 0], [5, 0], 10).communication_efficiency == 0.0


# --- invariants ------------------------------------------------------------------------------

HORIZON = 120


@st.composite
def interval_sets(draw: st.DrawFn) -> tuple[list[ReportInfo], list[np.ndarray], list[np.ndarray]]:
    """1-3 single-process reports (distinct hosts), 1-3 GPUs each, random intervals/phases."""
    n_rep = draw(st.integers(1, 3))
    infos, actss, phs = [], [], []
    for r in range(n_rep):
        gpus = draw(st.integers(1, 3))
        start = draw(st.integers(0, 30))
        end = draw(st.integers(start + 1, HORIZON))
        rows = []
        for _ in range(draw(st.integers(0, 14))):
            a = draw(st.integers(start, end - 1))
            b = draw(st.integers(a, end))
            rows.append((a, b, draw(st.integers(0, gpus - 1)), draw(st.integers(0, 3)),
                         draw(st.sampled_from([C, N, M, S]))))
        prow = []
        for _ in range(draw(st.integers(0, 3))):
            a = draw(st.integers(start, end - 1))
            prow.append((a, draw(st.integers(a, end)), 0, draw(st.integers(0, 1))))
        origin = draw(st.integers(0, 40))
        infos.append(report(f"r{r}", f"host{r}", 100 + r, r, list(range(gpus)), start, end,
                            origin=origin, phase_names=["step", "other"]))
        actss.append(acts(sorted(rows)))
        phs.append(phases(sorted(prow)))
    return infos, actss, phs


def _naive(info: ReportInfo, a: np.ndarray, gpu: int, lo: int, hi: int,
           thr: int) -> dict[str, object]:
    """Per-nanosecond reference of one device over wall [lo, hi) (report-local times + origin)."""
    o = info.origin_wall_ns
    size = HORIZON + 100
    cnt = np.zeros((3, size), int)
    for s, e, d, _, k in a.tolist():
        if d == gpu:
            cnt[{C: 0, N: 1, M: 2, S: 2}[k], s + o:e + o] += 1
    comp, comm = cnt[0] > 0, (cnt[1] + cnt[2]) > 0
    kern = cnt[0] + cnt[1]
    sl = slice(lo, hi)
    busy = (cnt.sum(0) > 0)
    gaps = []
    run = None
    for t in range(info.start_ns + o, info.end_ns + o):
        if not busy[t]:
            run = t if run is None else run
        elif run is not None:
            gaps.append((run, t))
            run = None
    if run is not None:
        gaps.append((run, info.end_ns + o))
    gaps = [g for g in gaps if g[1] - g[0] > thr and g[0] < hi and g[1] > lo]
    return {
        "useful_ns": int(comp[sl].sum()), "comm_ns": int((comm & ~comp)[sl].sum()),
        "overlap_ns": int((comm & comp)[sl].sum()),
        "inflight": [int((kern[sl] == i).sum()) for i in (1, 2, 3)] + [int((kern[sl] >= 4)
                                                                          .sum())],
        "gaps": len(gaps), "gap_ns": sum(min(b, hi) - max(a, lo) for a, b in gaps),
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=interval_sets(), thr=st.integers(0, 20), window=st.integers(7, 60))
def test_matches_naive_reference_and_identity_holds(data, thr: int, window: int) -> None:  # type: ignore[no-untyped-def]
    infos, actss, phs = data
    state = summarize("j", list(zip(infos, actss, phs, strict=True)), window_ns=window,
                      gap_threshold_ns=thr, chunk_rows=3)
    for rec in [state, *state.windows, *state.phases]:
        assert_identity(rec.metrics)
        for d in rec.devices:
            assert 0 <= d.captured_ns <= rec.span_ns
            assert d.useful_ns + d.comm_ns + d.idle_ns == d.captured_ns
            assert sum(d.inflight_ns) == d.captured_ns
            assert 0.0 <= d.overlap_share <= 1.0
    lo, hi = state.start_ns, state.end_ns
    for info, a in zip(infos, actss, strict=True):
        for g in range(len(info.devices)):
            ref = _naive(info, a, g, lo, hi, thr)
            row = dev(state, info.devices[0].host, g)
            got = {"useful_ns": row.useful_ns, "comm_ns": row.comm_ns,
                   "overlap_ns": row.overlap_ns, "inflight": row.inflight_ns[1:],
                   "gaps": row.gaps, "gap_ns": row.gap_ns}
            assert got == ref
            for w in state.windows:
                wr = [d for d in w.devices if d.host == row.host and d.device == g]
                ref_w = _naive(info, a, g, w.index * window, (w.index + 1) * window, thr)
                if wr:
                    assert (wr[0].useful_ns, wr[0].comm_ns, wr[0].gaps, wr[0].gap_ns) == (
                        ref_w["useful_ns"], ref_w["comm_ns"], ref_w["gaps"], ref_w["gap_ns"])
                else:
                    assert ref_w["useful_ns"] == ref_w["comm_ns"] == 0
            seen: dict[int, int] = {}
            for ps, pe, _, name in phs[infos.index(info)].tolist():
                occ = seen[name] = seen.get(name, -1) + 1
                (prow,) = [r for r in state.phases
                           if (r.name, r.index) == (info.phase_names[name], occ)]
                o = info.origin_wall_ns
                ref_p = _naive(info, a, g, ps + o, pe + o, thr)
                d = dev(prow, row.host, g)
                assert (d.useful_ns, d.comm_ns, d.overlap_ns, d.gaps, d.gap_ns) == (
                    ref_p["useful_ns"], ref_p["comm_ns"], ref_p["overlap_ns"], ref_p["gaps"],
                    ref_p["gap_ns"])
            assert sum(dev(w, row.host, g).useful_ns for w in state.windows
                       if any(d.host == row.host and d.device == g for d in w.devices)
                       ) == row.useful_ns


@settings(max_examples=100, deadline=None)
@given(data=interval_sets(), chunks=st.lists(st.integers(1, 20), min_size=1, max_size=6),
       flush=st.integers(1, 8))
def test_chunking_never_changes_the_result(data, chunks: list[int], flush: int) -> None:  # type: ignore[no-untyped-def]
    infos, actss, phs = data
    reference = msgspec.json.encode(summarize("j", list(zip(infos, actss, phs, strict=True)),
                                              window_ns=25, gap_threshold_ns=3,
                                              chunk_rows=10_000))

    def split_feed() -> bytes:
        """Feed each report in the given chunk sizes (phases interleaved by start)."""
        model = EfficiencyModel("j", window_ns=25, gap_threshold_ns=3, flush_rows=flush)
        for info, a, p in zip(infos, actss, phs, strict=True):
            model.begin_report(info)
            pos, pi, i = 0, 0, 0
            while pos < len(a) or pi < len(p):
                if pi < len(p) and (pos >= len(a) or p["start"][pi] <= a["start"][pos]):
                    model.add_phases(p[pi:pi + 1])
                    pi += 1
                    continue
                stop = pos + chunks[i % len(chunks)]
                if pi < len(p):
                    stop = min(stop, int(np.searchsorted(a["start"], p["start"][pi], "left")))
                stop = max(stop, pos + 1)
                model.add_activity(a[pos:stop])
                pos, i = stop, i + 1
            model.end_report()
        return msgspec.json.encode(model.state())

    assert split_feed() == reference


def test_state_is_the_fold_of_everything_published() -> None:
    from prvstream.sinks.summary import fold

    model = EfficiencyModel("j", window_ns=100, gap_threshold_ns=0)
    published: list[SummaryRecord] = []
    feed_report(model, report("a", "n0", 1, 0, [0], 0, 300), acts([(0, 250, 0, 0, C)]))
    published += model.take_updates()
    # the second rank covers only the last window: earlier windows are not republished
    feed_report(model, report("b", "n1", 2, 1, [0], 200, 300), acts([(210, 290, 0, 0, C)]))
    second = model.take_updates()
    assert [(r.view, r.index) for r in second] == [("cumulative", 0), ("window", 2)]
    published += second
    state = model.state()
    assert state == fold(published)
    assert [w.reports for w in state.windows] == [1, 1, 2]
    assert [len(w.devices) for w in state.windows] == [1, 1, 2]


# --- bounded state, per-name totals, lazy updates ---------------------------------------------


def _many_phases(n_steps: int, ranks: int = 2) -> list[tuple[ReportInfo, np.ndarray, np.ndarray]]:
    """``ranks`` single-GPU reports, each with ``n_steps`` "step" and n_steps // 3 "eval"
    phases (100 ns each, a compute kernel in each half) over 10 ns windows."""
    out = []
    for r in range(ranks):
        rows, prow = [], []
        for i in range(n_steps):
            t = 100 * i
            rows += [(t + 5 + r, t + 40, 0, 0, C), (t + 50, t + 70 + 5 * r, 0, 1, N)]
            prow.append((t, t + 100, 0, 0))
            if i % 3 == 0:
                prow.append((t + 20, t + 60, 0, 1))
        info = report(f"r{r}", f"n{r}", 10 + r, r, [0], 0, 100 * n_steps,
                      phase_names=["step", "eval"])
        out.append((info, acts(rows), phases(sorted(prow))))
    return out


def test_state_is_bounded_and_phase_totals_sum_the_instance_history() -> None:
    from prvstream.sinks.summary import fold

    recent = 8
    model = EfficiencyModel("j", window_ns=1000, gap_threshold_ns=3, flush_rows=7,
                            recent=recent)
    history: list[SummaryRecord] = []
    for info, a, p in _many_phases(90):
        feed_report(model, info, a, p, chunk_rows=13)
        history += model.iter_updates()
    state = model.state()
    assert state.recent == recent
    assert [w.index for w in state.windows] == list(range(1, 9))  # the latest 8 of 0..8
    by_name: dict[str, list[int]] = {}
    for rec in state.phases:
        by_name.setdefault(rec.name, []).append(rec.index)
    assert sorted(by_name["step"]) == list(range(82, 90))
    assert sorted(by_name["eval"]) == list(range(22, 30))
    assert state == fold(history, recent=recent)
    # per-name totals equal the sum over the latest record of every instance in the history
    latest = {(r.name, r.index): r for r in history if r.view == "phase"}
    assert [t.name for t in state.phase_totals] == ["eval", "step"]
    for total in state.phase_totals:
        inst = [r for (name, _), r in latest.items() if name == total.name]
        assert total.index == len(inst) == (90 if total.name == "step" else 30)
        assert total.span_ns == sum(r.span_ns for r in inst)
        assert total.start_ns == min(r.start_ns for r in inst)
        assert total.end_ns == max(r.end_ns for r in inst)
        for d in total.devices:
            rows = [x for r in inst for x in r.devices if (x.host, x.device) == (d.host, d.device)]
            for key in ("useful_ns", "comm_ns", "overlap_ns", "gaps", "gap_ns"):
                assert getattr(d, key) == sum(getattr(x, key) for x in rows), key
            assert d.inflight_ns[1:] == [sum(x.inflight_ns[k] for x in rows) for k in (1, 2, 3, 4)]
            assert d.useful_ns + d.comm_ns + d.idle_ns == total.span_ns
        assert_identity(total.metrics)


def test_fold_gives_the_same_bounded_state_however_records_are_grouped() -> None:
    from prvstream.sinks.summary import SummaryFolder, fold

    model = EfficiencyModel("j", window_ns=500, gap_threshold_ns=3, recent=4)
    history: list[SummaryRecord] = []
    for info, a, p in _many_phases(40, ranks=3):
        feed_report(model, info, a, p)
        history += model.take_updates()
    whole = fold(history, recent=4)
    stepwise = None
    for i in range(0, len(history), 17):
        stepwise = fold(history[i:i + 17], stepwise, recent=4)
    folder = SummaryFolder(recent=4)
    for rec in history:
        folder.add(rec)
    assert whole == stepwise == folder.state() == model.state()
    assert len(whole.phases) == 8 and len(whole.windows) == 4


def test_lazy_updates_equal_eager_ones_and_unconsumed_updates_are_kept() -> None:
    inputs = _many_phases(30)
    eager = EfficiencyModel("j", window_ns=700, recent=3)
    per_report: list[SummaryRecord] = []
    for info, a, p in inputs:
        feed_report(eager, info, a, p)
        per_report += eager.take_updates()
    late = EfficiencyModel("j", window_ns=700, recent=3)
    for info, a, p in inputs:  # not consumed between reports: built before time moves on
        feed_report(late, info, a, p)
    assert late.take_updates() == per_report
    assert late.take_updates() == []
    dropped = EfficiencyModel("j", window_ns=700, recent=3)
    for info, a, p in inputs:
        feed_report(dropped, info, a, p)
        dropped.discard_updates()
    assert dropped.state() == eager.state() == late.state()
    # per report: 2 name totals, the cumulative record, windows 0..4, 30 + 10 instances
    assert len(per_report) == 2 * (2 + 1 + 5 + 30 + 10)


def test_phase_instances_merge_across_reports_in_the_compact_table() -> None:
    # two ranks, the second arriving later, add to the same instance (name, occurrence)
    model = EfficiencyModel("j", window_ns=10**6, gap_threshold_ns=0, recent=2)
    inputs = _many_phases(6)
    feed_report(model, *inputs[0])
    first = {(r.name, r.index): r for r in model.take_updates() if r.view == "phase"}
    feed_report(model, *inputs[1])
    second = {(r.name, r.index): r for r in model.take_updates() if r.view == "phase"}
    assert set(first) == set(second)
    for key, rec in second.items():
        assert len(first[key].devices) == 1 and len(rec.devices) == 2
        assert rec.devices[0] == first[key].devices[0]  # rank 0's time is kept as it was
        assert rec.devices[1].useful_ns > 0


def test_windows_are_capped_whatever_the_span(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel to 2^62 (and a gap as long) costs at most 2 * MAX_WINDOWS + 1 windows: time
    beyond the cap folds into the edge window, and the windows still add up to the totals."""
    from prvstream.sinks.efficiency import sweep as sweep_module
    from prvstream.sinks.efficiency.parts import N_MEASURES

    monkeypatch.setattr(sweep_module, "MAX_WINDOWS", 64)
    span = 2**62
    info = report("r0", "h", 1, 0, [0, 1], 0, span)
    model = EfficiencyModel("j", window_ns=10_000_000_000, gap_threshold_ns=5)
    feed_report(model, info, acts([(0, span, 0, 0, C), (0, 10, 1, 0, C)]))
    windows = list(model.iter_updates())
    assert len(model._window_slots) <= 2 * 64 + 1
    assert 1 < len([r for r in windows if r.view == "window"]) <= 2 * 64 + 1
    state = model.state()
    d0, d1 = dev(state, "h", 0), dev(state, "h", 1)
    assert d0.useful_ns == span and (d1.gaps, d1.gap_ns) == (1, span - 10)
    for gid in range(len(model._devices)):
        slots, rows = model._dev_windows.rows(gid)
        assert len(slots) <= len(model._window_slots)
        assert (rows.sum(axis=0)[:N_MEASURES] == model._dev_totals[gid, :N_MEASURES]).all()
