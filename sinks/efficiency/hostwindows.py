"""The host processes' call time per window: one table of every (window, process) pair of a
model, its rows in one growing int64 array (not two dicts of lists a process)."""

from __future__ import annotations

import numpy as np

from prvstream.sinks.efficiency.parts import grow
from prvstream.sinks.logger import get_logger

__all__ = ["HostWindows"]

log = get_logger(__name__)


class HostWindows:
    """Rows of ``width`` int64 by (window index, process id): a process's columns, then its
    threads' (each view's columns are added to separately)."""

    def __init__(self, width: int) -> None:
        self.width = width
        #: window index -> process id -> row of ``_rows``
        self._at: dict[int, dict[int, int]] = {}
        self._rows = np.zeros((0, width), np.int64)
        self._n = 0

    def add(self, proc: int, col: int, windows: list[int], sums: list[int]) -> None:
        """Add ``sums`` to column ``col`` of process ``proc``'s row of each of ``windows``."""
        for k, total in zip(windows, sums, strict=True):
            at = self._at.get(k)
            if at is None:
                at = self._at[k] = {}
            r = at.get(proc)
            if r is None:
                r = at[proc] = self._n
                self._n += 1
                self._rows = grow(self._rows, self._n, first=16)
            self._rows[r, col] += total

    def get(self, window: int, proc: int) -> list[int] | None:
        """Process ``proc``'s row of ``window`` (a copy), or None when it has none."""
        r = self._at.get(window, {}).get(proc)
        return None if r is None else self._rows[r].tolist()

    def by_process(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every row's process id and window (sorted by both), and the rows in that order."""
        n = self._n
        procs, windows, at = (np.empty(n, np.int64) for _ in range(3))
        j = 0
        for k, rows in self._at.items():
            m = len(rows)
            windows[j:j + m] = k
            procs[j:j + m] = np.fromiter(rows.keys(), np.int64, m)
            at[j:j + m] = np.fromiter(rows.values(), np.int64, m)
            j += m
        order = np.lexsort((windows, procs))
        return procs[order], windows[order], self._rows[at[order]]

    def load(self, proc: int, col: int, keys: list[int], values: list[int]) -> None:
        """Add restored rows (``width // 2`` columns each, from ``col``) of windows ``keys``."""
        half = self.width // 2
        for j in range(half):
            self.add(proc, col + j, keys, values[j::half])
