"""The efficiency summary of every real export against the SQLite rows, to the nanosecond.

The expected numbers are computed here independently: per GPU (host, deviceId), the union of
the compute-kernel intervals (useful), and the union of memcpy, memset and NCCL-kernel
intervals minus what overlaps useful (comm), straight from the tables.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from prvstream.daemon.config import load_settings
from prvstream.daemon.stream.batch import convert
from prvstream.sinks.efficiency import EfficiencyModel
from tests.conftest import real_export_params

Interval = tuple[int, int]


def _union(intervals: list[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals: list[Interval]) -> int:
    return sum(end - start for start, end in intervals)


def _overlap(a: list[Interval], b: list[Interval]) -> int:
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _expected(export: Path) -> dict[int, tuple[int, int]]:
    """deviceId -> (useful ns, comm ns) from the export's rows."""
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    compute: dict[int, list[Interval]] = {}
    comm: dict[int, list[Interval]] = {}
    for device, start, end, name in con.execute(
            "SELECT k.deviceId, k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL AS k "
            "JOIN StringIds AS s ON s.id = k.shortName"):
        target = comm if name.lower().startswith("nccl") else compute
        target.setdefault(device, []).append((start, end))
    for table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if table in tables:
            for device, start, end in con.execute(f"SELECT deviceId, start, end FROM {table}"):
                comm.setdefault(device, []).append((start, end))
    con.close()
    out: dict[int, tuple[int, int]] = {}
    for device in set(compute) | set(comm):
        useful = _union(compute.get(device, []))
        moving = _union(comm.get(device, []))
        out[device] = (_length(useful), _length(moving) - _overlap(useful, moving))
    return out


@pytest.mark.parametrize("export", real_export_params())
def test_summary_matches_sqlite_per_device(export: Path, tmp_path: Path) -> None:
    settings = load_settings(None, {}, environ={})
    model = EfficiencyModel("real")
    convert([str(export)], tmp_path / "t", settings, model=model)
    state = model.state()
    got = {row.device: (row.useful_ns, row.comm_ns) for row in state.devices}
    assert got == _expected(export)
    m = state.metrics
    assert m.parallel_efficiency == pytest.approx(
        m.load_balance * m.communication_efficiency * m.orchestration_efficiency, rel=1e-12)
