"""The rows of one view (windows or phase instances) of every device, or of every host
process, of a model in one table: an owner's rows stay in a ``RowStore`` while its report is
fed, then (when few) move to one growing array of (key, row) records sorted by owner id, with
where each owner's records end (32 bits an owner, no composite key a record), so a settled
device or process keeps no objects of its own for them. A full chunk of the table keeps only
its columns that are not all zero, in the narrowest integer type that holds them (a watched
job adds records with every report, most of whose values are zero or small: issue 11); a
record read is widened back to int64."""

from __future__ import annotations

from array import array

import numpy as np

from prvstream.sinks.arrays import unique_inverse
from prvstream.sinks.efficiency.parts import grow
from prvstream.sinks.efficiency.rowstore import SPILL_BYTES, RowStore
from prvstream.sinks.logger import get_logger
from prvstream.sinks.narrowcols import extended

__all__ = ["SharedRows"]

log = get_logger(__name__)

#: rows a chunk of the table holds (the last one grows to it by ``grow``): the table grows
#: without copying what it holds, so its peak is not twice its size
CHUNK = 1024
#: an owner with at most this many records in one chunk is looked up in Python (``get``)
_FEW = 8
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

    def keys(self, lo: int, hi: int) -> list[int]:
        """Column 0 (the records' keys) of rows [lo, hi)."""
        if len(self.cols) and self.cols[0] == 0:
            keys: list[int] = self.data[lo:hi, 0].tolist()
            return keys
        return [0] * (hi - lo)

    def row(self, j: int, width: int) -> np.ndarray:
        """Row ``j`` as int64 (a new array)."""
        out = np.zeros(width, np.int64)
        out[self.cols] = self.data[j]
        return out


class SharedRows:
    """Rows of ``width`` int64 by (owner id, key): summed from the owner's ``RowStore`` (rows
    that may still change, or an owner with many rows: its store spills them to a file) and
    its rows in the shared table: records of the key and the row (``width + 1`` columns) in
    chunks, sorted by (owner id, key); owner ``g``'s are records [``_ends[g - 1]``,
    ``_ends[g]``) (from 0 for owner 0; none past ``_ends``)."""

    def __init__(self, width: int) -> None:
        self.width = width
        #: owner id -> its store (while its report is fed, or when it has many rows)
        self._stores: dict[int, RowStore] = {}
        self._ends = array("i")
        #: owners moved to the table after a greater id: (id, keys, rows), sorted in when
        #: the table is next read
        self._late: list[tuple[int, np.ndarray, np.ndarray]] = []
        #: full chunks packed, the last one (while not full) int64 rows grown by ``grow``
        self._chunks: list[np.ndarray | _Packed] = []
        self._n = 0
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
        if 0 < hi - lo <= _FEW and lo // CHUNK == (hi - 1) // CHUNK:
            found = self._few(lo, hi, key)  # most owners: a record or two, in one chunk
            if found is not None:
                row = found if row is None else row + found
        elif hi > lo:
            recs = self._slice(lo, hi)
            at = int(np.searchsorted(recs[:, 0], key))
            if at < hi - lo and int(recs[at, 0]) == key:
                found = recs[at, 1:].copy()
                row = found if row is None else row + found
        return row

    def _few(self, lo: int, hi: int, key: int) -> np.ndarray | None:
        """``get``'s row of ``key`` among records [lo, hi) of one chunk, found in Python (a
        copy), or None."""
        c = lo // CHUNK
        chunk, a = self._chunks[c], lo - c * CHUNK
        keys: list[int] = (chunk.keys(a, a + hi - lo) if isinstance(chunk, _Packed)
                           else chunk[a:a + hi - lo, 0].tolist())
        if key not in keys:
            return None
        j = a + keys.index(key)  # keys are unique within an owner's records
        if isinstance(chunk, _Packed):
            return chunk.row(j, self.width + 1)[1:]
        return chunk[j, 1:].copy()

    def rows(self, gid: int) -> tuple[np.ndarray, np.ndarray]:
        """Owner ``gid``'s keys with a row that is not all zero, sorted, and those rows."""
        lo, hi = self._span(gid)
        recs = self._slice(lo, hi)
        keys, rows = recs[:, 0], recs[:, 1:]
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
        if self._late:
            self._tidy()
        ends = self._ends
        if gid >= len(ends):
            return 0, 0
        return (ends[gid - 1] if gid else 0), ends[gid]

    def _append(self, gid: int, keys: np.ndarray, rows: np.ndarray) -> None:
        m = len(keys)
        if not m:
            return
        if gid < len(self._ends):  # after a greater id: sorted in when next read
            self._late.append((gid, np.asarray(keys, np.int64), rows))
            return
        n = self._n
        self._ends = extended(self._ends, [n] * (gid - len(self._ends)) + [n + m])
        self._put(n, self._records(keys, rows))
        self._n = n + m

    def _records(self, keys: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """(key, row) records of ``rows``."""
        recs = np.empty((len(keys), self.width + 1), np.int64)
        recs[:, 0] = keys
        recs[:, 1:] = rows
        return recs

    def _put(self, at: int, rows: np.ndarray) -> None:
        """Write ``rows`` from row ``at`` (the end of the table), adding chunks as needed."""
        done = 0
        while done < len(rows):
            c, j = divmod(at + done, CHUNK)
            take = min(len(rows) - done, CHUNK - j)
            if c == len(self._chunks):
                self._chunks.append(np.zeros((0, self.width + 1), np.int64))
            chunk = self._chunks[c]
            assert not isinstance(chunk, _Packed)  # only full chunks are packed
            if j + take == CHUNK:  # full: packed, without the spare room ``grow`` left
                self._chunks[c] = _Packed(np.concatenate((chunk[:j], rows[done:done + take])))
            else:
                chunk = self._chunks[c] = grow(chunk, j + take, first=16)
                chunk[j:j + take] = rows[done:done + take]
            done += take

    def _slice(self, lo: int, hi: int) -> np.ndarray:
        """Records [lo, hi) of the table (a copy)."""
        parts = []
        for c in range(lo // CHUNK, (hi - 1) // CHUNK + 1) if hi > lo else ():
            chunk, a, b = self._chunks[c], max(lo - c * CHUNK, 0), min(hi - c * CHUNK, CHUNK)
            parts.append(chunk.widened(a, b, self.width + 1) if isinstance(chunk, _Packed)
                         else chunk[a:b])
        if len(parts) == 1:
            return parts[0].copy() if parts[0].base is not None else parts[0]
        return np.concatenate(parts) if parts else np.zeros((0, self.width + 1), np.int64)

    def _tidy(self) -> None:
        """Sort the owners moved out of id order into the table (one pass over it)."""
        late, self._late = self._late, []
        ends = np.frombuffer(self._ends, np.dtype(f"i{self._ends.itemsize}")).astype(np.int64)
        owners = [np.repeat(np.arange(len(ends), dtype=np.int64), np.diff(ends, prepend=0))]
        recs = [self._slice(0, self._n)]
        for gid, keys, rows in late:
            owners.append(np.full(len(keys), gid, np.int64))
            recs.append(self._records(keys, rows))
        gids, table = np.concatenate(owners), np.concatenate(recs)
        order = np.lexsort((table[:, 0], gids))
        ends = np.cumsum(np.bincount(gids, minlength=len(ends)))
        wide = len(table) >= 1 << 31
        self._ends = array("q" if wide else "i", ends.astype(np.int64 if wide else np.int32)
                           .tobytes())
        self._chunks = []
        self._put(0, table[order])
        self._n = len(table)
