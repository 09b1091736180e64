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
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator

import numpy as np

from prvstream.daemon.nsys.storage_order import BLOCK, window_of
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger

__all__ = ["ROWID", "Floors", "floors", "merge", "scan_dtype", "stream"]

log = get_logger(__name__)

#: the field of a part's rows holding the driving table's rowid
ROWID = "_rowid"
_NEVER = np.iinfo(np.int64).max


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
        #: least start of blocks i.. (the int64 maximum past the last non-empty block)
        self.suffix = np.minimum.accumulate(least[::-1])[::-1] if len(least) else least

    def at(self, rowid: int) -> int:
        """The least start of any row at or after ``rowid``."""
        i = max(0, (rowid - self.first) // self.block)
        return int(self.suffix[i]) if i < len(self.suffix) else _NEVER


def floors(con: sqlite3.Connection, table: str, start: str, block: int = BLOCK
           ) -> tuple[Floors, int]:
    """``table``'s floors and its reorder window (``storage_order.window_of``, rows).

    ``table`` and ``start`` are quoted identifiers."""
    lo, hi = con.execute(f"SELECT (SELECT MIN(rowid) FROM {table}), "
                         f"(SELECT MAX(rowid) FROM {table})").fetchone()
    if lo is None:
        return Floors(0, np.empty(0, np.int64), block), 0
    sql = f"SELECT MIN({start}), MAX({start}) FROM {table} WHERE rowid BETWEEN ? AND ?"
    least = np.full((int(hi) - int(lo)) // block + 1, _NEVER, dtype=np.int64)
    bounds: list[tuple[int, int]] = []
    for i, first in enumerate(range(int(lo), int(hi) + 1, block)):
        low, high = con.execute(sql, (first, first + block - 1)).fetchone()
        if low is not None:
            least[i] = int(low)
            bounds.append((int(low), int(high)))
    return Floors(int(lo), least, block), window_of(bounds, block)


def _raw(rows: np.ndarray) -> np.ndarray:
    return rows.view(np.dtype((np.void, rows.dtype.itemsize)))


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate([_raw(p) for p in parts]).view(
        parts[0].dtype)


def merge(parts: list[Iterator[np.ndarray]], floor: Floors, dtype: np.dtype,
          chunk_rows: int) -> Iterator[np.ndarray]:
    """The parts' rows (``scan_dtype(dtype)`` chunks, each part in its driving rowid order) as
    ``dtype`` chunks of at most ``chunk_rows`` rows, ordered by start, ties by part, then in
    each part's order: ``ORDER BY start`` over the parts' ``UNION ALL``. A part's held rows
    are its chunks as they came (not copied into one array at each arrival)."""
    n = len(parts)
    if not n:  # no part, no rows (``min`` of no marks below would fail)
        return
    held: list[list[np.ndarray]] = [[] for _ in range(n)]
    #: least start of each part's rows still to come (``_NEVER`` once it ended)
    marks = [floor.at(floor.first)] * n
    last = [-1] * n
    while True:
        live = [i for i in range(n) if marks[i] != _NEVER]
        if live:
            k = min(live, key=lambda i: marks[i])  # the part furthest behind
            chunk = next(parts[k], None)
            if chunk is None:
                marks[k] = _NEVER
            elif len(chunk):
                rowid = chunk[ROWID]
                if int(rowid[0]) < last[k] or bool((rowid[1:] < rowid[:-1]).any()):
                    raise PrvstreamError("a join's part did not follow its driving table's "
                                         "rowid order; PRVSTREAM_PRESORT=0 reads it sorted")
                last[k] = int(rowid[-1])
                held[k].append(chunk)
                marks[k] = floor.at(last[k])
        below = min(marks)
        final = below == _NEVER
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
           max_window: int, found: Callable[[int], None] | None = None
           ) -> Iterator[np.ndarray] | None:
    """The merged parts (``merge``) when the driving table (a quoted identifier) is at most
    ``max_window`` rows out of start order, else None (the ordered SELECT is to run).
    ``open_part(sql, dtype)`` starts a part's chunks; ``found(window)`` is told the driving
    table's reorder window by ``"start"`` (``storage_order.reorder_window``'s), read with
    its floors, before any part starts."""
    try:
        floor, window = floors(con, driver, '"start"')
    except sqlite3.DatabaseError:
        return None  # the ordered query reports the damage
    if found is not None:
        found(window)
    if not 0 < window <= max_window:
        return None
    wide = scan_dtype(dtype)
    return merge([iter(open_part(sql, wide)) for sql in part_sqls], floor, dtype, chunk_rows)
