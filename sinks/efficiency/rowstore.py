"""A table of int64 rows keyed by phase instance id that stays small: a dense block for the
ids that may still receive time, the settled rest packed as sorted (key, row) pairs.

Instance ids are handed out in the order occurrences are met, so the ids a device or a host
process adds time to move forward with the report: rows below the smallest id still open are
final and are packed (only rows that are not all zero), which keeps a long report's table at
one row per closed instance instead of a doubling array over every id of the job.
"""

from __future__ import annotations

from array import array

import numpy as np

from prvstream.sinks.logger import get_logger

__all__ = ["RowStore"]

log = get_logger(__name__)

#: rows the dense block starts with when it grows from nothing
_FIRST = 8


class RowStore:
    """Rows of ``width`` int64 by key: ``dense`` holds keys [``base``, ``base + len(dense)``),
    ``_keys``/``_vals`` the packed keys below ``base`` (sorted, distinct) and their rows."""

    __slots__ = ("_keys", "_vals", "base", "dense", "width")

    def __init__(self, width: int) -> None:
        self.width = width
        self.base = 0
        self.dense = np.zeros((0, width), np.int64)
        self._keys: array[int] = array("q")
        self._vals: array[int] = array("q")

    def __len__(self) -> int:
        """Rows held (packed ones and the dense block's)."""
        return len(self._keys) + len(self.dense)

    def _reserve(self, lo: int, hi: int) -> None:
        """Make the dense block cover keys [lo, hi) (``lo`` at or above ``base``)."""
        if not len(self.dense):  # start the block at the first key (never below packed)
            self.base = lo if not len(self._keys) else max(self.base, lo)
        need = hi - self.base
        if need > len(self.dense):
            new = np.zeros((max(need, 2 * len(self.dense), _FIRST), self.width), np.int64)
            new[:len(self.dense)] = self.dense
            self.dense = new

    def add(self, keys: np.ndarray, values: np.ndarray, cols: slice | int = slice(None)) -> None:
        """Add ``values`` (one row, or one value with an int ``cols``, per key) to the rows of
        ``keys`` (repeated keys add up)."""
        if not len(keys):
            return
        keys = np.asarray(keys, np.int64)
        if int(keys.min()) < self.base and len(self.dense) + len(self._keys):
            low = keys < self.base
            self._add_packed(keys[low], values[low], cols)
            keys, values = keys[~low], values[~low]
            if not len(keys):
                return
        self._reserve(int(keys.min()), int(keys.max()) + 1)
        idx = keys - self.base
        target = self.dense[:, cols]  # a view: adding to it adds to the block
        np.add.at(target, idx, values)

    def _add_packed(self, keys: np.ndarray, values: np.ndarray, cols: slice | int) -> None:
        """Add to keys below ``base`` (rare: an id met late); the packed pairs are rebuilt."""
        held_k, held_v = self._packed()
        extra = np.zeros((len(keys), self.width), np.int64)
        extra[:, cols] = values
        self._pack(np.concatenate((held_k, keys)), np.concatenate((held_v, extra)),
                   replace=True)

    def _packed(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the packed keys and rows."""
        keys = np.array(self._keys, np.int64)
        vals = np.array(self._vals, np.int64).reshape(len(keys), self.width)
        return keys, vals

    def _pack(self, keys: np.ndarray, vals: np.ndarray, *, replace: bool = False) -> None:
        """Append rows (keys above every packed one), or with ``replace`` set the packed pairs
        to ``keys`` (any order, repeats summed); rows of zeros are dropped."""
        if replace:
            uk, inv = np.unique(keys, return_inverse=True)
            vals_sum = np.zeros((len(uk), self.width), np.int64)
            np.add.at(vals_sum, inv, vals)
            keys, vals = uk, vals_sum
            self._keys, self._vals = array("q"), array("q")
        nz = vals.any(axis=1)
        self._keys.extend(keys[nz].tolist())
        self._vals.extend(vals[nz].ravel().tolist())

    def settle(self, below: int) -> None:
        """Pack the rows of keys below ``below``: no time is added to them any more (a key
        that still gets some is handled, at a cost)."""
        n = min(below - self.base, len(self.dense))
        if n <= 0:
            return
        self._pack(np.arange(self.base, self.base + n, dtype=np.int64), self.dense[:n])
        rest = self.dense[n:]
        self.dense = rest.copy() if len(rest) else np.zeros((0, self.width), np.int64)
        self.base += n

    def get(self, key: int) -> np.ndarray | None:
        """The row of ``key`` (a copy), or None when it has none."""
        j = key - self.base
        if 0 <= j < len(self.dense):
            row: np.ndarray = self.dense[j].copy()
            return row
        if key < self.base and len(self._keys):
            keys = np.frombuffer(self._keys, np.int64)
            i = int(np.searchsorted(keys, key))
            found = i < len(keys) and int(keys[i]) == key
            del keys
            if found:
                w = self.width
                return np.array(self._vals[i * w:(i + 1) * w], np.int64)
        return None

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Every key with a row that is not all zero, sorted, and those rows."""
        keys, vals = self._packed()
        if len(self.dense):
            nz = self.dense.any(axis=1)
            keys = np.concatenate((keys, self.base + np.flatnonzero(nz)))
            vals = np.concatenate((vals, self.dense[nz]))
        return keys, vals

    def load(self, keys: np.ndarray, vals: np.ndarray) -> None:
        """Set rows (keys distinct and not held yet): they are packed."""
        if not len(keys):
            return
        held_k, held_v = self.rows()
        self.dense = np.zeros((0, self.width), np.int64)
        self._pack(np.concatenate((held_k, np.asarray(keys, np.int64))),
                   np.concatenate((held_v, np.asarray(vals, np.int64).reshape(-1, self.width))),
                   replace=True)
        self.base = int(self._keys[-1]) + 1 if len(self._keys) else 0
