"""The BSC/POP GPU efficiency model: a ``Sink`` that keeps rolling device summaries of a job.

Public API (definitions in docs/efficiency.md)::

    model = EfficiencyModel(job="run42", window_ns=10_000_000_000, gap_threshold_ns=1_000_000,
                            flush_rows=65536)  # small batches are buffered up to flush_rows
    model.begin_report(info); model.add_activity(batch); model.add_phases(batch)
    model.end_report()                 # computes the views for the reports so far
    model.iter_updates() -> Iterator[SummaryRecord]  # new summary.jsonl lines, built lazily
    model.take_updates() -> list[SummaryRecord]   # the same as a list
    model.discard_updates()            # drop them unbuilt (batch convert without history)
    model.state() -> SummaryState                 # summary.json content (bounded)
    summarize(job, [(info, activity, phases), ...]) -> SummaryState  # batch convert, tests
    feed_report(model, info, activity, phases, chunk_rows=...)  # sort, chunk, interleave
    job_metrics(useful, comm, span_ns) -> Metrics

Memory is O(chunk + open intervals) for the sweep, plus one row of 9 int64 per (device, window)
and per (device, phase instance) in tables grown by doubling (docs/efficiency.md gives the
cost); the published state is bounded by ``recent`` windows and instances per phase name.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from prvstream.sinks.base import ReportInfo, feed_interleaved
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary import (
    DEFAULT_RECENT,
    SCHEMA_VERSION,
    DeviceRow,
    GroupRow,
    Metrics,
    SummaryFolder,
    SummaryRecord,
    SummaryState,
    fold,
)

__all__ = ["EfficiencyModel", "feed_report", "job_metrics", "summarize"]

log = get_logger(__name__)

# columns of a totals vector
_USEFUL, _COMM, _OVERLAP, _K1, _K2, _K3, _K4 = range(7)
_N_MEASURES = 7
_GAPS, _GAP_NS = 7, 8
_WIDTH = 9
#: ActivityKind -> category: 0 compute kernel, 1 NCCL kernel, 2 memcpy/memset
_CATEGORY = np.array([0, 1, 2, 2], dtype=np.int8)
#: first capacity of a growing table (rows)
_FIRST_ROWS = 64
#: below this, sums of ns are exact in float64 and the metrics can be computed in plain Python
_EXACT = 2**53


def job_metrics(useful: Sequence[int], comm: Sequence[int], span_ns: int) -> Metrics:
    """LB, CE, OE and PE of devices with these useful/comm times over an interval of span_ns.

    Degenerate cases keep PE = LB * CE * OE: no devices or an empty span give zeros; a job where
    no compute ran has LB = 1 (all equal) and CE = 0 when communication ran, else 1.
    """
    if not useful or span_ns <= 0:
        return Metrics(load_balance=0.0, communication_efficiency=0.0,
                       orchestration_efficiency=0.0, parallel_efficiency=0.0)
    total_u = sum(useful)
    if total_u + sum(comm) < _EXACT:
        # every value and partial sum is an exact float64: the same numbers numpy gives
        max_u = float(max(useful))
        max_uc = float(max(u + c for u, c in zip(useful, comm, strict=True)))
        mean_u = float(total_u) / len(useful)
        sum_u = float(total_u)
    else:
        u = np.asarray(useful, dtype=np.float64)
        uc = u + np.asarray(comm, dtype=np.float64)
        max_u, max_uc = float(u.max()), float(uc.max())
        mean_u, sum_u = float(u.mean()), float(u.sum())
    lb = mean_u / max_u if max_u > 0 else 1.0
    ce = max_u / max_uc if max_uc > 0 else 1.0
    oe = max_uc / span_ns
    pe = sum_u / (len(useful) * span_ns)
    return Metrics(load_balance=lb, communication_efficiency=ce, orchestration_efficiency=oe,
                   parallel_efficiency=pe)


def _grow(arr: np.ndarray, need: int, fill: int = 0) -> np.ndarray:
    """``arr`` with at least ``need`` rows, doubling its capacity (new rows hold ``fill``)."""
    if len(arr) >= need:
        return arr
    new = np.full((max(need, 2 * len(arr), _FIRST_ROWS), *arr.shape[1:]), fill, arr.dtype)
    new[:len(arr)] = arr
    return new


def _rows() -> np.ndarray:
    return np.zeros((0, _WIDTH), np.int64)


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
    #: totals per window slot, per phase instance id and per phase name id (rows of _WIDTH)
    windows: np.ndarray = field(default_factory=_rows)
    instances: np.ndarray = field(default_factory=_rows)
    names: np.ndarray = field(default_factory=_rows)


@dataclass
class _Name:
    """A phase name: where its occurrences live and the sums its ``phase_total`` row shows."""

    name: str
    #: occurrence -> instance id (-1: none yet)
    instances: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    count: int = 0
    start: int = 0
    end: int = 0
    span: int = 0
    processes: set[int] = field(default_factory=set)


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
    #: per process: phase instances that may still receive time, as (start, end, instance id)
    recent: dict[tuple[str, int], list[tuple[int, int, int]]] = field(default_factory=dict)
    #: instance ids the report's phases touched (with repeats)
    touched: array[int] = field(default_factory=lambda: array("q"))
    #: activity taken but not swept yet: (start, end, global device, category) arrays
    pending: list[tuple[np.ndarray, ...]] = field(default_factory=list)
    pending_rows: int = 0


@dataclass
class _Pending:
    """What the last report changed; its records are built when ``iter_updates`` runs."""

    cumulative: SummaryRecord
    windows: range
    instances: np.ndarray  # instance ids in (start, name, occurrence) order
    names: list[int]  # phase name ids, by name
    built: dict[tuple[str, int], SummaryRecord]


def _segments(s: np.ndarray, e: np.ndarray, c: np.ndarray, lo: int,
              hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split [lo, hi) at every interval boundary: edges and, per segment, the running count of
    compute kernels, NCCL kernels and of everything (intervals start at or after ``lo``)."""
    n = len(s)
    eo = np.argsort(e, kind="stable")
    t = np.concatenate((s, e[eo]))
    order = np.argsort(t, kind="stable")  # two sorted runs: a merge
    ts = np.clip(t[order], lo, hi)
    sign = np.where(order < n, 1, -1).astype(np.int64)
    cat = np.concatenate((c, c[eo]))[order]
    last = np.flatnonzero(np.append(ts[1:] != ts[:-1], True))
    edges = ts[last]
    total = np.cumsum(sign)[last]
    comp = np.cumsum(np.where(cat == 0, sign, 0))[last]
    nccl = np.cumsum(np.where(cat == 1, sign, 0))[last]
    if edges[-1] == hi:  # boundaries at hi close the last segment
        edges, total, comp, nccl = edges[:-1], total[:-1], comp[:-1], nccl[:-1]
    if not len(edges) or edges[0] > lo:  # nothing starts at lo: an empty first segment
        zero = np.zeros(1, np.int64)
        edges = np.concatenate(([lo], edges))
        total, comp, nccl = (np.concatenate((zero, x)) for x in (total, comp, nccl))
    return np.append(edges, hi), comp, nccl, total


class EfficiencyModel:
    """Feeds on reports (the ``Sink`` protocol) and keeps the cumulative, window and phase views.

    Results depend only on the reports and their order, never on how batches are chunked, so a
    restarted daemon that re-feeds the same reports gets the same records.
    """

    def __init__(self, job: str, *, window_ns: int = 10_000_000_000,
                 gap_threshold_ns: int = 1_000_000, flush_rows: int = 65536,
                 recent: int = DEFAULT_RECENT) -> None:
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
        self._device_rank: list[int] = []  # gid -> position in (host, device) order
        self._process_devices: dict[tuple[str, int], list[int]] = {}
        self._window_slots: dict[int, int] = {}
        self._names: list[_Name] = []
        self._name_ids: dict[str, int] = {}
        #: instance id -> name id, occurrence, start, end (grown by doubling; _n_instances used)
        self._n_instances = 0
        self._i_name = np.zeros(0, np.int32)
        self._i_occ = np.zeros(0, np.int64)
        self._i_start = np.zeros(0, np.int64)
        self._i_end = np.zeros(0, np.int64)
        #: process id -> (host, pid), and per process which instances it has (uint8 per id)
        self._process_ids: dict[tuple[str, int], int] = {}
        self._processes: list[tuple[str, int]] = []
        self._has: list[np.ndarray] = []
        self._occurrences: dict[tuple[tuple[str, int], str], int] = {}
        self._report: _Report | None = None
        self._reports = 0
        self._last_report = ""
        self._span: tuple[int, int] | None = None
        self._pending: _Pending | None = None
        self._updates: list[SummaryRecord] = []
        self._folder = SummaryFolder(recent=recent)

    # --- Sink protocol ----------------------------------------------------------------------

    def begin_report(self, info: ReportInfo) -> None:
        """Register the report's processes and devices; its batches follow."""
        if self._report is not None:
            raise RuntimeError("begin_report called before end_report of the previous report")
        if self._pending is not None:  # updates not taken: build them before time moves on
            self._updates += self._produce(self._pending)
            self._pending = None
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
                order = sorted(range(len(self._devices)),
                               key=lambda g: (self._devices[g].host, self._devices[g].device))
                self._device_rank = [0] * len(order)
                for pos, g in enumerate(order):
                    self._device_rank[g] = pos
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
        s = batch["start"] + np.int64(rep.origin)  # int64 fields: no astype copy
        e = batch["end"] + np.int64(rep.origin)
        if int(s[0]) < rep.frontier or (len(s) > 1 and bool((s[1:] < s[:-1]).any())):
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
        if len(rep.pending) == 1:
            s, e, gdev, cat = rep.pending[0]
        elif rep.pending:
            s, e, gdev, cat = (np.concatenate(x) for x in zip(*rep.pending, strict=True))
        else:
            s = e = gdev = np.empty(0, np.int64)
            cat = np.empty(0, np.int8)
        rep.pending, rep.pending_rows = [], 0
        groups: dict[int, tuple[int, int]] = {}
        if len(rep.sweeps) == 1 or not len(gdev) or bool((gdev == gdev[0]).all()):
            if len(gdev):
                groups[int(gdev[0])] = (0, len(gdev))
        else:
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
        for row_start, row_end, row_proc, row_name in zip(
                batch["start"].tolist(), batch["end"].tolist(), batch["process"].tolist(),
                batch["name"].tolist(), strict=True):
            start, end = row_start + rep.origin, row_end + rep.origin
            if start < rep.frontier:
                raise ValueError("phase batches must arrive in non-decreasing start order "
                                 "(see the Sink protocol in prvstream.sinks.base)")
            rep.frontier = start
            if end < start:
                continue
            name = names[row_name]
            proc = rep.processes[row_proc]
            occ = self._occurrences.get((proc, name), 0)
            self._occurrences[(proc, name)] = occ + 1
            i = self._instance(name, occ, start, end)
            pid = self._process_ids.get(proc)
            if pid is None:
                pid = self._process_ids[proc] = len(self._processes)
                self._processes.append(proc)
                self._has.append(np.zeros(0, np.uint8))
            has = self._has[pid] = _grow(self._has[pid], i + 1)
            if not has[i]:
                has[i] = 1
                self._names[int(self._i_name[i])].processes.add(pid)
            rep.touched.append(i)
            rep.recent.setdefault(proc, []).append((start, end, i))

    def _instance(self, name: str, occ: int, start: int, end: int) -> int:
        """The id of phase instance (name, occ), created or widened to cover [start, end)."""
        nid = self._name_ids.get(name)
        if nid is None:
            nid = self._name_ids[name] = len(self._names)
            self._names.append(_Name(name))
        nm = self._names[nid]
        nm.instances = _grow(nm.instances, occ + 1, fill=-1)
        i = int(nm.instances[occ])
        if i < 0:
            i = nm.instances[occ] = self._n_instances
            self._n_instances += 1
            need = self._n_instances
            self._i_name = _grow(self._i_name, need)
            self._i_occ = _grow(self._i_occ, need)
            self._i_start = _grow(self._i_start, need)
            self._i_end = _grow(self._i_end, need)
            self._i_name[i], self._i_occ[i] = nid, occ
            self._i_start[i], self._i_end[i] = start, end
            nm.start = start if not nm.count else min(nm.start, start)
            nm.end = end if not nm.count else max(nm.end, end)
            nm.count += 1
            nm.span += end - start
            return i
        old_s, old_e = int(self._i_start[i]), int(self._i_end[i])
        new_s, new_e = min(old_s, start), max(old_e, end)
        if (new_s, new_e) != (old_s, old_e):
            self._i_start[i], self._i_end[i] = new_s, new_e
            nm.span += (new_e - new_s) - (old_e - old_s)
            nm.start, nm.end = min(nm.start, new_s), max(nm.end, new_e)
        return i

    def end_report(self) -> None:
        """Flush open intervals; the report's records follow from ``iter_updates``."""
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
        w = self.window_ns
        windows = range(start // w, (end - 1) // w + 1 if end > start else start // w + 1)
        touched = np.unique(np.frombuffer(rep.touched, np.int64)) if rep.touched else \
            np.zeros(0, np.int64)
        if len(touched):
            rank = np.argsort(np.argsort([n.name for n in self._names]))
            touched = touched[np.lexsort((self._i_occ[touched],
                                          rank[self._i_name[touched]],
                                          self._i_start[touched]))]
        names = sorted(set(self._i_name[touched].tolist()), key=lambda n: self._names[n].name)
        pending = _Pending(self._cumulative(), windows, touched, names, {})
        self._keep_state(pending)
        self._pending = pending
        log.debug("efficiency_updated", job=self.job, report=self._last_report,
                  windows=len(windows), phases=len(touched))

    def _keep_state(self, p: _Pending) -> None:
        """Fold into the bounded state the records of this update it keeps (built now)."""
        folder = self._folder
        for nid in p.names:
            p.built["t", nid] = rec = self._phase_total(nid)
            folder.add(rec)
        folder.add(p.cumulative)
        tail = p.windows[-folder.recent:]
        for k in sorted(folder.keeps("window", "", tail) & set(tail)):
            p.built["w", k] = rec = self._window(k)
            folder.add(rec)
        if len(p.instances):
            names = self._i_name[p.instances]
            for nid in p.names:
                ids = p.instances[names == nid]
                occs = self._i_occ[ids]
                top = np.sort(occs)[-folder.recent:].tolist()
                keep = folder.keeps("phase", self._names[nid].name, top) & set(top)
                for i in ids[np.isin(occs, list(keep))].tolist():
                    p.built["p", i] = rec = self._phase(i)
                    folder.add(rec)

    # --- results ----------------------------------------------------------------------------

    def iter_updates(self) -> Iterator[SummaryRecord]:
        """Records produced since the last call, built one at a time as they are consumed:
        phase name totals, cumulative, windows, phase instances (consume before the next
        ``begin_report``; one not consumed by then is built and held in memory)."""
        held, self._updates = self._updates, []
        pending, self._pending = self._pending, None
        yield from held
        if pending is not None:
            yield from self._produce(pending)

    def take_updates(self) -> list[SummaryRecord]:
        """``iter_updates`` as a list."""
        return list(self.iter_updates())

    def discard_updates(self) -> None:
        """Drop the records produced since the last call without building them (the state
        still reflects them)."""
        self._updates, self._pending = [], None

    def state(self) -> SummaryState:
        """The latest, bounded state: what folding every record published so far gives."""
        if not self._reports:
            return fold([self._cumulative()], recent=self._folder.recent)
        return self._folder.state()

    def _produce(self, p: _Pending) -> Iterator[SummaryRecord]:
        built = p.built
        for nid in p.names:
            yield built["t", nid]
        yield p.cumulative
        for k in p.windows:
            yield built.get(("w", k)) or self._window(k)
        for i in p.instances.tolist():
            yield built.get(("p", i)) or self._phase(i)

    # --- the sweep --------------------------------------------------------------------------

    def _require_report(self) -> _Report:
        if self._report is None:
            raise RuntimeError("begin_report must come before batches and end_report")
        return self._report

    def _advance(self, rep: _Report, gid: int, sw: _Sweep, ns: np.ndarray, ne: np.ndarray,
                 nc: np.ndarray, hi: int, *, final: bool, report_end: int = 0) -> None:
        """Finalize device ``gid`` over [sw.lo, hi) and attribute the time to every view."""
        lo = sw.lo
        if len(sw.carry_s):
            s = np.concatenate([sw.carry_s, np.maximum(ns, lo)])
            e = np.concatenate([sw.carry_e, ne])
            c = np.concatenate([sw.carry_c, nc])
        else:
            s, e, c = np.maximum(ns, lo), ne, nc
        if hi > lo:
            if len(s):
                edges, n0, n1, n_all = _segments(s, e, c, lo, hi)
            else:
                edges = np.array([lo, hi], np.int64)
                n0 = n1 = n_all = np.zeros(1, np.int64)
            length = np.diff(edges)
            comp = n0 > 0
            comm = (n_all - n0) > 0
            k = n0 + n1
            # one row per measure (contiguous rows make the running sums below cheap)
            ind = np.stack([comp, ~comp & comm, comp & comm, k == 1, k == 2, k == 3, k >= 4]
                           ).astype(np.int64)
            self._attribute(rep, gid, edges, length, ind)
            self._gaps(rep, gid, sw, edges, n_all > 0)
        open_ = e > hi
        sw.carry_s, sw.carry_e, sw.carry_c = np.maximum(s[open_], hi), e[open_], c[open_]
        sw.lo = max(lo, hi)
        if not len(sw.carry_s) and sw.idle_since is None:
            sw.idle_since = sw.lo
        if final:
            if sw.idle_since is not None and report_end > sw.idle_since:
                self._add_gaps(rep, gid, np.array([sw.idle_since]), np.array([report_end]))
            sw.idle_since = None

    def _window_rows(self, dev: _Device, ks: Iterable[int]) -> list[int]:
        """Slots of windows ``ks`` in the devices' window tables (created as needed)."""
        slots = []
        for k in ks:
            slot = self._window_slots.get(k)
            if slot is None:
                slot = self._window_slots[k] = len(self._window_slots)
            slots.append(slot)
        dev.windows = _grow(dev.windows, len(self._window_slots))
        return slots

    def _phase_rows(self, dev: _Device) -> None:
        dev.instances = _grow(dev.instances, self._n_instances)
        dev.names = _grow(dev.names, len(self._names))

    def _attribute(self, rep: _Report, gid: int, edges: np.ndarray, length: np.ndarray,
                   ind: np.ndarray) -> None:
        """Add the measures of segments [edges[i], edges[i+1]) to cumulative, windows, phases.

        ``ind`` holds one row per measure: 1 where the segment counts for it."""
        cum = np.zeros((_N_MEASURES, len(length) + 1), np.int64)
        np.cumsum(ind * length, axis=1, out=cum[:, 1:])
        total = cum[:, -1]
        dev = self._devices[gid]
        dev.totals[:_N_MEASURES] += total
        lo, hi = int(edges[0]), int(edges[-1])

        def upto(q: np.ndarray) -> np.ndarray:
            """The measures over [lo, q) for each instant q, one row per q."""
            q = np.clip(q, lo, hi)
            j = np.clip(np.searchsorted(edges, q, "right") - 1, 0, len(length) - 1)
            out: np.ndarray = (cum[:, j] + ind[:, j] * (q - edges[j])).T
            return out

        w = self.window_ns
        k0, k1 = lo // w, (hi - 1) // w
        if k0 == k1:
            slots = self._window_rows(dev, (k0,))
            dev.windows[slots[0], :_N_MEASURES] += total
        else:
            ks = np.arange(k0, k1 + 1, dtype=np.int64)
            per_window = np.diff(upto(np.append(ks, ks[-1] + 1) * w), axis=0)
            slots = self._window_rows(dev, ks.tolist())
            dev.windows[slots, :_N_MEASURES] += per_window
        recent = rep.recent.get(dev.process)
        if recent:
            r = np.array(recent, np.int64)
            ids = r[:, 2]
            per_phase = upto(r[:, 1]) - upto(r[:, 0])
            self._phase_rows(dev)
            dev.instances[ids, :_N_MEASURES] += per_phase  # ids are distinct
            np.add.at(dev.names[:, :_N_MEASURES], self._i_name[ids], per_phase)

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
        slots = self._window_rows(dev, ks.tolist())
        for slot, n, total in zip(slots, counts.tolist(), sums.tolist(), strict=True):
            dev.windows[slot, _GAPS] += n
            dev.windows[slot, _GAP_NS] += int(total)
        for a, b in zip(g0[~single].tolist(), g1[~single].tolist(), strict=True):
            for k in range(a // w, (b - 1) // w + 1):
                (slot,) = self._window_rows(dev, (k,))
                dev.windows[slot, _GAPS] += 1
                dev.windows[slot, _GAP_NS] += min(b, (k + 1) * w) - max(a, k * w)
        recent = rep.recent.get(dev.process)
        if recent:
            r = np.array(recent, np.int64)
            ps, pe, ids = r[None, :, 0], r[None, :, 1], r[:, 2]
            hit = (ps < g1[:, None]) & (pe > g0[:, None])
            inside = np.where(hit, np.minimum(g1[:, None], pe) - np.maximum(g0[:, None], ps),
                              0)
            n_hit, ns_hit = hit.sum(axis=0), inside.sum(axis=0)
            self._phase_rows(dev)
            dev.instances[ids, _GAPS] += n_hit
            dev.instances[ids, _GAP_NS] += ns_hit
            names = self._i_name[ids]
            np.add.at(dev.names[:, _GAPS], names, n_hit)
            np.add.at(dev.names[:, _GAP_NS], names, ns_hit)

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
                rows_of: Callable[[_Device], np.ndarray | None], row: int = 0, name: str = "",
                index: int = 0, span: int | None = None) -> SummaryRecord:
        """One record over [start, end) (length ``span``) for devices ``gids``; a device's
        totals are ``rows_of(device)[row]`` (zeros when missing)."""
        if span is None:
            span = max(end - start, 0)
        rows: list[DeviceRow] = []
        rank_of = self._device_rank
        for gid in sorted(set(gids), key=rank_of.__getitem__):
            dev = self._devices[gid]
            table = rows_of(dev)
            v = table[row].tolist() if table is not None and row < len(table) else \
                [0] * _WIDTH
            useful, comm, overlap = v[_USEFUL], v[_COMM], v[_OVERLAP]
            busy_k = v[_K1:_K4 + 1]
            rows.append(DeviceRow(
                host=dev.host, device=dev.device, useful_ns=useful, comm_ns=comm,
                idle_ns=max(span - useful - comm, 0), overlap_ns=overlap,
                overlap_share=overlap / (comm + overlap) if comm + overlap else 0.0,
                inflight_ns=[max(span - sum(busy_k), 0), *busy_k], gaps=v[_GAPS],
                gap_ns=v[_GAP_NS], rank=dev.rank, pid=dev.pid))
        hosts: dict[str, list[DeviceRow]] = {}
        ranks: dict[str, list[DeviceRow]] = {}
        for r in rows:
            hosts.setdefault(r.host, []).append(r)
            ranks.setdefault(str(r.rank) if r.rank is not None else f"{r.host}:{r.pid}",
                             []).append(r)

        #: groups of the same devices (one host, one rank, the job) share their metrics
        seen: dict[tuple[int, ...], Metrics] = {}

        def metrics(v: list[DeviceRow]) -> Metrics:
            key = tuple(id(r) for r in v)
            m = seen.get(key)
            if m is None:
                m = seen[key] = job_metrics([r.useful_ns for r in v], [r.comm_ns for r in v],
                                            span)
            return m

        def groups(by: dict[str, list[DeviceRow]]) -> list[GroupRow]:
            return [GroupRow(name=k, devices=len(v), useful_ns=sum(r.useful_ns for r in v),
                             comm_ns=sum(r.comm_ns for r in v), metrics=metrics(v))
                    for k, v in sorted(by.items(), key=lambda kv: _group_order(kv[0]))]

        return SummaryRecord(
            schema=SCHEMA_VERSION, job=self.job, view=view, name=name, index=index,
            start_ns=start, end_ns=end, span_ns=span,
            wall_ns=self._span[1] if self._span else 0, reports=self._reports,
            last_report=self._last_report,
            metrics=metrics(rows), devices=rows, hosts=groups(hosts), ranks=groups(ranks),
            window_ns=self.window_ns,
            gap_threshold_ns=self.gap_threshold_ns)

    def _cumulative(self) -> SummaryRecord:
        start, end = self._span if self._span else (0, 0)
        return self._record("cumulative", start, end, range(len(self._devices)),
                            lambda d: d.totals[None, :])

    def _window(self, k: int) -> SummaryRecord:
        w = self.window_ns
        ws, we = k * w, (k + 1) * w
        js, je = self._span if self._span else (ws, we)
        present = [i for i, d in enumerate(self._devices)
                   if any(a < we and b > ws for a, b in d.spans)]
        slot = self._window_slots.get(k, -1)
        return self._record("window", max(ws, js), min(we, je), present,
                            lambda d: d.windows if slot >= 0 else None, row=slot, index=k)

    def _present(self, processes: Iterable[int]) -> list[int]:
        return [g for p in processes
                for g in self._process_devices.get(self._processes[p], [])]

    def _phase(self, i: int) -> SummaryRecord:
        procs = [p for p, has in enumerate(self._has) if i < len(has) and has[i]]
        nm = self._names[int(self._i_name[i])]
        return self._record("phase", int(self._i_start[i]), int(self._i_end[i]),
                            self._present(procs), lambda d: d.instances, row=i, name=nm.name,
                            index=int(self._i_occ[i]))

    def _phase_total(self, nid: int) -> SummaryRecord:
        nm = self._names[nid]
        return self._record("phase_total", nm.start, nm.end, self._present(sorted(nm.processes)),
                            lambda d: d.names, row=nid, name=nm.name, index=nm.count,
                            span=nm.span)


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
