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

import sqlite3
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

from prvstream.daemon.nsys import storage_order
from prvstream.daemon.nsys.storage_order import BLOCK

__all__ = ["MOST_RUNS", "NEVER", "Run", "block_columns", "merge", "ranged", "table_runs",
           "window"]

#: the least start of an empty block (and of no rows at all)
NEVER = storage_order.NEVER
#: the most runs a table is read as (a scan, a reorder buffer and a chunk or two each)
MOST_RUNS = storage_order.MOST_RUNS


class Run(NamedTuple):
    """A rowid range of a table read as one storage-order scan with its reorder window."""

    first: int
    last: int
    window: int


def block_columns(con: sqlite3.Connection, table: str, start: str, where: str = "",
                  block: int = BLOCK) -> tuple[int, np.ndarray, np.ndarray]:
    """``storage_order.block_columns`` as int64 arrays: the table's least rowid, and the
    least and greatest start of each block of ``block`` rowids from it (``NEVER`` and
    ``-NEVER`` for a block without rows where ``where`` holds)."""
    first, least, greatest = storage_order.block_columns(con, table, start, where, block)
    return first, np.frombuffer(least, dtype=np.int64), np.frombuffer(greatest, dtype=np.int64)


def window(least: np.ndarray, greatest: np.ndarray, block: int = BLOCK) -> int:
    """The reorder window of one scan of these blocks (``block_columns``' arrays)."""
    return storage_order.columns_window(least.tolist(), greatest.tolist(), block)


def table_runs(con: sqlite3.Connection, table: str, start: str, where: str, first_rowid: int,
               least: np.ndarray, greatest: np.ndarray, max_window: int, block: int = BLOCK
               ) -> tuple[Run, ...] | None:
    """``storage_order.table_runs`` of ``block_columns``' arrays, as ``Run``s."""
    found = storage_order.table_runs(con, table, start, where, first_rowid, least.tolist(),
                                     greatest.tolist(), max_window, block)
    return None if found is None else tuple(Run(*run) for run in found)


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
