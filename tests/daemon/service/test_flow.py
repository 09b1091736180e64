"""A job's flow figures (status.json, job_flow log events): backlog, lag, rates."""

from __future__ import annotations

from pathlib import Path

from prvstream.daemon.service.flow import JobFlow


def test_backlog_lag_and_rates_over_the_last_minute() -> None:
    flow = JobFlow()
    assert flow.snapshot(now=0.0) == {"backlog": 0, "lag_s": 0.0, "reports_per_min": 0.0,
                                      "records_per_s": 0.0}
    for i in range(4):
        flow.ready(Path(f"r{i}"), now=10.0 + i)
    flow.ready(Path("r0"), now=50.0)  # seen again: still waiting since it was first ready
    assert flow.snapshot(now=20.0)["lag_s"] == 10.0
    flow.landed(Path("r0"), 600, now=30.0)
    flow.landed(Path("r1"), 600, now=40.0)
    flow.gone(Path("r2"))  # set aside: no longer waiting, never landed
    snap = flow.snapshot(now=40.0)
    assert snap["backlog"] == 1 and snap["lag_s"] == 27.0  # r3, ready at 13
    assert snap["reports_per_min"] == 12.0  # 2 in the 10 s since the first landed
    assert snap["records_per_s"] == 120.0
    later = flow.snapshot(now=95.0)  # r0 landed more than a minute ago
    assert later["reports_per_min"] == 1.1 and later["records_per_s"] == 10.9  # 1 in 55 s
