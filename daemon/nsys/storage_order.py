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
    # one subquery each: SQLite then reads both ends of the b-tree (MIN and MAX in one
    # SELECT scan the whole table)
    lo, hi = con.execute(f"SELECT (SELECT MIN(rowid) FROM {table}), "
                         f"(SELECT MAX(rowid) FROM {table})").fetchone()
    if lo is None:
        return []
    cond = f" AND ({where})" if where else ""
    sql = (f"SELECT MIN({start}), MAX({start}) FROM {table} "
           f"WHERE rowid BETWEEN ? AND ?{cond}")
    out: list[tuple[int, int]] = []
    for first in range(int(lo), int(hi) + 1, block):
        least, greatest = con.execute(sql, (first, first + block - 1)).fetchone()
        if least is not None:
            out.append((int(least), int(greatest)))
    return out


def window_of(bounds: list[tuple[int, int]], block: int = BLOCK) -> int:
    """Rows a rowid-order scan must hold back, given its blocks' start bounds: a row may have
    to pass the rows of its own block and of the blocks before it whose greatest start lies
    above its block's least, so (the most such blocks + 1) x ``block``."""
    n = len(bounds)
    if n == 0:
        return 0
    suffix_min = [0] * n  # least start of blocks i.. (non-decreasing in i)
    least = bounds[-1][0]
    for i in range(n - 1, -1, -1):
        least = min(least, bounds[i][0])
        suffix_min[i] = least
    reach = 0
    greatest = bounds[0][1]
    for i in range(n):
        greatest = max(greatest, bounds[i][1])
        # the first later block from which on every row starts at or after everything up to
        # block i: rows up to block i never have to pass a row from there on
        j = bisect.bisect_left(suffix_min, greatest, lo=i + 1)
        reach = max(reach, j - i - 1)
    return (reach + 1) * block


def reorder_window(con: sqlite3.Connection, table: str, start: str, where: str = "",
                   block: int = BLOCK) -> int:
    """``window_of`` the table's blocks (see the module docstring)."""
    return window_of(block_bounds(con, table, start, where, block), block)
