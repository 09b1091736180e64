"""The last time written per (task, thread) of a live trace, packed: the tasks sorted with
where their threads start, each thread's number as narrow as the numbers need and its time,
and a small dict of recent changes, about 9 bytes a thread and 8 a task instead of a dict
entry keyed by a tuple (issue 11: memory flat in the number of reports)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from prvstream.sinks.logger import get_logger

__all__ = ["ThreadLast"]

log = get_logger(__name__)

#: recent changes kept as a dict before they are merged into the arrays
_RECENT = 512


def _code(key: tuple[int, int]) -> int:
    """``key`` packed into one int64 (task in the high half): refuses what would collide."""
    task, thread = key
    if not (0 <= task < 2**31 and 0 <= thread < 2**32):
        raise ValueError(f"(task, thread) {key} out of the packed range "
                         "(task < 2**31, thread < 2**32, both >= 0)")
    return task << 32 | thread


def _narrowest(top: int) -> type[np.unsignedinteger]:
    """The narrowest unsigned type holding 0 … ``top``."""
    for kind in (np.uint8, np.uint16):
        if top <= np.iinfo(kind).max:
            return kind
    return np.uint32


class ThreadLast:
    """A mapping (task, thread) -> last time, with the part of ``dict`` the live trace uses.

    Packed: ``_tasks`` (sorted, int32) and ``_starts`` (where each task's threads begin in
    ``_threads`` and ``_times``; one more at the end), each task's threads sorted."""

    __slots__ = ("_recent", "_starts", "_tasks", "_threads", "_times")

    def __init__(self, items: Iterable[tuple[tuple[int, int], int]] = ()) -> None:
        self._tasks = np.empty(0, np.int32)
        self._starts = np.zeros(1, np.int64)
        self._threads: np.ndarray = np.empty(0, np.uint8)
        self._times = np.empty(0, np.int64)
        self._recent: dict[int, int] = {}
        for key, t in items:
            self.raise_to(key, t)

    def _packed(self, code: int) -> int:
        task, thread = code >> 32, code & 0xFFFFFFFF
        tasks = self._tasks
        k = int(np.searchsorted(tasks, task))
        if k == len(tasks) or int(tasks[k]) != task:
            return -1
        lo, hi = int(self._starts[k]), int(self._starts[k + 1])
        if hi - lo == 1:
            return lo if int(self._threads[lo]) == thread else -1
        i = lo + int(np.searchsorted(self._threads[lo:hi], thread))
        return i if i < hi and int(self._threads[i]) == thread else -1

    def _codes(self) -> np.ndarray:
        """Every packed key as its int64 code, in order."""
        tasks = np.repeat(self._tasks.astype(np.int64), np.diff(self._starts))
        return tasks << 32 | self._threads.astype(np.int64)

    def get(self, key: tuple[int, int], default: int = -1) -> int:
        code = _code(key)
        found = self._recent.get(code)
        if found is not None:
            return found
        i = self._packed(code)
        return default if i < 0 else int(self._times[i])

    def __setitem__(self, key: tuple[int, int], t: int) -> None:
        self._recent[_code(key)] = t
        if len(self._recent) >= _RECENT:
            self._merge()

    def raise_to(self, key: tuple[int, int], t: int) -> None:
        """Set ``key`` to ``t`` unless it already holds a later time."""
        if t > self.get(key, -1):
            self[key] = t

    def _merge(self) -> None:
        if not self._recent:
            return
        codes = np.fromiter(self._recent.keys(), np.int64, len(self._recent))
        times = np.fromiter(self._recent.values(), np.int64, len(self._recent))
        all_codes = np.concatenate((codes, self._codes()))
        # the recent value wins: a stable sort keeps it before the packed one of its code
        order = np.argsort(all_codes, kind="stable")
        all_codes = all_codes[order]
        first = np.ones(len(all_codes), bool)
        first[1:] = all_codes[1:] != all_codes[:-1]
        all_codes = all_codes[first]
        self._times = np.concatenate((times, self._times))[order][first]
        tasks = all_codes >> 32
        new_task = np.flatnonzero(tasks[1:] != tasks[:-1]) + 1
        heads = np.concatenate(([0], new_task)) if len(tasks) else new_task
        self._tasks = tasks[heads].astype(np.int32)
        self._starts = np.append(heads, len(tasks)).astype(
            np.int32 if len(tasks) <= np.iinfo(np.int32).max else np.int64)
        threads = all_codes & 0xFFFFFFFF
        self._threads = threads.astype(_narrowest(int(threads.max()) if len(threads) else 0))
        self._recent = {}

    def __len__(self) -> int:
        self._merge()
        return len(self._times)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple):
            return False
        code = _code(key)
        return code in self._recent or self._packed(code) >= 0

    def items(self) -> Iterator[tuple[tuple[int, int], int]]:
        self._merge()
        for c, t in zip(self._codes().tolist(), self._times.tolist(), strict=True):
            yield (c >> 32, c & 0xFFFFFFFF), t

    def as_dict(self) -> dict[tuple[int, int], int]:
        return dict(self.items())
