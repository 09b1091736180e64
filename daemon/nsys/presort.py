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


def _merge_into(held: deque[np.ndarray], chunk: np.ndarray) -> None:
    """Put ``chunk``'s rows into ``held`` (sorted as a whole): the held rows that start after
    the chunk's first row are sorted together with it, stably (held rows first)."""
    first = int(chunk["start"].min())
    tail: list[np.ndarray] = []
    while held and int(held[-1]["start"][0]) > first:
        tail.append(held.pop())
    if held and int(held[-1]["start"][-1]) > first:
        last = held.pop()
        cut = int(last["start"].searchsorted(first, side="right"))
        held.append(last[:cut])
        tail.append(last[cut:])
    tail.reverse()
    parts = [*tail, chunk]
    merged = np.concatenate([_raw(p) for p in parts]).view(chunk.dtype) if tail else chunk
    order = merged["start"].argsort(kind="stable")
    held.append(_raw(merged)[order].view(chunk.dtype))


def reorder(chunks: Iterator[np.ndarray], window: int, chunk_rows: int) -> Iterator[np.ndarray]:
    """``chunks`` (structured arrays with a ``start`` field, in rowid order) in non-decreasing
    start, in pieces of at most ``chunk_rows`` rows, holding back ``window`` rows.

    Correct when no row has more than ``window`` rows before it (in the scan) that start
    later; ``window`` 0 passes the chunks through.
    """
    if window <= 0:
        yield from chunks
        return
    held: deque[np.ndarray] = deque()  # sorted as a whole, in order
    count = 0
    for chunk in chunks:
        if not len(chunk):
            continue
        start = chunk["start"]
        if (held and int(start[0]) < int(held[-1]["start"][-1])) or bool(
                (start[1:] < start[:-1]).any()):
            _merge_into(held, chunk)
        else:
            held.append(chunk)
        count += len(chunk)
        while held and count - len(held[0]) >= window:
            front = held.popleft()
            count -= len(front)
            yield from _pieces(front, chunk_rows)
        ready = count - window
        if ready >= chunk_rows:  # part of the front is ready
            front = held[0]
            held[0] = front[ready:]
            count -= ready
            yield from _pieces(front[:ready], chunk_rows)
    for rest in held:
        yield from _pieces(rest, chunk_rows)
