"""The committed reports' host-state claims by thread, packed: int64 arrays sorted by a thread
hash and the reports' sort keys as arrays and one bytes buffer of names, instead of a dict of
lists of tuples (issue 11: memory flat in the number of reports)."""

from __future__ import annotations

from array import array

import numpy as np

from prvstream.daemon.stream.claims import Claim
from prvstream.sinks.logger import get_logger

__all__ = ["ClaimIndex"]

log = get_logger(__name__)

#: recent claims kept as tuples before they are merged into the arrays
_RECENT = 256
#: packed columns: thread hash, host id, pid, tid, start, end, report index
_COLUMNS = 7


class ClaimIndex:
    """Claims of reports added in order; ``earlier`` answers as the dict
    ``(host, pid, tid) -> [(report sort key, claim)]`` it replaces did."""

    __slots__ = ("_host_ids", "_hosts", "_name_ends", "_names", "_packed", "_recent",
                 "_rep_host", "_rep_wall")

    def __init__(self) -> None:
        self._hosts: list[str] = []
        self._host_ids: dict[str, int] = {}
        self._rep_wall = array("q")
        self._rep_host = array("q")
        self._names = bytearray()
        self._name_ends = array("q")
        self._packed = np.empty((0, _COLUMNS), np.int64)
        self._recent: list[tuple[int, ...]] = []

    def _host(self, host: str) -> int:
        found = self._host_ids.get(host)
        if found is None:
            found = self._host_ids[host] = len(self._hosts)
            self._hosts.append(host)
        return found

    def add(self, sort_key: tuple[int, str, str], claims: list[Claim]) -> None:
        """A report's claims, after every report added before."""
        if not claims:
            return
        rep = len(self._rep_wall)
        self._rep_wall.append(sort_key[0])
        self._rep_host.append(self._host(sort_key[1]))
        self._names += sort_key[2].encode(errors="surrogatepass")  # a path's undecodable bytes
        self._name_ends.append(len(self._names))
        for host, pid, tid, lo, hi in claims:
            self._recent.append((hash((host, pid, tid)), self._host(host), pid, tid, lo, hi,
                                 rep))
        if len(self._recent) >= _RECENT:
            self._merge()

    def _merge(self) -> None:
        if not self._recent:
            return
        both = np.concatenate((self._packed, np.array(self._recent, np.int64)))
        # stable: a thread's claims stay in the order they were added
        self._packed = both[np.argsort(both[:, 0], kind="stable")]
        self._recent = []

    def _sort_key(self, rep: int) -> tuple[int, str, str]:
        start = self._name_ends[rep - 1] if rep else 0
        return (self._rep_wall[rep], self._hosts[self._rep_host[rep]],
                self._names[start:self._name_ends[rep]].decode(errors="surrogatepass"))

    def earlier(self, sort_key: tuple[int, str, str], claims: list[Claim]) -> list[Claim]:
        """The claims on the threads of ``claims`` of the reports before ``sort_key``, by
        thread in the order of ``claims``, each thread's in the order they were added."""
        out: list[Claim] = []
        codes = self._packed[:, 0]
        for host, pid, tid in dict.fromkeys(c[:3] for c in claims):
            h = hash((host, pid, tid))
            hid = self._host_ids.get(host)
            if hid is None:
                continue
            a = int(np.searchsorted(codes, h, "left"))
            b = int(np.searchsorted(codes, h, "right"))
            rows = [tuple(r) for r in self._packed[a:b].tolist()]
            rows += [r for r in self._recent if r[0] == h]
            for _, rh, rp, rt, lo, hi, rep in rows:
                if (rh, rp, rt) == (hid, pid, tid) and self._sort_key(rep) < sort_key:
                    out.append((host, pid, tid, lo, hi))
        return out
