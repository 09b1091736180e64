"""``np.unique``'s answers for the small integer arrays of one chunk, without its fixed cost
(tens of microseconds a call in numpy 2.4, thousands of calls a conversion); the inverse of
few distinct values, and per-group count, sum, least and greatest, in C (``_arrays``,
optional) where it was built."""

from __future__ import annotations

import numpy as np

from prvstream.sinks.native import OptionalExtension

__all__ = ["FACTORIZER", "GROUPER", "distinct", "group_stats", "unique_inverse"]

#: ``unique_inverse`` finds the inverse by binary search up to this many distinct values
_FEW = 64

#: the distinct values and inverse in two passes over the values (C, optional; its limit of
#: distinct values is ``_FEW``)
FACTORIZER = OptionalExtension("prvstream.sinks._arrays", "unique_inverse", "value factorizer")
#: ``group_stats`` in one pass (C, optional)
GROUPER = OptionalExtension("prvstream.sinks._arrays", "group_stats", "group sums")

#: ``np.iinfo(np.int64)``'s bounds (building an ``iinfo`` costs microseconds a call)
_I64_MAX, _I64_MIN = int(np.iinfo(np.int64).max), int(np.iinfo(np.int64).min)


def group_stats(inverse: np.ndarray, values: np.ndarray, nbytes: np.ndarray | None, n: int,
                *, pure: bool = False
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per group 0..n-1 of the rows (row i in group ``inverse[i]``): how many rows, the sum,
    least and greatest of their ``values`` (int64 bounds where none) and the sum of their
    ``nbytes`` (0 without), each an int64 array of ``n``."""
    vals = values.astype(np.int64, copy=False)
    compiled = GROUPER.use(pure)
    if compiled is not None:
        out = tuple(np.empty(n, np.int64) for _ in range(5))
        if compiled(np.ascontiguousarray(inverse, np.int64), np.ascontiguousarray(vals),
                    None if nbytes is None else np.ascontiguousarray(nbytes, np.int64),
                    *out) == 0:
            return out  # type: ignore[return-value]
    count = np.bincount(inverse, minlength=n).astype(np.int64)
    total = np.zeros(n, np.int64)
    np.add.at(total, inverse, vals)
    lo = np.full(n, _I64_MAX, np.int64)
    np.minimum.at(lo, inverse, vals)
    hi = np.full(n, _I64_MIN, np.int64)
    np.maximum.at(hi, inverse, vals)
    size = np.zeros(n, np.int64)
    if nbytes is not None:
        np.add.at(size, inverse, nbytes.astype(np.int64, copy=False))
    return count, total, lo, hi, size


def distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of a 1-d integer array: its distinct values, sorted."""
    if len(values) == 0:
        return values[:0].copy()
    if bool((values == values[0]).all()):
        return values[:1].copy()
    return _sorted_distinct(values)


def _sorted_distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of a non-empty 1-d array, sorted (no shortcut for one value)."""
    ordered = np.sort(values)
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def unique_inverse(values: np.ndarray, *, pure: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for a 1-d integer array, several times faster
    when a chunk holds few distinct values (threads, streams, names): one value is checked
    for first, and a sort plus binary search replaces the argsort (or, compiled, two passes
    over the values)."""
    if len(values) == 0:
        return values[:0].copy(), np.zeros(0, dtype=np.intp)
    compiled = FACTORIZER.use(pure)
    if compiled is not None:
        uniq = np.empty(_FEW, dtype=values.dtype)
        inverse = np.empty(len(values), dtype=np.intp)
        count = compiled(values, uniq, inverse)
        if count >= 0:
            return uniq[:count], inverse
        if count == -1:  # more than _FEW distinct values
            return np.unique(values, return_inverse=True)
    first = values[0]
    if bool((values == first).all()):
        return values[:1].copy(), np.zeros(len(values), dtype=np.intp)
    uniq = _sorted_distinct(values)  # not one value: checked above
    if len(uniq) > _FEW:
        return np.unique(values, return_inverse=True)
    return uniq, np.searchsorted(uniq, values)
