"""``np.unique``'s answers for the small integer arrays of one chunk, without its fixed cost
(tens of microseconds a call in numpy 2.4, thousands of calls a conversion); the inverse of
few distinct values in C (``_arrays``, optional) where it was built."""

from __future__ import annotations

import numpy as np

from prvstream.sinks.native import OptionalExtension

__all__ = ["FACTORIZER", "distinct", "unique_inverse"]

#: ``unique_inverse`` finds the inverse by binary search up to this many distinct values
_FEW = 64

#: the distinct values and inverse in two passes over the values (C, optional; its limit of
#: distinct values is ``_FEW``)
FACTORIZER = OptionalExtension("prvstream.sinks._arrays", "unique_inverse", "value factorizer")


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
