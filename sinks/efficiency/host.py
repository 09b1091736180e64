"""Host metrics (BSC BasicAnalysis / TALP): per host process, time in the CUDA runtime and in
MPI, cumulative and per window, and the host efficiencies built from them.

Host processes are those with CUDA runtime or MPI calls (a helper process that calls neither
does not count). A process is *in the CUDA runtime* while at least one of its threads is inside
a CUDA runtime or driver API call (the union over its threads); likewise for MPI. Host useful
time is the process's captured time minus both (docs/efficiency.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from prvstream.sinks.base import HostKind, ReportInfo
from prvstream.sinks.efficiency.metrics import covered
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import HostMetrics, HostRow

__all__ = ["HOST_WIDTH", "HostProcess", "HostTotals", "host_metrics", "restore_process"]

log = get_logger(__name__)

#: columns of a host totals row: ns in the CUDA runtime, ns in MPI
HOST_WIDTH = 2


@dataclass
class HostProcess:
    """One host process of the job: its captured spans and its call time per view."""

    host: str
    pid: int
    rank: int | None = None
    #: wall-clock spans of its reports that have calls of it (only those count), and of those
    #: with MPI calls (MPI metrics are computed where any process has such a span)
    spans: list[tuple[int, int]] = field(default_factory=list)
    mpi_spans: list[tuple[int, int]] = field(default_factory=list)
    totals: list[int] = field(default_factory=lambda: [0] * HOST_WIDTH)
    #: window index -> totals row
    windows: dict[int, list[int]] = field(default_factory=dict)
    #: phase instance id -> totals row (time inside the process's own occurrence)
    instances: dict[int, list[int]] = field(default_factory=dict)


@dataclass
class _Open:
    """The report being fed: its processes, span and, per (process, kind), the union's reach."""

    procs: list[HostProcess]
    origin: int
    lo: int
    hi: int
    reach: dict[tuple[int, int], int] = field(default_factory=dict)
    #: processes (indices) with calls, with MPI calls
    called: set[int] = field(default_factory=set)
    mpi: set[int] = field(default_factory=set)
    #: per process index: phase occurrences that may still receive time (start, end, id)
    phases: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)


class HostTotals:
    """Unions of host call intervals per process, attributed to the cumulative and window
    views as they stream in (memory: one row per process and window)."""

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
        self._open = _Open(procs, origin, origin + int(info.start_ns), origin + int(info.end_ns))

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
        s = np.clip(batch["start"] + np.int64(rep.origin), rep.lo, rep.hi)
        e = np.clip(batch["end"] + np.int64(rep.origin), rep.lo, rep.hi)
        key = batch["process"].astype(np.int64) * 2 + batch["kind"].astype(np.int64)
        order = np.lexsort((s, key))
        s, e, key = s[order], e[order], key[order]
        cuts = np.flatnonzero(np.diff(key)) + 1
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(key)], strict=True):
            proc, kind = divmod(int(key[a]), 2)
            if not 0 <= proc < len(rep.procs):
                continue
            reach = rep.reach.get((proc, kind), rep.lo)
            ends = np.maximum.accumulate(np.concatenate(([reach], e[a:b])))
            lo, hi = np.maximum(s[a:b], ends[:-1]), e[a:b]
            keep = hi > lo
            rep.reach[(proc, kind)] = int(ends[-1])
            hp = rep.procs[proc]
            rep.called.add(proc)
            if kind == HostKind.MPI:
                rep.mpi.add(proc)
            if keep.any():
                self._attribute(hp, kind, lo[keep], hi[keep])
                self._phases(hp, kind, rep.phases.get(proc), lo[keep], hi[keep])
        frontier = int(batch["start"].max()) + rep.origin
        for lst in rep.phases.values():  # no later call starts before the frontier
            lst[:] = [p for p in lst if p[1] > frontier]

    @staticmethod
    def _phases(hp: HostProcess, kind: int, recent: list[tuple[int, int, int]] | None,
                lo: np.ndarray, hi: np.ndarray) -> None:
        """Add the parts of pieces [lo, hi) inside each open phase occurrence."""
        if not recent:
            return
        r = np.array(recent, np.int64)
        inside = np.clip(np.minimum(hi[:, None], r[None, :, 1])
                         - np.maximum(lo[:, None], r[None, :, 0]), 0, None).sum(axis=0)
        for i, ns in zip(r[:, 2].tolist(), inside.tolist(), strict=True):
            if ns:
                hp.instances.setdefault(i, [0] * HOST_WIDTH)[kind] += ns

    def _attribute(self, hp: HostProcess, kind: int, lo: np.ndarray, hi: np.ndarray) -> None:
        """Add disjoint pieces [lo, hi) to the totals and the windows they fall in."""
        hp.totals[kind] += int((hi - lo).sum())
        w = self.window_ns
        k0, k1 = lo // w, (hi - 1) // w
        single = k0 == k1
        ks, inv = np.unique(k0[single], return_inverse=True)
        sums = np.zeros(len(ks), np.int64)
        np.add.at(sums, inv, (hi - lo)[single])
        for k, total in zip(ks.tolist(), sums.tolist(), strict=True):
            hp.windows.setdefault(k, [0] * HOST_WIDTH)[kind] += total
        for a, b in zip(lo[~single].tolist(), hi[~single].tolist(), strict=True):
            for k in range(a // w, (b - 1) // w + 1):
                row = hp.windows.setdefault(k, [0] * HOST_WIDTH)
                row[kind] += min(b, (k + 1) * w) - max(a, k * w)

    def end(self) -> None:
        rep = self._open
        if rep is None:
            raise RuntimeError("begin_report must come before end_report")
        if rep.hi > rep.lo:
            span = (rep.lo, rep.hi)
            for hp in {id(rep.procs[i]): rep.procs[i] for i in sorted(rep.called)}.values():
                hp.spans.append(span)
            for hp in {id(rep.procs[i]): rep.procs[i] for i in sorted(rep.mpi)}.values():
                hp.mpi_spans.append(span)
        self._open = None

    def metrics(self, window: int | None = None) -> HostMetrics | None:
        """Host metrics of the whole job (each process over its captured time), or of window
        ``window``. None when no host process was captured there."""
        w = self.window_ns
        start, end = (-(2**62), 2**62) if window is None else (window * w, (window + 1) * w)
        rows = []
        for _, hp in sorted(self.processes.items()):
            t = covered(hp.spans, start, end)
            if t <= 0:
                continue
            v = hp.totals if window is None else hp.windows.get(window, [0] * HOST_WIDTH)
            rows.append((hp, t, v[HostKind.RUNTIME], v[HostKind.MPI]))
        return _rows_metrics(rows, start, end)

    def phase_metrics(self, occurrences: Iterable[tuple[tuple[str, int], int, int, int]]
                      ) -> HostMetrics | None:
        """Host metrics over phase occurrences ((host, pid), start, end, instance id): each
        process over its own occurrences (several of one process add up)."""
        acc: dict[tuple[str, int], list[int]] = {}
        lo, hi = 2**62, -(2**62)
        for key, s, e, i in occurrences:
            hp = self.processes.get(key)
            if hp is None:
                continue
            t = covered(hp.spans, s, e)
            if t <= 0:
                continue
            v = hp.instances.get(i, [0] * HOST_WIDTH)
            row = acc.setdefault(key, [0, 0, 0])
            row[0] += t
            row[1] += v[HostKind.RUNTIME]
            row[2] += v[HostKind.MPI]
            lo, hi = min(lo, s), max(hi, e)
        rows = [(self.processes[k], t, rt, m) for k, (t, rt, m) in sorted(acc.items())]
        return _rows_metrics(rows, lo, hi)


def _rows_metrics(rows: Sequence[tuple[HostProcess, int, int, int]], start: int,
                  end: int) -> HostMetrics | None:
    """host_metrics of (process, captured, runtime, MPI) rows; MPI ones where any process
    has a report with MPI calls in [start, end)."""
    if not rows:
        return None
    mpi = any(covered(hp.mpi_spans, start, end) > 0 for hp, *_ in rows)
    return host_metrics([(hp.host, hp.pid, hp.rank, t, rt, m) for hp, t, rt, m in rows],
                        mpi=mpi)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def host_metrics(rows: Iterable[tuple[str, int, int | None, int, int, int]], *,
                 mpi: bool) -> HostMetrics:
    """Host metrics of processes (host, pid, rank, captured ns, CUDA runtime ns, MPI ns).

    useful = captured - runtime - MPI (at least 0); DOE = sum(useful) / sum(useful + runtime);
    with ``mpi`` (MPI tables present): LB = mean(u) / max(u), CE = max(u), MPI PE = LB * CE,
    where u is each process's useful share of its captured time; host PE = MPI PE * DOE, or DOE
    without MPI (MPI metrics then null).
    """
    out: list[HostRow] = []
    for host, pid, rank, t, rt, m in rows:
        useful = max(t - rt - m, 0)
        out.append(HostRow(host=host, pid=pid, rank=rank, captured_ns=t, useful_ns=useful,
                           runtime_ns=rt, mpi_ns=m,
                           device_offload_efficiency=_ratio(useful, useful + rt)))
    sum_u = sum(r.useful_ns for r in out)
    doe = _ratio(sum_u, sum_u + sum(r.runtime_ns for r in out))
    lb = ce = mpe = None
    if mpi and out:
        shares = [r.useful_ns / r.captured_ns if r.captured_ns > 0 else 0.0 for r in out]
        top = max(shares)
        lb = math.fsum(shares) / len(shares) / top if top > 0 else 1.0
        ce = top
        mpe = lb * ce
    pe = None if doe is None else (doe if mpe is None else mpe * doe)
    return HostMetrics(parallel_efficiency=pe, mpi_parallel_efficiency=mpe,
                       device_offload_efficiency=doe, load_balance=lb,
                       communication_efficiency=ce, hosts=out)


def restore_process(host: str, pid: int, rank: int | None, spans: Sequence[Sequence[int]],
                    mpi_spans: Sequence[Sequence[int]], totals: Sequence[int],
                    keys: Sequence[int], values: Sequence[int]) -> HostProcess:
    """A process from its exported state (``partial.HostState``; phase rows added after)."""
    return HostProcess(host, pid, rank, [(s[0], s[1]) for s in spans],
                       [(s[0], s[1]) for s in mpi_spans],
                       list(totals) or [0] * HOST_WIDTH,
                       {k: list(values[i * HOST_WIDTH:(i + 1) * HOST_WIDTH])
                        for i, k in enumerate(keys)})
