"""Chunks of a rowid-order scan put into start order with a bounded reorder buffer.

SQLite sorts a whole table for ``ORDER BY start`` (there is no index on ``start``), although
Nsight Systems stores activity nearly in start order. When ``storage_order.reorder_window``
bounds how far a row can be out of place, ``reorder`` holds back that many rows of the scan and
yields the rest in start order, ties in rowid order (a stable sort: the order ``ORDER BY
start, rowid`` gives). Chunks that arrive in order are passed through without a copy.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import numpy as np

__all__ = ["MAX_WINDOW", "reorder"]

#: the largest reorder buffer (rows) worth holding; beyond it SQLite sorts. 65,536 takes in
#: an export of two processes' API calls stored one block after the other up to about 130k
#: calls (the 180k-row pipeline export's 57,344: its reader process 2.24 -> 1.81 G
#: instructions, the converter 2.05 -> 2.24 G, SQLite's sorts of the API table and the comm
#: join gone); held rows are at most 65,536 x the kind's row (40 to 56 bytes here)
MAX_WINDOW = 65536
#: held runs merged into one beyond this many (a table disordered within a few chunks starts
#: a run at nearly every chunk)
_MOST_RUNS = 8


def _pieces(chunk: np.ndarray, size: int) -> Iterator[np.ndarray]:
    if len(chunk) <= size:
        yield chunk
        return
    for lo in range(0, len(chunk), size):
        yield chunk[lo:lo + size]


def _raw(chunk: np.ndarray) -> np.ndarray:
    """The rows as opaque items: numpy copies those an order of magnitude faster than
    structured ones (gathers and concatenations)."""
    return chunk.view(np.dtype((np.void, chunk.dtype.itemsize)))


class _Run:
    """Rows sorted by start (ties in rowid order), as the pieces they arrived in; every row of
    a run comes before (in the scan) every row of the runs after it."""

    __slots__ = ("last", "pieces", "rows")

    def __init__(self, chunk: np.ndarray) -> None:
        self.pieces: deque[np.ndarray] = deque([chunk])
        self.rows = len(chunk)
        self.last = int(chunk["start"][-1])

    def append(self, chunk: np.ndarray) -> None:
        self.pieces.append(chunk)
        self.rows += len(chunk)
        self.last = int(chunk["start"][-1])

    def head(self, n: int) -> np.ndarray:
        """The first ``n`` rows (or all), as one array (a view when one piece holds them)."""
        first = self.pieces[0]
        if len(first) >= n:
            return first[:n]
        parts: list[np.ndarray] = []
        got = 0
        for piece in self.pieces:
            parts.append(_raw(piece[: n - got]))
            got += len(parts[-1])
            if got >= n:
                break
        return np.concatenate(parts).view(first.dtype)

    def drop(self, n: int) -> None:
        """Forget the first ``n`` rows."""
        self.rows -= n
        while n:
            first = self.pieces[0]
            if len(first) <= n:
                self.pieces.popleft()
                n -= len(first)
            else:
                self.pieces[0] = first[n:]
                n = 0


def _sorted(chunk: np.ndarray) -> np.ndarray:
    """``chunk`` in start order, ties in scan order (itself when it is)."""
    start = chunk["start"]
    if not bool((start[1:] < start[:-1]).any()):
        return chunk
    return _raw(chunk)[start.argsort(kind="stable")].view(chunk.dtype)


def _take(runs: list[_Run], n: int) -> np.ndarray:
    """The first ``n`` rows of the runs merged (start order; ties: the earlier run first, then
    the run's own order), removed from them; emptied runs are dropped."""
    heads = [run.head(n) for run in runs]
    merged = np.concatenate([_raw(h) for h in heads]).view(heads[0].dtype)
    order = merged["start"].argsort(kind="stable")[:n]  # concatenated in run order: stable
    bounds = np.cumsum([len(h) for h in heads])
    taken = np.bincount(bounds.searchsorted(order, side="right"), minlength=len(runs))
    for run, k in zip(runs, taken.tolist(), strict=True):
        run.drop(k)
    runs[:] = [run for run in runs if run.rows]
    return _raw(merged)[order].view(merged.dtype)


def reorder(chunks: Iterator[np.ndarray], window: int, chunk_rows: int) -> Iterator[np.ndarray]:
    """``chunks`` (structured arrays with a ``start`` field, in rowid order) in non-decreasing
    start, in pieces of at most ``chunk_rows`` rows, holding back ``window`` rows.

    Correct when no row has more than ``window`` rows before it (in the scan) that start
    later; ``window`` 0 passes the chunks through.

    The held rows are kept as sorted runs: a chunk (sorted first if it is not) that starts no
    earlier than the last run ends extends that run, else it starts a new one, and rows leave
    as the runs' heads merged. A table stored as one sorted run per process (an export's API
    calls) is then reordered in one pass, where merging every chunk into one sorted buffer
    copied the whole window again for each chunk of the second run; with one run the chunks
    pass through uncopied.
    """
    if window <= 0:
        yield from chunks
        return
    runs: list[_Run] = []
    count = 0
    for chunk in chunks:
        if not len(chunk):
            continue
        chunk = _sorted(chunk)
        if runs and int(chunk["start"][0]) >= runs[-1].last:
            runs[-1].append(chunk)
        else:
            runs.append(_Run(chunk))
        count += len(chunk)
        if len(runs) > _MOST_RUNS:  # many small runs (disorder within a few chunks): one
            runs[:] = [_Run(_take(runs, count))]
        if len(runs) == 1:  # whole pieces leave as they came
            pieces = runs[0].pieces
            while pieces and count - len(pieces[0]) >= window:
                front = pieces.popleft()
                runs[0].rows -= len(front)
                count -= len(front)
                yield from _pieces(front, chunk_rows)
            if not pieces:
                runs.clear()
        ready = count - window
        if ready >= chunk_rows:  # part of the runs' heads is ready
            count -= ready
            yield from _pieces(_take(runs, ready) if len(runs) > 1 else _front(runs, ready),
                               chunk_rows)
    if len(runs) > 1:
        yield from _pieces(_take(runs, count), chunk_rows)
    for run in runs:
        for rest in run.pieces:
            yield from _pieces(rest, chunk_rows)


def _front(runs: list[_Run], n: int) -> np.ndarray:
    """The first ``n`` rows of the one run, removed from it."""
    got = runs[0].head(n)
    runs[0].drop(n)
    if not runs[0].rows:
        runs.clear()
    return got
