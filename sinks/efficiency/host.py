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

import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import msgspec
import numpy as np

from prvstream.sinks.arrays import unique_inverse
from prvstream.sinks.base import HostKind, ReportInfo
from prvstream.sinks.efficiency.metrics import covered
from prvstream.sinks.efficiency.overlap import covered_by
from prvstream.sinks.efficiency.rowstore import RowStore
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import HostMetrics, HostRow

__all__ = [
    "HOST_WIDTH",
    "HostParts",
    "HostProcess",
    "HostSample",
    "HostTotals",
    "by_thread",
    "host_metrics",
    "outside",
    "restore_process",
    "thread_spans",
]

log = get_logger(__name__)

#: columns of a host totals row: ns in the CUDA runtime, ns in MPI
HOST_WIDTH = 2


Spans = list[tuple[int, int]]
Table = dict[int, list[int]]
#: host metrics with ``hosts`` left empty, and what makes their rows (again at each call)
HostParts = tuple[HostMetrics, Callable[[], Iterator[HostRow]]]


class HostProcess(msgspec.Struct):
    """One host process of the job: its captured spans and its call time per view, as a
    process (union over its threads) and summed over its host threads (each its own union)."""

    host: str
    pid: int
    rank: int | None = None
    #: wall-clock spans of its reports that have calls of it (only those count), and of those
    #: with MPI calls (MPI metrics are computed where any process has such a span)
    spans: Spans = msgspec.field(default_factory=list)
    mpi_spans: Spans = msgspec.field(default_factory=list)
    totals: list[int] = msgspec.field(default_factory=lambda: [0] * HOST_WIDTH)
    #: window index -> totals row
    windows: Table = msgspec.field(default_factory=dict)
    #: phase instance id -> totals row (time inside the process's own occurrence)
    instances: RowStore = msgspec.field(default_factory=lambda: RowStore(HOST_WIDTH))
    #: (host thread's OS tid, start, end) of each span it is captured over (the reports that
    #: give it states), flattened records in the order they were added (``thread_spans``)
    threads: array[int] = msgspec.field(default_factory=lambda: array("q"))
    #: the same rows, each the sum over its threads of the thread's own union of calls
    thread_totals: list[int] = msgspec.field(default_factory=lambda: [0] * HOST_WIDTH)
    thread_windows: Table = msgspec.field(default_factory=dict)
    thread_instances: RowStore = msgspec.field(default_factory=lambda: RowStore(HOST_WIDTH))


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


class HostSample(NamedTuple):
    """One host process over an interval: captured, CUDA runtime and MPI ns as a process, and
    the number of its host threads with the sums of their own captured, runtime and MPI ns."""

    host: str
    pid: int
    rank: int | None
    captured: int
    runtime: int
    mpi: int
    threads: int = 0
    thread_captured: int = 0
    thread_runtime: int = 0
    thread_mpi: int = 0


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
        self._open: _Open | None = None

    def begin(self, info: ReportInfo, origin: int) -> None:
        procs = []
        for p in info.processes:
            hp = self.processes.get((p.host, p.pid))
            if hp is None:
                hp = self.processes[(p.host, p.pid)] = HostProcess(p.host, p.pid, p.rank)
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

    @staticmethod
    def _settle(rep: _Open, *, final: bool) -> None:
        """Pack the phase rows no call adds time to any more: below the smallest occurrence
        still open in the process (all of them at the end of the report)."""
        for i, hp in enumerate(rep.procs):
            lst = None if final else rep.phases.get(i)
            for store in (hp.instances, hp.thread_instances):
                store.settle(min(p[2] for p in lst) if lst else None)

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
            totals, windows, instances = hp.totals, hp.windows, hp.instances
        else:
            rep.seen.setdefault(proc, set()).add(tid)
            lo, hi = outside(lo[keep], hi[keep], thread_spans(hp, tid))
            totals, windows, instances = hp.thread_totals, hp.thread_windows, \
                hp.thread_instances
        if len(lo):
            totals[kind] += int((hi - lo).sum())
            self._attribute(windows, kind, lo, hi)
            _phases(instances, kind, rep.phases.get(proc), lo, hi)

    def _attribute(self, windows: Table, kind: int, lo: np.ndarray, hi: np.ndarray) -> None:
        """Add disjoint pieces [lo, hi) to the windows they fall in."""
        w = self.window_ns
        k0, k1 = lo // w, (hi - 1) // w
        single = k0 == k1
        ks, inv = unique_inverse(k0[single])
        sums = np.zeros(len(ks), np.int64)
        np.add.at(sums, inv, (hi - lo)[single])
        for k, total in zip(ks.tolist(), sums.tolist(), strict=True):
            windows.setdefault(k, [0] * HOST_WIDTH)[kind] += total
        for a, b in zip(lo[~single].tolist(), hi[~single].tolist(), strict=True):
            for k in range(a // w, (b - 1) // w + 1):
                row = windows.setdefault(k, [0] * HOST_WIDTH)
                row[kind] += min(b, (k + 1) * w) - max(a, k * w)

    def end(self) -> None:
        rep = self._open
        if rep is None:
            raise RuntimeError("begin_report must come before end_report")
        self._settle(rep, final=True)
        if rep.hi > rep.lo:
            span = (rep.lo, rep.hi)
            for i in sorted(rep.called):
                if span not in rep.procs[i].spans:
                    rep.procs[i].spans.append(span)
            for i in sorted(rep.mpi):
                if span not in rep.procs[i].mpi_spans:
                    rep.procs[i].mpi_spans.append(span)
            for i, hp in enumerate(rep.procs):
                for tid in sorted({*rep.stated[i], *rep.seen.get(i, ())}):
                    hp.threads.extend((tid, *span))
        self._open = None

    def metrics(self, window: int | None = None) -> HostParts | None:
        """Host metrics of the whole job (each process over its captured time), or of window
        ``window``: with ``hosts`` empty, and what makes their rows again (a process at a
        time). None when no host process was captured there."""
        w = self.window_ns
        start, end = (-(2**62), 2**62) if window is None else (window * w, (window + 1) * w)
        zero = [0] * HOST_WIDTH

        def samples() -> Iterator[tuple[HostProcess, HostSample]]:
            for key in sorted(self.processes):
                hp = self.processes[key]
                t = covered(hp.spans, start, end)
                each = [covered(sp, start, end) for sp in by_thread(hp)]
                if t <= 0 and not any(each):
                    continue
                v = hp.totals if window is None else hp.windows.get(window, zero)
                tv = hp.thread_totals if window is None else hp.thread_windows.get(window,
                                                                                   zero)
                yield hp, HostSample(hp.host, hp.pid, hp.rank, t, v[0], v[1],
                                     sum(1 for x in each if x > 0), sum(each), tv[0], tv[1])

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
            t = covered(hp.spans, s, e)
            each = [covered(sp, s, e) for sp in by_thread(hp)]
            if t <= 0 and not any(each):
                continue
            mpi = mpi or covered(hp.mpi_spans, s, e) > 0
            found, t_found = hp.instances.get(i), hp.thread_instances.get(i)
            v = zero if found is None else found.tolist()
            tv = zero if t_found is None else t_found.tolist()
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


def _phases(instances: RowStore, kind: int, recent: list[tuple[int, int, int]] | None,
            lo: np.ndarray, hi: np.ndarray) -> None:
    """Add the parts of pieces [lo, hi) inside each open phase occurrence."""
    if not recent:
        return
    r = np.array(recent, np.int64)
    inside = covered_by(lo, hi, r[:, 0], r[:, 1])
    nz = inside > 0
    if nz.any():
        instances.add(r[nz, 2], inside[nz], kind)


def _rows_metrics(rows: Callable[[], Iterable[tuple[HostProcess, HostSample]]], start: int,
                  end: int, mpi: bool | None = None) -> HostParts | None:
    """host_metrics of (process, sample) rows (made again for each pass over them); MPI ones
    where ``mpi``, by default where any process has a report with MPI calls in [start, end)."""
    sums = _Sums()
    any_mpi = False
    for hp, sample in rows():
        if mpi is None and not any_mpi:
            any_mpi = covered(hp.mpi_spans, start, end) > 0
        sums.add(_host_row(sample))
    if not sums.count:
        return None
    return sums.metrics(any_mpi if mpi is None else mpi, []), lambda: (
        _host_row(sample) for _, sample in rows())


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def _host_row(raw: Sequence[Any]) -> HostRow:
    r = HostSample(*raw)
    useful = max(r.captured - r.runtime - r.mpi, 0)
    t_useful = max(r.thread_captured - r.thread_runtime - r.thread_mpi, 0)
    return HostRow(
        host=r.host, pid=r.pid, rank=r.rank, captured_ns=r.captured, useful_ns=useful,
        runtime_ns=r.runtime, mpi_ns=r.mpi, threads=r.threads,
        thread_captured_ns=r.thread_captured, thread_useful_ns=t_useful,
        thread_runtime_ns=r.thread_runtime, thread_mpi_ns=r.thread_mpi,
        device_offload_efficiency=_ratio(t_useful, t_useful + r.thread_runtime),
        process_offload_efficiency=_ratio(useful, useful + r.runtime))


class _Sums:
    """What the host metrics sum over the processes' rows, taken a row at a time."""

    def __init__(self) -> None:
        self.count = self.thread_useful = self.thread_runtime = self.useful = self.runtime = 0
        #: each captured process's useful share of its captured time, in row order
        self.shares = array("d")

    def add(self, r: HostRow) -> None:
        self.count += 1
        self.thread_useful += r.thread_useful_ns
        self.thread_runtime += r.thread_runtime_ns
        if r.captured_ns > 0:
            self.useful += r.useful_ns
            self.runtime += r.runtime_ns
            self.shares.append(r.useful_ns / r.captured_ns)

    def metrics(self, mpi: bool, hosts: list[HostRow]) -> HostMetrics:
        doe = _ratio(self.thread_useful, self.thread_useful + self.thread_runtime)
        pdoe = _ratio(self.useful, self.useful + self.runtime)
        lb = ce = mpe = None
        shares = self.shares
        if mpi and shares:
            top = max(shares)
            lb = math.fsum(shares) / len(shares) / top if top > 0 else 1.0
            ce = top
            mpe = lb * ce
        pe = None if doe is None else (doe if mpe is None else mpe * doe)
        return HostMetrics(parallel_efficiency=pe, mpi_parallel_efficiency=mpe,
                           device_offload_efficiency=doe, process_offload_efficiency=pdoe,
                           load_balance=lb, communication_efficiency=ce, hosts=hosts)


def host_metrics(rows: Iterable[Sequence[Any]], *, mpi: bool) -> HostMetrics:
    """Host metrics of processes (``HostSample`` fields; the thread ones default to 0).

    Per process: useful = captured - runtime - MPI (at least 0), and the same per thread
    summed over its host threads. Host offload efficiency (BasicAnalysis's device offload
    efficiency) DOE = sum(thread useful) / sum(thread useful + thread runtime) over every host
    thread; ``process_offload_efficiency`` is that ratio over processes. With ``mpi`` (MPI
    tables present): LB = mean(u) / max(u), CE = max(u), MPI PE = LB * CE, where u is each
    process's useful share of its captured time; host PE = MPI PE * DOE, or DOE without MPI.
    """
    out = [_host_row(r) for r in rows]
    sums = _Sums()
    for r in out:
        sums.add(r)
    return sums.metrics(mpi, out)


def thread_spans(hp: HostProcess, tid: int) -> Spans:
    """The spans host thread ``tid`` of ``hp`` is captured over, in the order added."""
    if not hp.threads:
        return []
    recs = np.array(hp.threads, np.int64).reshape(-1, 3)  # a copy: the array grows
    mine = recs[recs[:, 0] == tid]
    return list(zip(mine[:, 1].tolist(), mine[:, 2].tolist(), strict=True))


def by_thread(hp: HostProcess) -> list[Spans]:
    """Each host thread's spans (``thread_spans``), threads in the order first met."""
    out: dict[int, Spans] = {}
    t = hp.threads.tolist()
    for j in range(0, len(t), 3):
        out.setdefault(t[j], []).append((t[j + 1], t[j + 2]))
    return list(out.values())


def restore_process(host: str, pid: int, rank: int | None, spans: Sequence[Sequence[int]],
                    mpi_spans: Sequence[Sequence[int]], totals: Sequence[int],
                    keys: Sequence[int], values: Sequence[int]) -> HostProcess:
    """A process from its exported state (``partial.HostState``; phase rows added after)."""
    return HostProcess(host, pid, rank, [(s[0], s[1]) for s in spans],
                       [(s[0], s[1]) for s in mpi_spans],
                       list(totals) or [0] * HOST_WIDTH,
                       {k: list(values[i * HOST_WIDTH:(i + 1) * HOST_WIDTH])
                        for i, k in enumerate(keys)})
