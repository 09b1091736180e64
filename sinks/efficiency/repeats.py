"""GPU activity a later report repeats: overlapping capture ranges of one process record the
same kernels and copies, which must not count twice.

Rows of one (process, device, stream) run in launch order, so the activity a capture range
holds there is a contiguous run: every row of a later report whose start lies between the first
and the last start of an earlier report on that stream is one the earlier report holds (the
trace drops the same rows as duplicates, ``stream.dedupe``). The top-N tables drop the same GPU
operations, and an NVTX range whose start lies between the first and the last range start of
an earlier report of its process (a capture range holds every thread's ranges that start in
it). Reports count in the order fed.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from prvstream.sinks.arrays import distinct, unique_inverse
from prvstream.sinks.base import TableDetail
from prvstream.sinks.efficiency.host import outside
from prvstream.sinks.efficiency.parts import Device, Report
from prvstream.sinks.efficiency.processes import ProcessTable
from prvstream.sinks.efficiency.ragged import Ragged
from prvstream.sinks.logger import get_logger

__all__ = [
    "NvtxSpans",
    "close_streams",
    "held_rows",
    "load_nvtx",
    "outside_earlier",
    "repeated",
    "stream_spans",
]

log = get_logger(__name__)


class NvtxSpans:
    """By process of the model's ``ProcessTable``: the (first, last) NVTX range starts of each
    report fed so far, flattened pairs (one per report) in one ``Ragged`` by process id (no
    object or dict entry a process)."""

    def __init__(self, table: ProcessTable) -> None:
        self.table = table
        self._log = Ragged()

    def get(self, key: tuple[str, int]) -> array[int] | None:
        """A process's pairs (a copy), or None when it has none."""
        i = self.table.find(key[0], key[1])
        if i is None or i >= len(self._log) or not self._log.size(i):
            return None
        return self._log.get(i)

    def __contains__(self, key: tuple[str, int]) -> bool:
        i = self.table.find(key[0], key[1])
        return i is not None and i < len(self._log) and self._log.size(i) > 0

    def add(self, key: tuple[str, int], pairs: Sequence[int]) -> None:
        """Append flattened (first, last) pairs to the process's."""
        i = self.table.add(key[0], key[1])
        while len(self._log) <= i:
            self._log.add_owner()
        self._log.extend(i, pairs)

    def items(self) -> Iterator[tuple[tuple[str, int], array[int]]]:
        """((host, pid), pairs) of each process with some, by process id."""
        for i in self._ids():
            yield self.table.key(i), self._log.get(i)

    def in_key_order(self) -> Iterator[tuple[tuple[str, int], array[int]]]:
        """``items`` in (host, pid) order (each process's pairs read once, as it comes)."""
        for i in self.table.in_key_order(self._ids()):
            yield self.table.key(i), self._log.get(i)

    def pair_count(self) -> int:
        """How many (first, last) pairs all processes hold (no pairs read)."""
        return sum(self._log.size(i) // 2 for i in range(len(self._log)))

    def _ids(self) -> Iterator[int]:
        return (i for i in range(len(self._log)) if self._log.size(i))


def repeated(devices: Sequence[Device], rep: Report, local: np.ndarray, stream: np.ndarray,
             start: np.ndarray, bounds: Sequence[int] = (0,)) -> np.ndarray | None:
    """Which rows (local device index, stream, wall-clock start; in start order) an earlier
    report holds already (None: none); the report's own start spans follow them, new streams
    in the order separate calls on the batches starting at ``bounds`` would add them."""
    uniq, inverse = unique_inverse(_stream_code(local, stream))
    out: np.ndarray | None = None
    one = len(uniq) == 1
    order = range(len(uniq))
    if not one and len(bounds) > 1:  # by the batch each stream first appears in, then code
        first = np.full(len(uniq), len(start), np.int64)
        np.minimum.at(first, inverse, np.arange(len(start)))
        order = np.lexsort((uniq, np.searchsorted(bounds, first, side="right"))).tolist()
    codes = uniq.tolist()
    for j in order:
        c = codes[j]
        at = None if one else (inverse == j).nonzero()[0]
        s = start if at is None else start[at]
        i, st = _split_code(c)
        gid, pid = int(rep.devices[i]), int(rep.pids[i])
        span = rep.streams.get((gid, pid, st))
        lo, hi = int(s[0]), int(s[-1])
        rep.streams[(gid, pid, st)] = [lo, hi] if span is None else [min(span[0], lo),
                                                                      max(span[1], hi)]
        earlier = stream_spans(devices[gid], pid, st)
        if not len(earlier):
            continue
        hit = _inside(s, earlier)
        if hit.any():
            rep.repeats.add(gid)
            out = np.zeros(len(start), bool) if out is None else out
            out[hit if at is None else at[hit]] = True
    return out


def _stream_code(local: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """One int64 per row for its (local device index, stream): ``_split_code`` undoes it."""
    return (local.astype(np.int64) << 32) | (stream.astype(np.int64) & 0xFFFFFFFF)


def _split_code(code: int) -> tuple[int, int]:
    """(local device index, stream) of a ``_stream_code``, the stream's int32 sign back."""
    i, st = code >> 32, code & 0xFFFFFFFF
    return i, st - (1 << 32) if st >= (1 << 31) else st


def stream_spans(dev: Device, pid: int, stream: int) -> np.ndarray:
    """The (first, last) start spans of the earlier reports on one (pid, stream) of ``dev``
    (an (n, 2) copy)."""
    if not dev.streams:
        return np.zeros((0, 2), np.int64)
    recs = np.array(dev.streams, np.int64).reshape(-1, 4)  # a copy: the array may grow
    return recs[(recs[:, 0] == pid) & (recs[:, 1] == stream), 2:]


def _inside(start: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Which of ``start`` lie in one of ``spans`` ((n, 2): first, last; both in)."""
    hit = np.zeros(len(start), bool)
    for a, b in spans.tolist():
        hit |= (start >= a) & (start <= b)
    return hit


def held_rows(devices: Sequence[Device], nvtx: NvtxSpans, rep: Report, rows: TableDetail
              ) -> np.ndarray | None:
    """Which rows of a top-N table an earlier report holds (None: none): GPU operations by
    the rule of ``repeated`` on their stream, NVTX ranges by their process's range starts
    (the report's own are noted here, for the reports after it)."""
    t = rows.start + np.int64(rep.origin)
    out: np.ndarray | None = None
    gpu = rows.device >= 0
    for at, held in (*_gpu_held(devices, rep, rows, gpu.nonzero()[0], t),
                     *_nvtx_held(nvtx, rep, rows, (~gpu).nonzero()[0], t)):
        out = np.zeros(len(t), bool) if out is None else out
        out[at[held]] = True
    return out


def _hull(devices: Sequence[Device], rep: Report) -> tuple[int, int] | None:
    """The first and last start the earlier reports have on the report's streams (None:
    none), kept for the report: what is outside cannot be held."""
    if rep.hull is None:
        lo, hi = 1, 0
        for g, p in zip(rep.devices.tolist(), rep.pids.tolist(), strict=True):
            recs = np.array(devices[g].streams, np.int64).reshape(-1, 4)
            recs = recs[recs[:, 0] == p]
            if len(recs):
                a, b = int(recs[:, 2].min()), int(recs[:, 3].max())
                lo, hi = (a, b) if lo > hi else (min(lo, a), max(hi, b))
        rep.hull = (lo, hi)
    return rep.hull if rep.hull[0] <= rep.hull[1] else None


def _gpu_held(devices: Sequence[Device], rep: Report, rows: TableDetail, at: np.ndarray,
              t: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    hull = _hull(devices, rep) if len(at) else None
    if hull is None:
        return []
    s = t[at]
    if int(s.max()) < hull[0] or int(s.min()) > hull[1]:
        return []
    uniq, inverse = unique_inverse(_stream_code(rows.device[at], rows.stream[at]))
    out = []
    for j, c in enumerate(uniq.tolist()):
        i, st = _split_code(c)
        earlier = stream_spans(devices[int(rep.devices[i])], int(rep.pids[i]), st)
        if len(earlier):
            mine = at[inverse == j]
            hit = _inside(t[mine], earlier)
            if hit.any():
                out.append((mine, hit))
    return out


def _nvtx_held(nvtx: NvtxSpans, rep: Report, rows: TableDetail, at: np.ndarray,
               t: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    if not len(at):
        return []
    procs = rows.process[at]
    each = distinct(procs).tolist()
    out = []
    for p in each:
        mine = at if len(each) == 1 else at[procs == p]
        s = t[mine]
        key = rep.processes[p]
        lo, hi = int(s.min()), int(s.max())
        span = rep.nvtx.get(key)
        rep.nvtx[key] = [lo, hi] if span is None else [min(span[0], lo), max(span[1], hi)]
        earlier = nvtx.get(key)
        if earlier:
            hit = _inside(s, np.frombuffer(earlier, np.int64).reshape(-1, 2))
            if hit.any():
                out.append((mine, hit))
    return out


def close_streams(devices: Sequence[Device], nvtx: NvtxSpans, rep: Report) -> None:
    """The report's start spans join its devices' and processes' (after every row of it was
    taken)."""
    for (gid, pid, st), (lo, hi) in rep.streams.items():
        devices[gid].add_streams((pid, st, lo, hi))
    for key, (lo, hi) in rep.nvtx.items():
        nvtx.add(key, (lo, hi))


def load_nvtx(nvtx: NvtxSpans, records: Iterable[Sequence[Any]]) -> None:
    """Append (host, pid, first, last) records (a state's, in order) to the processes'."""
    added: dict[tuple[str, int], array[int]] = {}
    for host, pid, a, b in records:
        added.setdefault((host, pid), array("q")).extend((a, b))
    for key, more in added.items():
        nvtx.add(key, more)


def outside_earlier(dev: Device, rep: Report, gid: int, g0: np.ndarray, g1: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Idle stretches [g0, g1) of a device where the report repeats earlier activity: only
    their parts outside the earlier reports' spans (there the earlier report holds the
    device's time); unchanged elsewhere."""
    if gid not in rep.repeats:
        return g0, g1
    g0, g1 = outside(g0, g1, dev.spans)
    order = np.argsort(g0, kind="stable")
    return g0[order], g1[order]
