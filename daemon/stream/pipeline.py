"""One report's path through the spine: plan, number, stream every kind, merge, feed sinks.

``prepare`` opens an export and plans it; ``objects_of`` and ``value_labels_of`` give what a
canonical numbering needs; ``report_stream`` yields the report's records as one time-ordered
stream (a heap merge of one chunked stream per table) while routing GPU activity and NVTX
phases, in time order, to a sink. Batch conversion and the daemon both build on these.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from prvstream.daemon.kinds import registry
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
from prvstream.daemon.nsys import reader, tables
from prvstream.daemon.nsys.export import Export, ExportPlan, open_export, quote_identifier
from prvstream.daemon.nsys.reader import ReaderLease
from prvstream.daemon.stream.merge import Stream, merge
from prvstream.daemon.stream.numbering import Numbering
from prvstream.sinks.base import (
    ACTIVITY_DTYPE,
    PHASE_DTYPE,
    DeviceInfo,
    ProcessInfo,
    ReportInfo,
    feed_interleaved,
)
from prvstream.sinks.base import Sink as SinkProtocol
from prvstream.sinks.errors import NotAnExport, UnsupportedSchema
from prvstream.sinks.logger import get_logger

__all__ = [
    "ActivityRouter",
    "PreparedReport",
    "objects_of",
    "prepare",
    "report_context",
    "report_stream",
    "value_labels_of",
]

log = get_logger(__name__)

_q = quote_identifier



@dataclass
class PreparedReport:
    """An opened, planned export and what numbering and ordering need from it."""

    path: Path
    export: Export
    plan: ExportPlan
    host: str
    kinds: list[str]
    wall_start: int
    wall_end: int
    ranks: dict[int, int] = field(default_factory=dict)
    #: what canonical numbering needs, read once (``objects_of``, ``value_labels_of``)
    objects: ReportObjects | None = None
    value_labels: dict[str, set[str]] | None = None
    #: queries already running in the reader process (``prepare(prefetch_rows=...)``): the
    #: lease and its chunk streams by kind, taken over by ``report_stream``
    reading: tuple[ReaderLease, dict[str, Iterator[np.ndarray]]] | None = None

    @property
    def sort_key(self) -> tuple[int, str, str]:
        """Canonical report order: wall-clock start, host, file name."""
        return (self.wall_start, self.host, self.path.name)

    def close(self) -> None:
        self.stop_reading()
        self.export.close()

    def pause(self) -> None:
        """Close the connection until ``reopen``; prefetched streams live on in the reader."""
        self.export.close()

    def stop_reading(self) -> None:
        """Hand back the reader if the prefetched streams were never used."""
        if self.reading is not None:
            lease, _ = self.reading
            self.reading = None
            lease.release()

    def release(self) -> None:
        """Read what numbering needs, then close the connection until ``reopen``.

        Planning a job of many reports keeps only this summary of each, not its connection.
        """
        objects_of(self)
        value_labels_of(self)
        self.pause()

    def reopen(self) -> None:
        """A fresh connection that keeps the plan and metadata already read (no re-scan).

        Batch jobs plan every report first, then close them all and reopen each only while
        it streams, so that open connections and their caches are bounded by the fan-in.
        """
        fresh = open_export(self.path)
        fresh._meta = self.export.meta
        fresh._plan = self.plan
        fresh._inline_ids = self.export._inline_ids
        fresh._inline = dict(self.export._inline)
        fresh.memo = dict(self.export.memo)
        self.export.close()
        self.export = fresh


def prepare(path: Path, wanted: list[str] | None = None,
            prefetch_rows: int | None = None) -> PreparedReport:
    """Open and plan one export; raise ``UnsupportedSchema`` when it holds nothing to convert.

    With ``prefetch_rows``, the report's table queries start in the reader process (when it
    is free) before planning, so SQLite sorts there while this process plans.
    """
    export = open_export(path)
    reading = None
    try:
        present = tables.available_kinds(export)
        kinds = registry.to_convert(present, wanted)
        if not registry.has_cuda(present):
            raise UnsupportedSchema(
                f"{path}: holds no CUDA/GPU activity; profile with `nsys profile -t cuda` "
                "to convert it"
            )
        to_reader = (_reader_kinds(kinds, _table_rows(export, kinds))
                     if prefetch_rows is not None and reader.enabled() else [])
        lease = reader.lease(export.path) if to_reader else None
        if lease is not None and prefetch_rows is not None:
            reading = (lease, {k: _source(export, k, prefetch_rows, lease) for k in to_reader})
        meta = export.meta
        plan = export.plan()
        try:
            ranks = export.mpi_ranks()
        except (sqlite3.Error, ValueError, TypeError):  # an optional table of unknown shape
            ranks = {}
    except (sqlite3.Error, ValueError, TypeError, OverflowError) as exc:
        export.close()
        if reading is not None:
            reading[0].release()
        raise NotAnExport(
            f"{path}: unexpected content while planning ({exc}); this is not an intact "
            "Nsight Systems export, re-export it"
        ) from exc
    except BaseException:
        export.close()
        if reading is not None:
            reading[0].release()
        raise
    return PreparedReport(
        path=path, export=export, plan=plan, host=meta.hostname, kinds=kinds,
        wall_start=meta.first_ns + meta.wall_offset_ns,
        wall_end=meta.last_ns + meta.wall_offset_ns, ranks=ranks, reading=reading,
    )


ReportObjects = list[tuple[str, int, str, int | None, dict[ThreadKey, str]]]


def objects_of(rep: PreparedReport) -> ReportObjects:
    """(host, pid, name, rank, threads) of every process with activity in the report."""
    if rep.objects is None:
        rep.objects = _read_objects(rep)
    return rep.objects


def _read_objects(rep: PreparedReport) -> ReportObjects:
    procs = rep.export.processes()
    names = rep.export.thread_names()
    out: list[tuple[str, int, str, int | None, dict[ThreadKey, str]]] = []
    streams_by_pid: dict[int, list[tuple[int, int]]] = {}
    for g, d, s in rep.plan.streams:
        streams_by_pid.setdefault(g, []).append((d, s))
    owners = metric_owners(rep.plan)
    for gpid in rep.plan.processes:
        pid = pid_of(gpid)
        row = procs.get(gpid)
        threads: dict[ThreadKey, str] = {}
        for gtid in rep.plan.threads_by_process.get(gpid, []):
            tid = tid_of(gtid)
            threads[cpu_key(tid)] = f"{names.get(gtid, 'thread')} {tid}"
        for d, s in streams_by_pid.get(gpid, []):
            threads[gpu_key(d, s)] = stream_name(d, s)
        for gpu, owner in owners.items():
            if owner == gpid:
                threads[metrics_key(gpu)] = metrics_name(gpu)
        out.append((rep.host, pid, row.name if row else "", rep.ranks.get(gpid), threads))
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
    for key, values in rep.plan.values.items():
        group = groups.get(key)
        if group is None:
            continue
        if group.string_ids:
            rep.export.strings(v for v in values if v >= 0)
        labels = out.setdefault(group.name, set())
        for value in values:
            if value not in group.skip:
                labels.add(group.label(rep.export, value))
    return out


def report_context(rep: PreparedReport, numbering: Numbering, origin_wall: int,
                   report_index: int, phase_pattern: str) -> tuple[ReportContext, ReportInfo]:
    """Register the report's objects in ``numbering`` and build its conversion context."""
    meta = rep.export.meta
    offset = meta.wall_offset_ns - origin_wall
    objects = objects_of(rep)
    process_index: dict[int, int] = {}
    processes: list[ProcessInfo] = []
    ctx = ReportContext(
        names=rep.export, ids=numbering, host=rep.host, offset=offset,
        report_index=report_index, end_rel=meta.last_ns + offset, process_index=process_index,
        device_index={}, phase_pattern=re.compile(phase_pattern),
        thread_names=rep.export.thread_names(), nvtx_domain_names=rep.export.nvtx_domains(),
        sync_devices={(g, s, d): dev for g, s, d, dev in rep.plan.sync_devices},
        metric_owner=metric_owners(rep.plan), value_label=registry.value_label,
    )
    for gpid, (host, pid, name, rank, threads) in zip(rep.plan.processes, objects, strict=True):
        task = numbering.task(host, pid, name, rank)
        ctx.bind_task(gpid, task)
        for key in sorted(threads):
            numbering.thread(task, key, threads[key])
        process_index[gpid] = len(processes)
        processes.append(ProcessInfo(host=host, pid=pid, name=name, rank=rank))
    devices: list[DeviceInfo] = []
    for gpid, device in sorted({(g, d) for g, d, _ in rep.plan.streams}):
        ctx.device_index[(gpid, device)] = len(devices)
        devices.append(DeviceInfo(host=rep.host, device=device,
                                  process=process_index.get(gpid, 0),
                                  rank=rep.ranks.get(gpid)))
    info = ReportInfo(
        report_id=rep.path.name, processes=processes, devices=devices,
        origin_wall_ns=origin_wall, start_ns=meta.first_ns + offset,
        end_ns=meta.last_ns + offset, phase_names=ctx.phase_names,
    )
    return ctx, info


class ActivityRouter:
    """Holds GPU activity and phases until the merge horizon passes them, then feeds a sink
    in start order (a phase before activity that starts with it or later)."""

    def __init__(self, sink: SinkProtocol | None) -> None:
        self.sink = sink
        self._activity: list[np.ndarray] = []
        self._phases: list[np.ndarray] = []

    def add(self, activity: np.ndarray | None, phases: np.ndarray | None) -> None:
        if self.sink is None:
            return
        if activity is not None and len(activity):
            self._activity.append(activity)
        if phases is not None and len(phases):
            self._phases.append(phases)

    @staticmethod
    def _split(parts: list[np.ndarray], dtype: np.dtype, horizon: int | None
               ) -> tuple[np.ndarray, list[np.ndarray]]:
        if not parts:
            return np.empty(0, dtype=dtype), []
        allp = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if horizon is None:
            ready, rest = allp, []
        else:
            mask = allp["start"] < horizon
            ready, rest = allp[mask], ([allp[~mask]] if not mask.all() else [])
        order = np.argsort(ready["start"], kind="stable")
        return ready[order], rest

    def release(self, horizon: int | None) -> None:
        """Feed everything that starts before ``horizon`` (everything when None)."""
        if self.sink is None:
            return
        phases, self._phases = self._split(self._phases, PHASE_DTYPE, horizon)
        activity, self._activity = self._split(self._activity, ACTIVITY_DTYPE, horizon)
        feed_interleaved(self.sink, activity, phases)


#: share of the estimated reading cost the reader process takes: the converter's own work
#: (records, merge, text, summary) costs about half as much as reading, so with this split
#: both processes stay busy (measured on 1M-row synthetic exports, CUDA only and all kinds)
_READER_SHARE = 0.75
#: below this many rows the reader costs more (requests, copies) than it saves
_READER_MIN_ROWS = 50_000


#: kinds whose rows the reader weighs even when not converted: derived kinds' inputs
_COST_INPUTS = frozenset(k for s in registry.KINDS.values() for k in s.cost_inputs)


def _weighed(kinds: list[str]) -> set[str]:
    """Table kinds the reader may read (inline-text kinds stay in-process) whose rows count."""
    return {k for k in {*kinds, *_COST_INPUTS}
            if not registry.get(k).derived and not registry.get(k).inline_text}


def _table_rows(export: Export, kinds: list[str]) -> dict[str, int]:
    """Rows per kind that ``_reader_kinds`` weighs, before a plan exists (``COUNT(*)`` is cheap:
    SQLite counts a table's b-tree pages without decoding rows)."""
    return {kind: sum(int(n) for src in export.sources(kind)  # type: ignore[call-overload]
                      for (n,) in export.rows(f"SELECT COUNT(*) FROM {_q(src.table)}"))
            for kind in _weighed(kinds)}


def _reader_kinds(kinds: list[str], rows: Mapping[str, int]) -> list[str]:
    """The kinds the reader process reads (none for a small report), costliest first (the
    order their queries start in); the rest are read in-process. ``rows``: rows per kind
    (``_table_rows``, or a plan's counts).

    Cost estimate (``KindSpec.cost``): rows x (values fetched per row + 2) per table; a
    derived kind's from its inputs' rows. Largest first, each one that keeps the reader
    within its share (the largest always).
    """
    weighed = _weighed(kinds)
    if sum(rows.get(k, 0) for k in weighed) < _READER_MIN_ROWS:
        return []
    costs = {k: registry.get(k).cost(rows) for k in kinds
             if k in weighed or registry.get(k).derived}
    total = sum(costs.values())
    chosen: list[str] = []
    taken = 0
    for kind in sorted(costs, key=lambda k: (-costs[k], k)):
        if not chosen or taken + costs[kind] <= _READER_SHARE * total:
            chosen.append(kind)
            taken += costs[kind]
    return chosen


def _source(export: Export, kind: str, chunk_rows: int,
            lease: ReaderLease | None) -> Iterator[np.ndarray]:
    """The kind's chunks (``tables.stream``), read by the reader process when there is one
    (inline-text kinds, NVTX, always in-process)."""
    spec = registry.get(kind)
    if lease is None or spec.inline_text:
        return tables.stream(export, kind, chunk_rows)
    sql = spec.select_sql(export)
    if sql is None:
        return iter(())
    return lease.stream(sql, spec.dtype, tables.LAYOUTS[kind], chunk_rows, kind)


def _kind_stream(ctx: ReportContext, kind: str, chunks: Iterator[np.ndarray],
                 router: ActivityRouter, counts: Counter[str]) -> Stream:
    convert = registry.get(kind).convert
    for chunk in chunks:
        if not len(chunk):
            continue
        result = convert(ctx, chunk)
        router.add(result.activity, result.phases)
        counts[kind] += result.rows
        yield result.records, int(chunk["start"].max()) + ctx.offset


def report_stream(rep: PreparedReport, ctx: ReportContext, info: ReportInfo, chunk_rows: int,
                  sink: SinkProtocol | None, counts: Counter[str]) -> Stream:
    """The report's records in time order, with the sink fed along the way."""
    router = ActivityRouter(sink)
    if sink is not None:
        sink.begin_report(info)
    if rep.reading is not None:  # started by prepare
        lease: ReaderLease | None = rep.reading[0]
        sources = rep.reading[1]
        rep.reading = None
    else:
        to_reader = _reader_kinds(rep.kinds, rep.plan.counts) if reader.enabled() else []
        lease = reader.lease(rep.export.path) if to_reader else None
        sources = {k: _source(rep.export, k, chunk_rows, lease)
                   for k in to_reader} if lease is not None else {}
    try:
        streams: list[Stream] = []
        for kind in rep.kinds:  # every query starts now: the reader sorts while we convert
            chunks = sources.get(kind) or _source(rep.export, kind, chunk_rows, None)
            streams.append(_kind_stream(ctx, kind, chunks, router, counts))
        for batch, watermark in merge(streams):
            router.release(watermark)
            yield batch, watermark
    finally:
        if lease is not None:
            lease.release()
    router.release(None)
    if sink is not None:
        sink.end_report()
