"""Reports fed as one group (``hold_updates``/``release_updates``, what a convert of many
reports does) make one summary update: the records a per-report feed ends with, each once,
and the same state."""

from __future__ import annotations

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
from prvstream.sinks.summary import SummaryRecord

C, N = int(ActivityKind.COMPUTE), int(ActivityKind.NCCL)


def _report(rank: int, start: int, work: int) -> tuple[ReportInfo, np.ndarray, np.ndarray]:
    """One rank over [start, start + 1000): compute ``work`` ns, then NCCL, two phases."""
    info = ReportInfo(
        report_id=f"rank{rank}.sqlite",
        processes=[ProcessInfo(host=f"node{rank // 2}", pid=100 + rank, rank=rank)],
        devices=[DeviceInfo(host=f"node{rank // 2}", device=rank % 2, process=0, rank=rank)],
        origin_wall_ns=1_700_000_000_000_000_000, start_ns=start, end_ns=start + 1000,
        phase_names=["step"])
    act = np.array([(start, start + work, 0, 0, C), (start + work, start + work + 90, 0, 1, N)],
                   dtype=ACTIVITY_DTYPE)
    ph = np.array([(start, start + 500, 0, 0), (start + 500, start + 1000, 0, 0)],
                  dtype=PHASE_DTYPE)
    return info, act, ph


def _key(r: SummaryRecord) -> tuple[str, str, int]:
    return r.view, r.name, r.index


@pytest.mark.parametrize("starts", [[0, 0, 0, 0], [0, 300, 700, 1500]],
                         ids=["together", "staggered"])
def test_a_group_is_one_update_with_the_final_records(starts: list[int]) -> None:
    reports = [_report(rank, s, 300 + 100 * rank) for rank, s in enumerate(starts)]
    each = EfficiencyModel("job", window_ns=400, gap_threshold_ns=10)
    history: list[SummaryRecord] = []
    for rep in reports:
        feed_report(each, *rep)
        history += each.take_updates()
    group = EfficiencyModel("job", window_ns=400, gap_threshold_ns=10)
    group.hold_updates()
    for rep in reports:
        feed_report(group, *rep)
        assert group.take_updates() == []  # nothing before the group ends
    group.release_updates()
    update = group.take_updates()
    keys = [_key(r) for r in update]
    assert len(keys) == len(set(keys)) == len({_key(r) for r in history})
    assert [r.view for r in update if r.view == "cumulative"] == ["cumulative"]
    assert update[[r.view for r in update].index("cumulative")] == history[
        max(i for i, r in enumerate(history) if r.view == "cumulative")]
    assert group.state().metrics == each.state().metrics
    assert group.state().devices == each.state().devices
    last = {_key(r): r for r in history}
    for r in update:  # every record reflects all the reports (a per-report one, those so far)
        assert r.reports == len(reports)
        if last[_key(r)].reports == len(reports):
            assert r == last[_key(r)]
    assert group.partial() == each.partial()
