"""The efficiency model: a ``Sink`` that sweeps each report's GPU activity into device totals.

The views (records) are built by ``RecordViews``; the exportable, mergeable state by ``partial``.
"""

from __future__ import annotations

import itertools
import re
from array import array
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from prvstream.sinks.base import ReportInfo, TableDetail, TableRows
from prvstream.sinks.efficiency.host import HostTotals
from prvstream.sinks.efficiency.partial import EfficiencyState, export_state, restore
from prvstream.sinks.efficiency.parts import (
    CATEGORY,
    CATEGORY_NCCL_USEFUL,
    GAP_NS,
    GAPS,
    N_MEASURES,
    NOTE_NAMES,
    Device,
    Name,
    Pending,
    Report,
    Sweep,
    grow,
    segments,
)
from prvstream.sinks.efficiency.tables import SpanIndex, Tables, phase_rows
from prvstream.sinks.efficiency.views import RecordViews
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.fold import SummaryFolder, fold
from prvstream.sinks.summary.records import DEFAULT_RECENT, SummaryRecord, SummaryState

__all__ = ["EfficiencyModel", "phase_label"]

log = get_logger(__name__)


#: a trailing step number that makes every occurrence's name distinct (PyTorch's profiler
#: marks steps ``ProfilerStep#0``, ``ProfilerStep#1``, ...)
_NUMBERED = re.compile(r"#\d+$")
#: windows kept on each side of the first one; time beyond folds into the edge window, so
#: memory never grows with the time span (7.6 days of the default 10 s windows)
MAX_WINDOWS = 1 << 16


def phase_label(name: str) -> str:
    """The phase name occurrences are grouped under: without a trailing ``#N``."""
    return _NUMBERED.sub("", name) or name


class EfficiencyModel(RecordViews):
    """Feeds on reports (the ``Sink`` protocol) and keeps the cumulative, window and phase views.

    Results depend only on the reports and their order, never on how batches are chunked, so a
    restarted daemon that re-feeds the same reports gets the same records.
    """

    def __init__(self, job: str, *, window_ns: int = 10_000_000_000,
                 gap_threshold_ns: int = 1_000_000, flush_rows: int = 65536,
                 recent: int = DEFAULT_RECENT, top: int = 20,
                 nccl_as: str = "communication") -> None:
        if window_ns <= 0:
            raise ValueError(f"window_ns must be positive, got {window_ns}")
        self.job = job
        if nccl_as not in ("communication", "useful"):
            raise ValueError(f"nccl_as must be 'communication' or 'useful', got {nccl_as!r}")
        #: NCCL kernels count as communication (BasicAnalysis) or as useful work (TALP)
        self.nccl_as = nccl_as
        self._category = CATEGORY if nccl_as == "communication" else CATEGORY_NCCL_USEFUL
        self.window_ns = int(window_ns)
        self.gap_threshold_ns = int(gap_threshold_ns)
        #: small batches are buffered up to this many rows before a sweep (results do not
        #: depend on it; memory is O(flush_rows + open intervals))
        self.flush_rows = max(int(flush_rows), 1)
        self._devices: list[Device] = []
        self._device_ids: dict[tuple[str, int], int] = {}
        self._device_rank: list[int] = []  # gid -> position in (host, device) order
        self._process_devices: dict[tuple[str, int], list[int]] = {}
        self._window_slots: dict[int, int] = {}
        self._names: list[Name] = []
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
        #: per (process, phase name): its occurrences' start and end, in order (pairs)
        self._occ_spans: dict[tuple[tuple[str, int], str], array[int]] = {}
        self._occ_by_proc: dict[tuple[str, int], dict[str, array[int]]] = {}
        self._occ_indexed = 0
        #: the same, sorted for the search of ``phase_rows`` (extended, never re-sorted)
        self._span_index = SpanIndex()
        self._report: Report | None = None
        self._reports = 0
        self._last_report = ""
        #: the greatest (start, report id) of the reports included
        self._last_key: tuple[int, str] | None = None
        self._span: tuple[int, int] | None = None
        self._pending: Pending | None = None
        #: ``hold_updates``: the windows and phase instances the group touched
        self._held: tuple[set[int], array[int]] | None = None
        self._updates: list[SummaryRecord] = []
        self._folder = SummaryFolder(recent=recent)
        #: names shown per top-N table (then one "other" row)
        self.top = max(int(top), 1)
        self._tables = Tables()
        #: the top-N tables per phase name (rows attributed by start, ``phase_rows``)
        self._phase_tables: dict[str, Tables] = {}
        #: host metrics: CUDA runtime and MPI time per host process
        self._host = HostTotals(self.window_ns)
        #: ReportInfo.notes: note -> (reports it applies to, the first few report ids sorted)
        self._notes: dict[str, tuple[int, list[str]]] = {}

    # --- Sink protocol ----------------------------------------------------------------------

    def begin_report(self, info: ReportInfo) -> None:
        """Register the report's processes and devices; its batches follow."""
        if self._report is not None:
            raise RuntimeError("begin_report called before end_report of the previous report")
        if self._pending is not None:  # updates not taken: build them before time moves on
            self._updates += self._produce(self._pending)
            self._pending = None
        for note in info.notes:
            count, names = self._notes.get(note, (0, []))
            self._notes[note] = (count + 1, sorted([*names, info.report_id])[:NOTE_NAMES])
        origin = int(info.origin_wall_ns)
        processes = [(p.host, p.pid) for p in info.processes]
        local = np.empty(len(info.devices), np.int64)
        key_first = (origin + int(info.start_ns), info.report_id)
        for i, d in enumerate(info.devices):
            key = (d.host, d.device)
            gid = self._device_ids.get(key)
            proc = processes[d.process] if 0 <= d.process < len(processes) else (d.host, 0)
            if gid is None:
                gid = len(self._devices)
                self._device_ids[key] = gid
                self._add_device(Device(d.host, d.device, d.rank, proc[1], proc, key_first))
            local[i] = gid
        start, end = origin + int(info.start_ns), origin + int(info.end_ns)
        sweeps: dict[int, Sweep] = {}
        for gid in dict.fromkeys(local.tolist()):
            dev = self._devices[gid]
            if any(s < end and e > start for s, e in dev.spans):  # slices may come late
                log.warning("device_overlaps_earlier_report", job=self.job, host=dev.host,
                            device=dev.device, report=info.report_id)
            sweeps[gid] = Sweep(lo=start, idle_since=start)
        self._report = Report(info, origin, local, processes, sweeps, -(2**62), start, end)
        self._host.begin(info, origin)

    def _add_device(self, dev: Device) -> int:
        """Register a new device; return its id."""
        gid = len(self._devices)
        self._device_ids[(dev.host, dev.device)] = gid
        self._devices.append(dev)
        self._process_devices.setdefault(dev.process, []).append(gid)
        order = sorted(range(len(self._devices)),
                       key=lambda g: (self._devices[g].host, self._devices[g].device))
        self._device_rank = [0] * len(order)
        for pos, g in enumerate(order):
            self._device_rank[g] = pos
        return gid

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
        rep.pending.append((s, e, rep.devices[batch["device"]], self._category[batch["kind"]]))
        rep.pending_rows += len(s)
        if rep.pending_rows >= self.flush_rows:
            self._sweep_pending(rep)

    def _sweep_pending(self, rep: Report) -> None:
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
        names = rep.labels
        if len(names) < len(rep.info.phase_names):  # the pipeline adds names as it meets them
            names += [phase_label(n) for n in rep.info.phase_names[len(names):]]
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
            proc = rep.processes[row_proc]
            i = self._occurrence(proc, names[row_name], start, end)
            rep.touched.append(i)
            rep.recent.setdefault(proc, []).append((start, end, i))
            self._host.phase(row_proc, start, end, i)

    def add_table_detail(self, rows: TableDetail) -> None:
        """Take rows of a top-N table for the tables per phase (after every phase that
        starts at or before them)."""
        rep = self._require_report()
        # return_counts: np.unique's plain form checks for masked arrays, importing numpy.ma
        for p in np.unique(rows.process, return_counts=True)[0].tolist():
            proc = rep.processes[p]
            spans = {n: self._span_index.get((proc, n), s)
                     for n, s in self._spans_of(proc).items()}
            if spans:
                for name, agg in phase_rows(rows.take(rows.process == p), rep.origin, spans):
                    self._phase_tables.setdefault(name, Tables()).add(agg)

    def _spans_of(self, proc: tuple[str, int]) -> dict[str, array[int]]:
        """``_occ_spans`` of one process by phase name (indexed as keys are added, so a
        lookup does not grow with the processes in the job)."""
        if len(self._occ_spans) != self._occ_indexed:
            for (pr, name), spans in itertools.islice(self._occ_spans.items(),
                                                      self._occ_indexed, None):
                self._occ_by_proc.setdefault(pr, {})[name] = spans
            self._occ_indexed = len(self._occ_spans)
        return self._occ_by_proc.get(proc, {})

    def add_tables(self, rows: TableRows) -> None:
        """Take one chunk's per-name aggregates for the top-N tables (any order)."""
        self._require_report()
        self._tables.add(rows)

    def add_host(self, batch: np.ndarray) -> None:
        """Take HOST_DTYPE rows (CUDA runtime and MPI calls; start order per kind)."""
        self._require_report()
        self._host.add(batch)

    def _occurrence(self, proc: tuple[str, int], name: str, start: int, end: int) -> int:
        """Record the next occurrence of ``name`` in ``proc``; return its instance id."""
        spans = self._occ_spans.get((proc, name))
        if spans is None:
            spans = self._occ_spans[(proc, name)] = array("q")
        occ = len(spans) // 2
        spans += array("q", (start, end))
        i = self._instance(name, occ, start, end)
        pid = self._process_ids.get(proc)
        if pid is None:
            pid = self._process_ids[proc] = len(self._processes)
            self._processes.append(proc)
            self._has.append(np.zeros(0, np.uint8))
        has = self._has[pid] = grow(self._has[pid], i + 1)
        if not has[i]:
            has[i] = 1
            self._names[int(self._i_name[i])].processes.add(pid)
        return i

    def _instance(self, name: str, occ: int, start: int, end: int) -> int:
        """The id of phase instance (name, occ), created or widened to cover [start, end)."""
        nid = self._name_ids.get(name)
        if nid is None:
            nid = self._name_ids[name] = len(self._names)
            self._names.append(Name(name))
        nm = self._names[nid]
        nm.instances = grow(nm.instances, occ + 1, fill=-1)
        i = int(nm.instances[occ])
        if i < 0:
            i = nm.instances[occ] = self._n_instances
            self._n_instances += 1
            need = self._n_instances
            self._i_name = grow(self._i_name, need)
            self._i_occ = grow(self._i_occ, need)
            self._i_start = grow(self._i_start, need)
            self._i_end = grow(self._i_end, need)
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
        self._host.end()
        start, end = rep.first, rep.last
        for gid in rep.sweeps:
            self._devices[gid].spans.append((start, end))
        self._span = (start, end) if self._span is None else (
            min(self._span[0], start), max(self._span[1], end))
        self._reports += 1
        self._last_report = rep.info.report_id
        key = (rep.origin + int(rep.info.start_ns), rep.info.report_id)
        self._last_key = key if self._last_key is None else max(self._last_key, key)
        self._report = None
        windows = self._window_span(start, end)
        if self._held is not None:  # a group: one update once the last report is in
            self._held[0].update(windows)
            self._held[1].extend(rep.touched)
            return
        self._pend(windows, rep.touched)

    def hold_updates(self) -> None:
        """The reports that follow, until ``release_updates``, make one update (a group
        commit): its records are built once, from the state after the last of them."""
        if self._held is None:
            self._held = (set(), array("q"))

    def release_updates(self) -> None:
        """End a ``hold_updates`` group: its update is pending (``iter_updates``)."""
        held, self._held = self._held, None
        if held is not None and held[0]:
            self._pend(sorted(held[0]), held[1])

    def _pend(self, windows: Sequence[int], touched_ids: array[int]) -> None:
        touched = (np.unique(np.frombuffer(touched_ids, np.int64), return_counts=True)[0]
                   if touched_ids else np.zeros(0, np.int64))  # counts: no numpy.ma
        if len(touched):
            rank = np.argsort(np.argsort([n.name for n in self._names]))
            touched = touched[np.lexsort((self._i_occ[touched],
                                          rank[self._i_name[touched]],
                                          self._i_start[touched]))]
        names = sorted(set(self._i_name[touched].tolist()), key=lambda n: self._names[n].name)
        pending = Pending(self._cumulative(), windows, touched, names, {})
        self._keep_state(pending)
        self._pending = pending
        log.debug("efficiency_updated", job=self.job, report=self._last_report,
                  windows=len(windows), phases=len(touched))

    def _keep_state(self, p: Pending) -> None:
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

    def partial(self) -> EfficiencyState:
        """The mergeable state of the reports so far (see ``partial.merge``)."""
        return export_state(self)

    @classmethod
    def from_partial(cls, state: EfficiencyState, *, flush_rows: int = 65536,
                     recent: int = DEFAULT_RECENT,
                     published: SummaryState | None = None) -> EfficiencyModel:
        """A model that continues from ``state`` (``partial.restore``)."""
        return restore(state, flush_rows=flush_rows, recent=recent, published=published)

    def _rebuild_state(self) -> None:
        """The bounded state built afresh from the tables (after a restore or a merge)."""
        folder = self._folder = SummaryFolder(recent=self._folder.recent)
        if not self._reports:
            return
        for nid in sorted(range(len(self._names)), key=lambda n: self._names[n].name):
            folder.add(self._phase_total(nid))
        folder.add(self._cumulative())
        ks: set[int] = set()
        for d in self._devices:
            for s, e in d.spans:
                ks.update(self._window_span(s, e))
        for k in sorted(ks)[-folder.recent:]:
            folder.add(self._window(k))
        for nm in self._names:
            occs = nm.instances[nm.instances >= 0][-folder.recent:]
            for i in occs.tolist():
                folder.add(self._phase(i))

    def state(self) -> SummaryState:
        """The latest, bounded state: what folding every record published so far gives."""
        if not self._reports:
            return fold([self._cumulative()], recent=self._folder.recent)
        return self._folder.state()

    def _produce(self, p: Pending) -> Iterator[SummaryRecord]:
        built = p.built
        for nid in p.names:
            yield built["t", nid]
        yield p.cumulative
        for k in p.windows:
            yield built.get(("w", k)) or self._window(k)
        for i in p.instances.tolist():
            yield built.get(("p", i)) or self._phase(i)

    # --- the sweep --------------------------------------------------------------------------

    def _require_report(self) -> Report:
        if self._report is None:
            raise RuntimeError("begin_report must come before batches and end_report")
        return self._report

    def _advance(self, rep: Report, gid: int, sw: Sweep, ns: np.ndarray, ne: np.ndarray,
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
                edges, n0, n1, n_all = segments(s, e, c, lo, hi)
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

    def _fold(self, k: np.ndarray, first: int) -> np.ndarray:
        """Windows ``k``, each replaced by the edge window when it lies more than
        ``MAX_WINDOWS`` from the model's first window (``first`` when there is none yet)."""
        origin = next(iter(self._window_slots), first)
        folded: np.ndarray = np.clip(k, origin - MAX_WINDOWS, origin + MAX_WINDOWS)
        return folded

    def _window_span(self, start: int, end: int) -> range:
        """The (folded) windows [start, end) touches."""
        w = self.window_ns
        k0, k1 = self._fold(np.array([start // w, max(end - 1, start) // w]),
                            start // w).tolist()
        return range(k0, k1 + 1)

    def _window_rows(self, dev: Device, ks: Iterable[int]) -> list[int]:
        """Slots of windows ``ks`` in the devices' window tables (created as needed)."""
        slots = []
        for k in ks:
            slot = self._window_slots.get(k)
            if slot is None:
                slot = self._window_slots[k] = len(self._window_slots)
            slots.append(slot)
        dev.windows = grow(dev.windows, len(self._window_slots), first=1)
        return slots

    def _phase_rows(self, dev: Device) -> None:
        dev.instances = grow(dev.instances, self._n_instances, first=1)
        dev.names = grow(dev.names, len(self._names), first=1)

    def _attribute(self, rep: Report, gid: int, edges: np.ndarray, length: np.ndarray,
                   ind: np.ndarray) -> None:
        """Add the measures of segments [edges[i], edges[i+1]) to cumulative, windows, phases.

        ``ind`` holds one row per measure: 1 where the segment counts for it."""
        cum = np.zeros((N_MEASURES, len(length) + 1), np.int64)
        np.cumsum(ind * length, axis=1, out=cum[:, 1:])
        total = cum[:, -1]
        dev = self._devices[gid]
        dev.totals[:N_MEASURES] += total
        lo, hi = int(edges[0]), int(edges[-1])

        def upto(q: np.ndarray) -> np.ndarray:
            """The measures over [lo, q) for each instant q, one row per q."""
            q = np.clip(q, lo, hi)
            j = np.clip(np.searchsorted(edges, q, "right") - 1, 0, len(length) - 1)
            out: np.ndarray = (cum[:, j] + ind[:, j] * (q - edges[j])).T
            return out

        span = self._window_span(lo, hi)
        if len(span) == 1:
            slots = self._window_rows(dev, span)
            dev.windows[slots[0], :N_MEASURES] += total
        else:
            ks = np.arange(span.start, span.stop, dtype=np.int64)
            bounds = np.append(ks, ks[-1] + 1) * self.window_ns
            bounds[0], bounds[-1] = lo, hi  # folded edge windows take all beyond them
            per_window = np.diff(upto(bounds), axis=0)
            slots = self._window_rows(dev, ks.tolist())
            dev.windows[slots, :N_MEASURES] += per_window
        recent = rep.recent.get(dev.process)
        if recent:
            r = np.array(recent, np.int64)
            ids = r[:, 2]
            per_phase = upto(r[:, 1]) - upto(r[:, 0])
            self._phase_rows(dev)
            dev.instances[ids, :N_MEASURES] += per_phase  # ids are distinct
            np.add.at(dev.names[:, :N_MEASURES], self._i_name[ids], per_phase)

    def _gaps(self, rep: Report, gid: int, sw: Sweep, edges: np.ndarray,
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

    def _add_gaps(self, rep: Report, gid: int, g0: np.ndarray, g1: np.ndarray) -> None:
        """Count the idle stretches [g0, g1) longer than the threshold in every view."""
        long_ = (g1 - g0) > self.gap_threshold_ns
        if not long_.any():
            return
        g0, g1 = g0[long_].astype(np.int64), g1[long_].astype(np.int64)
        dev = self._devices[gid]
        dev.totals[GAPS] += len(g0)
        dev.totals[GAP_NS] += int((g1 - g0).sum())
        w = self.window_ns
        first = int(g0[0]) // w
        k0, k1 = self._fold(g0 // w, first), self._fold((g1 - 1) // w, first)
        single = k0 == k1
        ks, inv = np.unique(k0[single], return_inverse=True)
        counts = np.bincount(inv, minlength=len(ks))
        sums = np.bincount(inv, weights=(g1 - g0)[single], minlength=len(ks))
        slots = self._window_rows(dev, ks.tolist())
        for slot, n, total in zip(slots, counts.tolist(), sums.tolist(), strict=True):
            dev.windows[slot, GAPS] += n
            dev.windows[slot, GAP_NS] += int(total)
        for a, b, ka, kb in zip(g0[~single].tolist(), g1[~single].tolist(),
                                k0[~single].tolist(), k1[~single].tolist(), strict=True):
            for k in range(ka, kb + 1):
                (slot,) = self._window_rows(dev, (k,))
                dev.windows[slot, GAPS] += 1
                dev.windows[slot, GAP_NS] += ((b if k == kb else (k + 1) * w)
                                              - (a if k == ka else k * w))
        recent = rep.recent.get(dev.process)
        if recent:
            r = np.array(recent, np.int64)
            ps, pe, ids = r[None, :, 0], r[None, :, 1], r[:, 2]
            hit = (ps < g1[:, None]) & (pe > g0[:, None])
            inside = np.where(hit, np.minimum(g1[:, None], pe) - np.maximum(g0[:, None], ps),
                              0)
            n_hit, ns_hit = hit.sum(axis=0), inside.sum(axis=0)
            self._phase_rows(dev)
            dev.instances[ids, GAPS] += n_hit
            dev.instances[ids, GAP_NS] += ns_hit
            names = self._i_name[ids]
            np.add.at(dev.names[:, GAPS], names, n_hit)
            np.add.at(dev.names[:, GAP_NS], names, ns_hit)

    def _prune(self, rep: Report) -> None:
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
