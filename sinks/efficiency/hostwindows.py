"""The host processes' call time per window: one table of every (window, process) pair of a
model, its rows in one growing int64 array, found by a packed index of the pairs (a sorted
int64 array, the rows in its order, and a small dict of recent pairs: no dict entry, int
object or row number a pair)."""

from __future__ import annotations

import numpy as np

from prvstream.sinks.efficiency.parts import grow
from prvstream.sinks.logger import get_logger

__all__ = ["HostWindows"]

log = get_logger(__name__)

#: recent pairs kept in a dict before they are merged into the packed index
_RECENT = 512
#: a pair's code: (window - the first window) in the high half, the process id in the low
_PROC_BITS = 32
_HALF = 1 << 31


class HostWindows:
    """Rows of ``width`` int64 by (window index, process id): a process's columns, then its
    threads' (each view's columns are added to separately). The merged pairs' rows lie in
    the order of their codes (the row of code ``j`` of the index is row ``j``: no row number
    a pair), the recent pairs' rows after them, in the order added."""

    def __init__(self, width: int) -> None:
        self.width = width
        #: the first window added: codes count windows from it
        self._base: int | None = None
        #: packed pairs merged, sorted: the first rows, in the same order
        self._codes = np.empty(0, np.int64)
        #: code -> row of the pairs not merged yet
        self._recent: dict[int, int] = {}
        #: (window, process) -> its row, of the pairs no code holds (far windows, huge ids)
        self._wide: dict[tuple[int, int], list[int]] = {}
        self._rows = np.zeros((0, width), np.int64)
        self._n = 0

    def _code(self, window: int, proc: int) -> int | None:
        if self._base is None:
            self._base = window
        d = window - self._base
        if -_HALF <= d < _HALF and 0 <= proc < 1 << _PROC_BITS:
            return d << _PROC_BITS | proc
        return None

    def _find(self, code: int) -> int | None:
        r = self._recent.get(code)
        if r is None and len(self._codes):
            i = int(np.searchsorted(self._codes, code))
            if i < len(self._codes) and int(self._codes[i]) == code:
                r = i
        return r

    def add(self, proc: int, col: int, windows: list[int], sums: list[int]) -> None:
        """Add ``sums`` to column ``col`` of process ``proc``'s row of each of ``windows``."""
        for k, total in zip(windows, sums, strict=True):
            code = self._code(k, proc)
            if code is None:
                row = self._wide.get((k, proc))
                if row is None:
                    row = self._wide[(k, proc)] = [0] * self.width
                row[col] += total
                continue
            r = self._find(code)
            if r is not None:
                self._rows[r, col] += total
                continue
            r = self._n
            self._recent[code] = r
            self._n += 1
            self._rows = grow(self._rows, self._n, first=16)
            self._rows[r, col] += total
            if len(self._recent) >= _RECENT:
                self._merge()

    def _merge(self) -> None:
        """Merge the recent pairs into the index, their rows into the code order."""
        if not self._recent:
            return
        m, k = len(self._codes), len(self._recent)
        codes = np.concatenate((self._codes, np.fromiter(self._recent.keys(), np.int64, k)))
        at = np.concatenate((np.arange(m, dtype=np.int64),
                             np.fromiter(self._recent.values(), np.int64, k)))
        order = np.argsort(codes, kind="stable")
        self._codes = codes[order]
        self._rows[:m + k] = self._rows[at[order]]
        self._recent = {}

    def get(self, window: int, proc: int) -> list[int] | None:
        """Process ``proc``'s row of ``window`` (a copy), or None when it has none."""
        if self._base is None:
            return None
        code = self._code(window, proc)
        if code is None:
            row = self._wide.get((window, proc))
            return None if row is None else list(row)
        r = self._find(code)
        return None if r is None else self._rows[r].tolist()

    def rows_of(self, window: int, procs: np.ndarray) -> np.ndarray:
        """The rows of ``window`` of processes ``procs`` (int64), zeros for those without
        one: ``get`` of each, at once."""
        out = np.zeros((len(procs), self.width), np.int64)
        if self._base is None or not len(procs):
            return out
        self._merge()
        d = window - self._base
        if -_HALF <= d < _HALF and len(self._codes):
            fits = (procs >= 0) & (procs < 1 << _PROC_BITS)
            codes = np.int64(d) << np.int64(_PROC_BITS) | procs
            at = np.minimum(np.searchsorted(self._codes, codes), len(self._codes) - 1)
            found = fits & (self._codes[at] == codes)
            out[found] = self._rows[at[found]]
        if self._wide:
            where = {p: j for j, p in enumerate(procs.tolist())}
            for (k, p), row in self._wide.items():
                j = where.get(p)
                if k == window and j is not None:
                    out[j] = row
        return out

    def by_process(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every row's process id and window (sorted by both), and the rows in that order."""
        self._merge()
        base = self._base or 0
        wide = len(self._wide)
        procs = np.concatenate((self._codes & ((1 << _PROC_BITS) - 1),
                                np.fromiter((p for _, p in self._wide), np.int64, wide)))
        windows = np.concatenate(((self._codes >> _PROC_BITS) + base,
                                  np.fromiter((k for k, _ in self._wide), np.int64, wide)))
        rows = np.concatenate((self._rows[:self._n],
                               np.array(list(self._wide.values()), np.int64).reshape(
                                   wide, self.width)))
        order = np.lexsort((windows, procs))
        return procs[order], windows[order], rows[order]

    def load(self, proc: int, col: int, keys: list[int], values: list[int]) -> None:
        """Add restored rows (``width // 2`` columns each, from ``col``) of windows ``keys``."""
        half = self.width // 2
        for j in range(half):
            self.add(proc, col + j, keys, values[j::half])
