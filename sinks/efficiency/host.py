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

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice

import msgspec
import numpy as np

from prvstream.sinks.arrays import unique_inverse
from prvstream.sinks.base import HostKind, ReportInfo
from prvstream.sinks.efficiency.hostcolumns import (
    MPI_SPAN,
    SPAN,
    HostColumns,
    measured,
    parse_logs,
    spans_of,
)
from prvstream.sinks.efficiency.hostmetrics import HostSample, HostSums, host_metrics, host_row
from prvstream.sinks.efficiency.hostwindows import HostWindows
from prvstream.sinks.efficiency.metrics import covered
from prvstream.sinks.efficiency.overlap import covered_by
from prvstream.sinks.efficiency.processes import ProcessTable
from prvstream.sinks.efficiency.ragged import Ragged
from prvstream.sinks.efficiency.sharedrows import SharedRows
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary import encoded
from prvstream.sinks.summary.records import HostMetrics, HostRow

__all__ = [
    "HOST_WIDTH",
    "MPI_SPAN",
    "NO_RANK",
    "SPAN",
    "HostParts",
    "HostSample",
    "HostTotals",
    "host_metrics",
    "outside",
    "restore_process",
]

log = get_logger(__name__)

#: columns of a host totals row: ns in the CUDA runtime, ns in MPI
HOST_WIDTH = 2
#: a process's row and its threads' (``HostTotals.log``'s first slots, ``HostWindows``)
_SUMS = 2 * HOST_WIDTH
#: a new process's sums
_ZERO_SUMS = (0,) * _SUMS
#: the rank column's value of a process without one
NO_RANK = -(2**63)
#: host processes a record samples as columns at a time, and phase occurrences a phase
#: record measures at a time (``HostTotals.metrics``, ``phase_metrics``)
BLOCK = 256
#: most (occurrence, span) pairs a block of phase occurrences is measured with as columns
_PAIRS = 1 << 16
#: fewer host processes, or phase occurrences in a block, than this are measured one at a
#: time: numpy's calls cost more than the Python they replace (a small export's summary)
COLUMNS_FROM = 64


Spans = list[tuple[int, int]]
#: host metrics with ``hosts`` left empty, and what makes their rows (again at each call)
HostParts = tuple[HostMetrics, Callable[[], Iterator[HostRow]]]
#: measured phase occurrences: process ids, starts, ends, instance ids, captured ns, threads
#: captured and their ns; whether any has MPI calls inside
_OccurrenceColumns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                           np.ndarray, np.ndarray, bool]


class _Open(msgspec.Struct):
    """The report being fed: its processes, span and, per union key, the union's reach."""

    #: the process ids (``ProcessTable``) of the report's processes
    procs: list[int]
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
    and window views as they stream in (memory: one row per process, thread and window).

    A host process is an id of the model's ``ProcessTable``: its rank, its log (``log``) and
    its rows are columns and owners by that id, no object of its own."""

    def __init__(self, window_ns: int, table: ProcessTable | None = None) -> None:
        self.window_ns = window_ns
        #: the model's processes: a host process is one of them
        self.table = ProcessTable() if table is None else table
        #: by process id: 1 for a host process (one a report met, or a state's)
        self._is_host = bytearray()
        #: by process id: its rank (``NO_RANK``: none)
        self._rank = array("q")
        #: how many host processes, and their ids in (host, pid) order (None: to sort again)
        self.count = 0
        self._order: array[int] | None = array("q")
        #: every process's log (``log``), by process id
        self.logs = Ragged()
        #: every process's time per window (its row, then its threads')
        self.windows = HostWindows(_SUMS)
        #: every process's rows by phase instance id (its own, then its threads')
        self.instances = SharedRows(_SUMS)
        self._open: _Open | None = None

    def process(self, host: str, pid: int, rank: int | None) -> int:
        """The id of host process (host, pid), made a host process (with ``rank``) when it is
        not one yet."""
        return self._made_host(self.table.add(host, pid), rank)

    def _made_host(self, i: int, rank: int | None) -> int:
        if i < len(self._is_host) and self._is_host[i]:
            return i
        grow = i + 1 - len(self._is_host)
        if grow > 0:
            self._is_host.extend(bytes(grow))
            self._rank.extend((NO_RANK,) * grow)
        while len(self.logs) <= i:
            self.logs.add_owner()
        self._is_host[i] = 1
        self._rank[i] = NO_RANK if rank is None else rank
        self.logs.extend(i, _ZERO_SUMS)
        self.count += 1
        self._order = None
        return i

    def has(self, host: str, pid: int) -> bool:
        """Whether (host, pid) is a host process."""
        i = self.table.find(host, pid)
        return i is not None and i < len(self._is_host) and bool(self._is_host[i])

    def is_host(self, i: int) -> bool:
        return i < len(self._is_host) and bool(self._is_host[i])

    def rank(self, i: int) -> int | None:
        r = self._rank[i]
        return None if r == NO_RANK else r

    def in_key_order(self) -> array[int]:
        """The host processes' ids in (host, pid) order (kept until a process is added)."""
        if self._order is None:
            self._order = array("q", self.table.in_key_order(
                i for i, h in enumerate(self._is_host) if h))
        return self._order

    def log(self, i: int) -> array[int]:
        """ns in the CUDA runtime and in MPI (``HOST_WIDTH``) of process ``i`` as a process,
        then summed over its threads; then its (tag, start, end) records (``records``), a
        group a span: start, end, the number of tags, the tags. A copy."""
        return self.logs.get(i)

    def spans(self, i: int) -> Spans:
        return self._tagged(i, SPAN)

    def mpi_spans(self, i: int) -> Spans:
        return self._tagged(i, MPI_SPAN)

    def thread_spans(self, i: int, tid: int) -> Spans:
        """The spans host thread ``tid`` of process ``i`` is captured over, in order."""
        return self._tagged(i, tid)

    def totals(self, i: int) -> list[int]:
        return self.log(i)[:HOST_WIDTH].tolist()

    def thread_totals(self, i: int) -> list[int]:
        return self.log(i)[HOST_WIDTH:_SUMS].tolist()

    def _tagged(self, i: int, tag: int) -> Spans:
        """The spans of process ``i``'s records of ``tag``, in the order added."""
        t = self.log(i)
        out: Spans = []
        j, n = _SUMS, len(t)
        while j < n:
            k = t[j + 2]
            if tag in t[j + 3:j + 3 + k]:
                out.append((t[j], t[j + 1]))
            j += 3 + k
        return out

    def add_spans(self, i: int, span: tuple[int, int], tags: Sequence[int]) -> None:
        """Record ``span`` of process ``i`` under each of ``tags``: ``SPAN``, ``MPI_SPAN`` or
        a thread's tid (one group of the log)."""
        if tags:
            self.logs.extend(i, (*span, len(tags), *tags))

    def records(self, i: int) -> Iterator[tuple[int, int, int]]:
        """(tag, start, end) of process ``i``'s records, in the order added: the wall-clock
        spans of its reports that have calls of it (tag ``SPAN``; only those count), of those
        with MPI calls (``MPI_SPAN``: MPI metrics are computed where any process has such a
        span), and of each span a host thread is captured over (tag: its OS tid; the reports
        that give it states)."""
        t = self.log(i).tolist()
        j, n = _SUMS, len(t)
        while j < n:
            s, e, k = t[j], t[j + 1], t[j + 2]
            for tag in t[j + 3:j + 3 + k]:
                yield tag, s, e
            j += 3 + k

    def threads(self, i: int) -> list[tuple[int, int, int]]:
        """(tid, start, end) of each span a host thread of process ``i`` is captured over."""
        return [(tag, s, e) for tag, s, e in self.records(i) if tag >= 0]

    def captured(self, i: int) -> tuple[Spans, list[Spans]]:
        """Process ``i``'s spans (``spans``) and each host thread's, threads in the order
        first met, in one pass."""
        own: Spans = []
        each: dict[int, Spans] = {}
        for tag, s, e in self.records(i):
            if tag == SPAN:
                own.append((s, e))
            elif tag >= 0:
                each.setdefault(tag, []).append((s, e))
        return own, list(each.values())

    def begin(self, info: ReportInfo, origin: int, ids: Sequence[int] | None = None) -> None:
        """A report's processes (``ids``: their ids in the model's table)."""
        procs = []
        for j, p in enumerate(info.processes):
            i = self.table.add(p.host, p.pid) if ids is None else ids[j]
            if not self.is_host(i):
                self._made_host(i, p.rank)
            elif p.rank is not None:
                r = self._rank[i]
                self._rank[i] = p.rank if r == NO_RANK else min(r, p.rank)
            procs.append(i)
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
        for j, i in enumerate(rep.procs):
            lst = None if final else rep.phases.get(j)
            self.instances.settle(i, min(p[2] for p in lst) if lst else None, final=final)

    def _union(self, rep: _Open, proc: int, tid: int, kind: int, s: np.ndarray,
               e: np.ndarray) -> None:
        """Add the new part of calls [s, e) (in start order) of a process (``tid`` -1) or of
        one of its threads to its union, outside the spans of earlier reports of it."""
        reach = rep.reach.get((proc, tid, kind), rep.lo)
        ends = np.maximum.accumulate(np.concatenate(([reach], e)))
        lo, hi = np.maximum(s, ends[:-1]), e
        keep = hi > lo
        rep.reach[(proc, tid, kind)] = int(ends[-1])
        i = rep.procs[proc]
        if tid < 0:
            rep.called.add(proc)
            if kind == HostKind.MPI:
                rep.mpi.add(proc)
            lo, hi = outside(lo[keep], hi[keep], self.spans(i))
            col = kind
        else:
            rep.seen.setdefault(proc, set()).add(tid)
            lo, hi = outside(lo[keep], hi[keep], self.thread_spans(i, tid))
            col = HOST_WIDTH + kind
        if len(lo):
            self.logs.add_at(i, col, int((hi - lo).sum()))
            self._attribute(i, col, lo, hi)
            _phases(self.instances, i, col, rep.phases.get(proc), lo, hi)

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
            tags: dict[int, list[int]] = {i: [] for i in rep.procs}  # a group a process
            for j in sorted(rep.called):
                i = rep.procs[j]
                if SPAN not in tags[i] and span not in self.spans(i):
                    tags[i].append(SPAN)
            for j in sorted(rep.mpi):
                i = rep.procs[j]
                if MPI_SPAN not in tags[i] and span not in self.mpi_spans(i):
                    tags[i].append(MPI_SPAN)
            for j, i in enumerate(rep.procs):
                tags[i] += sorted({*rep.stated[j], *rep.seen.get(j, ())})
            for i, mine in tags.items():
                self.add_spans(i, span, mine)
        self._open = None

    def metrics(self, window: int | None = None) -> HostParts | None:
        """Host metrics of the whole job (each process over its captured time), or of window
        ``window``: with ``hosts`` empty, and what makes their rows again. None when no host
        process was captured there.

        The processes are sampled ``BLOCK`` at a time as columns (``hostcolumns``), or one at
        a time where the columns cannot give the same values or are too few to pay
        (``_samples``, ``COLUMNS_FROM``); the sums are
        made in one pass, the rows again in another, so what a record holds for its host
        processes is one block's columns, whatever their number (issue 11)."""
        w = self.window_ns
        start, end = (-(2**62), 2**62) if window is None else (window * w, (window + 1) * w)
        if self.count < COLUMNS_FROM:
            return _rows_metrics(self, lambda: self._samples(start, end, window), start, end)
        sums = HostSums()
        any_mpi = False
        for _, found in self._blocks(start, end, window):
            if found is None or not found[0].exact():  # sums and shares: Python's
                return _rows_metrics(self, lambda: self._samples(start, end, window), start,
                                     end)
            cols, mpi = found
            sums.add_columns(cols.captured, cols.runtime, cols.mpi, cols.thread_captured,
                             cols.thread_runtime, cols.thread_mpi)
            any_mpi = any_mpi or mpi
        if not sums.count:
            return None

        def rows() -> Iterator[HostRow]:
            for ids, found in self._blocks(start, end, window):
                samples = (self._samples(start, end, window, ids.tolist()) if found is None
                           else self._column_samples(found[0]))
                for _, sample in samples:
                    yield host_row(sample)

        return sums.metrics(any_mpi, []), rows

    def _samples(self, start: int, end: int, window: int | None,
                 ids: Iterable[int] | None = None) -> Iterator[tuple[int, HostSample]]:
        """Each host process's sample over [start, end), one process at a time (``ids``, in
        key order; default: every host process): those captured there."""
        zero = [0] * _SUMS
        table = self.table
        for i in self.in_key_order() if ids is None else ids:
            own, theirs = self.captured(i)
            t = covered(own, start, end)
            each = [covered(sp, start, end) for sp in theirs]
            if t <= 0 and not any(each):
                continue
            v = self.log(i)[:_SUMS].tolist() if window is None else \
                self.windows.get(window, i) or zero
            yield i, HostSample(table.host(i), table.pid(i), self.rank(i), t, v[0], v[1],
                                sum(1 for x in each if x > 0), sum(each), v[2], v[3])

    def _column_samples(self, cols: HostColumns) -> Iterator[tuple[int, HostSample]]:
        """``_samples`` of a block's columns."""
        table = self.table
        for i, *values in cols.sample_rows(0, len(cols)):
            yield i, HostSample(table.host(i), table.pid(i), self.rank(i), *values)

    def _blocks(self, start: int, end: int, window: int | None
                ) -> Iterator[tuple[np.ndarray, tuple[HostColumns, bool] | None]]:
        """The host processes in key order, ``BLOCK`` at a time: their ids, and their samples
        as columns with whether any of them has MPI calls in [start, end) (None where the
        columns cannot hold them: ``_columns``)."""
        order = self.in_key_order()
        for a in range(0, len(order), BLOCK):
            ids = np.array(order[a:a + BLOCK], np.int64)
            yield ids, self._columns(ids, start, end, window)

    def _columns(self, ids: np.ndarray, start: int, end: int, window: int | None
                 ) -> tuple[HostColumns, bool] | None:
        """The samples of host processes ``ids`` over [start, end) (``_samples``'s, of
        ``window`` or of the whole job) as columns, and whether any of those sampled has MPI
        calls there; None where a span's times or a process's threads are past what the
        columns hold (``hostcolumns.TIMES``, ``thread_sums``)."""
        n = len(ids)
        with self.logs.segments(ids) as (data, first, size):
            owner, lo, hi, tag = parse_logs(data, first, size, _SUMS)
            sums = (data[first[:, None] + np.arange(_SUMS)] if window is None
                    else self.windows.rows_of(window, ids))
        found = measured(owner, tag, lo, hi, n, start, end)
        if found is None:
            return None
        captured, count, thread_captured, any_mpi = found
        keep = (captured > 0) | (count > 0)
        return HostColumns(ids=ids[keep], captured=captured[keep], runtime=sums[keep, 0],
                           mpi=sums[keep, 1], threads=count[keep],
                           thread_captured=thread_captured[keep],
                           thread_runtime=sums[keep, 2], thread_mpi=sums[keep, 3]), any_mpi

    def phase_metrics(self, occurrences: Iterable[tuple[int, int, int, int]]
                      ) -> HostParts | None:
        """Host metrics over phase occurrences (process id, start, end, instance id): each
        process over its own occurrences (several of one process add up); as ``metrics``.

        The occurrences are measured ``BLOCK`` at a time as columns (``_occurrence_block``),
        or one at a time where the columns cannot hold them or a block has fewer than
        ``COLUMNS_FROM``; each process's sums are kept
        (seven a process met: its captured ns, runtime and MPI ns, the most threads of one
        occurrence, their captured, runtime and MPI ns), its rows made from them."""
        acc = _PhaseSums(len(self.table))
        hosts = np.frombuffer(bytes(self._is_host), np.uint8)  # a copy: the flags may grow
        it = iter(occurrences)
        while block := list(islice(it, BLOCK)):
            found = None if len(block) < COLUMNS_FROM else self._occurrence_block(
                np.array(block, np.int64).reshape(-1, 4), hosts)
            if found is None:
                for key, s, e, i in block:
                    self._add_occurrence(acc, key, s, e, i)
                continue
            *columns, mpi = found
            acc.mpi = acc.mpi or mpi
            for measured_one in zip(*(c.tolist() for c in columns), strict=True):
                self._add_measured(acc, *measured_one)

        def samples() -> Iterator[tuple[int, HostSample]]:
            table = self.table
            for k in table.in_key_order(acc.met):
                yield k, HostSample(table.host(k), table.pid(k), self.rank(k), *acc.of(k))

        return _rows_metrics(self, samples, acc.lo, acc.hi, acc.mpi)

    def _add_occurrence(self, acc: _PhaseSums, key: int, s: int, e: int, i: int) -> None:
        """One occurrence measured in Python: ``phase_metrics``'s one at a time."""
        if not self.is_host(key):
            return
        own, theirs = self.captured(key)
        t = covered(own, s, e)
        each = [covered(sp, s, e) for sp in theirs]
        if t <= 0 and not any(each):
            return
        acc.mpi = acc.mpi or covered(self.mpi_spans(key), s, e) > 0
        self._add_measured(acc, key, s, e, i, t, sum(1 for x in each if x > 0), sum(each))

    def _add_measured(self, acc: _PhaseSums, key: int, s: int, e: int, i: int, captured: int,
                      threads: int, thread_captured: int) -> None:
        """A measured occurrence of process ``key`` (instance ``i``) added to its sums: its
        captured ns, threads captured and their ns, with the instance's runtime and MPI ns
        as a process and over its threads."""
        row = self.instances.get(key, i)
        zero = [0] * HOST_WIDTH
        v, tv = (zero, zero) if row is None else (row[:HOST_WIDTH].tolist(),
                                                  row[HOST_WIDTH:].tolist())
        acc.add(key, s, e, (captured, *v, threads, thread_captured, *tv))

    def _occurrence_block(self, occ: np.ndarray, hosts: np.ndarray
                          ) -> _OccurrenceColumns | None:
        """Occurrences (rows of process id, start, end, instance id) measured as columns:
        those of host processes captured there (their process ids, starts, ends and
        instance ids, captured ns, threads captured and their ns, in the order given) and
        whether any has MPI calls inside; None where the columns cannot hold them (span
        times past ``TIMES``, a process of too many threads, or more than ``_PAIRS``
        (occurrence, span) pairs). ``hosts``: 1 by the id of each host process."""
        key = occ[:, 0]
        occ = occ[(key >= 0) & (key < len(hosts))]
        occ = occ[hosts[occ[:, 0]] == 1]
        if not len(occ):
            empty = np.empty(0, np.int64)
            return empty, empty, empty, empty, empty, empty, empty, False
        procs, of = np.unique(occ[:, 0], return_inverse=True)
        with self.logs.segments(procs) as (data, first, size):
            owner, lo, hi, tag = parse_logs(data, first, size, _SUMS)
        item, span = spans_of(owner, of)
        if len(item) > _PAIRS:
            return None
        found = measured(item, tag[span], lo[span], hi[span], len(occ), occ[item, 1],
                         occ[item, 2])
        if found is None:
            return None
        captured, count, each, any_mpi = found
        keep = (captured > 0) | (count > 0)
        occ = occ[keep]
        return (occ[:, 0], occ[:, 1], occ[:, 2], occ[:, 3], captured[keep], count[keep],
                each[keep], any_mpi)


class _PhaseSums:
    """``phase_metrics``'s sums: seven a process, in the order first met (the thread count
    the largest of one occurrence, the others added up), and the occurrences' extent."""

    def __init__(self, processes: int) -> None:
        self.acc = array("q")
        #: by process id: 1 + its sums' place in ``acc`` (0: not met); the processes met
        self.place = array("i", bytes(4 * processes))
        self.met = array("q")
        self.lo, self.hi = 2**62, -(2**62)
        #: MPI calls captured inside an occurrence of their own process
        self.mpi = False

    def add(self, key: int, s: int, e: int, values: Sequence[int]) -> None:
        acc, row = self.acc, self.place[key] - 1
        if row < 0:
            row = len(acc)
            self.place[key] = row + 1
            self.met.append(key)
            acc.extend((0,) * 7)
        for j, x in enumerate(values):
            acc[row + j] = max(acc[row + j], x) if j == 3 else acc[row + j] + x
        self.lo, self.hi = min(self.lo, s), max(self.hi, e)

    def of(self, key: int) -> array[int]:
        row = self.place[key] - 1
        return self.acc[row:row + 7]


def _phases(rows: SharedRows, proc: int, col: int,
            recent: list[tuple[int, int, int]] | None, lo: np.ndarray, hi: np.ndarray) -> None:
    """Add the parts of pieces [lo, hi) inside each open phase occurrence to column ``col``
    of the process's instance rows."""
    if not recent:
        return
    r = np.array(recent, np.int64)
    inside = covered_by(lo, hi, r[:, 0], r[:, 1])
    nz = inside > 0
    if nz.any():
        rows.add(proc, r[nz, 2], inside[nz], col)


def _rows_metrics(totals: HostTotals, rows: Callable[[], Iterable[tuple[int, HostSample]]],
                  start: int, end: int, mpi: bool | None = None) -> HostParts | None:
    """host_metrics of (process, sample) rows (made again for each pass over them, but for
    up to ``ROWS_AT_ONCE`` of them, kept); MPI ones where ``mpi``, by default where any
    process has a report with MPI calls in [start, end)."""
    sums = HostSums()
    any_mpi = False
    kept: list[HostRow] | None = []
    for proc, sample in rows():
        if mpi is None and not any_mpi:
            any_mpi = covered(totals.mpi_spans(proc), start, end) > 0
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


def restore_process(totals: HostTotals, host: str, pid: int, rank: int | None,
                    spans: Sequence[Sequence[int]], mpi_spans: Sequence[Sequence[int]],
                    threads: Sequence[Sequence[int]], sums: Sequence[int],
                    thread_sums: Sequence[int]) -> int:
    """A process of ``totals`` from its exported state (``partial.HostState``; its windows
    and phase rows added after): its id."""
    i = totals.process(host, pid, rank)
    totals.logs.set_at(i, 0, [*(sums or [0] * HOST_WIDTH), *(thread_sums or [0] * HOST_WIDTH)])
    groups: dict[tuple[int, int], list[int]] = {}  # a group a span, spans as first met
    for tag, recs in ((SPAN, spans), (MPI_SPAN, mpi_spans)):
        for s in recs:
            groups.setdefault((s[0], s[1]), []).append(tag)
    for t in threads:
        groups.setdefault((t[1], t[2]), []).append(t[0])
    for span, tags in groups.items():
        totals.add_spans(i, span, tags)
    return i
