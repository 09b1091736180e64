"""One report's path through the spine: plan, number, stream every kind, merge, feed sinks.

``prepare`` opens an export and plans it; ``objects_of`` and ``value_labels_of`` give what a
canonical numbering needs; ``report_stream`` yields the report's records as one time-ordered
stream (a heap merge of one chunked stream per table) while routing GPU activity and NVTX
phases, in time order, to a sink. Batch conversion and the daemon both build on these.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import msgspec
import numpy as np

from prvstream.daemon import heap
from prvstream.daemon.kinds import hoststates, registry
from prvstream.daemon.kinds.bounds import NO_END, screen
from prvstream.daemon.kinds.context import (
    ReportContext,
    ThreadKey,
    cpu_key,
    gpu_key,
    metrics_key,
    metrics_name,
    pid_of,
    stream_name,
    tid_of,
)
from prvstream.daemon.nsys import heldrows, tables
from prvstream.daemon.nsys.export import Export, ExportPlan, open_export
from prvstream.daemon.nsys.heldrows import HeldRows, HeldSource, RowSpill
from prvstream.daemon.nsys.sources import ChunkSource, open_source, prestart_reader
from prvstream.daemon.stream.claims import Claim, relative_spans
from prvstream.daemon.stream.merge import Stream, merge, merge_whole
from prvstream.daemon.stream.numbering import Numbering
from prvstream.daemon.stream.ranks import RankedTask, rank_from_name
from prvstream.daemon.stream.ready import split_ready
from prvstream.sinks.base import (
    ACTIVITY_DTYPE,
    HOST_DTYPE,
    PHASE_DTYPE,
    DeviceInfo,
    ProcessInfo,
    ReportInfo,
    TableDetail,
    feed_interleaved,
)
from prvstream.sinks.base import Sink as SinkProtocol
from prvstream.sinks.errors import ExportChanged, NotAnExport, UnsupportedSchema
from prvstream.sinks.logger import get_logger

__all__ = [
    "ActivityRouter",
    "PreparedReport",
    "ReportObjects",
    "objects_of",
    "prepare",
    "ranked_tasks",
    "register_report",
    "report_context",
    "report_stream",
    "value_labels_of",
]

log = get_logger(__name__)




class PreparedReport(msgspec.Struct):
    """A planned export and what numbering and ordering need from it.

    Two verbs: ``open`` makes it ready to stream (its connection and a chunk source, which
    ``report_stream`` takes over), ``close`` frees both and keeps what was planned and read,
    so a job plans many reports and holds only as many open as it streams at once.
    """

    path: Path
    export: Export
    plan: ExportPlan
    host: str
    kinds: list[str]
    #: wall-clock time of the session start (time 0 of the report in the Nsight Systems GUI)
    wall_start: int
    wall_end: int
    ranks: dict[int, int] = msgspec.field(default_factory=dict)
    #: what canonical numbering needs, read once (``objects_of``, ``value_labels_of``)
    objects: ReportObjects | None = None
    value_labels: dict[str, set[str]] | None = None
    #: the label of each value ``value_labels`` holds, by (value group, id): made once, for
    #: numbering and again for converting (``ReportContext.know_labels``)
    labels: dict[tuple[str, int], str] | None = None
    #: where the chunks come from while open (started by ``prepare(prefetch_rows=...)``)
    source: ChunkSource | None = None
    #: whether the reader process may read it (``Settings.reader``)
    use_reader: bool = True
    #: whether tables may be scanned in storage order with a reorder buffer (``Settings.presort``)
    presort: bool = True
    #: the name the report arrived under when ``path`` is a kept copy ("" = ``path``'s)
    arrived_as: str = ""
    #: a small export's rows, read while it was planned (``prepare(hold=...)``): it streams
    #: from them and is never opened again
    held: HeldRows | None = None
    spill: RowSpill | None = None

    @property
    def name(self) -> str:
        """The report's file name as it arrived (its rank may be in it)."""
        return self.arrived_as or self.path.name

    @property
    def sort_key(self) -> tuple[int, str, str]:
        """Canonical report order: wall-clock start, host, file name."""
        return (self.wall_start, self.host, self.path.name)

    @property
    def counts(self) -> Mapping[str, int]:
        """Rows planned for each kind."""
        return self.plan.counts

    @property
    def planned_rows(self) -> int:
        """Rows planned for the kinds converted."""
        return sum(self.plan.counts.get(k, 0) for k in self.kinds)

    def open(self, chunk_rows: int) -> None:
        """Reconnect if closed and choose the chunk source (unless one is started); a report
        whose rows are held streams them without a connection."""
        if self.held is not None and self.spill is not None:
            if self.source is None:
                self.source = HeldSource(self.spill, self.held)
            return
        self.export.reopen()
        if self.source is None:
            self.source = open_source(self.export, self.kinds, chunk_rows, self.plan.counts,
                                      use_reader=self.use_reader, presort=self.presort)

    def close(self) -> None:
        """Free the chunk source (the reader) and the connection; idempotent."""
        source, self.source = self.source, None
        try:
            if source is not None:
                source.close()
        finally:
            self.export.close()


def prepare(path: Path, wanted: list[str] | None = None,
            prefetch_rows: int | None = None, *, use_reader: bool = True,
            presort: bool = True, hold: RowSpill | None = None,
            hold_rows: int = 0, chunk_rows: int = 0) -> PreparedReport:
    """Open and plan one export; raise ``UnsupportedSchema`` when it holds nothing to convert.

    With ``prefetch_rows``, the report's chunk source opens before planning: its costliest
    queries start in the reader process (when it is free), which sorts while this one plans.
    ``use_reader`` False (``Settings.reader``) reads everything in this process; ``presort``
    False (``Settings.presort``) lets SQLite sort every table.

    With ``hold``, an export of at most ``hold_rows`` rows is read once, now, in chunks of
    ``chunk_rows`` (those its stream would read): the rows go to ``hold`` and the plan's
    distinct values come from them where they can (``plan_export``), so the export takes one
    connection and no planning scan of the tables read.
    """
    reading = prefetch_rows is not None and prestart_reader(path, use_reader)
    export = open_export(path)  # the reader's start overlaps the opening and planning
    source: ChunkSource | None = None
    held: HeldRows | None = None
    try:
        behind = reading and _big(path)
        if behind:
            export.scan_facts_behind()  # the tables' time ranges scanned while planning
        # a report the reader is to read sends its queries before the tables' time ranges
        # are scanned here (the reader works meanwhile): kinds from a row looked up per table
        present = tables.available_kinds(export, scan=not reading)
        kinds = registry.to_convert(present, wanted)
        if not registry.has_cuda(present):
            raise UnsupportedSchema(
                f"{path}: holds no CUDA/GPU activity; profile with `nsys profile -t cuda` "
                "to convert it"
            )
        if prefetch_rows is not None:
            source = open_source(export, kinds, prefetch_rows, use_reader=use_reader,
                                 presort=presort)
        if reading and not behind:
            export.scan_facts()
        early = None if hold is None or source is not None else heldrows.read_early(
            export, kinds, hold_rows, chunk_rows, presort=presort)
        plan = export.plan(early, kinds)
        meta = export.meta
        try:
            ranks = export.mpi_ranks()
        except (sqlite3.Error, ValueError, TypeError):  # an optional table of unknown shape
            ranks = {}
        if early is not None and hold is not None:
            held = heldrows.hold(hold, export, kinds, early, chunk_rows, presort=presort)
    except (sqlite3.Error, ValueError, TypeError, OverflowError) as exc:
        _abandon(export, source)
        raise NotAnExport(
            f"{path}: unexpected content while planning ({exc}); this is not an intact "
            "Nsight Systems export, re-export it"
        ) from exc
    except BaseException:
        _abandon(export, source)
        raise
    return PreparedReport(
        path=path, export=export, plan=plan, host=meta.hostname, kinds=kinds,
        wall_start=meta.session_start_ns + meta.wall_offset_ns,
        wall_end=meta.last_ns + meta.wall_offset_ns, ranks=ranks, source=source,
        use_reader=use_reader, presort=presort, held=held,
        spill=hold if held is not None else None,
    )



#: an export file at least this large has its tables' time ranges scanned in a thread while
#: it is planned (about 250k rows: the scan takes 0.07 s; below, one connection and the fewest
#: statements matter more, issue 11)
_FACTS_BEHIND_BYTES = 16 << 20


def _big(path: Path) -> bool:
    try:
        return path.stat().st_size >= _FACTS_BEHIND_BYTES
    except OSError:
        return False


def _abandon(export: Export, source: ChunkSource | None) -> None:
    try:
        if source is not None:
            source.close()
    finally:
        export.close()


ReportObjects = list[tuple[str, int, str, int | None, dict[ThreadKey, str]]]


def objects_of(rep: PreparedReport) -> ReportObjects:
    """(host, pid, name, rank, threads) of every process with activity in the report."""
    if rep.objects is None:
        rep.objects = _read_objects(rep)
    return rep.objects


def _read_objects(rep: PreparedReport) -> ReportObjects:
    procs = rep.export.process_names(rep.plan.processes)
    names = rep.export.thread_names()
    out: list[tuple[str, int, str, int | None, dict[ThreadKey, str]]] = []
    streams_by_pid: dict[int, list[tuple[int, int]]] = {}
    for g, d, s in rep.plan.streams:
        streams_by_pid.setdefault(g, []).append((d, s))
    owners = metric_owners(rep.plan)
    for gpid in rep.plan.processes:
        pid = pid_of(gpid)
        threads: dict[ThreadKey, str] = {}
        for gtid in rep.plan.threads_by_process.get(gpid, []):
            tid = tid_of(gtid)
            threads[cpu_key(tid)] = f"{names.get(gtid, 'thread')} {tid}"
        for d, s in streams_by_pid.get(gpid, []):
            threads[gpu_key(d, s)] = stream_name(d, s)
        for gpu, owner in owners.items():
            if owner == gpid:
                threads[metrics_key(gpu)] = metrics_name(gpu)
        out.append((rep.host, pid, procs.get(gpid, ""), rep.ranks.get(gpid), threads))
    return out


def metric_owners(plan: ExportPlan) -> dict[int, int]:
    """GPU -> globalPid whose task carries the GPU's metrics: the lowest process with
    activity on that device, else the lowest process of the report."""
    users: dict[int, int] = {}
    for g, d, _ in plan.streams:
        users[d] = min(users.get(d, g), g)
    fallback = min(plan.processes) if plan.processes else 0
    return {gpu: users.get(gpu, fallback) for gpu, _ in plan.gpu_metrics}


def value_labels_of(rep: PreparedReport) -> dict[str, set[str]]:
    """Value group -> every label the report's converted kinds use (read once)."""
    if rep.value_labels is None:
        rep.value_labels = _read_value_labels(rep)
    return rep.value_labels


def _read_value_labels(rep: PreparedReport) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    groups = registry.plan_value_groups(rep.kinds)
    # every group's string ids in one look-up (one statement, not one per group)
    rep.export.strings(v for key, values in rep.plan.values.items()
                       if (group := groups.get(key)) is not None and group.string_ids
                       for v in values if v >= 0)
    made: dict[tuple[str, int], str] = {}
    for key, values in rep.plan.values.items():
        group = groups.get(key)
        if group is None:
            continue
        ids = [value for value in values if value not in group.skip]
        labels = group.labels_of(rep.export, ids)
        made.update(zip([(group.name, value) for value in ids], labels, strict=True))
        out.setdefault(group.name, set()).update(labels)
    rep.labels = made
    return out


def register_report(numbering: Numbering, objects: ReportObjects,
                    values: Mapping[str, set[str]]) -> list[int]:
    """Give a report's objects and value labels their ids (new ones appended, objects first,
    then labels sorted within sorted groups); returns the task id of each process.

    Depends only on the numbering and the report's plan, so a coordinator can reserve a
    report's ids before a worker converts it: the conversion then adds none.
    """
    tasks = []
    for host, pid, name, rank, threads in objects:
        task = numbering.task(host, pid, name, rank)
        tasks.append(task)
        for key in sorted(threads):
            numbering.thread(task, key, threads[key])
    for group in sorted(values):
        numbering.values_of(group, sorted(values[group]))
    return tasks


def report_context(rep: PreparedReport, numbering: Numbering, origin_wall: int,
                   report_index: int, phase_pattern: str, rank_pattern: str = "",
                   earlier: Sequence[Claim] = ()) -> tuple[ReportContext, ReportInfo]:
    """Register the report's objects in ``numbering`` and build its conversion context.

    A report with one GPU process and no MPI rank takes the rank its name carries
    (``rank_pattern``) for its devices; the trace's tasks keep MPI ranks only. ``earlier``:
    the claims of earlier reports on its threads (``claims``), where its host states yield.
    """
    meta = rep.export.meta
    offset = meta.wall_offset_ns - origin_wall
    objects = objects_of(rep)
    process_index: dict[int, int] = {}
    processes: list[ProcessInfo] = []
    ctx = ReportContext(
        names=rep.export, ids=numbering, host=rep.host, offset=offset,
        report_index=report_index, end_rel=meta.last_ns + offset, process_index=process_index,
        device_index={}, phase_pattern=phase_pattern,
        thread_names=rep.export.thread_names(), nvtx_domain_names=rep.export.nvtx_domains(),
        sync_devices={(g, s, d): dev for g, s, d, dev in rep.plan.sync_devices},
        metric_owner=metric_owners(rep.plan), value_label=registry.value_label,
        bound=(meta.bound_lo_ns, meta.bound_hi_ns),
    )
    for kind, n in rep.export.refused_rows().items():
        ctx.hostile[f"{kind} {NO_END}"] += n
    tasks = register_report(numbering, objects, value_labels_of(rep))
    if rep.labels:
        ctx.know_labels(rep.labels)
    # every CPU thread of a report with CUDA runtime calls gets host states (kinds.hoststates)
    stated = rep.plan.threads_by_process if "runtime" in rep.kinds else {}
    for gpid, (host, pid, name, rank, _), task in zip(rep.plan.processes, objects, tasks,
                                                      strict=True):
        ctx.bind_task(gpid, task)
        process_index[gpid] = len(processes)
        processes.append(ProcessInfo(host=host, pid=pid, name=name, rank=rank,
                                     threads=sorted({int(tid_of(g))
                                                     for g in stated.get(gpid, [])})))
    ctx.start_rel = meta.first_ns + offset
    gtids = [g for gpid in rep.plan.processes for g in stated.get(gpid, [])]
    if gtids:
        cpu_tasks, cpu_threads = ctx.cpu_objects(np.array(gtids, dtype=np.int64))
        hoststates.register(ctx, cpu_tasks, cpu_threads)
        claimed = relative_spans(earlier, origin_wall)
        for g, key in zip(gtids, zip(cpu_tasks.tolist(), cpu_threads.tolist(), strict=True),
                          strict=True):
            spans = claimed.get((rep.host, int(pid_of(g)), int(tid_of(g))))
            if spans:
                ctx.host_claimed[key] = spans
    devices: list[DeviceInfo] = []
    name_rank = _name_rank(rep, rank_pattern)
    for gpid, device in sorted({(g, d) for g, d, _ in rep.plan.streams}):
        ctx.device_index[(gpid, device)] = len(devices)
        devices.append(DeviceInfo(host=rep.host, device=device,
                                  process=process_index.get(gpid, 0),
                                  rank=rep.ranks.get(gpid, name_rank)))
    info = ReportInfo(
        report_id=rep.path.name, processes=processes, devices=devices,
        origin_wall_ns=origin_wall, start_ns=meta.first_ns + offset,
        end_ns=meta.last_ns + offset, phase_names=ctx.phase_names, notes=meta.notes(),
    )
    return ctx, info


def _name_rank(rep: PreparedReport, rank_pattern: str) -> int | None:
    """The rank in the report's name, when it has exactly one GPU process to give it to."""
    if len({g for g, _, _ in rep.plan.streams}) != 1:
        return None
    return rank_from_name(rep.name, rank_pattern)


def ranked_tasks(rep: PreparedReport, rank_pattern: str) -> list[RankedTask]:
    """The report's processes with GPU work and their ranks (MPI, else its name, else
    None), as the job's expected ranks count them."""
    name_rank = _name_rank(rep, rank_pattern)
    return [RankedTask(rep.host, pid_of(g), rep.ranks.get(g, name_rank))
            for g in sorted({g for g, _, _ in rep.plan.streams})]


#: records merged between two releases of the router (at every merged batch, 4,096 records
#: at most, its splits and the model's feed cost 5% more CPU at 1M rows; the sink gets the
#: same rows in the same order whatever the cadence)
RELEASE_RECORDS = 16384


class ActivityRouter:
    """Holds GPU activity and phases until the merge horizon passes them, then feeds a sink
    in start order (a phase before activity that starts with it or later)."""

    def __init__(self, sink: SinkProtocol | None) -> None:
        self.sink = sink
        self._activity: list[np.ndarray] = []
        self._phases: list[np.ndarray] = []
        self._host: list[np.ndarray] = []
        #: rows of the top-N tables, held like activity (a row after its phases), each batch
        #: with its greatest start: fed whole once the horizon passes it (a chunk's rows)
        self._detail: list[tuple[int, TableDetail]] = []

    def add(self, activity: np.ndarray | None, phases: np.ndarray | None,
            tables: list[TableDetail] | None = None, host: np.ndarray | None = None) -> None:
        if self.sink is None:
            return
        if host is not None and len(host) and hasattr(self.sink, "add_host"):
            self._host.append(host)
        if tables and hasattr(self.sink, "add_table_detail"):  # the rows, for every table
            self._detail.extend((int(d.start.max()), d) for d in tables if len(d.start))
        elif tables and hasattr(self.sink, "add_tables"):  # sums: no order to keep
            for rows in tables:
                self.sink.add_tables(rows.rows())
        if activity is not None and len(activity):
            self._activity.append(activity)
        if phases is not None and len(phases):
            self._phases.append(phases)

    def release(self, horizon: int | None) -> None:
        """Feed everything that starts before ``horizon`` (everything when None)."""
        if self.sink is None:
            return
        phases, self._phases = split_ready(self._phases, PHASE_DTYPE, horizon)
        activity, self._activity = split_ready(self._activity, ACTIVITY_DTYPE, horizon)
        feed_interleaved(self.sink, activity, phases)
        host, self._host = split_ready(self._host, HOST_DTYPE, horizon)
        if len(host):  # after every phase that starts before the horizon, as add_host asks
            self.sink.add_host(host)  # type: ignore[attr-defined]
        held, self._detail = self._detail, []
        for last, d in held:  # likewise after every phase that starts at or before its rows
            if horizon is None or last < horizon:
                self.sink.add_table_detail(d)  # type: ignore[attr-defined]
            else:
                self._detail.append((last, d))


def _kind_stream(ctx: ReportContext, kind: str, chunks: Iterator[np.ndarray],
                 router: ActivityRouter, counts: Counter[str],
                 records: Counter[str]) -> Stream:
    spec = registry.get(kind)
    for chunk in chunks:
        if not len(chunk):
            continue
        chunk = screen(chunk, kind, ctx.bound, ctx.hostile, open_end=spec.open_end,
                       other_times=spec.other_times)
        if not len(chunk):
            continue
        result = spec.convert(ctx, chunk)
        router.add(result.activity, result.phases, result.tables, result.host)
        counts[kind] += result.rows
        records[kind] += len(result.records)
        watermark = int(chunk["start"].max()) + ctx.offset
        if spec.watermark is not None:
            watermark = spec.watermark(ctx, watermark)
        yield result.records, watermark
    if spec.finish is not None:
        tail = spec.finish(ctx)
        records[kind] += len(tail)
        yield tail, ctx.end_rel


def report_stream(rep: PreparedReport, ctx: ReportContext, info: ReportInfo, chunk_rows: int,
                  sink: SinkProtocol | None, counts: Counter[str],
                  records: Counter[str] | None = None, *, whole_rows: int = 0) -> Stream:
    """The report's records in time order, with the sink fed along the way; ``counts``
    gathers rows read per kind, ``records`` the records written per kind. The report is
    opened for it; the stream takes its chunk source over and frees it when it ends (the
    connection stays until the report is closed). ``ExportChanged`` ends it when the file at
    the report's path changed while its rows were read.

    A report planned to hold at most ``whole_rows`` rows (0: none) is read whole and sorted
    once (``merge.merge_whole``) instead of merged chunk by chunk: the same records, and the
    sink fed the same rows in the same order, in one release instead of one per batch.
    """
    per_kind: Counter[str] = Counter() if records is None else records
    router = ActivityRouter(sink)
    if sink is not None:
        sink.begin_report(info)
    rep.open(chunk_rows)
    source, rep.source = rep.source, None
    assert source is not None
    try:  # every kind's stream starts now (reader queries already run: it sorts meanwhile)
        streams = [_kind_stream(ctx, kind, source.chunks(kind), router, counts, per_kind)
                   for kind in rep.kinds]
        if 0 < sum(rep.plan.counts.values()) <= whole_rows:
            yield from merge_whole(streams)
        else:
            held = 0
            for batch, watermark in merge(streams):
                held += len(batch)
                if held >= RELEASE_RECORDS:
                    router.release(watermark)
                    held = 0
                yield batch, watermark
    finally:
        source.close()
    if not isinstance(source, HeldSource) and rep.export.changed_since_opened():
        # a connection opened by path since planning (the reader process, the compiled row
        # reader, a reopen) may have read another file, or the file grew under a statement
        raise ExportChanged(f"{rep.path} changed while it was read (replaced, or still being "
                            "written): nothing read from it is kept; read it again once it "
                            "is complete")
    heap.release_freed(sum(rep.plan.counts.values()))  # before the end's summary records
    router.release(None)
    if sink is not None:
        sink.end_report()
