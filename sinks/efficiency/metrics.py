"""The four POP device metrics of a set of devices over an interval."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

import numpy as np

from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import Metrics, zero_metrics

__all__ = ["covered", "covered_pairs", "exact_columns", "group_order", "job_metrics",
           "job_metrics_of", "single_metrics"]

log = get_logger(__name__)

#: ``covered_pairs`` of at most this many pairs: in Python (numpy's per-call cost outweighs
#: the work there)
_PAIRS_IN_PYTHON = 256
#: below this, sums of ns are exact in float64 and the metrics can be computed in plain Python
_EXACT = 2**53
#: columns whose values (and their pairwise sums) stay below this convert to float64 exactly:
#: numpy then gives the same floats as Python's ints (``exact_columns``)
_COLUMN_LIMIT = 2**52


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
        return zero_metrics()
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


def exact_columns(span_ns: int, *columns: np.ndarray) -> bool:
    """Whether int64 ``columns`` of n values can be summed in int64 and converted to float64
    without a rounding Python's ints would not make: every value in [0, 2**52) and n times the
    largest below 2**62 (their sums and the pairwise sums of two columns cannot overflow),
    and ``span_ns`` below 2**52."""
    if not 0 <= span_ns < _COLUMN_LIMIT:
        return False
    n = max((len(c) for c in columns), default=0)
    if n == 0:
        return True
    lo = min(int(c.min()) for c in columns if len(c))
    hi = max(int(c.max()) for c in columns if len(c))
    return lo >= 0 and hi < min(_COLUMN_LIMIT, (1 << 62) // n)


def job_metrics_of(useful: np.ndarray, comm: np.ndarray, span_ns: int,
                   captured: np.ndarray) -> Metrics:
    """``job_metrics`` of int64 columns (a record of thousands of devices): the same floats,
    computed without a Python int or float a device; columns ``exact_columns`` refuses are
    handed to ``job_metrics`` as lists."""
    if not exact_columns(span_ns, useful, comm, captured):
        return job_metrics(useful.tolist(), comm.tolist(), span_ns, captured.tolist())
    n = len(useful)
    if n and bool((captured != span_ns).any()):
        if int(captured.max()) <= 0:
            return zero_metrics()
        u, uc = _shares_of(useful, comm, captured)
        max_u, max_uc, mean_u = float(u.max()), float(uc.max()), math.fsum(u) / n
        return Metrics(load_balance=mean_u / max_u if max_u > 0 else 1.0,
                       communication_efficiency=max_u / max_uc if max_uc > 0 else 1.0,
                       orchestration_efficiency=max_uc, parallel_efficiency=mean_u)
    if not n or span_ns <= 0:
        return zero_metrics()
    total_u = int(useful.sum())
    if total_u + int(comm.sum()) >= _EXACT:
        return job_metrics(useful.tolist(), comm.tolist(), span_ns)
    max_u, max_uc = float(int(useful.max())), float(int((useful + comm).max()))
    mean_u, sum_u = float(total_u) / n, float(total_u)
    return Metrics(load_balance=mean_u / max_u if max_u > 0 else 1.0,
                   communication_efficiency=max_u / max_uc if max_uc > 0 else 1.0,
                   orchestration_efficiency=max_uc / span_ns,
                   parallel_efficiency=sum_u / (n * span_ns))


def _shares_of(useful: np.ndarray, comm: np.ndarray, captured: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """``_shares``'s useful and useful + comm shares of each device's captured time (0.0 where
    it captured none), as float64 columns."""
    t = captured.astype(np.float64)
    held = captured > 0
    u = np.divide(useful.astype(np.float64), t, out=np.zeros(len(t)), where=held)
    uc = np.divide((useful + comm).astype(np.float64), t, out=np.zeros(len(t)), where=held)
    return u, uc


def single_metrics(useful: np.ndarray, comm: np.ndarray, span_ns: int, captured: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``job_metrics`` of each device alone (``[u]``, ``[c]``, ``span_ns``, ``[t]``), as four
    float64 columns (LB, CE, OE, PE): a record's groups of one device each (the ranks of a
    job with one GPU a rank), without a call a device. The columns must be ``exact_columns``.

    Alone, a device's mean is its maximum, so LB is 1 wherever the metrics are not all zero;
    captured over the span its CE is u / (u + c) and OE, PE are (u + c) and u over the span,
    captured over another time they are the shares' (``_shares``)."""
    n = len(useful)
    shared = captured != span_ns
    u, uc = _shares_of(useful, comm, captured)
    fu, fuc = useful.astype(np.float64), (useful + comm).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ce = np.where(shared, np.where(uc > 0, u / uc, 1.0), np.where(fuc > 0, fu / fuc, 1.0))
        oe = np.where(shared, uc, fuc / span_ns if span_ns > 0 else 0.0)
        pe = np.where(shared, u, fu / span_ns if span_ns > 0 else 0.0)
    lb = np.ones(n)
    zero = np.where(shared, captured <= 0, span_ns <= 0)
    for col in (lb, ce, oe, pe):
        col[zero] = 0.0
    return lb, ce, oe, pe


def _shares(useful: Sequence[int], comm: Sequence[int], captured: Sequence[int]) -> Metrics:
    """The metrics of devices captured over different times: on useful and comm shares."""
    u = [x / t if t > 0 else 0.0 for x, t in zip(useful, captured, strict=True)]
    uc = [(x + y) / t if t > 0 else 0.0
          for x, y, t in zip(useful, comm, captured, strict=True)]
    if not u or max(captured) <= 0:
        return zero_metrics()
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
