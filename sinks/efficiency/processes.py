"""The host processes of a model as one table: a process id by (host, pid), found by the
packed (host id, value) index the devices use (``devices.PairIndex``), so the phases, host
metrics and NVTX repeats of a process are columns by its id, not objects and tuple-keyed dict
entries of their own (a watched job adds a process a report: issue 11)."""

from __future__ import annotations

from array import array
from collections.abc import Iterable

import numpy as np

from prvstream.sinks.efficiency.devices import PairIndex
from prvstream.sinks.hostnames import HostNames
from prvstream.sinks.logger import get_logger
from prvstream.sinks.narrowcols import extended

__all__ = ["ProcessTable"]

log = get_logger(__name__)


class ProcessTable:
    """(host, pid) -> process id (0, 1, ... in the order added), and back."""

    def __init__(self) -> None:
        self._hosts = HostNames()
        #: by process id: its host id and pid (``narrowcols``: as narrow as their values)
        self._hid = array("b")
        self._pid = array("b")
        #: (host id, pid) -> process id
        self._index = PairIndex()

    def __len__(self) -> int:
        return len(self._pid)

    def find(self, host: str, pid: int) -> int | None:
        """The id of process (host, pid), or None when it has none."""
        hid = self._hosts.find(host)
        return None if hid is None else self._index.first(hid, pid)

    def add(self, host: str, pid: int) -> int:
        """The id of process (host, pid), added when it has none."""
        found = self.find(host, pid)
        if found is not None:
            return found
        hid = self._hosts.id(host)
        i = len(self._pid)
        self._hid = extended(self._hid, (hid,))
        self._pid = extended(self._pid, (pid,))
        self._index.add(hid, pid, i)
        return i

    def key(self, i: int) -> tuple[str, int]:
        """(host, pid) of process ``i`` (a new tuple)."""
        return self._hosts[self._hid[i]], self._pid[i]

    def host(self, i: int) -> str:
        return self._hosts[self._hid[i]]

    def pid(self, i: int) -> int:
        return self._pid[i]

    def in_key_order(self, ids: Iterable[int]) -> array[int]:
        """``ids`` sorted by their (host, pid) (distinct ids): by numpy over the host names'
        order and the pids, no key tuple a process."""
        found = np.fromiter(ids, np.int64)
        names = [self._hosts[h] for h in range(len(self._hosts))]
        name_rank = np.empty(len(names), np.int64)
        name_rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
        hids = np.frombuffer(self._hid, np.dtype(f"i{self._hid.itemsize}"))[found]
        pids = np.frombuffer(self._pid, np.dtype(f"i{self._pid.itemsize}"))[found]
        return array("q", found[np.lexsort((pids, name_rank[hids]))].tobytes())
