"""The verdict of an interval: its dominant loss and the device that causes it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import Culprit, DeviceRow, Metrics, Verdict

__all__ = ["LOSSES", "blame_order", "judge"]

log = get_logger(__name__)

#: Metrics field -> (loss name, short label); the dominant loss is the smallest metric
LOSSES = {"load_balance": ("load imbalance", "LB"),
          "communication_efficiency": ("communication", "CE"),
          "orchestration_efficiency": ("orchestration", "OE")}
#: above this every metric is "no significant loss"
_FINE = 0.995


def _t(d: DeviceRow, span: int) -> int:
    return d.captured_ns or span


def _share(ns: int, d: DeviceRow, span: int) -> float:
    t = _t(d, span)
    return ns / t if t > 0 else 0.0


def blame_order(loss: str, span: int) -> Callable[[DeviceRow], tuple[float, ...]]:
    """Sort key putting the devices that contribute most to ``loss`` first: the busiest for
    load imbalance, the most exposed communication for communication, the most idle (in gaps,
    then overall) for orchestration."""
    if loss == "load imbalance":
        return lambda d: (-_share(d.useful_ns, d, span), d.device)
    if loss == "communication":
        return lambda d: (-_share(d.comm_ns, d, span), d.device)
    if loss == "orchestration":
        return lambda d: (-_share(d.gap_ns, d, span), -_share(d.idle_ns, d, span), d.device)
    return lambda d: (0.0, d.device)


def _who(d: DeviceRow) -> str:
    proc = f"rank {d.rank}" if d.rank is not None else f"pid {d.pid}"
    return f"{proc} ({d.host} GPU {d.device})"


def _p(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def judge(metrics: Metrics, devices: Sequence[DeviceRow], span: int) -> Verdict:
    """The verdict over devices whose times are over ``span`` (or their own captured time)."""
    if span <= 0 or not devices:
        return Verdict(loss="none", text="no data yet")
    metric = min(LOSSES, key=lambda f: getattr(metrics, f))
    value = float(getattr(metrics, metric))
    if value >= _FINE:
        return Verdict(loss="none", text="no significant loss (LB, CE, OE all above 99.5%)")
    loss, short = LOSSES[metric]
    key = blame_order(loss, span)
    worst = min(devices, key=lambda d: (key(d), d.host))
    n = len(devices)
    if loss == "load imbalance":
        mean = sum(_share(d.useful_ns, d, span) for d in devices) / n
        mine = _share(worst.useful_ns, worst, span)
        more = mine / mean - 1.0 if mean > 0 else 0.0
        detail = f"{_who(worst)} computes {_p(more)} longer than the mean"
    elif loss == "communication":
        mean = sum(_share(d.comm_ns, d, span) for d in devices) / n
        detail = (f"{_who(worst)} spends {_p(_share(worst.comm_ns, worst, span))} of its time "
                  f"in exposed communication (mean {_p(mean)})")
    else:
        mean = sum(_share(d.idle_ns, d, span) for d in devices) / n
        detail = (f"{_who(worst)} is idle {_p(_share(worst.idle_ns, worst, span))} of its time, "
                  f"{_p(_share(worst.gap_ns, worst, span))} in gaps (mean idle {_p(mean)})")
    return Verdict(loss=loss, metric=metric, value=value,
                   culprit=Culprit(host=worst.host, device=worst.device, rank=worst.rank,
                                   pid=worst.pid),
                   text=f"{loss}: {detail} ({short} {_p(value)})")
