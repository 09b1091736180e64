"""Host names as small ids (0, 1, ... in the order first seen) and back: the tables that hold
a row per device, process or report (many rows, few hosts) keep a host id instead of a name."""

from __future__ import annotations

import sys

__all__ = ["HostNames"]


class HostNames:
    """Host name <-> id; names interned (every row of a host shares one string)."""

    __slots__ = ("_ids", "_names")

    def __init__(self) -> None:
        self._names: list[str] = []
        self._ids: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._names)

    def __getitem__(self, hid: int) -> str:
        """The name of host id ``hid``."""
        return self._names[hid]

    def id(self, host: str) -> int:
        """The id of ``host``, added when new."""
        hid = self._ids.get(host)
        if hid is None:
            hid = self._ids[host] = len(self._names)
            self._names.append(sys.intern(host))
        return hid

    def find(self, host: str) -> int | None:
        """The id of ``host``, or None when it has none."""
        return self._ids.get(host)
