"""The efficiency model: a ``Sink`` that sweeps each report's GPU activity into device totals.

The sweep is ``DeviceSweep``, phase instances ``PhaseInstances``, the records ``RecordViews`` and
``UpdateQueue``; the exportable, mergeable state is ``partial``.
"""

from __future__ import annotations

import bisect
import sys
from array import array
from typing import TYPE_CHECKING

import numpy as np

from prvstream.sinks.arrays import distinct
from prvstream.sinks.base import ReportInfo, TableDetail, TableRows
from prvstream.sinks.efficiency.devices import DeviceTable
from prvstream.sinks.efficiency.host import HostTotals
from prvstream.sinks.efficiency.intake import ActivityIntake
from prvstream.sinks.efficiency.parts import (
    CATEGORY,
    CATEGORY_NCCL_USEFUL,
    NOTE_NAMES,
    WIDTH,
    Name,
    Pending,
    Report,
    Sweep,
    grow,
)
from prvstream.sinks.efficiency.phases import PhaseInstances
from prvstream.sinks.efficiency.processes import ProcessTable
from prvstream.sinks.efficiency.ragged import Ragged
from prvstream.sinks.efficiency.repeats import NvtxSpans, close_streams, held_rows
from prvstream.sinks.efficiency.sharedrows import SharedRows
from prvstream.sinks.efficiency.sweep import DeviceSweep
from prvstream.sinks.efficiency.tables import SpanIndex, Tables, phase_rows
from prvstream.sinks.efficiency.updates import UpdateQueue
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.encoded import EncodedRecord, RecordSpool
from prvstream.sinks.summary.records import DEFAULT_RECENT, SummaryState
from prvstream.sinks.summary.spill import SpilledFolder

if TYPE_CHECKING:
    from prvstream.sinks.efficiency.partial import EfficiencyState

__all__ = ["EfficiencyModel"]

log = get_logger(__name__)


class EfficiencyModel(ActivityIntake, UpdateQueue, PhaseInstances, DeviceSweep):
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
        #: the devices by id as columns (each ``Device`` made when read), with their first
        #: report, report spans and stream records and the (host, device) and process look-ups
        self._devices = DeviceTable()
        #: each device's totals per window slot and per phase instance id, by device id
        self._dev_windows = SharedRows(WIDTH)
        self._dev_instances = SharedRows(WIDTH)
        #: each device's totals (a row by device id, grown by a quarter; int32 until a sum
        #: does not fit, ``_add_totals``) and per phase name id
        self._dev_totals = np.zeros((0, WIDTH), np.int32)
        self._dev_names = SharedRows(WIDTH)
        #: gid -> position in (host, device) order; rebuilt by ``_ranked`` when a device came
        #: in before others (stale), so registering is never a pass over every device
        self._device_rank = array("i")
        self._device_rank_stale = False
        #: the device ids in (host, device) order (ids, not key tuples: no dict of every
        #: device's position is made to rebuild the ranks)
        self._device_order = array("i")
        self._window_slots: dict[int, int] = {}
        self._names: list[Name] = []
        self._name_ids: dict[str, int] = {}
        #: instance id -> name id, occurrence, start, end (grown by doubling; _n_instances used)
        self._n_instances = 0
        self._i_name = np.zeros(0, np.int32)
        self._i_occ = np.zeros(0, np.int64)
        self._i_start = np.zeros(0, np.int64)
        self._i_end = np.zeros(0, np.int64)
        #: the host processes: (host, pid) -> process id; their phases, host metrics and
        #: NVTX spans are columns by that id
        self._procs = ProcessTable()
        #: per process id, a byte per instance id: 1 where it has that instance
        self._has: list[bytes | bytearray] = []
        #: one copy of each short instance set, shared by the processes that have it
        self._has_kept: dict[bytes, bytes] = {}
        #: per process id, its one phase name's id (or none, or several: ``_occ_names``)
        self._occ_name = array("b")  # narrow (``narrowcols``): a few names
        self._occ_names: dict[int, dict[str, array[int]]] = {}
        #: by process id: the occurrence spans of a process's one phase name
        self._occ_log = Ragged()
        self._phase_procs = 0
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
        self._updates: list[EncodedRecord] = []
        self._spool = RecordSpool()
        self._folder = SpilledFolder(recent=recent)
        #: names shown per top-N table (then one "other" row)
        self.top = max(int(top), 1)
        self._tables = Tables()
        #: the top-N tables per phase name (rows attributed by start, ``phase_rows``)
        self._phase_tables: dict[str, Tables] = {}
        #: by process: each report's first and last NVTX range start (``repeats``)
        self._nvtx = NvtxSpans(self._procs)
        #: host metrics: CUDA runtime and MPI time per host process
        self._host = HostTotals(self.window_ns, self._procs)
        #: ReportInfo.notes: note -> (reports it applies to, the first few report ids sorted)
        self._notes: dict[str, tuple[int, list[str]]] = {}

    # --- Sink protocol ----------------------------------------------------------------------

    def begin_report(self, info: ReportInfo) -> None:
        """Register the report's processes and devices; its batches follow."""
        if self._report is not None:
            raise RuntimeError("begin_report called before end_report of the previous report")
        if self._pending is not None:  # updates not taken: build them before time moves on
            self._updates += [EncodedRecord.of_bytes(r, r.data)  # before the spool is reused
                              for r in self._produce(self._pending)]
            self._pending = None
        for note in info.notes:
            count, names = self._notes.get(note, (0, []))
            self._notes[note] = (count + 1, sorted([*names, info.report_id])[:NOTE_NAMES])
        origin = int(info.origin_wall_ns)
        processes = [(sys.intern(p.host), p.pid) for p in info.processes]
        local = np.empty(len(info.devices), np.int64)
        key_first = (origin + int(info.start_ns), info.report_id)
        for i, d in enumerate(info.devices):
            gid = self._devices.find(d.host, d.device)
            if gid is None:
                proc = processes[d.process] if 0 <= d.process < len(processes) else (d.host, 0)
                gid = self._add_device(d.host, d.device, d.rank, proc, key_first)
            local[i] = gid
        start, end = origin + int(info.start_ns), origin + int(info.end_ns)
        sweeps: dict[int, Sweep] = {}
        for gid in dict.fromkeys(local.tolist()):
            dev = self._devices[gid]
            if any(s < end and e > start for s, e in dev.spans):  # slices may come late
                log.warning("device_overlaps_earlier_report", job=self.job, host=dev.host,
                            device=dev.device, report=info.report_id)
            sweeps[gid] = Sweep(lo=start, idle_since=start)
        self._report = Report(info, origin, local, processes, sweeps, -(2**62), start, end,
                              pids=np.array([processes[d.process][1]
                                             if 0 <= d.process < len(processes) else 0
                                             for d in info.devices], np.int64))
        self._host.begin(info, origin, [self._procs.add(h, p) for h, p in processes])

    def _add_device(self, host: str, device: int, rank: int | None, process: tuple[str, int],
                    first: tuple[int, str]) -> int:
        """Register a new device of ``process`` whose first report is ``first``; its id."""
        gid = self._devices.add(host, device, rank, process, first)
        self._dev_totals = grow(self._dev_totals, gid + 1, first=16)
        # its place among the keys so far; when devices after it must move one down (reports
        # out of key order), the ranks are rebuilt once at the next record instead: moving
        # them at each new device (or sorting all again) is quadratic in a job's reports
        pos = bisect.bisect_left(self._device_order, (host, device), key=self._devices.key)
        self._device_order.insert(pos, gid)
        if pos < len(self._device_rank):
            self._device_rank_stale = True
        self._device_rank.append(pos)
        return gid

    def _ranked(self) -> array[int]:
        """gid -> position of the device in (host, device) order."""
        if self._device_rank_stale:
            rank = array("i", bytes(4 * len(self._devices)))
            for pos, gid in enumerate(self._device_order):
                rank[gid] = pos
            self._device_rank = rank
            self._device_rank_stale = False
        return self._device_rank

    def add_table_detail(self, rows: TableDetail) -> None:
        """Take rows of a top-N table (after every phase that starts at or before them): they
        count in the job's tables and in those of the phases they start in, but for the rows
        an earlier overlapping capture range holds (``repeats``)."""
        rep = self._require_report()
        again = held_rows(self._devices, self._nvtx, rep, rows)
        if again is not None:
            rows = rows.take(~again)
        if not len(rows.start):
            return
        self._tables.add(rows.rows())
        procs = distinct(rows.process).tolist()
        for p in procs:
            proc = rep.processes[p]
            spans = {n: self._span_index.get((proc, n), s)
                     for n, s in self._held_spans(proc)}
            if spans:
                mine = rows if len(procs) == 1 else rows.take(rows.process == p)
                for name, agg in phase_rows(mine, rep.origin, spans):
                    self._phase_tables.setdefault(name, Tables()).add(agg)

    def add_tables(self, rows: TableRows) -> None:
        """Take one chunk's per-name aggregates for the top-N tables (any order; a feed
        that has the rows gives them to ``add_table_detail`` instead)."""
        self._require_report()
        self._tables.add(rows)

    def add_host(self, batch: np.ndarray) -> None:
        """Take HOST_DTYPE rows (CUDA runtime and MPI calls; start order per kind)."""
        self._require_report()
        self._host.add(batch)

    def end_report(self) -> None:
        """Flush open intervals; the report's records follow from ``iter_updates``."""
        rep = self._require_report()
        if rep.pending:
            self._sweep_pending(rep)
        for gid, sw in rep.sweeps.items():
            hi = max(rep.last, sw.lo, int(sw.carry_e.max()) if len(sw.carry_e) else sw.lo)
            self._advance(rep, gid, sw, sw.carry_s[:0], sw.carry_e[:0], sw.carry_c[:0], hi,
                          final=True, report_end=rep.last)
        self._settle(rep, final=True)
        self._host.end()
        close_streams(self._devices, self._nvtx, rep)
        start, end = rep.first, rep.last
        for gid in rep.sweeps:
            self._devices[gid].add_span(start, end)
        self._span = (start, end) if self._span is None else (
            min(self._span[0], start), max(self._span[1], end))
        self._reports += 1
        self._last_report = rep.info.report_id
        key = (rep.origin + int(rep.info.start_ns), rep.info.report_id)
        self._last_key = key if self._last_key is None else max(self._last_key, key)
        self._report = None
        self._span_index.clear()  # a cache for the report's rows: kept, it grows with the job
        windows = self._window_span(start, end)
        if self._held is not None:  # a group: one update once the last report is in
            self._held[0].update(windows)
            self._held[1].extend(rep.touched)
            return
        self._pend(windows, rep.touched)

    def partial(self) -> EfficiencyState:
        """The mergeable state of the reports so far (see ``partial.merge``)."""
        from prvstream.sinks.efficiency.partial import export_state  # not on a conversion

        return export_state(self)

    @classmethod
    def from_partial(cls, state: EfficiencyState, *, flush_rows: int = 65536,
                     recent: int = DEFAULT_RECENT,
                     published: SummaryState | None = None) -> EfficiencyModel:
        """A model that continues from ``state`` (``partial.restore``)."""
        from prvstream.sinks.efficiency.partial import restore

        return restore(state, flush_rows=flush_rows, recent=recent, published=published)

    def _require_report(self) -> Report:
        if self._report is None:
            raise RuntimeError("begin_report must come before batches and end_report")
        return self._report
