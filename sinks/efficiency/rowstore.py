"""A table of int64 rows keyed by phase instance id that stays small: a dense block for the
ids that may still receive time, the settled rest packed as sorted (key, row) records.

Instance ids are handed out in the order occurrences are met, so the ids a device or a host
process adds time to move forward with the report: rows below the smallest id still open are
final and are packed (only rows that are not all zero), which keeps a long report's table at
one row per closed instance instead of a doubling array over every id of the job, and a
device or process of a small report at a few hundred bytes. Past ``SPILL_BYTES`` of packed
records a store moves their rows to an unlinked temporary file and keeps only their keys in
memory, so a long report's settled instances do not stay resident (``get`` reads one row back).
"""

from __future__ import annotations

import os
import threading
import weakref
from array import array
from typing import IO

import numpy as np

from prvstream.sinks.arrays import unique_inverse
from prvstream.sinks.logger import get_logger
from prvstream.sinks.scratch import read_at, unnamed_file

__all__ = ["RowStore"]

log = get_logger(__name__)

#: rows the dense block starts with when it grows from nothing
_FIRST = 8
#: packed records (bytes) held in memory before their rows go to the store's file
SPILL_BYTES = 1 << 16
#: temporary files the stores of a process hold open at once (beyond it rows stay in memory)
MAX_FILES = 64
_files_lock = threading.Lock()
_files_open = 0


def _open_file() -> IO[bytes] | None:
    """A new unlinked temporary file, or None when ``MAX_FILES`` are open."""
    global _files_open
    with _files_lock:
        if _files_open >= MAX_FILES:
            return None
        _files_open += 1
    try:
        return unnamed_file("prvstream-rows-")
    except OSError as exc:
        _close_file(None)
        log.warning("rowstore_spill_unavailable", error=str(exc))
        return None


def _close_file(fh: IO[bytes] | None) -> None:
    global _files_open
    if fh is not None:
        fh.close()
    with _files_lock:
        _files_open -= 1


class RowStore:
    """Rows of ``width`` int64 by key: ``dense`` (None when empty) holds keys [``base``,
    ``base + len(dense)``); the keys below ``base``, sorted and distinct, are packed: the
    first ``len(_keys)`` with their rows in ``_file`` (row j at byte j x width x 8), the rest
    in ``_packed``, each key followed by its row (``width + 1`` int64 a record, as bytes: no
    array header or spare capacity a store; None when there are none)."""

    __slots__ = ("__weakref__", "_file", "_keys", "_packed", "base", "dense", "width")

    def __init__(self, width: int) -> None:
        self.width = width
        self.base = 0
        self.dense: np.ndarray | None = None
        self._packed: bytes | bytearray | None = None
        self._keys: array[int] | None = None
        self._file: IO[bytes] | None = None

    def __len__(self) -> int:
        """Rows held (packed ones and the dense block's)."""
        return self._n_packed() + self._n_dense()

    def resident(self, rows: int) -> bool:
        """Whether every row is packed in memory (none dense, none in the file), and at most
        ``rows`` of them."""
        return self.dense is None and self._file is None and self._n_packed() <= rows

    def _n_dense(self) -> int:
        return 0 if self.dense is None else len(self.dense)

    def _n_spilled(self) -> int:
        return 0 if self._keys is None else len(self._keys)

    def _n_packed(self) -> int:
        held = 0 if self._packed is None else len(self._packed) // (8 * (self.width + 1))
        return self._n_spilled() + held

    def _reserve(self, lo: int, hi: int) -> np.ndarray:
        """The dense block, made to cover keys [lo, hi) (``lo`` at or above ``base``)."""
        if self.dense is None:  # start the block at the first key (never below packed ones)
            self.base = lo if not self._n_packed() else max(self.base, lo)
        n = self._n_dense()
        need = hi - self.base
        if self.dense is None or need > n:
            new = np.zeros((max(need, 2 * n, _FIRST), self.width), np.int64)
            if self.dense is not None:
                new[:n] = self.dense
            self.dense = new
        return self.dense

    def add(self, keys: np.ndarray, values: np.ndarray, cols: slice | int = slice(None)) -> None:
        """Add ``values`` (one row, or one value with an int ``cols``, per key) to the rows of
        ``keys`` (repeated keys add up)."""
        if not len(keys):
            return
        keys = np.asarray(keys, np.int64)
        if int(keys.min()) < self.base and (self.dense is not None or self._n_packed()):
            low = keys < self.base
            extra = np.zeros((int(low.sum()), self.width), np.int64)
            extra[:, cols] = values[low]
            held_k, held_v = self._unpack()
            self._set_packed(np.concatenate((held_k, keys[low])),
                             np.concatenate((held_v, extra)))
            keys, values = keys[~low], values[~low]
            if not len(keys):
                return
        dense = self._reserve(int(keys.min()), int(keys.max()) + 1)
        target = dense[:, cols]  # a view: adding to it adds to the block
        np.add.at(target, keys - self.base, values)

    def _unpack(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the packed keys and rows."""
        keys, vals = [np.zeros(0, np.int64)], [np.zeros((0, self.width), np.int64)]
        n = self._n_spilled()
        if n:
            assert self._keys is not None and self._file is not None
            keys.append(np.array(self._keys, np.int64))
            data = read_at(self._file.fileno(), n * self.width * 8, 0)
            vals.append(np.frombuffer(data, np.int64).reshape(n, self.width).copy())
        if self._packed is not None:
            flat = np.frombuffer(self._packed, np.int64).reshape(-1, self.width + 1)
            keys.append(flat[:, 0].copy())
            vals.append(flat[:, 1:].copy())
        if len(keys) == 2:
            return keys[1], vals[1]
        return np.concatenate(keys), np.concatenate(vals)

    def _set_packed(self, keys: np.ndarray, vals: np.ndarray) -> None:
        """Replace the packed records by ``keys`` (any order, repeats summed) and rows."""
        uk, inv = unique_inverse(keys)
        summed = np.zeros((len(uk), self.width), np.int64)
        np.add.at(summed, inv, vals)
        self._packed = None
        self._keys = None  # the file's rows are written over from its start
        self._append(uk, summed)

    def _append(self, keys: np.ndarray, vals: np.ndarray) -> None:
        """Pack rows of keys above every packed one (rows of zeros are dropped)."""
        nz = vals.any(axis=1)
        if not nz.any():
            return
        recs = np.concatenate((keys[nz, None], vals[nz]), axis=1).tobytes()
        if self._packed is None:
            self._packed = recs
        elif len(self._packed) < SPILL_BYTES:  # copied to grow: less than SPILL_BYTES
            self._packed += recs
        else:  # no file to spill to: grown in place from here on
            if not isinstance(self._packed, bytearray):
                self._packed = bytearray(self._packed)
            self._packed += recs
        if len(self._packed) >= SPILL_BYTES:
            self._spill()

    def _spill(self) -> None:
        """Move the in-memory records' rows to the file (their keys stay in ``_keys``)."""
        if self._file is None:
            self._file = _open_file()
            if self._file is None:
                return
            weakref.finalize(self, _close_file, self._file)
        assert self._packed is not None
        flat = np.frombuffer(self._packed, np.int64).reshape(-1, self.width + 1)
        n = self._n_spilled()
        os.pwrite(self._file.fileno(), flat[:, 1:].tobytes(), n * self.width * 8)
        if self._keys is None:
            self._keys = array("q")
        self._keys.frombytes(flat[:, 0].tobytes())
        del flat
        self._packed = None

    def _last_key(self) -> int:
        """The greatest packed key (some are packed)."""
        if self._packed is not None:
            return int(np.frombuffer(self._packed, np.int64, 1, len(self._packed)
                                     - 8 * (self.width + 1))[0])
        assert self._keys is not None
        return int(self._keys[-1])

    def settle(self, below: int | None = None) -> None:
        """Pack the rows of keys below ``below`` (all with None): no time is added to them
        any more (a key that still gets some is handled, at a cost)."""
        if self.dense is None:
            return
        n = len(self.dense) if below is None else min(below - self.base, len(self.dense))
        if n <= 0:
            return
        self._append(np.arange(self.base, self.base + n, dtype=np.int64), self.dense[:n])
        rest = self.dense[n:]
        self.dense = rest.copy() if len(rest) and rest.any() else None
        self.base += n

    def get(self, key: int) -> np.ndarray | None:
        """The row of ``key`` (a copy), or None when it has none."""
        j = key - self.base
        if self.dense is not None and 0 <= j < len(self.dense):
            row: np.ndarray = self.dense[j].copy()
            return row
        if key < self.base and self._packed is not None:
            w = self.width + 1
            flat = np.frombuffer(self._packed, np.int64)
            keys = flat[::w]
            i = int(keys.searchsorted(key))
            if i < len(keys) and int(keys[i]) == key:
                return flat[i * w + 1:(i + 1) * w].copy()
        if key < self.base and self._keys is not None and self._file is not None:
            spilled = np.frombuffer(self._keys, np.int64)
            i = int(spilled.searchsorted(key))
            found = i < len(spilled) and int(spilled[i]) == key
            del spilled
            if found:
                size = self.width * 8
                return np.frombuffer(read_at(self._file.fileno(), size, i * size),
                                     np.int64).copy()
        return None

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Every key with a row that is not all zero, sorted, and those rows."""
        keys, vals = self._unpack()
        if self.dense is not None:
            nz = self.dense.any(axis=1)
            keys = np.concatenate((keys, self.base + np.flatnonzero(nz)))
            vals = np.concatenate((vals, self.dense[nz]))
        return keys, vals

    def load(self, keys: np.ndarray, vals: np.ndarray) -> None:
        """Set rows (keys distinct and not held yet): they are packed."""
        if not len(keys):
            return
        held_k, held_v = self.rows()
        self.dense = None
        self._set_packed(np.concatenate((held_k, np.asarray(keys, np.int64))),
                         np.concatenate((held_v,
                                         np.asarray(vals, np.int64).reshape(-1, self.width))))
        if self._n_packed():
            self.base = self._last_key() + 1
