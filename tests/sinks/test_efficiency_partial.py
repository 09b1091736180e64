"""Mergeable partial efficiency state: any grouping and order of merges gives the single pass."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prvstream.sinks.base import (
    HOST_DTYPE,
    ReportInfo,
    TableDetail,
    TableRows,
    feed_interleaved,
    table_detail,
    table_rows,
)
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.efficiency.partial import (
    EfficiencyState,
    absorb,
    decode_partial,
    encode_partial,
    encode_state_chunks,
    group_state,
    merge,
    merge_all,
)
from prvstream.sinks.errors import OverlappingStates
from tests.sinks.test_efficiency import C, M, N, S, acts, phases, report

Report = tuple[ReportInfo, np.ndarray, np.ndarray, np.ndarray]


@st.composite
def sliced_jobs(draw: st.DrawFn) -> list[Report]:
    """1-3 processes (on 1-2 hosts), each captured in 1-3 slices (one report each, disjoint
    in time), 1-2 GPUs per process, random activity, "step"/"eval" phases and host calls
    (CUDA runtime, MPI; some reaching past the report's ends)."""
    out: list[Report] = []
    for p in range(draw(st.integers(1, 3))):
        host = f"h{draw(st.integers(0, 1))}"
        gpus = [2 * p + g for g in range(draw(st.integers(1, 2)))]
        t = draw(st.integers(0, 30))
        for k in range(draw(st.integers(1, 3))):
            start, end = t, t + draw(st.integers(1, 60))
            t = end + draw(st.integers(0, 40))
            rows = []
            for _ in range(draw(st.integers(0, 10))):
                a = draw(st.integers(start, end - 1))
                rows.append((a, draw(st.integers(a, end)), draw(st.integers(0, len(gpus) - 1)),
                             draw(st.integers(0, 2)), draw(st.sampled_from([C, N, M, S]))))
            prow = []
            for _ in range(draw(st.integers(0, 3))):
                a = draw(st.integers(start, end - 1))
                prow.append((a, draw(st.integers(a, end)), 0, draw(st.integers(0, 1))))
            info = report(f"p{p}.s{k}", host, 100 + p, p, gpus, start, end,
                          phase_names=["step", "eval"])
            local = acts(sorted(rows))
            calls = []
            for _ in range(draw(st.integers(0, 6))):
                a = draw(st.integers(start - 5, end))
                calls.append((a, a + draw(st.integers(0, 30)), 0, draw(st.integers(0, 1)),
                              draw(st.integers(0, 2))))
            out.append((info, local, phases(sorted(prow)),
                        np.array(sorted(calls), dtype=HOST_DTYPE)))
    out.sort(key=lambda r: (r[0].origin_wall_ns + r[0].start_ns, r[0].report_id))
    return out


def _tables(info: ReportInfo) -> TableRows:
    """Kernel table rows that differ per report (names shared between reports)."""
    s, e = info.start_ns, info.end_ns
    return table_rows("kernels", ["gemm", f"k{s % 3}", "nccl"], np.array([0, 1, 1, 0, 2]),
                      np.array([e - s, s, e, 1, 7]), np.array([s, 0, 0, 1, e]))


def _detail(info: ReportInfo, a: np.ndarray) -> TableDetail:
    """Kernel rows for the tables per phase: one per activity row, named by its start."""
    return table_detail("kernels", ["even", "odd"], a["start"] % 2, a["start"],
                        np.zeros(len(a), np.int64), a["end"] - a["start"])


def _brute_phase_tables(job: list[Report]) -> dict[str, dict[str, list[int]]]:
    """Per phase name, kernel name -> [count, total]: rows starting inside an occurrence."""
    out: dict[str, dict[str, list[int]]] = {}
    for info, a, ph, _ in job:
        for name_id, name in enumerate(info.phase_names):
            occ = [(s, e) for s, e, n in zip(ph["start"].tolist(), ph["end"].tolist(),
                                             ph["name"].tolist(), strict=True)
                   if n == name_id and e >= s]
            for s0, e0 in zip(a["start"].tolist(), a["end"].tolist(), strict=True):
                if any(s <= s0 < e for s, e in occ):
                    row = out.setdefault(name, {}).setdefault(("even", "odd")[s0 % 2], [0, 0])
                    row[0] += 1
                    row[1] += e0 - s0
    return out


def _single(reports: list[Report], window: int, **kw: int) -> EfficiencyModel:
    model = EfficiencyModel("j", window_ns=window, gap_threshold_ns=3, **kw)
    for rep in reports:
        _feed(model, rep)
    return model


def _feed(model: EfficiencyModel, rep: Report) -> None:
    info, a, ph, host = rep
    model.begin_report(info)
    model.add_tables(_tables(info))
    # host calls after the phases that start before them, in start order, in two batches
    model.add_host(host[:len(host) // 2])
    model.add_host(host[len(host) // 2:])
    feed_interleaved(model, a, ph, 4)
    model.add_table_detail(_detail(info, a))  # after every phase, as the Sink protocol asks
    model.end_report()


def _tree(states: list[EfficiencyState], cuts: list[int]) -> EfficiencyState:
    """Merge in an arbitrary tree shape: split at ``cuts`` (recursively)."""
    if len(states) == 1:
        return states[0]
    at = 1 + (cuts[0] % (len(states) - 1)) if cuts else 1
    return merge(_tree(states[:at], cuts[1:]), _tree(states[at:], cuts[1:]))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=sliced_jobs(), window=st.integers(7, 50), data=st.data())
def test_merging_in_any_grouping_and_order_gives_the_single_pass_state(  # type: ignore[no-untyped-def]
        job, window: int, data) -> None:
    whole = _single(job, window)
    expected = whole.partial()
    groups = data.draw(st.lists(st.integers(0, 3), min_size=len(job), max_size=len(job)))
    # odd parts sweep after every row: their closed phase rows are packed mid-report
    parts = [_single([r for r, g in zip(job, groups, strict=True) if g == k], window,
                     flush_rows=1 if k % 2 else 65536).partial()
             for k in sorted(set(groups))]
    order = data.draw(st.permutations(range(len(parts))))
    cuts = data.draw(st.lists(st.integers(0, 10), max_size=4))
    merged = _tree([parts[i] for i in order], cuts)
    assert merged == expected
    assert merged.tables == expected.tables and expected.tables["kernels"]["gemm"][0] == \
        2 * len(job)
    assert merged.phase_tables == expected.phase_tables
    assert {n: {k: v[:2] for k, v in t["kernels"].items()}
            for n, t in expected.phase_tables.items()} == _brute_phase_tables(job)
    assert decode_partial(encode_partial(merged)) == expected
    # the views built from a merged state: the cumulative record is the single pass's
    rebuilt = EfficiencyModel.from_partial(merged).state()
    single = whole.state()
    assert rebuilt.metrics == single.metrics and rebuilt.devices == single.devices
    assert rebuilt.tables == single.tables
    assert [(p.name, p.tables) for p in rebuilt.phase_totals] == \
        [(p.name, p.tables) for p in single.phase_totals]
    assert merged.hosts == expected.hosts and len(expected.hosts) == len(
        {(r[0].processes[0].host, r[0].processes[0].pid) for r in job})
    assert rebuilt.host_metrics == single.host_metrics
    assert [w.host_metrics for w in rebuilt.windows] == [w.host_metrics for w in single.windows]
    assert [p.host_metrics for p in rebuilt.phases] == [p.host_metrics for p in single.phases]
    assert [p.host_metrics for p in rebuilt.phase_totals] == \
        [p.host_metrics for p in single.phase_totals]
    assert (rebuilt.reports, rebuilt.last_report) == (single.reports, single.last_report)
    assert [p.index for p in rebuilt.phase_totals] == [p.index for p in single.phase_totals]
    def busy(rows):  # type: ignore[no-untyped-def]
        return [(w.index, [(d.host, d.device, d.useful_ns, d.comm_ns, d.gap_ns)
                           for d in w.devices]) for w in rows]

    assert busy(rebuilt.windows) == busy(single.windows)
    assert busy(rebuilt.phases) == busy(single.phases)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=sliced_jobs(), cut=st.integers(0, 20))
def test_a_restored_model_continues_like_an_uninterrupted_one(job, cut: int) -> None:  # type: ignore[no-untyped-def]
    cut %= len(job) + 1
    first = _single(job[:cut], 10)
    model = EfficiencyModel.from_partial(decode_partial(encode_partial(first.partial())),
                                         flush_rows=4, published=first.state())
    for rep in job[cut:]:
        _feed(model, rep)
    whole = _single(job, 10)
    assert model.partial() == whole.partial()
    assert model.state() == whole.state()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=sliced_jobs(), cut=st.integers(0, 20))
def test_the_state_encoded_in_pieces_is_the_state_encoded_whole(job, cut: int) -> None:  # type: ignore[no-untyped-def]
    """A checkpoint is written a device at a time (``encode_state_chunks``): its bytes are
    those of the whole state encoded at once, and decode to it."""
    model = _single(job[:cut % (len(job) + 1)], 10)
    data = b"".join(encode_state_chunks(model))
    assert data == encode_partial(model.partial())
    assert decode_partial(data) == model.partial()


@pytest.mark.parametrize("devices", [15, 16, 17, 300])
def test_pieces_of_many_devices_carry_msgpack_array_headers_of_every_size(devices: int
                                                                          ) -> None:
    model = EfficiencyModel("j", window_ns=10)
    for r in range(devices // 3):
        info = report(f"r{r:03}", f"h{r}", 100 + r, r, [0, 1, 2], 10 * r, 10 * r + 9,
                      phase_names=["step"])
        model.begin_report(info)
        feed_interleaved(model, acts([(10 * r, 10 * r + 4, r % 3, 0, C)]),
                         phases([(10 * r, 10 * r + 8, 0, 0)]), 4)
        model.end_report()
    data = b"".join(encode_state_chunks(model))
    assert data == encode_partial(model.partial())
    assert len(decode_partial(data).devices) == devices // 3 * 3


def _held(reports: list[Report], window: int) -> EfficiencyModel:
    """A model fed ``reports`` as one group (``hold_updates``), as a batch feeds its own."""
    model = EfficiencyModel("j", window_ns=window, gap_threshold_ns=3)
    model.hold_updates()
    for rep in reports:
        _feed(model, rep)
    return model


def _proc(rep: Report) -> tuple[str, int]:
    return rep[0].processes[0].host, rep[0].processes[0].pid


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=sliced_jobs(), window=st.integers(7, 50), data=st.data())
def test_a_model_absorbing_the_state_of_other_processes_gives_the_single_pass_records(  # type: ignore[no-untyped-def]
        job, window: int, data) -> None:
    """A batch's helper feeds its reports into a model of its own and the converter's model
    absorbs its state (``absorb``): where the two sets share no process and no GPU, the
    update's records and the summary state are those of one model fed every report."""
    side = {p: data.draw(st.integers(0, 1)) for p in sorted({_proc(r) for r in job})}
    whole = _held(job, window)
    whole.release_updates()
    mine = _held([r for r in job if side[_proc(r)] == 0], window)
    state, windows = group_state(_held([r for r in job if side[_proc(r)] == 1], window))
    absorb(mine, decode_partial(encode_partial(state)), windows, job[-1][0].report_id)
    mine.release_updates()
    assert mine.partial() == whole.partial()
    assert b"".join(mine.iter_update_bytes()) == b"".join(whole.iter_update_bytes())
    assert mine.state_json() == whole.state_json()


@pytest.mark.parametrize("shared", ["process", "device"])
def test_absorb_refuses_a_state_sharing_a_process_or_a_device(shared: str) -> None:
    a = report("a", "h", 100, 0, [0], 0, 50, phase_names=["step"])
    b = report("b", "h", 100 if shared == "process" else 101, 1, [0], 60, 90,
               phase_names=["step"])
    mine, theirs = _held([], 10), _held([], 10)
    for model, info in ((mine, a), (theirs, b)):
        model.begin_report(info)
        feed_interleaved(model, acts([(info.start_ns, info.start_ns + 5, 0, 0, C)]),
                         phases([(info.start_ns, info.start_ns + 8, 0, 0)]), 4)
        model.end_report()
    before = mine.partial()
    state, windows = group_state(theirs)
    with pytest.raises(ValueError, match="sharing"):
        absorb(mine, state, windows, "b")
    assert mine.partial() == before
    with pytest.raises(RuntimeError, match="held"):
        group_state(EfficiencyModel("j", window_ns=10))


def test_merge_refuses_different_settings() -> None:
    a = EfficiencyModel("j", window_ns=10).partial()
    b = EfficiencyModel("j", window_ns=20).partial()
    with pytest.raises(ValueError, match="same settings"):
        merge(a, b)
    assert merge_all([a]) is a


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=sliced_jobs(), data=st.data())
def test_a_repeated_capture_of_one_process_counts_once_and_its_states_never_merge(  # type: ignore[no-untyped-def]
        job, data) -> None:
    """A report captured again (an overlapping capture range of the same process, holding
    the same calls and GPU rows): one model counts its device and host time once; states
    that hold one copy each refuse to merge, in every grouping, instead of counting it
    twice (``partial._refuse_overlaps``)."""
    i = data.draw(st.integers(0, len(job) - 1))
    info, a, ph, host = job[i]
    twin = (msgspec.structs.replace(info, report_id=info.report_id + ".again"), a, ph, host)
    twice = sorted([*job, twin], key=lambda r: (r[0].origin_wall_ns + r[0].start_ns,
                                                 r[0].report_id))
    once, both = _single(job, 10).state(), _single(twice, 10).state()

    def measures(rows):  # type: ignore[no-untyped-def]
        return [(d.host, d.device, d.useful_ns, d.comm_ns, d.idle_ns, d.overlap_ns,
                 d.captured_ns) for d in rows]

    assert measures(both.devices) == measures(once.devices)
    assert both.metrics == once.metrics
    assert both.host_metrics == once.host_metrics
    if not len(a[a["end"] > a["start"]]) and not len(host):
        return  # nothing of it shows in a state: nothing to count twice
    groups = data.draw(st.lists(st.integers(0, 2), min_size=len(twice), max_size=len(twice)))
    at = twice.index(twin)
    groups[at] = 3  # the twin and its original on different sides
    groups[next(j for j, r in enumerate(twice) if r is job[i])] = 4
    parts = [_single([r for r, g in zip(twice, groups, strict=True) if g == k], 10).partial()
             for k in sorted(set(groups))]
    order = data.draw(st.permutations(range(len(parts))))
    cuts = data.draw(st.lists(st.integers(0, 10), max_size=4))
    with pytest.raises(OverlappingStates, match="overlap in time"):
        _tree([parts[k] for k in order], cuts)
