"""Python ``array`` columns kept as narrow as the integers they hold: setting or appending a
value that does not fit widens the column first, to the narrowest of 8, 16, 32 and 64 bits
that holds it (a watched job's tables grow with every report, and most of their values fit in
8, 16 or 32 bits: issue 11)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

__all__ = ["extended", "set_item"]

#: signed typecodes from narrow to wide
_LADDER = "bhiq"


def _wider(typecode: str) -> str:
    """The typecodes a column of ``typecode`` may widen to, narrowest first."""
    at = _LADDER.find(typecode)
    return _LADDER[at + 1:] if at >= 0 else "q"


def extended(col: array[int], values: Sequence[int]) -> array[int]:
    """``col`` with ``values`` appended; a column that one of them does not fit is widened
    first (what an int64 does not hold fails as ``array`` does)."""
    n = len(col)
    try:
        col.extend(values)
    except OverflowError:
        del col[n:]
    else:
        return col
    codes = _wider(col.typecode)
    for code in codes:
        wide = array(code, col)
        try:
            wide.extend(values)
        except OverflowError:
            if code == codes[-1]:
                raise
            continue
        return wide
    raise AssertionError("unreachable")  # pragma: no cover


def set_item(col: array[int], i: int, value: int) -> array[int]:
    """``col`` with item ``i`` set to ``value``, widened first when it does not fit."""
    try:
        col[i] = value
    except OverflowError:
        codes = _wider(col.typecode)
        for code in codes:
            wide = array(code, col)
            try:
                wide[i] = value
            except OverflowError:
                if code == codes[-1]:
                    raise
                continue
            return wide
    return col
