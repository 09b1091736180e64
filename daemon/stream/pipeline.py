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

from prvstream.daemon.nsys import reader, tables
from prvstream.daemon.nsys.export import (
    Export,
    ExportPlan,
    open_export,
    pack_i4_pair,
    quote_identifier,
    wrap_i4,
)
from prvstream.daemon.nsys.reader import ReaderLease
from prvstream.daemon.nsys.rowfill import rows_to_array
from prvstream.daemon.stream.merge import PRIO_BEGIN, Stream, merge
from prvstream.daemon.stream.numbering import Numbering, ThreadKey, cpu_key, gpu_key
from prvstream.daemon.stream.records import (
    _KIND_RANK,
    CONVERTERS,
    ReportContext,
    metrics_key,
    metrics_name,
    stream_name,
)
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
from prvstream.sinks.paraver import format as pv

__all__ = [
    "CONVERTIBLE_KINDS",
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

#: kinds with a record converter, plus "comm" (launch -> kernel and API -> memcpy arrows)
CONVERTIBLE_KINDS: tuple[str, ...] = (*CONVERTERS, "comm")
_GPU_KINDS = ("kernel", "memcpy", "memset")
#: plan values kind -> value group
_VALUE_GROUPS = {"kernel": "kernel", "runtime": "api", "osrt": "osrt", "nvtx": "nvtx",
                 "mpi": "mpi", "graph": "graph", "openacc": "openacc",
                 "nvtx_domain": "nvtx_domain", "gpu_metrics": "gpu_metric"}


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
        kinds = [k for k in present if k in CONVERTERS and (not wanted or k in wanted)]
        if ("kernel" in present or "memcpy" in present) and "runtime" in present and (
            not wanted or "comm" in wanted
        ):
            kinds.append("comm")
        if not any(k in present for k in (*_GPU_KINDS, "runtime", "sync")):
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
        pid = (gpid >> 24) & 0xFFFFFF
        row = procs.get(gpid)
        threads: dict[ThreadKey, str] = {}
        for gtid in rep.plan.threads_by_process.get(gpid, []):
            tid = gtid & 0xFFFFFF
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
    from prvstream.daemon.stream.records import value_label

    out: dict[str, set[str]] = {}
    for kind, values in rep.plan.values.items():
        group = _VALUE_GROUPS.get(kind)
        if group is None or (kind != "nvtx_domain" and kind not in rep.kinds):
            continue
        if group not in ("graph", "openacc", "nvtx_domain", "gpu_metric"):
            rep.export.strings(v for v in values if v >= 0)
        labels = out.setdefault(group, set())
        for value in values:
            if group == "nvtx_domain" and value == 0:
                continue
            labels.add(value_label(rep.export, group, value))
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
        export=rep.export, numbering=numbering, host=rep.host, offset=offset,
        report_index=report_index, end_rel=meta.last_ns + offset, process_index=process_index,
        device_index={}, phase_pattern=re.compile(phase_pattern),
        thread_names=rep.export.thread_names(), nvtx_domain_names=rep.export.nvtx_domains(),
        sync_devices={(g, s, d): dev for g, s, d, dev in rep.plan.sync_devices},
        metric_owner=metric_owners(rep.plan),
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


#: one row per arrow; device and stream travel packed in one int64 and the size with the
#: arrow's kind in its low bit (0: launch -> kernel, 1: API -> memcpy), so that a kernel's
#: last value is the small int 0 (fewer Python objects per fetched row)
_COMM_SQL = """
SELECT r.start, r.globalTid, g.start, g.globalPid, {device_stream}, {size_kind}
FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r
JOIN {table} AS g
  ON g.correlationId = r.correlationId AND (g.globalPid >> 24) = (r.globalTid >> 24)
"""
_COMM_DTYPE = np.dtype([("start", "<i8"), ("gtid", "<i8"), ("recv", "<i8"), ("gpid", "<i8"),
                        ("device", "<i4"), ("stream", "<i4"), ("size_kind", "<i8")])
_COMM_LAYOUT = tables.fetch_layout(_COMM_DTYPE)


def comm_sql(export: Export) -> str | None:
    """Launch -> kernel (tag 55001) and API -> memcpy (tag 55002) arrows, by send time."""
    parts = []
    device_stream = pack_i4_pair(wrap_i4("COALESCE(g.deviceId, -1)"),
                                 wrap_i4("COALESCE(g.streamId, -1)"))
    if export.has("CUPTI_ACTIVITY_KIND_KERNEL", "correlationId"):
        parts.append(_COMM_SQL.format(device_stream=device_stream, size_kind="0",
                                      table="CUPTI_ACTIVITY_KIND_KERNEL"))
    if export.has("CUPTI_ACTIVITY_KIND_MEMCPY", "correlationId"):
        parts.append(_COMM_SQL.format(device_stream=device_stream,
                                      size_kind="(COALESCE(g.bytes, 0) << 1) | 1",
                                      table="CUPTI_ACTIVITY_KIND_MEMCPY"))
    if not parts or not export.has("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId"):
        return None
    return " UNION ALL ".join(parts) + " ORDER BY 1"


#: share of the estimated reading cost the reader process takes: the converter's own work
#: (records, merge, text, summary) costs about half as much as reading, so with this split
#: both processes stay busy (measured on 1M-row synthetic exports, CUDA only and all kinds)
_READER_SHARE = 0.75
#: below this many rows the reader costs more (requests, copies) than it saves
_READER_MIN_ROWS = 50_000


def _table_rows(export: Export, kinds: list[str]) -> dict[str, int]:
    """Rows per kind that ``_reader_kinds`` weighs, before a plan exists (``COUNT(*)`` is cheap:
    SQLite counts a table's b-tree pages without decoding rows)."""
    return {kind: sum(int(n) for src in export.sources(kind)  # type: ignore[call-overload]
                      for (n,) in export.rows(f"SELECT COUNT(*) FROM {_q(src.table)}"))
            for kind in {*kinds, "runtime", "kernel", "memcpy"} - {"nvtx", "comm"}}


def _reader_kinds(kinds: list[str], rows: Mapping[str, int]) -> list[str]:
    """The kinds the reader process reads (none for a small report), costliest first (the
    order their queries start in); the rest are read in-process. ``rows``: rows per kind
    (``_table_rows``, or a plan's counts).

    Cost estimate: rows x (values fetched per row + 2) per table, and for the comm join its
    rows x 8 plus a probe per API row. Largest first, each one that keeps the reader within
    its share (the largest always).
    """
    weighed = {*kinds, "runtime", "kernel", "memcpy"} - {"nvtx", "comm"}
    if sum(rows.get(k, 0) for k in weighed) < _READER_MIN_ROWS:
        return []
    costs = {k: rows.get(k, 0) * (len(tables.GROUPS[k]) + 2) for k in kinds if k in weighed}
    if "comm" in kinds:
        costs["comm"] = ((rows.get("kernel", 0) + rows.get("memcpy", 0)) * 8
                         + rows.get("runtime", 0) * 3)
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
    """The kind's chunks (``tables.stream``, or the comm join), read by the reader process when
    there is one (NVTX, with its text column, always in-process)."""
    if kind == "comm":
        sql = comm_sql(export)
        if sql is None:
            return iter(())
        if lease is not None:
            return lease.stream(sql, _COMM_DTYPE, _COMM_LAYOUT, chunk_rows, "comm")
        return tables.chunks(export, sql, "comm", chunk_rows,
                             lambda rows: rows_to_array(rows, _COMM_DTYPE, _COMM_LAYOUT))
    if lease is None or kind == "nvtx":
        return tables.stream(export, kind, chunk_rows)
    sql = tables.select_sql(export, kind)
    if sql is None:
        return iter(())
    return lease.stream(sql, tables.DTYPES[kind], tables.LAYOUTS[kind], chunk_rows, kind)


def _comm_stream(ctx: ReportContext, chunks: Iterator[np.ndarray],
                 counts: Counter[str]) -> Stream:
    from prvstream.daemon.stream.records import _keys, _lines

    for chunk in chunks:
        send = chunk["start"] + ctx.offset
        recv = chunk["recv"] + ctx.offset
        s_task, s_thread = ctx.cpu_objects(chunk["gtid"])
        r_task, r_thread = ctx.gpu_objects(chunk)
        lines = _lines("3:0:1:%d:%d:%d:%d:0:1:%d:%d:%d:%d:%d:%d", s_task, s_thread, send,
                       send, r_task, r_thread, recv, recv, chunk["size_kind"] >> 1,
                       np.where(chunk["size_kind"] & 1, pv.TAG_API_MEMCPY,
                                pv.TAG_LAUNCH_KERNEL))
        seq = ctx.next_seq("comm", len(chunk))
        keys = _keys(send, PRIO_BEGIN, s_task, s_thread, _KIND_RANK["comm"] * 4 + 2,
                     ctx.report_index, seq)
        counts["comm"] += len(chunk)
        yield lines.batch(keys), int(send[-1])


def _kind_stream(ctx: ReportContext, kind: str, chunks: Iterator[np.ndarray],
                 router: ActivityRouter, counts: Counter[str]) -> Stream:
    convert = CONVERTERS[kind]
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
        sources = {k: _source(ctx.export, k, chunk_rows, lease)
                   for k in to_reader} if lease is not None else {}
    try:
        streams: list[Stream] = []
        for kind in rep.kinds:  # every query starts now: the reader sorts while we convert
            chunks = sources.get(kind) or _source(ctx.export, kind, chunk_rows, None)
            if kind == "comm":
                streams.append(_comm_stream(ctx, chunks, counts))
            else:
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
