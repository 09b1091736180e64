"""Python ``array`` columns kept as narrow as the integers they hold: setting or appending a
value that does not fit widens the column to int64 first (a watched job's tables grow with
every report, and most of their values fit in 8 or 32 bits: issue 11)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

__all__ = ["extended", "set_item"]


def extended(col: array[int], values: Sequence[int]) -> array[int]:
    """``col`` with ``values`` appended; a column that one of them does not fit is widened to
    int64 first (what an int64 does not hold fails as ``array`` does)."""
    n = len(col)
    try:
        col.extend(values)
    except OverflowError:
        del col[n:]
        col = array("q", col)
        col.extend(values)
    return col


def set_item(col: array[int], i: int, value: int) -> array[int]:
    """``col`` with item ``i`` set to ``value``, widened to int64 first when it does not fit."""
    try:
        col[i] = value
    except OverflowError:
        col = array("q", col)
        col[i] = value
    return col
