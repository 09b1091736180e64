"""The host processes of a model as one table: a process id by (host, pid), found by a packed
index (a host id and the pid in one int64: two sorted int64 arrays and a small dict of recent
codes), so the phases, host metrics and NVTX repeats of a process are columns by its id, not
objects and tuple-keyed dict entries of their own (a watched job adds a process a report:
issue 11)."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable

import numpy as np

from prvstream.sinks.logger import get_logger
from prvstream.sinks.narrowcols import extended

__all__ = ["ProcessTable"]

log = get_logger(__name__)

#: recent codes kept in a dict before they are merged into the packed index
_RECENT = 512
#: a code: the host id in the high half, the pid in the low
_PID_BITS = 32


class ProcessTable:
    """(host, pid) -> process id (0, 1, ... in the order added), and back."""

    def __init__(self) -> None:
        self._hosts: list[str] = []
        self._host_ids: dict[str, int] = {}
        #: by process id: its host id and pid (``narrowcols``: as narrow as their values)
        self._hid = array("b")
        self._pid = array("b")
        #: packed codes, sorted, and the process id of each
        self._codes = np.empty(0, np.int64)
        self._at = np.empty(0, np.int64)
        #: code -> process id of the codes not merged yet
        self._recent: dict[int, int] = {}
        #: (host id, pid) -> process id of the pids no code holds (negative or huge)
        self._wide: dict[tuple[int, int], int] = {}

    def __len__(self) -> int:
        return len(self._pid)

    def find(self, host: str, pid: int) -> int | None:
        """The id of process (host, pid), or None when it has none."""
        hid = self._host_ids.get(host)
        if hid is None:
            return None
        if not 0 <= pid < 1 << _PID_BITS:
            return self._wide.get((hid, pid))
        code = hid << _PID_BITS | pid
        r = self._recent.get(code)
        if r is None and len(self._codes):
            i = int(np.searchsorted(self._codes, code))
            if i < len(self._codes) and int(self._codes[i]) == code:
                r = int(self._at[i])
        return r

    def add(self, host: str, pid: int) -> int:
        """The id of process (host, pid), added when it has none."""
        found = self.find(host, pid)
        if found is not None:
            return found
        hid = self._host_ids.get(host)
        if hid is None:
            hid = self._host_ids[host] = len(self._hosts)
            self._hosts.append(sys.intern(host))
        i = len(self._pid)
        self._hid = extended(self._hid, (hid,))
        self._pid = extended(self._pid, (pid,))
        if not 0 <= pid < 1 << _PID_BITS:
            self._wide[(hid, pid)] = i
        else:
            self._recent[hid << _PID_BITS | pid] = i
            if len(self._recent) >= _RECENT:
                self._merge()
        return i

    def _merge(self) -> None:
        n = len(self._recent)
        codes = np.concatenate((self._codes, np.fromiter(self._recent.keys(), np.int64, n)))
        at = np.concatenate((self._at, np.fromiter(self._recent.values(), np.int64, n)))
        order = np.argsort(codes, kind="stable")
        self._codes, self._at = codes[order], at[order]
        self._recent = {}

    def key(self, i: int) -> tuple[str, int]:
        """(host, pid) of process ``i`` (a new tuple)."""
        return self._hosts[self._hid[i]], self._pid[i]

    def host(self, i: int) -> str:
        return self._hosts[self._hid[i]]

    def pid(self, i: int) -> int:
        return self._pid[i]

    def in_key_order(self, ids: Iterable[int]) -> list[int]:
        """``ids`` sorted by their (host, pid)."""
        return sorted(ids, key=lambda i: (self._hosts[self._hid[i]], self._pid[i]))
