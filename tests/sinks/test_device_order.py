"""The model lists devices in (host, device) order whatever order their reports register
them in (each new device is placed among the others, not all of them sorted again)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.base import ACTIVITY_DTYPE, ActivityKind, DeviceInfo, ProcessInfo, ReportInfo
from prvstream.sinks.efficiency import EfficiencyModel, feed_report

_KEYS = st.lists(st.tuples(st.sampled_from(["a", "b", "node1", "node10", "node2"]),
                           st.integers(0, 9)), min_size=1, max_size=30, unique=True)


def _report(i: int, host: str, device: int) -> tuple[ReportInfo, np.ndarray]:
    info = ReportInfo(
        report_id=f"r{i:03d}.sqlite",
        processes=[ProcessInfo(host=host, pid=100 + i, rank=i)],
        devices=[DeviceInfo(host=host, device=device, process=0, rank=i)],
        origin_wall_ns=1_700_000_000_000_000_000, start_ns=1000 * i, end_ns=1000 * i + 500)
    act = np.array([(1000 * i, 1000 * i + 100, 0, 0, int(ActivityKind.COMPUTE))],
                   dtype=ACTIVITY_DTYPE)
    return info, act


@settings(max_examples=60, deadline=None)
@given(keys=_KEYS, groups=st.integers(1, 4))
def test_devices_are_listed_in_key_order(keys: list[tuple[str, int]], groups: int) -> None:
    model = EfficiencyModel("job", window_ns=10**9)
    records = []
    size = -(-len(keys) // groups)
    for lo in range(0, len(keys), size):  # one record after each group of new devices
        model.hold_updates()
        for i in range(lo, min(lo + size, len(keys))):
            feed_report(model, *_report(i, *keys[i]))
        model.release_updates()
        records = model.take_updates()
        cumulative = [r for r in records if r.view == "cumulative"]
        assert len(cumulative) == 1
        shown = [(d.host, d.device) for d in cumulative[0].devices]
        assert shown == sorted(keys[:min(lo + size, len(keys))])
    assert list(model._ranked()) == [sorted(keys).index(k) for k in keys]
