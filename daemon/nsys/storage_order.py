"""How far a table's storage (rowid) order strays from start order, from per-block bounds.

Nsight Systems writes activity in flushes, so its tables are nearly sorted by start in rowid
order. ``reorder_window`` reads the least and greatest start of every block of ``BLOCK`` rowids
(one short range scan each, SQLite's C only) and returns how many rows a rowid-order scan must
hold back so that, sorted stably, it comes out in start order (ties in rowid order): a row
can only come after rows that lie in its own block or the blocks just before it whose greatest
start exceeds its block's least. A table stored as a few runs, each nearly sorted but each
starting back at the beginning of time (one process's rows after another's), is cut into them
by ``table_runs`` (``runscan`` reads and merges them). Standard library only: the reader
process imports it by path.
"""

from __future__ import annotations

import bisect
import itertools
import sqlite3
from array import array

#: ``typing.TYPE_CHECKING`` without importing typing (the reader process loads this module)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["BLOCK", "MOST_RUNS", "NEVER", "block_bounds", "block_columns", "columns_window",
           "reorder_window", "table_runs", "window_of"]

#: rowids per block whose start bounds are read. The window is a whole number of blocks, so
#: small blocks bound it tighter: on the synthetic exports 512 holds back 32k rows over the
#: seven tables against 66k with 4096 (about 2.5 MiB less in the converter), for the same
#: rows scanned in 8x the (short) range queries
BLOCK = 512


#: the least start of a block without rows (and ``-NEVER`` its greatest)
NEVER = (1 << 63) - 1
#: the most runs a table is read as (``table_runs``: a scan, a reorder buffer and a chunk or
#: two each)
MOST_RUNS = 8


def block_bounds(con: sqlite3.Connection, table: str, start: str, where: str = "",
                 block: int = BLOCK) -> list[tuple[int, int]]:
    """(least, greatest) start of each non-empty block of ``block`` rowids, in rowid order.

    ``table`` and ``start`` are quoted identifiers, ``where`` an SQL condition or "".
    """
    _, least, greatest = block_columns(con, table, start, where, block)
    return [(lo, hi) for lo, hi in zip(least, greatest, strict=True) if lo != NEVER]


def block_columns(con: sqlite3.Connection, table: str, start: str, where: str = "",
                  block: int = BLOCK) -> tuple[int, array[int], array[int]]:
    """The table's least rowid, and the least and greatest start of each block of ``block``
    rowids from it (``NEVER`` and ``-NEVER`` for a block without rows where ``where`` holds):
    16 bytes a block, where a 10M-row table's thousands of blocks as tuples of Python ints
    were over 1 MiB of the reader process."""
    least_of, greatest_of = array("q"), array("q")
    # one subquery each: SQLite then reads both ends of the b-tree (MIN and MAX in one
    # SELECT scan the whole table)
    lo, hi = con.execute(f"SELECT (SELECT MIN(rowid) FROM {table}), "
                         f"(SELECT MAX(rowid) FROM {table})").fetchone()
    if lo is None:
        return 0, least_of, greatest_of
    cond = f" AND ({where})" if where else ""
    sql = (f"SELECT MIN({start}), MAX({start}) FROM {table} "
           f"WHERE rowid BETWEEN ? AND ?{cond}")
    for first in range(int(lo), int(hi) + 1, block):
        least, greatest = con.execute(sql, (first, first + block - 1)).fetchone()
        least_of.append(NEVER if least is None else int(least))
        greatest_of.append(-NEVER if greatest is None else int(greatest))
    return int(lo), least_of, greatest_of


def columns_window(least: Sequence[int], greatest: Sequence[int], block: int = BLOCK) -> int:
    """``window_of`` the non-empty blocks of ``block_columns``' columns."""
    kept = [i for i, lo in enumerate(least) if lo != NEVER]
    return _window([least[i] for i in kept], [greatest[i] for i in kept], block)


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
    _, least, greatest = block_columns(con, table, start, where, block)
    return columns_window(least, greatest, block)


def table_runs(con: sqlite3.Connection, table: str, start: str, where: str, first_rowid: int,
               least: Sequence[int], greatest: Sequence[int], max_window: int,
               block: int = BLOCK) -> list[tuple[int, int, int]] | None:
    """The table as runs ``(first rowid, last rowid, reorder window)`` from its
    ``block_columns``, or None when it is not two to ``MOST_RUNS`` runs whose windows
    together stay within ``max_window`` (what one scan's buffer may hold).

    Blocks join the current run in rowid order; a block whose rows would have to pass the
    window's worth of the run's blocks or more (those whose running greatest start exceeds
    its least) starts a new run instead, and its own rows are read (``_split``): one
    process's last rows and the next one's first share a block, and that block, taken whole
    into the new run, would hold the new run's every row back behind the old run's latest
    start."""
    reach = max(1, max_window // block)
    runs: list[list[tuple[int, int, int, int]]] = [[]]
    prefix: list[int] = []  # the current run's running greatest start, per piece
    for i, lo in enumerate(least):
        if lo == NEVER:
            continue
        # a piece: a block's rows, or part of them (first, last rowid, least, greatest)
        piece = (first_rowid + i * block, first_rowid + (i + 1) * block - 1, lo, greatest[i])
        if len(prefix) - bisect.bisect_right(prefix, lo) >= reach:
            head, piece = _split(con, table, start, where, piece, prefix, reach)
            if head is not None:
                runs[-1].append(head)
            runs.append([])
            prefix = []
        runs[-1].append(piece)
        prefix.append(max(piece[3], prefix[-1]) if prefix else piece[3])
    if not 2 <= len(runs) <= MOST_RUNS:
        return None
    found = [(run[0][0], run[-1][1], window_of([(p[2], p[3]) for p in run], block))
             for run in runs]
    return found if sum(w for _, _, w in found) <= max_window else None


def _split(con: sqlite3.Connection, table: str, start: str, where: str,
           piece: tuple[int, int, int, int], prefix: list[int], reach: int
           ) -> tuple[tuple[int, int, int, int] | None, tuple[int, int, int, int]]:
    """The piece's rows that still belong to the current run (None: none do) and those that
    start the next one: cut where the block's starts fall furthest (the greatest start
    before the cut above the least after it), when the rows before the cut fit the current
    run (pass fewer than ``reach`` of its pieces, whose running greatest is ``prefix``)."""
    cond = f" AND ({where})" if where else ""
    rows = con.execute(f"SELECT rowid, {start} FROM {table} WHERE rowid BETWEEN ? AND ?"
                       f"{cond} ORDER BY rowid", (piece[0], piece[1])).fetchall()
    starts = [r[1] for r in rows]
    if len(rows) < 2 or not all(type(s) is int for s in starts):
        return None, piece  # not integers: the ordered query, if it comes to it, reports them
    before = list(itertools.accumulate(starts, max))[:-1]  # of rows[:s], s = 1..n-1
    after = list(itertools.accumulate(reversed(starts), min))[::-1][1:]  # of rows[s:]
    cut = max(range(len(before)), key=lambda k: before[k] - after[k]) + 1  # the first most
    head_least = min(starts[:cut])
    if len(prefix) - bisect.bisect_right(prefix, head_least) >= reach:
        return None, piece
    return ((piece[0], rows[cut][0] - 1, head_least, before[cut - 1]),
            (rows[cut][0], piece[1], after[cut - 1], max(starts[cut:])))
