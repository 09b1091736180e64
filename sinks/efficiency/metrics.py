"""The four POP device metrics of a set of devices over an interval."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

import numpy as np

from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import Metrics

__all__ = ["covered", "covered_pairs", "group_order", "job_metrics"]

log = get_logger(__name__)

#: ``covered_pairs`` of at most this many pairs: in Python (numpy's per-call cost outweighs
#: the work there)
_PAIRS_IN_PYTHON = 256
#: below this, sums of ns are exact in float64 and the metrics can be computed in plain Python
_EXACT = 2**53


def job_metrics(useful: Sequence[int], comm: Sequence[int], span_ns: int,
                captured: Sequence[int] | None = None) -> Metrics:
    """LB, CE, OE and PE of devices with these useful/comm times over an interval of span_ns.

    ``captured``: each device's captured time in the interval (its reports' spans); when they
    differ, each device's times count as shares of its own captured time (docs/efficiency.md).
    Degenerate cases keep PE = LB * CE * OE: no devices or an empty span give zeros; a job where
    no compute ran has LB = 1 (all equal) and CE = 0 when communication ran, else 1.
    """
    if captured is not None and any(t != span_ns for t in captured):
        return _shares(useful, comm, captured)
    if not useful or span_ns <= 0:
        return Metrics(load_balance=0.0, communication_efficiency=0.0,
                       orchestration_efficiency=0.0, parallel_efficiency=0.0)
    total_u = sum(useful)
    if total_u + sum(comm) < _EXACT:
        # every value and partial sum is an exact float64: the same numbers numpy gives
        max_u = float(max(useful))
        max_uc = float(max(u + c for u, c in zip(useful, comm, strict=True)))
        mean_u = float(total_u) / len(useful)
        sum_u = float(total_u)
    else:
        u = np.asarray(useful, dtype=np.float64)
        uc = u + np.asarray(comm, dtype=np.float64)
        max_u, max_uc = float(u.max()), float(uc.max())
        mean_u, sum_u = float(u.mean()), float(u.sum())
    lb = mean_u / max_u if max_u > 0 else 1.0
    ce = max_u / max_uc if max_uc > 0 else 1.0
    oe = max_uc / span_ns
    pe = sum_u / (len(useful) * span_ns)
    return Metrics(load_balance=lb, communication_efficiency=ce, orchestration_efficiency=oe,
                   parallel_efficiency=pe)


def _shares(useful: Sequence[int], comm: Sequence[int], captured: Sequence[int]) -> Metrics:
    """The metrics of devices captured over different times: on useful and comm shares."""
    u = [x / t if t > 0 else 0.0 for x, t in zip(useful, captured, strict=True)]
    uc = [(x + y) / t if t > 0 else 0.0
          for x, y, t in zip(useful, comm, captured, strict=True)]
    if not u or max(captured) <= 0:
        return Metrics(load_balance=0.0, communication_efficiency=0.0,
                       orchestration_efficiency=0.0, parallel_efficiency=0.0)
    max_u, max_uc, mean_u = max(u), max(uc), math.fsum(u) / len(u)
    return Metrics(load_balance=mean_u / max_u if max_u > 0 else 1.0,
                   communication_efficiency=max_u / max_uc if max_uc > 0 else 1.0,
                   orchestration_efficiency=max_uc, parallel_efficiency=mean_u)


def covered(spans: Sequence[tuple[int, int]], lo: int, hi: int) -> int:
    """Length of the union of ``spans`` inside [lo, hi)."""
    total, reach = 0, lo
    for s, e in sorted(spans):
        s, e = max(s, reach), min(e, hi)
        if e > s:
            total += e - s
            reach = e
    return total


def covered_pairs(pairs: array[int], lo: int, hi: int) -> int:
    """``covered`` of the flattened [start, end) pairs ``pairs`` (a record's every device's
    spans: thousands of pairs are one array, not a tuple each): the same length, computed
    over the pairs sorted by start as a running reach (the furthest end so far)."""
    if len(pairs) <= 2 * _PAIRS_IN_PYTHON:
        return covered([(pairs[j], pairs[j + 1]) for j in range(0, len(pairs), 2)], lo, hi)
    flat = np.frombuffer(pairs, np.int64) if pairs.itemsize == 8 else np.asarray(pairs, np.int64)
    starts, ends = flat[0::2], flat[1::2]
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.minimum(ends[order], hi)
    reach = np.maximum.accumulate(np.concatenate(([lo], ends)))[:-1]
    gained = ends - np.maximum(starts, reach)
    return int(gained[gained > 0].sum())


def group_order(name: str) -> tuple[int, float, str]:
    try:
        return 0, float(name), name
    except ValueError:
        return 1, math.inf, name
