"""The last time written per (task, thread) of a live trace, packed: two sorted int64 arrays
and a small dict of recent changes, about 16 bytes a thread instead of a dict entry keyed by
a tuple (issue 11: memory flat in the number of reports)."""

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


class ThreadLast:
    """A mapping (task, thread) -> last time, with the part of ``dict`` the live trace uses."""

    __slots__ = ("_codes", "_recent", "_times")

    def __init__(self, items: Iterable[tuple[tuple[int, int], int]] = ()) -> None:
        self._codes = np.empty(0, np.int64)
        self._times = np.empty(0, np.int64)
        self._recent: dict[int, int] = {}
        for key, t in items:
            self.raise_to(key, t)

    def _packed(self, code: int) -> int:
        i = int(np.searchsorted(self._codes, code))
        return i if i < len(self._codes) and int(self._codes[i]) == code else -1

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
        all_codes = np.concatenate((codes, self._codes))
        # the recent value wins: a stable sort keeps it before the packed one of its code
        order = np.argsort(all_codes, kind="stable")
        all_codes = all_codes[order]
        first = np.ones(len(all_codes), bool)
        first[1:] = all_codes[1:] != all_codes[:-1]
        self._codes = all_codes[first]
        self._times = np.concatenate((times, self._times))[order][first]
        self._recent = {}

    def __len__(self) -> int:
        self._merge()
        return len(self._codes)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple):
            return False
        code = _code(key)
        return code in self._recent or self._packed(code) >= 0

    def items(self) -> Iterator[tuple[tuple[int, int], int]]:
        self._merge()
        for c, t in zip(self._codes.tolist(), self._times.tolist(), strict=True):
            yield (c >> 32, c & 0xFFFFFFFF), t

    def as_dict(self) -> dict[tuple[int, int], int]:
        return dict(self.items())
