"""The efficiency model's devices as columns by device id: each device's host (an id into the
model's host names), CUDA id, rank, process and first report in narrow ``array`` columns, its
look-ups as packed integer codes, and a ``Device`` made only when code reads one (a watched job
registers a device with nearly every report: issue 11)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import msgspec
import numpy as np

from prvstream.sinks.efficiency.ragged import Ragged
from prvstream.sinks.hostnames import HostNames
from prvstream.sinks.logger import get_logger
from prvstream.sinks.madesequence import MadeSequence
from prvstream.sinks.narrowcols import extended

__all__ = ["Device", "DeviceTable", "PairIndex", "fits_int32"]

log = get_logger(__name__)

#: recent pairs kept in a dict before they are merged into the packed index
_RECENT = 512
#: a pair's code: the host id in the high half, the value (offset by ``_HALF``) in the low
_LOW_BITS = 32
_HALF = 1 << 31


def fits_int32(values: np.ndarray) -> bool:
    """Whether every one of ``values`` (int64, not empty) fits an int32."""
    return int(values.min()) >= -_HALF and int(values.max()) < _HALF


class PairIndex:
    """(host id, int) pairs -> the ids added under each (in the order added): a sorted int64
    array of packed codes and an int32 array of their ids, a small dict of recent pairs, and a
    dict of the pairs no code holds (values beyond 32 bits): no tuple, dict entry or int object
    a pair."""

    def __init__(self) -> None:
        self._codes = np.empty(0, np.int64)
        self._ids = np.empty(0, np.int32)
        #: code -> id(s) of the pairs not merged yet
        self._recent: dict[int, int | list[int]] = {}
        #: (host id, value) -> ids of the pairs no code holds
        self._wide: dict[tuple[int, int], list[int]] = {}

    @staticmethod
    def _code(host: int, value: int) -> int | None:
        if 0 <= host < _HALF and -_HALF <= value < _HALF:
            return host << _LOW_BITS | (value + _HALF)
        return None

    def add(self, host: int, value: int, gid: int) -> None:
        """Add id ``gid`` under (host, value) (ids come in increasing order)."""
        code = self._code(host, value)
        if code is None:
            self._wide.setdefault((host, value), []).append(gid)
            return
        held = self._recent.get(code)
        if held is None:
            self._recent[code] = gid
        elif isinstance(held, int):
            self._recent[code] = [held, gid]
        else:
            held.append(gid)
        if len(self._recent) >= _RECENT:
            self._merge()

    def _merge(self) -> None:
        codes, ids = [], []
        for code, held in self._recent.items():
            for gid in (held,) if isinstance(held, int) else held:
                codes.append(code)
                ids.append(gid)
        allc = np.concatenate((self._codes, np.array(codes, np.int64)))
        alli = np.concatenate((self._ids, np.array(ids, np.int32)))
        order = np.lexsort((alli, allc))  # by code, then id: the order added
        self._codes, self._ids = allc[order], alli[order]
        self._recent = {}

    def find(self, host: int, value: int) -> list[int]:
        """The ids added under (host, value), in the order added."""
        code = self._code(host, value)
        if code is None:
            return list(self._wide.get((host, value), ()))
        out: list[int] = []
        if len(self._codes):
            a, b = self._codes.searchsorted([code, code + 1]).tolist()
            if b > a:
                out = self._ids[a:b].tolist()
        held = self._recent.get(code)
        if held is not None:
            out += [held] if isinstance(held, int) else held
        return out

    def first(self, host: int, value: int) -> int | None:
        """The first id added under (host, value) (None: none)."""
        found = self.find(host, value)
        return found[0] if found else None


class DeviceTable(MadeSequence["Device"]):
    """The model's devices by id (a sequence of ``Device``, each made when read): the columns
    of each device, its first report, and its report spans and stream records as lists of one
    shared ``Ragged`` (owners ``2 * id`` and ``2 * id + 1``)."""

    def __init__(self) -> None:
        self.hosts = HostNames()
        #: by device id: host id, its process's host id, CUDA id, rank (0 where
        #: ``_has_rank`` is 0: none), pid (widened as ``narrowcols`` does)
        self._host = array("i")
        self._proc_host = array("i")
        self._device = array("i")
        self._rank = array("i")
        self._has_rank = bytearray()
        self._pid = array("i")
        #: the (start, report id) of each device's first report: the ids' UTF-8 bytes one
        #: after the other, each one's end in ``_id_end``
        self.first_ns = array("q")
        self._ids = bytearray()
        self._id_end = array("i")
        self.logs = Ragged()
        #: (host, CUDA id) -> device id; (process host, pid) -> its devices' ids
        self._by_key = PairIndex()
        self._by_process = PairIndex()

    def __len__(self) -> int:
        return len(self._host)

    def host(self, index: int) -> str:
        """Device ``index``'s host (no ``Device`` made)."""
        return self.hosts[self._host[index]]

    def group_key(self, index: int) -> str:
        """Device ``index``'s rank as text, or ``host:pid`` where it has none (a record's
        rank groups; no ``Device`` made)."""
        if self._has_rank[index]:
            return str(self._rank[index])
        return f"{self.hosts[self._host[index]]}:{self._pid[index]}"

    def ranks_of(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Devices ``ids``'s ranks (0 where none) and whether each has one, as columns (a
        record's rank groups of thousands of devices; no text a device)."""
        ranks = np.frombuffer(self._rank, np.dtype(f"i{self._rank.itemsize}"))[ids]
        has = np.frombuffer(self._has_rank, np.uint8)[ids] != 0
        return ranks.astype(np.int64), has

    def _item(self, index: int) -> Device:
        host = self.hosts[self._host[index]]
        proc_host = self.hosts[self._proc_host[index]]
        pid = self._pid[index]
        return Device(host, self._device[index],
                      self._rank[index] if self._has_rank[index] else None, pid,
                      (proc_host, pid), index, self)

    def add(self, host: str, device: int, rank: int | None, process: tuple[str, int],
            first: tuple[int, str]) -> int:
        """A new device's columns; its id."""
        gid = len(self._host)
        hid = self.hosts.id(host)
        phid = self.hosts.id(process[0])
        self._host.append(hid)
        self._proc_host.append(phid)
        self._device = extended(self._device, (device,))
        self._rank = extended(self._rank, (0 if rank is None else rank,))
        self._has_rank.append(rank is not None)
        self._pid = extended(self._pid, (process[1],))
        self.first_ns.append(first[0])
        self._ids += first[1].encode("utf-8", "surrogatepass")
        self._id_end = extended(self._id_end, (len(self._ids),))
        self.logs.add_owner()
        self.logs.add_owner()
        self._by_key.add(hid, device, gid)
        self._by_process.add(phid, process[1], gid)
        return gid

    def find(self, host: str, device: int) -> int | None:
        """The id of device (host, CUDA id) (None: not registered)."""
        hid = self.hosts.find(host)
        return None if hid is None else self._by_key.first(hid, device)

    def of_process(self, process: tuple[str, int]) -> list[int]:
        """The ids of the devices of ``process`` (host, pid), in the order registered."""
        hid = self.hosts.find(process[0])
        return [] if hid is None else self._by_process.find(hid, process[1])

    def key(self, gid: int) -> tuple[str, int]:
        """(host, CUDA id) of device ``gid``."""
        return self.hosts[self._host[gid]], self._device[gid]

    def span_log(self, gid: int) -> array[int]:
        """The [start, end) spans of device ``gid``'s reports, flattened pairs (a copy)."""
        return self.logs.get(2 * gid)

    def first(self, gid: int) -> tuple[int, str]:
        """(start, report id) of device ``gid``'s first report."""
        a = self._id_end[gid - 1] if gid else 0
        return self.first_ns[gid], self._ids[a:self._id_end[gid]].decode("utf-8",
                                                                          "surrogatepass")


class Device(msgspec.Struct, gc=False):
    """A physical GPU of the job: (host, CUDA id), all its streams and processes flattened;
    made from its model's ``DeviceTable`` (``cols``) under ``at`` (its id) when read, where
    what it logs per report is."""

    host: str
    device: int
    rank: int | None
    pid: int
    process: tuple[str, int]
    at: int
    cols: DeviceTable

    @property
    def first(self) -> tuple[int, str]:
        """(start, report id) of the report that registered it (the earliest one, merged)."""
        return self.cols.first(self.at)

    @property
    def span_log(self) -> array[int]:
        """The [start, end) spans of its reports, flattened pairs (a copy)."""
        return self.cols.span_log(self.at)

    @property
    def spans(self) -> list[tuple[int, int]]:
        """The spans of its reports, in the order added."""
        t = self.span_log
        return [(t[j], t[j + 1]) for j in range(0, len(t), 2)]

    @property
    def streams(self) -> array[int]:
        """(pid, stream, first, last) activity starts of each report fed so far, flattened
        records (a copy): a later report's activity starting inside one was captured by it
        already (``repeats``)."""
        return self.cols.logs.get(2 * self.at + 1)

    def add_span(self, start: int, end: int) -> None:
        """Log the [start, end) span of one of its reports."""
        self.cols.logs.extend(2 * self.at, (start, end))

    def add_streams(self, records: Sequence[int]) -> None:
        """Log flattened (pid, stream, first, last) records."""
        self.cols.logs.extend(2 * self.at + 1, records)
