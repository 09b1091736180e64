"""The rows of one view (windows or phase instances) of every device, or of every host
process, of a model in one table: an owner's rows stay in a ``RowStore`` while its report is
fed, then (when few) move to one growing array of (owner id, key) rows, so a settled device or
process keeps no objects of its own for them. A full chunk of the table keeps only its columns
that are not all zero, in the narrowest integer type that holds them (a watched job adds rows
with every report, most of whose values are zero or small: issue 11); a row read is widened
back to int64."""

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
#: the integer types a full chunk's columns may be kept in, narrowest first, and their bits
_NARROW = ((np.int8, 8), (np.int16, 16), (np.int32, 32))


class _Packed:
    """A full chunk's rows: the columns ``cols`` that are not all zero, as ``data`` (one row a
    table row) in the narrowest integer type that holds them; the other columns are zero."""

    __slots__ = ("cols", "data")

    def __init__(self, rows: np.ndarray) -> None:
        cols = np.flatnonzero(rows.any(axis=0))
        data = rows[:, cols]
        if len(cols):
            lo, hi = int(data.min()), int(data.max())
            for t, bits in _NARROW:
                if -(1 << (bits - 1)) <= lo and hi < 1 << (bits - 1):
                    data = data.astype(t)
                    break
        self.cols = cols
        self.data = np.ascontiguousarray(data)

    def widened(self, lo: int, hi: int, width: int) -> np.ndarray:
        """Rows [lo, hi) of the chunk as int64 rows of ``width`` (a new array)."""
        out = np.zeros((hi - lo, width), np.int64)
        out[:, self.cols] = self.data[lo:hi]
        return out

    def row(self, j: int, width: int) -> np.ndarray:
        """Row ``j`` as int64 (a new array)."""
        out = np.zeros(width, np.int64)
        out[self.cols] = self.data[j]
        return out


class SharedRows:
    """Rows of ``width`` int64 by (owner id, key): summed from the owner's ``RowStore`` (rows
    that may still change, or an owner with many rows: its store spills them to a file) and
    its rows in the shared table (sorted composite keys, their rows in chunks)."""

    def __init__(self, width: int) -> None:
        self.width = width
        #: owner id -> its store (while its report is fed, or when it has many rows)
        self._stores: dict[int, RowStore] = {}
        self._keys = np.zeros(0, np.int64)
        #: full chunks packed, the last one (while not full) int64 rows grown by ``grow``
        self._chunks: list[np.ndarray | _Packed] = []
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
                chunk = self._chunks[at // CHUNK]
                found = (chunk.row(at % CHUNK, self.width) if isinstance(chunk, _Packed)
                         else chunk[at % CHUNK].copy())
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
            chunk = self._chunks[c]
            assert not isinstance(chunk, _Packed)  # only full chunks are packed
            if j + take == CHUNK:  # full: packed, without the spare room ``grow`` left
                self._chunks[c] = _Packed(np.concatenate((chunk[:j], rows[done:done + take])))
            else:
                chunk = self._chunks[c] = grow(chunk, j + take, first=16)
                chunk[j:j + take] = rows[done:done + take]
            done += take

    def _slice(self, lo: int, hi: int) -> np.ndarray:
        """Rows [lo, hi) of the table (a copy)."""
        parts = []
        for c in range(lo // CHUNK, (hi - 1) // CHUNK + 1) if hi > lo else ():
            chunk, a, b = self._chunks[c], max(lo - c * CHUNK, 0), min(hi - c * CHUNK, CHUNK)
            parts.append(chunk.widened(a, b, self.width) if isinstance(chunk, _Packed)
                         else chunk[a:b])
        if len(parts) == 1:
            return parts[0].copy() if parts[0].base is not None else parts[0]
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
