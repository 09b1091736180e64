"""Throughput and peak memory of the efficiency model on a synthetic time-ordered stream.

Run: ``python tests/bench/bench_efficiency.py [ROWS] [GPUS]`` (not collected by pytest).
"""

from __future__ import annotations

import resource
import sys
import time

import numpy as np

from prvstream.sinks.base import ACTIVITY_DTYPE, PHASE_DTYPE, DeviceInfo, ProcessInfo, ReportInfo
from prvstream.sinks.efficiency import EfficiencyModel, feed_report


def main(rows: int = 2_000_000, gpus: int = 8) -> None:
    rng = np.random.default_rng(0)
    span = rows * 300_000  # ~300 us between starts: 10 min for 2M rows
    starts = np.sort(rng.integers(0, span, rows))
    act = np.zeros(rows, ACTIVITY_DTYPE)
    act["start"], act["end"] = starts, starts + rng.integers(1000, 2_000_000, rows)
    act["device"], act["stream"] = rng.integers(0, gpus, rows), rng.integers(0, 4, rows)
    act["kind"] = rng.choice(4, rows, p=[0.7, 0.1, 0.15, 0.05])
    steps = np.arange(0, span, 100_000_000)  # a "step" phase every 100 ms
    ph = np.zeros(len(steps), PHASE_DTYPE)
    ph["start"], ph["end"] = steps, steps + 100_000_000
    info = ReportInfo(report_id="bench", processes=[ProcessInfo(host="h", pid=1, rank=0)],
                      devices=[DeviceInfo(host="h", device=g, process=0, rank=0)
                               for g in range(gpus)],
                      origin_wall_ns=1_700_000_000_000_000_000, start_ns=0, end_ns=span,
                      phase_names=["step"])
    model = EfficiencyModel("bench")
    t0 = time.perf_counter()
    feed_report(model, info, act, ph)
    fed = time.perf_counter() - t0
    records = model.take_updates()
    t1 = time.perf_counter()
    model.state()
    print(f"{rows} rows, {gpus} GPUs, {len(steps)} phases: {fed:.2f} s "
          f"({rows / fed / 1e6:.2f} M rows/s), {len(records)} records; state() "
          f"{time.perf_counter() - t1:.2f} s; peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
