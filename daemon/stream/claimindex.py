"""The committed reports' host-state claims by thread, packed: columns sorted by an exact
thread code (host id, pid and tid in one int64) and the reports' sort keys as arrays and one
bytes buffer of names, instead of a dict of lists of tuples (issue 11: memory flat in the
number of reports)."""

from __future__ import annotations

from array import array

import numpy as np

from prvstream.daemon.stream.claims import Claim
from prvstream.sinks.hostnames import HostNames
from prvstream.sinks.logger import get_logger
from prvstream.sinks.narrowcols import extended

__all__ = ["ClaimIndex"]

log = get_logger(__name__)

#: recent claims kept as tuples before they are merged into the arrays
_RECENT = 256
#: bits of a thread code: host id, pid, tid (pid and tid of a globalTid are 24 bits each)
_HOST_BITS, _ID_BITS = 15, 24
_ID_LIMIT = 1 << _ID_BITS
#: a report index as int32 until one does not fit
_I32_MAX = 2**31 - 1


class ClaimIndex:
    """Claims of reports added in order; ``earlier`` answers as the dict
    ``(host, pid, tid) -> [(report sort key, claim)]`` it replaces did.

    A claim is 28 bytes in four sorted columns (thread code, start, end, report); a thread
    whose host id, pid or tid does not fit the code keeps its claims in a small dict instead.
    """

    __slots__ = ("_codes", "_his", "_hosts", "_los", "_name_ends", "_names",
                 "_recent", "_rep_host", "_rep_wall", "_reps", "_wide")

    def __init__(self) -> None:
        self._hosts = HostNames()
        self._rep_wall = array("q")
        self._rep_host = array("i")
        self._names = bytearray()
        self._name_ends = array("i")
        self._codes = np.empty(0, np.int64)
        self._los = np.empty(0, np.int64)
        self._his = np.empty(0, np.int64)
        self._reps: np.ndarray = np.empty(0, np.int32)
        self._recent: list[tuple[int, int, int, int]] = []
        #: (host, pid, tid) -> [(start, end, report)] of threads without a code
        self._wide: dict[tuple[str, int, int], list[tuple[int, int, int]]] = {}

    @staticmethod
    def _code(hid: int, pid: int, tid: int) -> int:
        """The thread's exact code, or -1 where one of its parts does not fit."""
        if hid >> _HOST_BITS or not (0 <= pid < _ID_LIMIT and 0 <= tid < _ID_LIMIT):
            return -1
        return (hid << _ID_BITS | pid) << _ID_BITS | tid

    def add(self, sort_key: tuple[int, str, str], claims: list[Claim]) -> None:
        """A report's claims, after every report added before."""
        if not claims:
            return
        rep = len(self._rep_wall)
        self._rep_wall.append(sort_key[0])
        self._rep_host = extended(self._rep_host, (self._hosts.id(sort_key[1]),))
        self._names += sort_key[2].encode(errors="surrogatepass")  # a path's undecodable bytes
        self._name_ends = extended(self._name_ends, (len(self._names),))
        for host, pid, tid, lo, hi in claims:
            code = self._code(self._hosts.id(host), pid, tid)
            if code < 0:
                self._wide.setdefault((host, pid, tid), []).append((lo, hi, rep))
            else:
                self._recent.append((code, lo, hi, rep))
        if len(self._recent) >= _RECENT:
            self._merge()

    def _merge(self) -> None:
        recent = self._recent
        if not recent:
            return
        codes, los, his, reps = zip(*recent, strict=True)
        both = np.concatenate((self._codes, np.array(codes, np.int64)))
        # stable: a thread's claims stay in the order they were added
        order = np.argsort(both, kind="stable")
        self._codes = both[order]
        self._los = np.concatenate((self._los, np.array(los, np.int64)))[order]
        self._his = np.concatenate((self._his, np.array(his, np.int64)))[order]
        rep_type = np.int32 if reps[-1] <= _I32_MAX and self._reps.dtype == np.int32 \
            else np.int64
        self._reps = np.concatenate((self._reps.astype(rep_type, copy=False),
                                     np.array(reps, rep_type)))[order]
        self._recent = []

    def _sort_key(self, rep: int) -> tuple[int, str, str]:
        start = self._name_ends[rep - 1] if rep else 0
        return (self._rep_wall[rep], self._hosts[self._rep_host[rep]],
                self._names[start:self._name_ends[rep]].decode(errors="surrogatepass"))

    def earlier(self, sort_key: tuple[int, str, str], claims: list[Claim]) -> list[Claim]:
        """The claims on the threads of ``claims`` of the reports before ``sort_key``, by
        thread in the order of ``claims``, each thread's in the order they were added."""
        out: list[Claim] = []
        codes = self._codes
        for host, pid, tid in dict.fromkeys(c[:3] for c in claims):
            hid = self._hosts.find(host)
            if hid is None:
                continue
            code = self._code(hid, pid, tid)
            if code < 0:
                rows = self._wide.get((host, pid, tid), [])
            else:
                a = int(np.searchsorted(codes, code, "left"))
                b = int(np.searchsorted(codes, code, "right"))
                rows = list(zip(self._los[a:b].tolist(), self._his[a:b].tolist(),
                                self._reps[a:b].tolist(), strict=True))
                rows += [r[1:] for r in self._recent if r[0] == code]
            for lo, hi, rep in rows:
                if self._sort_key(rep) < sort_key:
                    out.append((host, pid, tid, lo, hi))
        return out
