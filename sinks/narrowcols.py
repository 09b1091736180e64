"""Python ``array`` columns kept as narrow as the integers they hold: setting or appending a
value that does not fit widens the column first, to the narrowest of 8, 16, 32 and 64 bits
that holds it (a watched job's tables grow with every report, and most of their values fit in
8, 16 or 32 bits: issue 11)."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence

__all__ = ["extended", "set_item"]

#: signed typecodes from narrow to wide
_LADDER = "bhiq"


def _wider(typecode: str) -> str:
    """The typecodes a column of ``typecode`` may widen to, narrowest first."""
    at = _LADDER.find(typecode)
    return _LADDER[at + 1:] if at >= 0 else "q"


def _widened(col: array[int], put: Callable[[array[int]], None]) -> array[int]:
    """A copy of ``col`` at the narrowest wider typecode that ``put`` succeeds on (``put``
    applied to it); what an int64 does not hold fails as ``array`` does."""
    codes = _wider(col.typecode)
    for code in codes[:-1]:
        wide = array(code, col)
        try:
            put(wide)
        except OverflowError:
            continue
        return wide
    wide = array(codes[-1], col)
    put(wide)
    return wide


def extended(col: array[int], values: Sequence[int]) -> array[int]:
    """``col`` with ``values`` appended; a column that one of them does not fit is widened
    first (what an int64 does not hold fails as ``array`` does)."""
    n = len(col)
    try:
        col.extend(values)
    except OverflowError:
        del col[n:]
        return _widened(col, lambda wide: wide.extend(values))
    return col


def set_item(col: array[int], i: int, value: int) -> array[int]:
    """``col`` with item ``i`` set to ``value``, widened first when it does not fit."""
    try:
        col[i] = value
    except OverflowError:
        return _widened(col, lambda wide: wide.__setitem__(i, value))
    return col
