"""How far a table's storage (rowid) order strays from start order, from per-block bounds.

Nsight Systems writes activity in flushes, so its tables are nearly sorted by start in rowid
order. ``reorder_window`` reads the least and greatest start of every block of ``BLOCK`` rowids
(one short range scan each, SQLite's C only) and returns how many rows a rowid-order scan must
hold back so that, sorted stably, it comes out in start order (ties in rowid order): a row
can only come after rows that lie in its own block or the blocks just before it whose greatest
start exceeds its block's least. Standard library only: the reader process imports it by path.
"""

from __future__ import annotations

import bisect
import sqlite3
from array import array

#: ``typing.TYPE_CHECKING`` without importing typing (the reader process loads this module)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["BLOCK", "block_bounds", "reorder_window", "window_of"]

#: rowids per block whose start bounds are read. The window is a whole number of blocks, so
#: small blocks bound it tighter: on the synthetic exports 512 holds back 32k rows over the
#: seven tables against 66k with 4096 (about 2.5 MiB less in the converter), for the same
#: rows scanned in 8x the (short) range queries
BLOCK = 512


def block_bounds(con: sqlite3.Connection, table: str, start: str, where: str = "",
                 block: int = BLOCK) -> list[tuple[int, int]]:
    """(least, greatest) start of each non-empty block of ``block`` rowids, in rowid order.

    ``table`` and ``start`` are quoted identifiers, ``where`` an SQL condition or "".
    """
    least, greatest = _block_columns(con, table, start, where, block)
    return list(zip(least, greatest, strict=True))


def _block_columns(con: sqlite3.Connection, table: str, start: str, where: str,
                   block: int) -> tuple[array[int], array[int]]:
    """``block_bounds`` as two int64 arrays: 16 bytes a block, where a 10M-row table's
    thousands of blocks as tuples of Python ints were over 1 MiB of the reader process."""
    least_of, greatest_of = array("q"), array("q")
    # one subquery each: SQLite then reads both ends of the b-tree (MIN and MAX in one
    # SELECT scan the whole table)
    lo, hi = con.execute(f"SELECT (SELECT MIN(rowid) FROM {table}), "
                         f"(SELECT MAX(rowid) FROM {table})").fetchone()
    if lo is None:
        return least_of, greatest_of
    cond = f" AND ({where})" if where else ""
    sql = (f"SELECT MIN({start}), MAX({start}) FROM {table} "
           f"WHERE rowid BETWEEN ? AND ?{cond}")
    for first in range(int(lo), int(hi) + 1, block):
        least, greatest = con.execute(sql, (first, first + block - 1)).fetchone()
        if least is not None:
            least_of.append(int(least))
            greatest_of.append(int(greatest))
    return least_of, greatest_of


def window_of(bounds: list[tuple[int, int]], block: int = BLOCK) -> int:
    """Rows a rowid-order scan must hold back, given its blocks' start bounds: a row may have
    to pass the rows of its own block and of the blocks before it whose greatest start lies
    above its block's least, so (the most such blocks + 1) x ``block``."""
    return _window([lo for lo, _ in bounds], [hi for _, hi in bounds], block)


def _window(least_of: Sequence[int], greatest_of: Sequence[int], block: int) -> int:
    """``window_of`` from the blocks' least and greatest starts."""
    n = len(least_of)
    if n == 0:
        return 0
    suffix_min = array("q", bytes(8 * n))  # least start of blocks i.. (non-decreasing in i)
    least = least_of[-1]
    for i in range(n - 1, -1, -1):
        least = min(least, least_of[i])
        suffix_min[i] = least
    reach = 0
    greatest = greatest_of[0]
    for i in range(n):
        greatest = max(greatest, greatest_of[i])
        # the first later block from which on every row starts at or after everything up to
        # block i: rows up to block i never have to pass a row from there on
        j = bisect.bisect_left(suffix_min, greatest, lo=i + 1)
        reach = max(reach, j - i - 1)
    return (reach + 1) * block


def reorder_window(con: sqlite3.Connection, table: str, start: str, where: str = "",
                   block: int = BLOCK) -> int:
    """``window_of`` the table's blocks (see the module docstring)."""
    return _window(*_block_columns(con, table, start, where, block), block)
