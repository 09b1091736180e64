"""A table stored as a few runs read without SQLite's sort: one storage-order scan per run.

Real multi-process exports store each process's rows (its API calls above all) in one block
after the other's: every block is nearly in start order, but each starts back at the
beginning of time, so the table is further from start order than a reorder buffer holds
(``presort.MAX_WINDOW``) and ``ORDER BY start`` sorted it whole before its first row. Cut
into runs by its per-block start bounds (``table_runs``: rowid ranges, each nearly sorted),
the table is read as one rowid-range scan per run, each put into start order by its own
reorder buffer (``Run.window`` rows), and ``merge`` joins the runs by start, ties to the
earlier run: rowid order, the order ``ORDER BY start`` gives. Memory is the runs' windows
(together at most ``MAX_WINDOW``, else SQLite sorts) and a chunk or two per run.

The comm join (``joinscan``) reads its driving table run by run the same way.
"""

from __future__ import annotations

import bisect
import sqlite3
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

from prvstream.daemon.nsys.storage_order import BLOCK, window_of

__all__ = ["MOST_RUNS", "NEVER", "Run", "block_columns", "merge", "ranged", "table_runs",
           "window"]

#: the least start of an empty block (and of no rows at all)
NEVER = int(np.iinfo(np.int64).max)
#: the most runs a table is read as (a scan, a reorder buffer and a chunk or two each)
MOST_RUNS = 8


class Run(NamedTuple):
    """A rowid range of a table read as one storage-order scan with its reorder window."""

    first: int
    last: int
    window: int


def block_columns(con: sqlite3.Connection, table: str, start: str, where: str = "",
                  block: int = BLOCK) -> tuple[int, np.ndarray, np.ndarray]:
    """The table's least rowid, and the least and greatest start of each block of ``block``
    rowids from it (``NEVER`` and ``-NEVER`` for a block without rows where ``where``
    holds). ``table`` and ``start`` are quoted identifiers, ``where`` a condition or ""."""
    # one subquery each: SQLite then reads both ends of the b-tree (MIN and MAX in one
    # SELECT scan the whole table)
    lo, hi = con.execute(f"SELECT (SELECT MIN(rowid) FROM {table}), "
                         f"(SELECT MAX(rowid) FROM {table})").fetchone()
    if lo is None:
        return 0, np.empty(0, np.int64), np.empty(0, np.int64)
    cond = f" AND ({where})" if where else ""
    sql = f"SELECT MIN({start}), MAX({start}) FROM {table} WHERE rowid BETWEEN ? AND ?{cond}"
    least = np.full((int(hi) - int(lo)) // block + 1, NEVER, dtype=np.int64)
    greatest = np.full(len(least), -NEVER, dtype=np.int64)
    for i, first in enumerate(range(int(lo), int(hi) + 1, block)):
        low, high = con.execute(sql, (first, first + block - 1)).fetchone()
        if low is not None:
            least[i] = int(low)
            greatest[i] = int(high)
    return int(lo), least, greatest


def window(least: np.ndarray, greatest: np.ndarray, block: int = BLOCK) -> int:
    """The reorder window of one scan of these blocks (``block_columns``' arrays):
    ``storage_order.window_of`` their non-empty ones."""
    kept = least != NEVER
    return window_of(list(zip(least[kept].tolist(), greatest[kept].tolist(), strict=True)),
                     block)


class _Piece(NamedTuple):
    """A block's rows, or part of them: their rowid range and least and greatest start."""

    first: int
    last: int
    least: int
    greatest: int


def table_runs(con: sqlite3.Connection, table: str, start: str, where: str, first_rowid: int,
               least: np.ndarray, greatest: np.ndarray, max_window: int, block: int = BLOCK
               ) -> tuple[Run, ...] | None:
    """The table's runs as rowid ranges with their reorder windows (``block_columns``'
    answer: its blocks' bounds), or None when it is not two to ``MOST_RUNS`` runs whose
    windows together stay within ``max_window`` (what one scan's buffer may hold).

    Blocks join the current run in rowid order; a block whose rows would have to pass the
    window's worth of the run's blocks or more (those whose running greatest start exceeds
    its least) starts a new run instead, and its own rows are read (``_split``): one
    process's last rows and the next one's first share a block, and that block, taken whole
    into the new run, would hold the new run's every row back behind the old run's latest
    start."""
    pieces = [_Piece(first_rowid + i * block, first_rowid + (i + 1) * block - 1, int(lo),
                     int(hi)) for i, (lo, hi) in enumerate(zip(least.tolist(),
                                                                greatest.tolist(),
                                                                strict=True)) if lo != NEVER]
    reach = max(1, max_window // block)
    runs: list[list[_Piece]] = [[]]
    prefix: list[int] = []  # the current run's running greatest start, per piece
    for piece in pieces:
        if len(prefix) - bisect.bisect_right(prefix, piece.least) >= reach:
            head, piece = _split(con, table, start, where, piece, prefix, reach)
            if head is not None:
                runs[-1].append(head)
            runs.append([])
            prefix = []
        runs[-1].append(piece)
        prefix.append(max(piece.greatest, prefix[-1]) if prefix else piece.greatest)
    if not 2 <= len(runs) <= MOST_RUNS:
        return None
    found = tuple(Run(run[0].first, run[-1].last,
                      window_of([(p.least, p.greatest) for p in run], block)) for run in runs)
    return found if sum(r.window for r in found) <= max_window else None


def _split(con: sqlite3.Connection, table: str, start: str, where: str, piece: _Piece,
           prefix: list[int], reach: int) -> tuple[_Piece | None, _Piece]:
    """The piece's rows that still belong to the current run (None: none do) and those that
    start the next one: cut where the block's starts fall furthest (the greatest start
    before the cut above the least after it), when the rows before the cut fit the current
    run (pass fewer than ``reach`` of its pieces, whose running greatest is ``prefix``)."""
    cond = f" AND ({where})" if where else ""
    rows = con.execute(f"SELECT rowid, {start} FROM {table} WHERE rowid BETWEEN ? AND ?"
                       f"{cond} ORDER BY rowid", (piece.first, piece.last)).fetchall()
    try:
        rowids = np.array([r[0] for r in rows], dtype=np.int64)
        starts = np.array([r[1] for r in rows], dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return None, piece  # not integers: the ordered query, if it comes to it, reports them
    if len(rows) < 2:
        return None, piece
    before = np.maximum.accumulate(starts)[:-1]  # greatest start of rows[:s], s = 1..n-1
    after = np.minimum.accumulate(starts[::-1])[::-1][1:]  # least start of rows[s:]
    cut = int(np.argmax(before - after)) + 1
    head_least = int(starts[:cut].min())
    if len(prefix) - bisect.bisect_right(prefix, head_least) >= reach:
        return None, piece
    return (_Piece(piece.first, int(rowids[cut]) - 1, head_least, int(before[cut - 1])),
            _Piece(int(rowids[cut]), piece.last, int(after[cut - 1]), int(starts[cut:].max())))


def ranged(scan: str, table: str, where: str, run: Run) -> str:
    """The storage-order ``scan`` of ``table`` (a quoted identifier; a SELECT ending in
    ``FROM table`` and its ``WHERE where`` if any) restricted to the run's rowids."""
    tail = f" WHERE {where}" if where else ""
    if not scan.endswith(f" FROM {table}{tail}"):
        raise ValueError(f"not a storage-order scan of {table}: {scan!r}")
    cond = f"({where}) AND " if where else ""
    return (f"{scan[:len(scan) - len(tail)]} WHERE {cond}{table}.rowid "
            f"BETWEEN {run.first} AND {run.last}")


def _raw(rows: np.ndarray) -> np.ndarray:
    return rows.view(np.dtype((np.void, rows.dtype.itemsize)))


def merge(runs: Sequence[Iterator[np.ndarray]], chunk_rows: int) -> Iterator[np.ndarray]:
    """The runs' chunks (each run's in non-decreasing start) as one stream in non-decreasing
    start, ties to the earlier run, in chunks of at most ``chunk_rows`` rows.

    The run furthest behind is read next; rows leave once they start before every run's
    last row read (no run can still deliver one before them), at least a chunk's worth at a
    time, so each run holds about a chunk beyond what leaves."""
    n = len(runs)
    held: list[list[np.ndarray]] = [[] for _ in range(n)]
    #: start of each run's last row read (-NEVER before its first)
    last = [-NEVER] * n
    live = list(range(n))
    while live:
        k = min(live, key=last.__getitem__)
        chunk = next(runs[k], None)
        if chunk is None:
            live.remove(k)
        elif len(chunk):
            held[k].append(chunk)
            last[k] = int(chunk["start"][-1])
        if not live:
            break
        below = min(last[i] for i in live)
        ready = [sum(int(np.searchsorted(c["start"], below)) for c in h) for h in held]
        if sum(ready) >= chunk_rows:
            yield from _release(held, ready, chunk_rows)
    yield from _release(held, [sum(len(c) for c in h) for h in held], chunk_rows)


def _release(held: list[list[np.ndarray]], ready: list[int], chunk_rows: int
             ) -> Iterator[np.ndarray]:
    """The first ``ready[i]`` rows of each run's held chunks, merged by start (ties to the
    earlier run), removed from them."""
    taken: list[np.ndarray] = []
    for chunks, count in zip(held, ready, strict=True):
        while count:
            first = chunks[0]
            if len(first) <= count:
                taken.append(first)
                chunks.pop(0)
                count -= len(first)
            else:
                taken.append(first[:count])
                chunks[0] = first[count:]
                count = 0
    if not taken:
        return
    dtype = taken[0].dtype
    both = taken[0] if len(taken) == 1 else np.concatenate([_raw(t) for t in taken]).view(dtype)
    if len(taken) > 1:
        order = both["start"].argsort(kind="stable")  # concatenated in run order: stable
        both = _raw(both)[order].view(dtype)
    for lo in range(0, len(both), chunk_rows):
        yield both[lo:lo + chunk_rows]
