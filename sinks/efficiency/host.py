"""Host metrics (BSC BasicAnalysis / TALP): per host process and per host thread, time in the
CUDA runtime and in MPI, cumulative and per window, and the host efficiencies built from them.

Host offload efficiency is BasicAnalysis's: per host thread, useful time is the time outside
CUDA runtime (and MPI) calls, which is the Running state ``kinds.hoststates`` writes, summed
over every host thread. The same ratio per process (a process in the runtime while any of its
threads is) is kept as ``process_offload_efficiency``; the MPI metrics are per process
(docs/efficiency.md). A later report of a process yields to the earlier ones where their spans
overlap, as the trace's host states do.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence

import msgspec
import numpy as np

from prvstream.sinks.arrays import unique_inverse
from prvstream.sinks.base import HostKind, ReportInfo
from prvstream.sinks.efficiency.hostmetrics import HostSample, HostSums, host_metrics, host_row
from prvstream.sinks.efficiency.hostwindows import HostWindows
from prvstream.sinks.efficiency.metrics import covered
from prvstream.sinks.efficiency.overlap import covered_by
from prvstream.sinks.efficiency.ragged import Ragged
from prvstream.sinks.efficiency.sharedrows import SharedRows
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary import encoded
from prvstream.sinks.summary.records import HostMetrics, HostRow

__all__ = [
    "HOST_WIDTH",
    "MPI_SPAN",
    "SPAN",
    "HostParts",
    "HostProcess",
    "HostSample",
    "HostTotals",
    "by_thread",
    "captured",
    "host_metrics",
    "outside",
    "restore_process",
    "thread_spans",
    "threads",
]

log = get_logger(__name__)

#: columns of a host totals row: ns in the CUDA runtime, ns in MPI
HOST_WIDTH = 2
#: a process's row and its threads' (``HostProcess.log``'s first slots, ``HostWindows``)
_SUMS = 2 * HOST_WIDTH
#: ``HostProcess.log`` tags of the process's spans (a thread's tag is its OS tid, >= 0)
SPAN, MPI_SPAN = -1, -2
#: ``HostProcess.log`` lengths searched in Python (a process of a few reports and threads)
_SMALL = _SUMS + 3 * 32
#: a new process's sums
_ZERO_SUMS = (0,) * _SUMS


Spans = list[tuple[int, int]]
#: host metrics with ``hosts`` left empty, and what makes their rows (again at each call)
HostParts = tuple[HostMetrics, Callable[[], Iterator[HostRow]]]


class HostProcess(msgspec.Struct, gc=False):
    """One host process of the job: its captured spans and its call time as a process (union
    over its threads) and summed over its host threads (each its own union); its time per
    window is in ``HostTotals.windows`` under ``id``. What grows with its reports is its list
    of ``HostTotals.logs`` (``log``), so a process of a small report is one small struct."""

    host: str
    pid: int
    #: its number in the model (the order first met)
    id: int
    #: the model's logs of every process (``HostTotals.logs``): its own is the list ``id``
    logs: Ragged
    rank: int | None = None
    #: (its rows by phase instance id: time inside its own occurrence, then the same summed
    #: over its threads, are rows of ``HostTotals.instances`` under ``id``)

    @property
    def log(self) -> array[int]:
        """ns in the CUDA runtime and in MPI (``HOST_WIDTH``) as a process, then summed over
        its threads; then (tag, start, end) records in the order added: the wall-clock spans
        of its reports that have calls of it (tag ``SPAN``; only those count), of those with
        MPI calls (``MPI_SPAN``: MPI metrics are computed where any process has such a span),
        and of each span a host thread is captured over (tag: its OS tid; the reports that
        give it states). A copy."""
        return self.logs.get(self.id)

    @property
    def spans(self) -> Spans:
        return self._tagged(SPAN)

    @property
    def mpi_spans(self) -> Spans:
        return self._tagged(MPI_SPAN)

    @property
    def totals(self) -> list[int]:
        return self.log[:HOST_WIDTH].tolist()

    @property
    def thread_totals(self) -> list[int]:
        return self.log[HOST_WIDTH:_SUMS].tolist()

    def records(self) -> np.ndarray:
        """The (tag, start, end) records (a copy: the array grows)."""
        return np.array(self.log[_SUMS:], np.int64).reshape(-1, 3)

    def _tagged(self, tag: int) -> Spans:
        t = self.log
        if len(t) <= _SMALL:  # a few records: a Python pass costs less than numpy's calls
            return [(t[j + 1], t[j + 2]) for j in range(_SUMS, len(t), 3) if t[j] == tag]
        recs = self.records()
        mine = recs[recs[:, 0] == tag]
        return list(zip(mine[:, 1].tolist(), mine[:, 2].tolist(), strict=True))

    def add_span(self, tag: int, span: tuple[int, int]) -> None:
        """Record a span of the process (``SPAN``, ``MPI_SPAN``) or of a thread (its tid)."""
        self.logs.extend(self.id, (tag, *span))

    def add_time(self, col: int, ns: int) -> None:
        """Add ``ns`` to column ``col`` of its sums (the log's first ``_SUMS`` values)."""
        self.logs.add_at(self.id, col, ns)


class _Open(msgspec.Struct):
    """The report being fed: its processes, span and, per union key, the union's reach."""

    procs: list[HostProcess]
    origin: int
    lo: int
    hi: int
    #: per process index, the threads the trace gives host states
    stated: list[list[int]]
    reach: dict[tuple[int, ...], int] = msgspec.field(default_factory=dict)
    #: processes (indices) with calls, with MPI calls; threads with calls per process
    called: set[int] = msgspec.field(default_factory=set)
    mpi: set[int] = msgspec.field(default_factory=set)
    seen: dict[int, set[int]] = msgspec.field(default_factory=dict)
    #: per process index: phase occurrences that may still receive time (start, end, id)
    phases: dict[int, list[tuple[int, int, int]]] = msgspec.field(default_factory=dict)


def outside(lo: np.ndarray, hi: np.ndarray, spans: Spans) -> tuple[np.ndarray, np.ndarray]:
    """The parts of disjoint pieces [lo, hi) outside every span of ``spans``."""
    for a, b in spans:
        if not len(lo):
            break
        lo, hi = (np.concatenate((lo, np.maximum(lo, b))),
                  np.concatenate((np.minimum(hi, a), hi)))
        keep = hi > lo
        lo, hi = lo[keep], hi[keep]
    return lo, hi


class HostTotals:
    """Unions of host call intervals per process and per thread, attributed to the cumulative
    and window views as they stream in (memory: one row per process, thread and window)."""

    def __init__(self, window_ns: int) -> None:
        self.window_ns = window_ns
        self.processes: dict[tuple[str, int], HostProcess] = {}
        #: every process's log (``HostProcess.log``), by process id
        self.logs = Ragged()
        #: every process's time per window (its row, then its threads')
        self.windows = HostWindows(_SUMS)
        #: every process's rows by phase instance id (its own, then its threads')
        self.instances = SharedRows(_SUMS)
        self._open: _Open | None = None

    def process(self, host: str, pid: int, rank: int | None) -> HostProcess:
        """A new process of the job (its host name interned: a job's processes share few)."""
        return self.process_at((sys.intern(host), pid), rank)

    def process_at(self, key: tuple[str, int], rank: int | None) -> HostProcess:
        """A new process of the job under ``key`` (host interned, pid): the model's own key
        tuple of the process, not one more a process."""
        hp = self.processes[key] = HostProcess(key[0], key[1], self.logs.add_owner(),
                                               self.logs, rank)
        self.logs.extend(hp.id, _ZERO_SUMS)
        return hp

    def begin(self, info: ReportInfo, origin: int,
              keys: Sequence[tuple[str, int]] | None = None) -> None:
        """A report's processes (``keys``: the model's (host, pid) of each, to be kept)."""
        procs = []
        for i, p in enumerate(info.processes):
            hp = self.processes.get((p.host, p.pid))
            if hp is None:
                hp = self.process(p.host, p.pid, p.rank) if keys is None else \
                    self.process_at(keys[i], p.rank)
            elif p.rank is not None:
                hp.rank = p.rank if hp.rank is None else min(hp.rank, p.rank)
            procs.append(hp)
        self._open = _Open(procs, origin, origin + int(info.start_ns),
                           origin + int(info.end_ns), [list(p.threads) for p in info.processes])

    def phase(self, proc: int, start: int, end: int, instance: int) -> None:
        """A phase occurrence of process ``proc`` (wall-clock times): its host time follows."""
        if self._open is not None and end > start:
            self._open.phases.setdefault(proc, []).append((start, end, instance))

    def add(self, batch: np.ndarray) -> None:
        """HOST_DTYPE rows, in non-decreasing start order (across batches and kinds), each
        after every phase that starts at or before it."""
        rep = self._open
        if rep is None:
            raise RuntimeError("begin_report must come before host batches")
        if not len(batch):
            return
        lo, hi = np.int64(rep.lo), np.int64(rep.hi)  # np.clip's fixed cost is 10 us a call
        s = np.minimum(np.maximum(batch["start"] + np.int64(rep.origin), lo), hi)
        e = np.minimum(np.maximum(batch["end"] + np.int64(rep.origin), lo), hi)
        proc_of = batch["process"].astype(np.int64)
        kind_of = batch["kind"].astype(np.int64)
        tid_of = batch["thread"].astype(np.int64)
        for level, key in ((0, proc_of * 2 + kind_of),
                           (1, (proc_of << 34) | (tid_of << 2) | kind_of)):
            if bool((key == key[0]).all()) and not bool((s[1:] < s[:-1]).any()):
                ks, ss, es = key, s, e  # one key, in start order: the sort would not move
                cuts = np.zeros(0, np.int64)
            else:
                order = np.lexsort((s, key))
                ks, ss, es = key[order], s[order], e[order]
                cuts = np.flatnonzero(np.diff(ks)) + 1
            for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(ks)], strict=True):
                k = int(ks[a])
                proc, tid, kind = (k >> 1, -1, k & 1) if level == 0 else \
                    (k >> 34, (k >> 2) & ((1 << 32) - 1), k & 3)
                if not 0 <= proc < len(rep.procs):
                    continue
                self._union(rep, proc, tid, kind, ss[a:b], es[a:b])
        frontier = int(batch["start"].max()) + rep.origin
        for lst in rep.phases.values():  # no later call starts before the frontier
            lst[:] = [p for p in lst if p[1] > frontier]
        self._settle(rep, final=False)

    def _settle(self, rep: _Open, *, final: bool) -> None:
        """Pack the phase rows no call adds time to any more: below the smallest occurrence
        still open in the process (all of them at the end of the report)."""
        for i, hp in enumerate(rep.procs):
            lst = None if final else rep.phases.get(i)
            self.instances.settle(hp.id, min(p[2] for p in lst) if lst else None, final=final)

    def _union(self, rep: _Open, proc: int, tid: int, kind: int, s: np.ndarray,
               e: np.ndarray) -> None:
        """Add the new part of calls [s, e) (in start order) of a process (``tid`` -1) or of
        one of its threads to its union, outside the spans of earlier reports of it."""
        reach = rep.reach.get((proc, tid, kind), rep.lo)
        ends = np.maximum.accumulate(np.concatenate(([reach], e)))
        lo, hi = np.maximum(s, ends[:-1]), e
        keep = hi > lo
        rep.reach[(proc, tid, kind)] = int(ends[-1])
        hp = rep.procs[proc]
        if tid < 0:
            rep.called.add(proc)
            if kind == HostKind.MPI:
                rep.mpi.add(proc)
            lo, hi = outside(lo[keep], hi[keep], hp.spans)
            col = kind
        else:
            rep.seen.setdefault(proc, set()).add(tid)
            lo, hi = outside(lo[keep], hi[keep], thread_spans(hp, tid))
            col = HOST_WIDTH + kind
        if len(lo):
            hp.add_time(col, int((hi - lo).sum()))
            self._attribute(hp.id, col, lo, hi)
            _phases(self.instances, hp, col, rep.phases.get(proc), lo, hi)

    def _attribute(self, proc: int, col: int, lo: np.ndarray, hi: np.ndarray) -> None:
        """Add disjoint pieces [lo, hi) to column ``col`` of the windows they fall in."""
        w = self.window_ns
        k0, k1 = lo // w, (hi - 1) // w
        single = k0 == k1
        ks, inv = unique_inverse(k0[single])
        sums = np.zeros(len(ks), np.int64)
        np.add.at(sums, inv, (hi - lo)[single])
        self.windows.add(proc, col, ks.tolist(), sums.tolist())
        for a, b in zip(lo[~single].tolist(), hi[~single].tolist(), strict=True):
            span = list(range(a // w, (b - 1) // w + 1))
            self.windows.add(proc, col, span, [min(b, (k + 1) * w) - max(a, k * w)
                                               for k in span])

    def end(self) -> None:
        rep = self._open
        if rep is None:
            raise RuntimeError("begin_report must come before end_report")
        self._settle(rep, final=True)
        if rep.hi > rep.lo:
            span = (rep.lo, rep.hi)
            for i in sorted(rep.called):
                if span not in rep.procs[i].spans:
                    rep.procs[i].add_span(SPAN, span)
            for i in sorted(rep.mpi):
                if span not in rep.procs[i].mpi_spans:
                    rep.procs[i].add_span(MPI_SPAN, span)
            for i, hp in enumerate(rep.procs):
                for tid in sorted({*rep.stated[i], *rep.seen.get(i, ())}):
                    hp.add_span(tid, span)
        self._open = None

    def metrics(self, window: int | None = None) -> HostParts | None:
        """Host metrics of the whole job (each process over its captured time), or of window
        ``window``: with ``hosts`` empty, and what makes their rows again (a process at a
        time). None when no host process was captured there."""
        w = self.window_ns
        start, end = (-(2**62), 2**62) if window is None else (window * w, (window + 1) * w)
        zero = [0] * _SUMS

        def samples() -> Iterator[tuple[HostProcess, HostSample]]:
            for key in sorted(self.processes):
                hp = self.processes[key]
                own, theirs = captured(hp)
                t = covered(own, start, end)
                each = [covered(sp, start, end) for sp in theirs]
                if t <= 0 and not any(each):
                    continue
                lg = hp.log
                v = (lg[0], lg[1], lg[2], lg[3]) if window is None else \
                    self.windows.get(window, hp.id) or zero
                yield hp, HostSample(hp.host, hp.pid, hp.rank, t, v[0], v[1],
                                     sum(1 for x in each if x > 0), sum(each), v[2], v[3])

        return _rows_metrics(samples, start, end)

    def phase_metrics(self, occurrences: Iterable[tuple[tuple[str, int], int, int, int]]
                      ) -> HostParts | None:
        """Host metrics over phase occurrences ((host, pid), start, end, instance id): each
        process over its own occurrences (several of one process add up); as ``metrics``."""
        at: dict[tuple[str, int], int] = {}
        acc = array("q")  # 7 sums a process, in the order first met
        lo, hi = 2**62, -(2**62)
        zero = [0] * HOST_WIDTH
        mpi = False  # MPI calls captured inside an occurrence of their own process
        for key, s, e, i in occurrences:
            hp = self.processes.get(key)
            if hp is None:
                continue
            own, theirs = captured(hp)
            t = covered(own, s, e)
            each = [covered(sp, s, e) for sp in theirs]
            if t <= 0 and not any(each):
                continue
            mpi = mpi or covered(hp.mpi_spans, s, e) > 0
            found = self.instances.get(hp.id, i)
            v, tv = (zero, zero) if found is None else (found[:HOST_WIDTH].tolist(),
                                                         found[HOST_WIDTH:].tolist())
            row = at.get(key)
            if row is None:
                row = at[key] = len(acc)
                acc.extend((0,) * 7)
            for j, x in enumerate((t, *v, sum(1 for x in each if x > 0), sum(each), *tv)):
                acc[row + j] = max(acc[row + j], x) if j == 3 else acc[row + j] + x
            lo, hi = min(lo, s), max(hi, e)

        def samples() -> Iterator[tuple[HostProcess, HostSample]]:
            for k in sorted(at):
                r = acc[at[k]:at[k] + 7]
                hp = self.processes[k]
                yield hp, HostSample(k[0], k[1], hp.rank, *r)

        return _rows_metrics(samples, lo, hi, mpi)


def _phases(rows: SharedRows, hp: HostProcess, col: int,
            recent: list[tuple[int, int, int]] | None, lo: np.ndarray, hi: np.ndarray) -> None:
    """Add the parts of pieces [lo, hi) inside each open phase occurrence to column ``col``
    of the process's instance rows."""
    if not recent:
        return
    r = np.array(recent, np.int64)
    inside = covered_by(lo, hi, r[:, 0], r[:, 1])
    nz = inside > 0
    if nz.any():
        rows.add(hp.id, r[nz, 2], inside[nz], col)


def _rows_metrics(rows: Callable[[], Iterable[tuple[HostProcess, HostSample]]], start: int,
                  end: int, mpi: bool | None = None) -> HostParts | None:
    """host_metrics of (process, sample) rows (made again for each pass over them, but for
    up to ``ROWS_AT_ONCE`` of them, kept); MPI ones where ``mpi``, by default where any
    process has a report with MPI calls in [start, end)."""
    sums = HostSums()
    any_mpi = False
    kept: list[HostRow] | None = []
    for hp, sample in rows():
        if mpi is None and not any_mpi:
            any_mpi = covered(hp.mpi_spans, start, end) > 0
        row = host_row(sample)
        sums.add(row)
        if kept is not None and len(kept) < encoded.ROWS_AT_ONCE:
            kept.append(row)
        else:
            kept = None
    if not sums.count:
        return None
    made = kept
    again = (lambda: iter(made)) if made is not None else lambda: (
        host_row(sample) for _, sample in rows())
    return sums.metrics(any_mpi if mpi is None else mpi, []), again


def thread_spans(hp: HostProcess, tid: int) -> Spans:
    """The spans host thread ``tid`` of ``hp`` is captured over, in the order added."""
    return hp._tagged(tid)


def threads(hp: HostProcess) -> list[tuple[int, int, int]]:
    """(tid, start, end) of each span a host thread of ``hp`` is captured over, in order."""
    t = hp.log.tolist()
    return [(t[j], t[j + 1], t[j + 2]) for j in range(_SUMS, len(t), 3) if t[j] >= 0]


def by_thread(hp: HostProcess) -> list[Spans]:
    """Each host thread's spans (``thread_spans``), threads in the order first met."""
    return captured(hp)[1]


def captured(hp: HostProcess) -> tuple[Spans, list[Spans]]:
    """The process's spans (``spans``) and each host thread's (``by_thread``), in one pass."""
    t = hp.log.tolist()
    own: Spans = []
    each: dict[int, Spans] = {}
    for j in range(_SUMS, len(t), 3):
        tag = t[j]
        if tag == SPAN:
            own.append((t[j + 1], t[j + 2]))
        elif tag >= 0:
            each.setdefault(tag, []).append((t[j + 1], t[j + 2]))
    return own, list(each.values())


def restore_process(totals: HostTotals, host: str, pid: int, rank: int | None,
                    spans: Sequence[Sequence[int]], mpi_spans: Sequence[Sequence[int]],
                    threads: Sequence[Sequence[int]], sums: Sequence[int],
                    thread_sums: Sequence[int]) -> HostProcess:
    """A process of ``totals`` from its exported state (``partial.HostState``; its windows
    and phase rows added after)."""
    hp = totals.process(host, pid, rank)
    totals.logs.set_at(hp.id, 0, [*(sums or [0] * HOST_WIDTH),
                                  *(thread_sums or [0] * HOST_WIDTH)])
    for tag, recs in ((SPAN, spans), (MPI_SPAN, mpi_spans)):
        for s in recs:
            hp.add_span(tag, (s[0], s[1]))
    for t in threads:
        hp.add_span(t[0], (t[1], t[2]))
    return hp
