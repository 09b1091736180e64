"""The rows of one view (windows or phase instances) of every device, or of every host
process, of a model in one table: an owner's rows stay in a ``RowStore`` while its report is
fed, then (when few) move to one growing array of (owner id, key) rows, so a settled device or
process keeps no objects of its own for them."""

from __future__ import annotations

import numpy as np

from prvstream.sinks.arrays import unique_inverse
from prvstream.sinks.efficiency.parts import grow
from prvstream.sinks.efficiency.rowstore import SPILL_BYTES, RowStore
from prvstream.sinks.logger import get_logger

__all__ = ["SharedRows"]

log = get_logger(__name__)

#: a key's bits in a composite (owner id << _KEY_BITS | key) key
_KEY_BITS = 32
#: rows a chunk of the table holds (the last one grows to it by ``grow``): the table grows
#: without copying what it holds, so its peak is not twice its size
CHUNK = 1024


class SharedRows:
    """Rows of ``width`` int64 by (owner id, key): summed from the owner's ``RowStore`` (rows
    that may still change, or an owner with many rows: its store spills them to a file) and
    its rows in the shared table (sorted composite keys, their rows in chunks)."""

    def __init__(self, width: int) -> None:
        self.width = width
        #: owner id -> its store (while its report is fed, or when it has many rows)
        self._stores: dict[int, RowStore] = {}
        self._keys = np.zeros(0, np.int64)
        self._chunks: list[np.ndarray] = []
        self._n = 0
        self._sorted = True
        #: rows a settled device may move to the table: what its store keeps in memory anyway
        self.small = SPILL_BYTES // (8 * (width + 1))

    def add(self, gid: int, keys: np.ndarray, values: np.ndarray,
            cols: slice | int = slice(None)) -> None:
        """``RowStore.add`` to owner ``gid``'s rows."""
        store = self._stores.get(gid)
        if store is None:
            store = self._stores[gid] = RowStore(self.width)
        store.add(keys, values, cols)

    def settle(self, gid: int, below: int | None = None, *, final: bool = False) -> None:
        """``RowStore.settle``; with ``final`` (the owner's report ended), its rows move to
        the table when they are few and it has none there yet."""
        store = self._stores.get(gid)
        if store is None:
            return
        store.settle(below)
        if final and store.resident(self.small):
            lo, hi = self._span(gid)
            if lo == hi:
                keys, rows = store.rows()
                del self._stores[gid]
                self._append(gid, keys, rows)

    def load(self, gid: int, keys: np.ndarray, vals: np.ndarray) -> None:
        """Add rows to owner ``gid``'s (``RowStore.load``: repeated keys add up), as a restored
        state's; they move to the table as at the end of a report."""
        store = self._stores.get(gid)
        if store is None:
            store = self._stores[gid] = RowStore(self.width)
        store.load(keys, vals)
        self.settle(gid, final=True)

    def get(self, gid: int, key: int) -> np.ndarray | None:
        """Owner ``gid``'s row of ``key`` (a copy), or None when it has none."""
        store = self._stores.get(gid)
        row = None if store is None else store.get(key)
        lo, hi = self._span(gid)
        if hi > lo:
            at = lo + int(np.searchsorted(self._keys[lo:hi], (gid << _KEY_BITS) | key))
            if at < hi and int(self._keys[at]) == (gid << _KEY_BITS) | key:
                found: np.ndarray = self._chunks[at // CHUNK][at % CHUNK].copy()
                row = found if row is None else row + found
        return row

    def rows(self, gid: int) -> tuple[np.ndarray, np.ndarray]:
        """Owner ``gid``'s keys with a row that is not all zero, sorted, and those rows."""
        lo, hi = self._span(gid)
        keys = self._keys[lo:hi] & ((1 << _KEY_BITS) - 1)
        rows = self._slice(lo, hi)
        store = self._stores.get(gid)
        if store is not None:
            more_k, more_v = store.rows()
            if hi > lo:
                uk, inv = unique_inverse(np.concatenate((keys, more_k)))
                summed = np.zeros((len(uk), self.width), np.int64)
                np.add.at(summed, inv, np.concatenate((rows, more_v)))
                nz = summed.any(axis=1)
                return uk[nz], summed[nz]
            return more_k, more_v
        return keys, rows

    def _span(self, gid: int) -> tuple[int, int]:
        """Where owner ``gid``'s rows lie in the table."""
        if not self._n:
            return 0, 0
        self._tidy()
        lo, hi = np.searchsorted(self._keys[:self._n],
                                 [gid << _KEY_BITS, (gid + 1) << _KEY_BITS]).tolist()
        return int(lo), int(hi)

    def _append(self, gid: int, keys: np.ndarray, rows: np.ndarray) -> None:
        m = len(keys)
        if not m:
            return
        n = self._n
        self._keys = grow(self._keys, n + m, first=16)
        self._keys[n:n + m] = (gid << _KEY_BITS) | np.asarray(keys, np.int64)
        if n and int(self._keys[n]) <= int(self._keys[n - 1]):
            self._sorted = False
        self._put(n, rows)
        self._n = n + m

    def _put(self, at: int, rows: np.ndarray) -> None:
        """Write ``rows`` from row ``at`` (the end of the table), adding chunks as needed."""
        done = 0
        while done < len(rows):
            c, j = divmod(at + done, CHUNK)
            take = min(len(rows) - done, CHUNK - j)
            if c == len(self._chunks):
                self._chunks.append(np.zeros((0, self.width), np.int64))
            self._chunks[c] = grow(self._chunks[c], j + take, first=16)
            self._chunks[c][j:j + take] = rows[done:done + take]
            done += take

    def _slice(self, lo: int, hi: int) -> np.ndarray:
        """Rows [lo, hi) of the table (a copy)."""
        parts = [self._chunks[c][max(lo - c * CHUNK, 0):min(hi - c * CHUNK, CHUNK)]
                 for c in range(lo // CHUNK, (hi - 1) // CHUNK + 1)] if hi > lo else []
        return np.concatenate(parts) if parts else np.zeros((0, self.width), np.int64)

    def _tidy(self) -> None:
        """Sort the table by composite key (owners settled out of id order)."""
        if self._sorted:
            return
        n = self._n
        order = np.argsort(self._keys[:n], kind="stable")
        self._keys[:n] = self._keys[:n][order]
        rows = self._slice(0, n)[order]
        self._chunks = []
        self._put(0, rows)
        self._sorted = True
