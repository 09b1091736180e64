"""The BSC/POP GPU efficiency model: a ``Sink`` that keeps rolling device summaries of a job.

Public API (definitions in docs/efficiency.md)::

    model = EfficiencyModel(job="run42", window_ns=10_000_000_000, gap_threshold_ns=1_000_000,
                            flush_rows=65536)  # small batches are buffered up to flush_rows
    model.begin_report(info); model.add_activity(batch); model.add_phases(batch)
    model.end_report()                 # computes the views for the reports so far
    model.take_updates() -> list[SummaryRecord]   # new summary.jsonl lines since last call
    model.state() -> SummaryState                 # summary.json content
    summarize(job, [(info, activity, phases), ...]) -> SummaryState  # batch convert, tests
    feed_report(model, info, activity, phases, chunk_rows=...)  # sort, chunk, interleave
    job_metrics(useful, comm, span_ns) -> Metrics

Memory is O(chunk + open intervals) for the sweep, plus one small vector per (device, window)
and per (device, phase instance) touched, which are the rows the summaries publish.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import structlog

from prvstream.sinks.base import ReportInfo, feed_interleaved
from prvstream.sinks.summary import (
    SCHEMA_VERSION,
    DeviceRow,
    GroupRow,
    Metrics,
    SummaryRecord,
    SummaryState,
    fold,
)

__all__ = ["EfficiencyModel", "feed_report", "job_metrics", "summarize"]

log = structlog.get_logger(__name__)

# columns of a totals vector
_USEFUL, _COMM, _OVERLAP, _K1, _K2, _K3, _K4 = range(7)
_N_MEASURES = 7
_GAPS, _GAP_NS = 7, 8
_WIDTH = 9
#: ActivityKind -> category: 0 compute kernel, 1 NCCL kernel, 2 memcpy/memset
_CATEGORY = np.array([0, 1, 2, 2], dtype=np.int8)


def job_metrics(useful: Sequence[int], comm: Sequence[int], span_ns: int) -> Metrics:
    """LB, CE, OE and PE of devices with these useful/comm times over an interval of span_ns.

    Degenerate cases keep PE = LB * CE * OE: no devices or an empty span give zeros; a job where
    no compute ran has LB = 1 (all equal) and CE = 0 when communication ran, else 1.
    """
    if not useful or span_ns <= 0:
        return Metrics(load_balance=0.0, communication_efficiency=0.0,
                       orchestration_efficiency=0.0, parallel_efficiency=0.0)
    u = np.asarray(useful, dtype=np.float64)
    uc = u + np.asarray(comm, dtype=np.float64)
    max_u, max_uc = float(u.max()), float(uc.max())
    lb = float(u.mean()) / max_u if max_u > 0 else 1.0
    ce = max_u / max_uc if max_uc > 0 else 1.0
    oe = max_uc / span_ns
    pe = float(u.sum()) / (len(u) * span_ns)
    return Metrics(load_balance=lb, communication_efficiency=ce, orchestration_efficiency=oe,
                   parallel_efficiency=pe)


@dataclass
class _Device:
    """A physical GPU of the job: (host, CUDA id), all its streams and processes flattened."""

    host: str
    device: int
    rank: int | None
    pid: int
    process: tuple[str, int]
    spans: list[tuple[int, int]] = field(default_factory=list)
    totals: np.ndarray = field(default_factory=lambda: np.zeros(_WIDTH, np.int64))


@dataclass
class _Phase:
    """One phase instance (name, occurrence): its span over the processes and device totals."""

    name: str
    occurrence: int
    start: int
    end: int
    processes: set[tuple[str, int]] = field(default_factory=set)
    totals: dict[int, np.ndarray] = field(default_factory=dict)


@dataclass
class _Sweep:
    """Per device of the current report: the finalized frontier and intervals still open."""

    lo: int
    idle_since: int | None
    carry_s: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    carry_e: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    carry_c: np.ndarray = field(default_factory=lambda: np.empty(0, np.int8))


@dataclass
class _Report:
    info: ReportInfo
    origin: int
    devices: np.ndarray  # local device index -> global device index
    processes: list[tuple[str, int]]
    sweeps: dict[int, _Sweep]
    frontier: int
    first: int
    last: int
    #: per process: phase instances that may still receive time, as (start, end, phase)
    recent: dict[tuple[str, int], list[tuple[int, int, _Phase]]] = field(default_factory=dict)
    touched: dict[tuple[str, int], _Phase] = field(default_factory=dict)
    #: activity taken but not swept yet: (start, end, global device, category) arrays
    pending: list[tuple[np.ndarray, ...]] = field(default_factory=list)
    pending_rows: int = 0


def _add(store: dict[int, np.ndarray], key: int, vec: np.ndarray) -> None:
    cur = store.get(key)
    if cur is None:
        store[key] = vec.astype(np.int64, copy=True)
    else:
        cur += vec


class EfficiencyModel:
    """Feeds on reports (the ``Sink`` protocol) and keeps the cumulative, window and phase views.

    Results depend only on the reports and their order, never on how batches are chunked, so a
    restarted daemon that re-feeds the same reports gets the same records.
    """

    def __init__(self, job: str, *, window_ns: int = 10_000_000_000,
                 gap_threshold_ns: int = 1_000_000, flush_rows: int = 65536) -> None:
        if window_ns <= 0:
            raise ValueError(f"window_ns must be positive, got {window_ns}")
        self.job = job
        self.window_ns = int(window_ns)
        self.gap_threshold_ns = int(gap_threshold_ns)
        #: small batches are buffered up to this many rows before a sweep (results do not
        #: depend on it; memory is O(flush_rows + open intervals))
        self.flush_rows = max(int(flush_rows), 1)
        self._devices: list[_Device] = []
        self._device_ids: dict[tuple[str, int], int] = {}
        self._process_devices: dict[tuple[str, int], list[int]] = {}
        self._windows: dict[int, dict[int, np.ndarray]] = {}
        self._phases: dict[tuple[str, int], _Phase] = {}
        self._occurrences: dict[tuple[tuple[str, int], str], int] = {}
        self._report: _Report | None = None
        self._reports = 0
        self._last_report = ""
        self._span: tuple[int, int] | None = None
        self._updates: list[SummaryRecord] = []
        self._latest: SummaryState | None = None

    # --- Sink protocol ----------------------------------------------------------------------

    def begin_report(self, info: ReportInfo) -> None:
        """Register the report's processes and devices; its batches follow."""
        if self._report is not None:
            raise RuntimeError("begin_report called before end_report of the previous report")
        origin = int(info.origin_wall_ns)
        processes = [(p.host, p.pid) for p in info.processes]
        local = np.empty(len(info.devices), np.int64)
        for i, d in enumerate(info.devices):
            key = (d.host, d.device)
            gid = self._device_ids.get(key)
            proc = processes[d.process] if 0 <= d.process < len(processes) else (d.host, 0)
            if gid is None:
                gid = len(self._devices)
                self._device_ids[key] = gid
                self._devices.append(_Device(d.host, d.device, d.rank, proc[1], proc))
                self._process_devices.setdefault(proc, []).append(gid)
            local[i] = gid
        start, end = origin + int(info.start_ns), origin + int(info.end_ns)
        sweeps: dict[int, _Sweep] = {}
        for gid in dict.fromkeys(local.tolist()):
            dev = self._devices[gid]
            if any(s < end and e > start for s, e in dev.spans):  # slices may come late
                log.warning("device_overlaps_earlier_report", job=self.job, host=dev.host,
                            device=dev.device, report=info.report_id)
            sweeps[gid] = _Sweep(lo=start, idle_since=start)
        self._report = _Report(info, origin, local, processes, sweeps, -(2**62), start, end)

    def add_activity(self, batch: np.ndarray) -> None:
        """Take ACTIVITY_DTYPE rows (non-decreasing start); sweep when ``flush_rows`` wait."""
        rep = self._require_report()
        if len(batch) == 0:
            return
        s = batch["start"].astype(np.int64) + rep.origin
        e = batch["end"].astype(np.int64) + rep.origin
        if int(s[0]) < rep.frontier or np.any(s[1:] < s[:-1]):
            raise ValueError("activity batches must arrive in non-decreasing start order "
                             "(see the Sink protocol in prvstream.sinks.base)")
        keep = e > s
        rep.frontier = int(s[-1])
        if not keep.all():
            s, e, batch = s[keep], e[keep], batch[keep]
        if len(s):
            rep.first = min(rep.first, int(s[0]))
            rep.last = max(rep.last, int(e.max()))
        rep.pending.append((s, e, rep.devices[batch["device"]], _CATEGORY[batch["kind"]]))
        rep.pending_rows += len(s)
        if rep.pending_rows >= self.flush_rows:
            self._sweep_pending(rep)

    def _sweep_pending(self, rep: _Report) -> None:
        """Finalize every device of the report up to the last start seen."""
        hi = rep.frontier
        if rep.pending:
            s, e, gdev, cat = (np.concatenate(x) for x in zip(*rep.pending, strict=True))
            rep.pending, rep.pending_rows = [], 0
        else:
            s = e = gdev = np.empty(0, np.int64)
            cat = np.empty(0, np.int8)
        order = np.argsort(gdev, kind="stable")
        gdev, s, e, cat = gdev[order], s[order], e[order], cat[order]
        bounds = np.flatnonzero(np.diff(gdev)) + 1
        groups = {int(gdev[a]): (a, b) for a, b in
                  zip([0, *bounds.tolist()], [*bounds.tolist(), len(gdev)], strict=True)
                  if b > a}
        for gid, sw in rep.sweeps.items():
            if gid in groups:
                a, b = groups[gid]
                self._advance(rep, gid, sw, s[a:b], e[a:b], cat[a:b], hi, final=False)
            elif len(sw.carry_s):
                self._advance(rep, gid, sw, s[:0], e[:0], cat[:0], hi, final=False)
            else:
                sw.lo = max(sw.lo, hi)
        self._prune(rep)

    def add_phases(self, batch: np.ndarray) -> None:
        """Take PHASE_DTYPE rows: each is the next occurrence of its name in its process."""
        rep = self._require_report()
        names = rep.info.phase_names
        for row in batch:
            start, end = int(row["start"]) + rep.origin, int(row["end"]) + rep.origin
            if start < rep.frontier:
                raise ValueError("phase batches must arrive in non-decreasing start order "
                                 "(see the Sink protocol in prvstream.sinks.base)")
            rep.frontier = start
            if end < start:
                continue
            name = names[int(row["name"])]
            proc = rep.processes[int(row["process"])]
            occ = self._occurrences.get((proc, name), 0)
            self._occurrences[(proc, name)] = occ + 1
            phase = self._phases.get((name, occ))
            if phase is None:
                phase = self._phases[(name, occ)] = _Phase(name, occ, start, end)
            phase.start, phase.end = min(phase.start, start), max(phase.end, end)
            phase.processes.add(proc)
            rep.touched[(name, occ)] = phase
            rep.recent.setdefault(proc, []).append((start, end, phase))

    def end_report(self) -> None:
        """Flush open intervals and publish updated records (see ``take_updates``)."""
        rep = self._require_report()
        if rep.pending:
            self._sweep_pending(rep)
        for gid, sw in rep.sweeps.items():
            hi = max(rep.last, sw.lo, int(sw.carry_e.max()) if len(sw.carry_e) else sw.lo)
            self._advance(rep, gid, sw, sw.carry_s[:0], sw.carry_e[:0], sw.carry_c[:0], hi,
                          final=True, report_end=rep.last)
        start, end = rep.first, rep.last
        for gid in rep.sweeps:
            self._devices[gid].spans.append((start, end))
        self._span = (start, end) if self._span is None else (
            min(self._span[0], start), max(self._span[1], end))
        self._reports += 1
        self._last_report = rep.info.report_id
        self._report = None
        first_new = len(self._updates)
        self._updates.append(self._cumulative())
        w = self.window_ns
        for k in range(start // w, (end - 1) // w + 1 if end > start else start // w + 1):
            self._updates.append(self._window(k))
        for phase in sorted(rep.touched.values(), key=lambda p: (p.start, p.name,
                                                                  p.occurrence)):
            self._updates.append(self._phase(phase))
        self._latest = fold(self._updates[first_new:], self._latest)
        log.debug("efficiency_updated", job=self.job, report=self._last_report,
                  records=len(self._updates))

    # --- results ----------------------------------------------------------------------------

    def take_updates(self) -> list[SummaryRecord]:
        """Records produced since the last call, in order: cumulative, windows, phases."""
        out, self._updates = self._updates, []
        return out

    def state(self) -> SummaryState:
        """The latest state: exactly what folding every record published so far gives."""
        if self._latest is None:
            return fold([self._cumulative()])
        return self._latest

    # --- the sweep --------------------------------------------------------------------------

    def _require_report(self) -> _Report:
        if self._report is None:
            raise RuntimeError("begin_report must come before batches and end_report")
        return self._report

    def _advance(self, rep: _Report, gid: int, sw: _Sweep, ns: np.ndarray, ne: np.ndarray,
                 nc: np.ndarray, hi: int, *, final: bool, report_end: int = 0) -> None:
        """Finalize device ``gid`` over [sw.lo, hi) and attribute the time to every view."""
        s = np.concatenate([sw.carry_s, np.maximum(ns, sw.lo)])
        e = np.concatenate([sw.carry_e, ne])
        c = np.concatenate([sw.carry_c, nc])
        lo = sw.lo
        if hi > lo:
            edges = np.unique(np.concatenate(
                [np.array([lo, hi], np.int64), s[s < hi], e[(e > lo) & (e < hi)]]))
            t = edges[:-1]
            length = np.diff(edges)
            n = []
            for cat in range(3):
                sc, ec = np.sort(s[c == cat]), np.sort(e[c == cat])
                n.append(np.searchsorted(sc, t, "right") - np.searchsorted(ec, t, "right"))
            comp, comm = n[0] > 0, (n[1] + n[2]) > 0
            k = n[0] + n[1]
            ind = np.stack([comp, ~comp & comm, comp & comm, k == 1, k == 2, k == 3, k >= 4],
                           axis=1).astype(np.int64)
            self._attribute(rep, gid, edges, length, ind)
            self._gaps(rep, gid, sw, edges, (n[0] + n[1] + n[2]) > 0)
        open_ = e > hi
        sw.carry_s, sw.carry_e, sw.carry_c = np.maximum(s[open_], hi), e[open_], c[open_]
        sw.lo = max(lo, hi)
        if not len(sw.carry_s) and sw.idle_since is None:
            sw.idle_since = sw.lo
        if final:
            if sw.idle_since is not None and report_end > sw.idle_since:
                self._add_gaps(rep, gid, np.array([sw.idle_since]), np.array([report_end]))
            sw.idle_since = None

    def _attribute(self, rep: _Report, gid: int, edges: np.ndarray, length: np.ndarray,
                   ind: np.ndarray) -> None:
        """Add the measures of segments [edges[i], edges[i+1]) to cumulative, windows, phases."""
        cum = np.vstack([np.zeros((1, _N_MEASURES), np.int64),
                         np.cumsum(ind * length[:, None], axis=0)])
        dev = self._devices[gid]
        dev.totals[:_N_MEASURES] += cum[-1]
        lo, hi = int(edges[0]), int(edges[-1])

        def upto(q: np.ndarray) -> np.ndarray:
            q = np.clip(q, lo, hi)
            j = np.clip(np.searchsorted(edges, q, "right") - 1, 0, len(length) - 1)
            out: np.ndarray = cum[j] + ind[j] * (q - edges[j])[:, None]
            return out

        w = self.window_ns
        ks = np.arange(lo // w, (hi - 1) // w + 1, dtype=np.int64)
        per_window = np.diff(upto(np.append(ks, ks[-1] + 1) * w), axis=0)
        for k, vec in zip(ks.tolist(), per_window, strict=True):
            if vec.any():
                full = np.zeros(_WIDTH, np.int64)
                full[:_N_MEASURES] = vec
                _add(self._windows.setdefault(k, {}), gid, full)
        recent = rep.recent.get(dev.process)
        if recent:
            ps = np.array([r[0] for r in recent], np.int64)
            pe = np.array([r[1] for r in recent], np.int64)
            per_phase = upto(pe) - upto(ps)
            for (_, _, phase), vec in zip(recent, per_phase, strict=True):
                if vec.any():
                    full = np.zeros(_WIDTH, np.int64)
                    full[:_N_MEASURES] = vec
                    _add(phase.totals, gid, full)

    def _gaps(self, rep: _Report, gid: int, sw: _Sweep, edges: np.ndarray,
              busy: np.ndarray) -> None:
        """Close idle stretches that end inside these segments; carry the one still open."""
        idle = np.concatenate([[0], (~busy).astype(np.int8), [0]])
        d = np.diff(idle)
        starts, stops = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        g0, g1 = edges[starts], edges[np.minimum(stops, len(busy))]
        if sw.idle_since is not None:
            if busy[0]:  # the stretch open at the frontier ended right there
                g0 = np.concatenate([[sw.idle_since], g0])
                g1 = np.concatenate([[edges[0]], g1])
            else:
                g0[0] = sw.idle_since
        sw.idle_since = None
        if not busy[-1]:  # idle up to the new frontier: still open
            sw.idle_since = int(g0[-1])
            g0, g1 = g0[:-1], g1[:-1]
        self._add_gaps(rep, gid, g0, g1)

    def _add_gaps(self, rep: _Report, gid: int, g0: np.ndarray, g1: np.ndarray) -> None:
        """Count the idle stretches [g0, g1) longer than the threshold in every view."""
        long_ = (g1 - g0) > self.gap_threshold_ns
        if not long_.any():
            return
        g0, g1 = g0[long_].astype(np.int64), g1[long_].astype(np.int64)
        dev = self._devices[gid]
        dev.totals[_GAPS] += len(g0)
        dev.totals[_GAP_NS] += int((g1 - g0).sum())
        w = self.window_ns
        k0, k1 = g0 // w, (g1 - 1) // w
        single = k0 == k1
        ks, inv = np.unique(k0[single], return_inverse=True)
        counts = np.bincount(inv, minlength=len(ks))
        sums = np.bincount(inv, weights=(g1 - g0)[single], minlength=len(ks))
        vec = np.zeros(_WIDTH, np.int64)
        for k, n, total in zip(ks.tolist(), counts.tolist(), sums.tolist(), strict=True):
            vec[_GAPS], vec[_GAP_NS] = n, int(total)
            _add(self._windows.setdefault(k, {}), gid, vec)
        for a, b in zip(g0[~single].tolist(), g1[~single].tolist(), strict=True):
            for k in range(a // w, (b - 1) // w + 1):
                vec[_GAPS], vec[_GAP_NS] = 1, min(b, (k + 1) * w) - max(a, k * w)
                _add(self._windows.setdefault(k, {}), gid, vec)
        recent = rep.recent.get(dev.process)
        if recent:
            ps = np.array([r[0] for r in recent], np.int64)[None, :]
            pe = np.array([r[1] for r in recent], np.int64)[None, :]
            hit = (ps < g1[:, None]) & (pe > g0[:, None])
            inside = np.where(hit, np.minimum(g1[:, None], pe) - np.maximum(g0[:, None], ps),
                              0)
            for j in np.flatnonzero(hit.any(axis=0)).tolist():
                vec[_GAPS], vec[_GAP_NS] = int(hit[:, j].sum()), int(inside[:, j].sum())
                _add(recent[j][2].totals, gid, vec)

    def _prune(self, rep: _Report) -> None:
        """Forget phases that ended before every device of their process can still add time."""
        cutoff: dict[tuple[str, int], int] = {}
        for gid, sw in rep.sweeps.items():
            proc = self._devices[gid].process
            mark = sw.idle_since if sw.idle_since is not None else sw.lo
            cutoff[proc] = min(cutoff.get(proc, mark), mark)
        for proc, lst in rep.recent.items():
            limit = cutoff.get(proc)
            if limit is None:
                lst.clear()
            elif lst and min(r[1] for r in lst) <= limit:
                lst[:] = [r for r in lst if r[1] > limit]

    # --- records ----------------------------------------------------------------------------

    def _record(self, view: str, start: int, end: int, gids: Iterable[int],
                totals: dict[int, np.ndarray], name: str = "", index: int = 0) -> SummaryRecord:
        span = max(end - start, 0)
        rows: list[DeviceRow] = []
        zero = np.zeros(_WIDTH, np.int64)
        for gid in sorted(set(gids), key=lambda g: (self._devices[g].host,
                                                     self._devices[g].device)):
            dev, v = self._devices[gid], totals.get(gid, zero)
            useful, comm, overlap = int(v[_USEFUL]), int(v[_COMM]), int(v[_OVERLAP])
            busy_k = [int(x) for x in v[_K1:_K4 + 1]]
            rows.append(DeviceRow(
                host=dev.host, device=dev.device, useful_ns=useful, comm_ns=comm,
                idle_ns=max(span - useful - comm, 0), overlap_ns=overlap,
                overlap_share=overlap / (comm + overlap) if comm + overlap else 0.0,
                inflight_ns=[max(span - sum(busy_k), 0), *busy_k], gaps=int(v[_GAPS]),
                gap_ns=int(v[_GAP_NS]), rank=dev.rank, pid=dev.pid))
        hosts: dict[str, list[DeviceRow]] = {}
        ranks: dict[str, list[DeviceRow]] = {}
        for r in rows:
            hosts.setdefault(r.host, []).append(r)
            ranks.setdefault(str(r.rank) if r.rank is not None else f"{r.host}:{r.pid}",
                             []).append(r)

        def groups(by: dict[str, list[DeviceRow]]) -> list[GroupRow]:
            return [GroupRow(name=k, devices=len(v), useful_ns=sum(r.useful_ns for r in v),
                             comm_ns=sum(r.comm_ns for r in v),
                             metrics=job_metrics([r.useful_ns for r in v],
                                                 [r.comm_ns for r in v], span))
                    for k, v in sorted(by.items(), key=lambda kv: _group_order(kv[0]))]

        return SummaryRecord(
            schema=SCHEMA_VERSION, job=self.job, view=view, name=name, index=index,
            start_ns=start, end_ns=end, span_ns=span,
            wall_ns=self._span[1] if self._span else 0, reports=self._reports,
            last_report=self._last_report,
            metrics=job_metrics([r.useful_ns for r in rows], [r.comm_ns for r in rows], span),
            devices=rows, hosts=groups(hosts), ranks=groups(ranks), window_ns=self.window_ns,
            gap_threshold_ns=self.gap_threshold_ns)

    def _cumulative(self) -> SummaryRecord:
        start, end = self._span if self._span else (0, 0)
        return self._record("cumulative", start, end, range(len(self._devices)),
                            {i: d.totals for i, d in enumerate(self._devices)})

    def _window(self, k: int) -> SummaryRecord:
        w = self.window_ns
        ws, we = k * w, (k + 1) * w
        js, je = self._span if self._span else (ws, we)
        present = [i for i, d in enumerate(self._devices)
                   if any(a < we and b > ws for a, b in d.spans)]
        return self._record("window", max(ws, js), min(we, je), present,
                            self._windows.get(k, {}), index=k)

    def _phase(self, phase: _Phase) -> SummaryRecord:
        present = [g for p in phase.processes for g in self._process_devices.get(p, [])]
        return self._record("phase", phase.start, phase.end, present, phase.totals,
                            name=phase.name, index=phase.occurrence)


def _group_order(name: str) -> tuple[int, float, str]:
    try:
        return 0, float(name), name
    except ValueError:
        return 1, math.inf, name


def summarize(job: str, reports: Iterable[tuple[ReportInfo, np.ndarray, np.ndarray | None]],
              *, window_ns: int = 10_000_000_000, gap_threshold_ns: int = 1_000_000,
              chunk_rows: int = 65536) -> SummaryState:
    """Feed whole reports (info, ACTIVITY_DTYPE rows, PHASE_DTYPE rows or None) in order.

    Rows need not be sorted; each report is sorted by start and fed in chunks of
    ``chunk_rows`` (also the model's ``flush_rows``) with phases interleaved as the Sink
    protocol requires. Returns the state.
    """
    model = EfficiencyModel(job, window_ns=window_ns, gap_threshold_ns=gap_threshold_ns,
                            flush_rows=chunk_rows)
    for info, activity, phases in reports:
        feed_report(model, info, activity, phases, chunk_rows=chunk_rows)
    return model.state()


def feed_report(model: EfficiencyModel, info: ReportInfo, activity: np.ndarray,
                phases: np.ndarray | None = None, *, chunk_rows: int = 65536) -> None:
    """Drive one report through ``model``: sort, chunk, interleave phases, end the report."""
    act = activity[np.argsort(activity["start"], kind="stable")]
    ph = phases[np.argsort(phases["start"], kind="stable")] if phases is not None else None
    model.begin_report(info)
    feed_interleaved(model, act, ph, chunk_rows)
    model.end_report()
