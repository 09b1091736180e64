"""The host processes' call time per window: one table of every (window, process) pair of a
model, its rows in one growing int64 array, found by a packed index of the pairs (two sorted
int64 arrays and a small dict of recent pairs: no dict entry and int object a pair)."""

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
    threads' (each view's columns are added to separately)."""

    def __init__(self, width: int) -> None:
        self.width = width
        #: the first window added: codes count windows from it
        self._base: int | None = None
        #: packed pairs: sorted codes and the row of each
        self._codes = np.empty(0, np.int64)
        self._at = np.empty(0, np.int64)
        #: code -> row of the pairs not merged yet
        self._recent: dict[int, int] = {}
        #: (window, process) -> row of the pairs no code holds (far windows, huge ids)
        self._wide: dict[tuple[int, int], int] = {}
        self._rows = np.zeros((0, width), np.int64)
        self._n = 0

    def _code(self, window: int, proc: int) -> int | None:
        if self._base is None:
            self._base = window
        d = window - self._base
        if -_HALF <= d < _HALF and 0 <= proc < 1 << _PROC_BITS:
            return d << _PROC_BITS | proc
        return None

    def _find(self, window: int, proc: int, code: int | None) -> int | None:
        if code is None:
            return self._wide.get((window, proc))
        r = self._recent.get(code)
        if r is None and len(self._codes):
            i = int(np.searchsorted(self._codes, code))
            if i < len(self._codes) and int(self._codes[i]) == code:
                r = int(self._at[i])
        return r

    def add(self, proc: int, col: int, windows: list[int], sums: list[int]) -> None:
        """Add ``sums`` to column ``col`` of process ``proc``'s row of each of ``windows``."""
        for k, total in zip(windows, sums, strict=True):
            code = self._code(k, proc)
            r = self._find(k, proc, code)
            if r is None:
                r = self._n
                if code is None:
                    self._wide[(k, proc)] = r
                else:
                    self._recent[code] = r
                    if len(self._recent) >= _RECENT:
                        self._merge()
                self._n += 1
                self._rows = grow(self._rows, self._n, first=16)
            self._rows[r, col] += total

    def _merge(self) -> None:
        if not self._recent:
            return
        codes = np.concatenate((self._codes, np.fromiter(self._recent.keys(), np.int64,
                                                         len(self._recent))))
        at = np.concatenate((self._at, np.fromiter(self._recent.values(), np.int64,
                                                   len(self._recent))))
        order = np.argsort(codes, kind="stable")
        self._codes, self._at = codes[order], at[order]
        self._recent = {}

    def get(self, window: int, proc: int) -> list[int] | None:
        """Process ``proc``'s row of ``window`` (a copy), or None when it has none."""
        if self._base is None:
            return None
        r = self._find(window, proc, self._code(window, proc))
        return None if r is None else self._rows[r].tolist()

    def by_process(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every row's process id and window (sorted by both), and the rows in that order."""
        self._merge()
        base = self._base or 0
        wide = len(self._wide)
        procs = np.concatenate((self._codes & ((1 << _PROC_BITS) - 1),
                                np.fromiter((p for _, p in self._wide), np.int64, wide)))
        windows = np.concatenate(((self._codes >> _PROC_BITS) + base,
                                  np.fromiter((k for k, _ in self._wide), np.int64, wide)))
        at = np.concatenate((self._at, np.fromiter(self._wide.values(), np.int64, wide)))
        order = np.lexsort((windows, procs))
        return procs[order], windows[order], self._rows[at[order]]

    def load(self, proc: int, col: int, keys: list[int], values: list[int]) -> None:
        """Add restored rows (``width // 2`` columns each, from ``col``) of windows ``keys``."""
        half = self.width // 2
        for j in range(half):
            self.add(proc, col + j, keys, values[j::half])
