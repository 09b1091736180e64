"""A join kind (the comm arrows) read without SQLite's sort: its parts scan the driving table
in rowid order, and ``merge`` puts their rows into the ordered SELECT's order.

SQLite answers ``a UNION ALL b ... ORDER BY start`` by sorting each part (its sorter is
stable: ties in the order the join produced them) and merging the parts, ties to the earlier
part. Each part here is the same join with the driving table (the API calls) as its outer loop
in rowid order and its rowid as a last value. The driving table's per-block least starts
(``floors``) bound what a part can still deliver: a row may leave once its start lies below
the least start of every part's rows to come, and stable sorts of the parts' held rows in part
order give SQLite's ties. Memory is the held rows: the table's disorder (a reorder window, as
for the tables) plus a chunk per part, whatever the size of the export.

A driving table stored as a few runs, each nearly in start order but each starting back at
the beginning of time (real multi-process exports store each process's API calls in one block
after the other's), is too far from start order for one scan. Its parts are then read run by
run (``runscan.table_runs``: rowid ranges, each within a window), each with the run's own
floors, the runs' rows merging like parts (ties by part, then by run: rowid order, as
SQLite's). They join TEMP copies of the joined tables made once (the kind's
``copied_parts``): a statement per part and run, each building its own automatic index of a
GPU table, cost twice the ordered join. The table's own kind is read by runs the same way
(``runscan``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator

import numpy as np

from prvstream.daemon.nsys import runscan
from prvstream.daemon.nsys.runscan import NEVER, Run
from prvstream.daemon.nsys.storage_order import BLOCK
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger

__all__ = ["ROWID", "Floors", "floors", "merge", "scan_dtype", "stream"]

log = get_logger(__name__)

#: the field of a part's rows holding the driving table's rowid
ROWID = "_rowid"


def scan_dtype(dtype: np.dtype) -> np.dtype:
    """The kind's dtype (packed) with the driving table's rowid appended (the parts' rows)."""
    names = dtype.names or ()
    wide = np.dtype([*((name, dtype[name]) for name in names), (ROWID, np.int64)])
    if wide.itemsize != dtype.itemsize + 8 or any(
            _offset(wide, name) != _offset(dtype, name) for name in names):
        raise ValueError("a join kind's dtype must be packed, its fields in offset order")
    return wide


def _offset(dtype: np.dtype, name: str) -> int:
    fields = dtype.fields
    assert fields is not None
    return int(fields[name][1])


class Floors:
    """The least start of the driving table's rows at or after a rowid, per block."""

    def __init__(self, first: int, least: np.ndarray, block: int = BLOCK) -> None:
        self.first = first
        self.block = block
        #: least start of each block (the int64 maximum for an empty one)
        self.least = least
        #: least start of blocks i.. (the int64 maximum past the last non-empty block)
        self.suffix = np.minimum.accumulate(least[::-1])[::-1] if len(least) else least

    def at(self, rowid: int) -> int:
        """The least start of any row at or after ``rowid``."""
        i = max(0, (rowid - self.first) // self.block)
        return int(self.suffix[i]) if i < len(self.suffix) else NEVER


def floors(con: sqlite3.Connection, table: str, start: str, block: int = BLOCK
           ) -> tuple[Floors, int]:
    """``table``'s floors and its reorder window (``storage_order.window_of``, rows).

    ``table`` and ``start`` are quoted identifiers."""
    floor, window, _ = _floors_and_greatest(con, table, start, block)
    return floor, window


def _floors_and_greatest(con: sqlite3.Connection, table: str, start: str, block: int
                         ) -> tuple[Floors, int, np.ndarray]:
    """``floors``, and each block's greatest start (``-NEVER`` for an empty block)."""
    first, least, greatest = runscan.block_columns(con, table, start, "", block)
    return Floors(first, least, block), runscan.window(least, greatest, block), greatest


def _raw(rows: np.ndarray) -> np.ndarray:
    return rows.view(np.dtype((np.void, rows.dtype.itemsize)))


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate([_raw(p) for p in parts]).view(
        parts[0].dtype)


def merge(parts: list[Iterator[np.ndarray]], floor: Floors | list[Floors], dtype: np.dtype,
          chunk_rows: int) -> Iterator[np.ndarray]:
    """The parts' rows (``scan_dtype(dtype)`` chunks, each part in its driving rowid order) as
    ``dtype`` chunks of at most ``chunk_rows`` rows, ordered by start, ties by part, then in
    each part's order: ``ORDER BY start`` over the parts' ``UNION ALL``. A part's held rows
    are its chunks as they came (not copied into one array at each arrival). ``floor``: the
    driving table's, or each part's own (a part that reads one run of it)."""
    n = len(parts)
    if not n:  # no part, no rows (``min`` of no marks below would fail)
        return
    floor_of = floor if isinstance(floor, list) else [floor] * n
    held: list[list[np.ndarray]] = [[] for _ in range(n)]
    #: least start of each part's rows still to come (``NEVER`` once it ended)
    marks = [f.at(f.first) for f in floor_of]
    last = [-1] * n
    while True:
        live = [i for i in range(n) if marks[i] != NEVER]
        if live:
            k = min(live, key=lambda i: marks[i])  # the part furthest behind
            chunk = next(parts[k], None)
            if chunk is None:
                marks[k] = NEVER
            elif len(chunk):
                rowid = chunk[ROWID]
                if int(rowid[0]) < last[k] or bool((rowid[1:] < rowid[:-1]).any()):
                    raise PrvstreamError("a join's part did not follow its driving table's "
                                         "rowid order; PRVSTREAM_PRESORT=0 reads it sorted")
                last[k] = int(rowid[-1])
                held[k].append(chunk)
                marks[k] = floor_of[k].at(last[k])
        below = min(marks)
        final = below == NEVER
        ready = sum(len(c) if final else int(np.count_nonzero(c["start"] < below))
                    for h in held for c in h)
        if ready and (ready >= chunk_rows or final):
            yield from _release(held, None if final else below, dtype, chunk_rows)
        if final:
            return


def _release(held: list[list[np.ndarray]], below: int | None, dtype: np.dtype,
             chunk_rows: int) -> Iterator[np.ndarray]:
    """The held rows starting before ``below`` (all with None), sorted; the rest stay."""
    taken: list[np.ndarray] = []
    for i, chunks in enumerate(held):
        if not chunks:
            continue
        if below is None:
            taken += chunks
            held[i] = []
            continue
        rest: list[np.ndarray] = []
        for c in chunks:
            mask = c["start"] < below
            if mask.all():
                taken.append(c)
            elif mask.any():
                taken.append(c[mask])
                rest.append(c[~mask])
            else:
                rest.append(c)
        held[i] = rest
    both = _concat(taken)
    order = np.argsort(both["start"], kind="stable")
    width = both.dtype.itemsize
    wide = both.view(np.uint8).reshape(len(both), width)
    for lo in range(0, len(order), chunk_rows):
        piece = wide[order[lo:lo + chunk_rows], :dtype.itemsize]
        yield np.ascontiguousarray(piece).view(dtype).reshape(-1)


def stream(con: sqlite3.Connection, driver: str, part_sqls: list[str], dtype: np.dtype,
           chunk_rows: int, open_part: Callable[[str, np.dtype], Iterator[np.ndarray]],
           max_window: int,
           found: Callable[[int, tuple[Run, ...] | None], None] | None = None,
           copies: Callable[[], tuple[list[str], list[str]] | None] | None = None,
           block: int = BLOCK) -> Iterator[np.ndarray] | None:
    """The merged parts (``merge``) when the driving table (a quoted identifier) is at most
    ``max_window`` rows out of start order; or, with ``copies`` (asked only then: the
    statements making TEMP copies of the joined tables, and the parts joining them, the
    kind's ``copied_parts``), when it is a few runs that are (``runscan.table_runs``); else
    None (the ordered SELECT is to run). ``open_part(sql, dtype)`` starts a part's chunks on the
    connection every part is read on, and runs the copies' statements there too (chunks of no
    rows); ``found(window, runs)`` is told the driving table's reorder window by ``"start"``
    (``storage_order.reorder_window``'s) and, beyond ``max_window``, the runs it may be
    scanned as (``runscan.table_runs``), read with its floors, before any part starts. A part
    reads the driving table as ``r`` and has no WHERE clause (a run's rowid range is added as
    one)."""
    try:
        floor, window, greatest = _floors_and_greatest(con, driver, '"start"', block)
        runs = None if window <= max_window else runscan.table_runs(
            con, driver, '"start"', "", floor.first, floor.least, greatest, max_window, block)
    except sqlite3.DatabaseError:
        return None  # the ordered query reports the damage
    if found is not None:
        found(window, runs)
    if window <= 0:
        return None
    wide = scan_dtype(dtype)
    if window <= max_window:
        return merge([iter(open_part(sql, wide)) for sql in part_sqls], floor, dtype,
                     chunk_rows)
    if copies is None:
        return None
    copied = None if runs is None else copies()
    if runs is None or copied is None:
        return None
    setup, parts = copied
    # the copies, with the connection's writes allowed meanwhile (its TEMP schema only: the
    # export is opened read-only); started now, so that a reader process makes them while
    # this one goes on planning, and waited for before the first part is read
    made = [open_part(sql, wide) for sql in
            ("PRAGMA query_only=0", *setup, "PRAGMA query_only=1")]
    streams: list[Iterator[np.ndarray]] = []
    run_floors: list[Floors] = []
    for sql in parts:  # part after part, each run by run: SQLite's ties
        for run in runs:
            streams.append(iter(open_part(f"{sql.rstrip()}\nWHERE r.rowid BETWEEN {run.first} "
                                          f"AND {run.last}", wide)))
            run_floors.append(_run_floors(con, driver, floor, run))
    return _after(made, merge(streams, run_floors, dtype, chunk_rows))


def _run_floors(con: sqlite3.Connection, driver: str, floor: Floors, run: Run) -> Floors:
    """The floors of the driving table's rows in ``run``: its blocks' least starts, those of
    a block the run shares with another run (it starts or ends inside it) from the run's own
    rows (the whole block's least, lower, would hold every row of the run back to it)."""
    block = floor.block
    a = (run.first - floor.first) // block
    b = (run.last - floor.first) // block + 1
    least = floor.least[a:b].copy()
    edges = {0: (run.first, min(run.last, floor.first + (a + 1) * block - 1)),
             b - a - 1: (max(run.first, floor.first + (b - 1) * block), run.last)}
    for i, (lo, hi) in edges.items():
        if (lo - floor.first) % block or (hi + 1 - floor.first) % block:
            (found,) = con.execute(f'SELECT MIN("start") FROM {driver} WHERE rowid BETWEEN '
                                   f"? AND ?", (lo, hi)).fetchone()
            least[i] = NEVER if found is None else int(found)
    return Floors(floor.first + a * block, least, block)


def _after(first: list[Iterator[np.ndarray]], then: Iterator[np.ndarray]
           ) -> Iterator[np.ndarray]:
    """``then``'s chunks once every statement of ``first`` has run (its chunks read)."""
    for statement in first:
        for _ in statement:
            pass
    yield from then
