"""Shared types: the record batches the daemon feeds to sinks, and the ``Sink`` protocol.

Times in every batch are integer nanoseconds relative to the trace origin (the origin's wall
clock time is ``ReportInfo.origin_wall_ns``). Batches are numpy structured arrays so that hot
paths stay vectorised; metadata that crosses a boundary or hits disk is a msgspec Struct.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Protocol

import msgspec
import numpy as np

from prvstream.sinks.arrays import group_stats

__all__ = [
    "ACTIVITY_DTYPE",
    "HOST_DTYPE",
    "PHASE_DTYPE",
    "ActivityKind",
    "DeviceInfo",
    "HostKind",
    "ProcessInfo",
    "ReportInfo",
    "Sink",
    "TableDetail",
    "TableRows",
    "Timestamp",
    "feed_interleaved",
    "table_detail",
    "table_rows",
]

#: integer nanoseconds relative to the trace origin
Timestamp = int


class ActivityKind(IntEnum):
    """What a GPU interval is, for the efficiency model."""

    COMPUTE = 0  # a kernel that is not NCCL
    NCCL = 1  # a kernel whose name begins with "nccl"
    MEMCPY = 2
    MEMSET = 3


#: one GPU activity interval; ``device`` indexes ``ReportInfo.devices``
ACTIVITY_DTYPE = np.dtype(
    [("start", "<i8"), ("end", "<i8"), ("device", "<i4"), ("stream", "<i4"), ("kind", "u1")]
)

class HostKind(IntEnum):
    """What a host interval is, for the host metrics (time that is not host useful work)."""

    RUNTIME = 0  # a CUDA runtime or driver API call
    MPI = 1  # an MPI call


#: one host call interval; ``process`` indexes ``ReportInfo.processes``, ``kind`` is a HostKind,
#: ``thread`` is the calling thread's OS tid (host offload efficiency is counted per thread)
HOST_DTYPE = np.dtype(
    [("start", "<i8"), ("end", "<i8"), ("process", "<i4"), ("kind", "u1"), ("thread", "<i4")]
)

#: one NVTX range that may be an efficiency phase; ``name`` indexes ``ReportInfo.phase_names``,
#: ``process`` indexes ``ReportInfo.processes``
PHASE_DTYPE = np.dtype(
    [("start", "<i8"), ("end", "<i8"), ("process", "<i4"), ("name", "<i4")]
)


class DeviceInfo(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A physical GPU as seen by one process: (host, CUDA device id)."""

    host: str
    device: int
    #: index into ReportInfo.processes of the process that used it
    process: int = 0
    #: MPI rank of that process, when known
    rank: int | None = None


class ProcessInfo(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A profiled process: one Paraver task."""

    host: str
    pid: int
    name: str = ""
    rank: int | None = None
    #: OS tids of its CPU threads that the trace gives host states (Running outside CUDA
    #: runtime calls): every CPU thread of a report with CUDA runtime calls
    threads: list[int] = msgspec.field(default_factory=list)


class ReportInfo(msgspec.Struct, forbid_unknown_fields=True):
    """What a sink needs to know about one report before its batches arrive."""

    #: stable identifier of the report (its file name within the job)
    report_id: str
    processes: list[ProcessInfo]
    devices: list[DeviceInfo]
    #: wall-clock ns of time 0 in this report's batches
    origin_wall_ns: int
    #: the report's first and last timestamps, relative to the origin
    start_ns: int
    end_ns: int
    #: names of the NVTX ranges selected as phases (PHASE_DTYPE.name indexes this)
    phase_names: list[str] = msgspec.field(default_factory=list)
    #: what a reader of the summary should know about this export (e.g. a clock not used);
    #: the summary lists each distinct note once, with the reports it applies to
    notes: list[str] = msgspec.field(default_factory=list)


class TableRows(msgspec.Struct, frozen=True):
    """One chunk's rows of a top-N table (``kernels``, ``nccl``, ``memcpy``, ``nvtx``),
    aggregated per name: count, total/min/max duration (ns) and bytes (0 where none)."""

    table: str
    names: list[str]
    count: np.ndarray
    total: np.ndarray
    min: np.ndarray
    max: np.ndarray
    bytes: np.ndarray


class TableDetail(msgspec.Struct, frozen=True):
    """One chunk's rows of a top-N table, unaggregated: row i is named
    ``labels[inverse[i]]``, starts at ``start[i]`` (report time, as activity) in process
    ``process[i]`` (index into ``ReportInfo.processes``), lasts ``duration[i]`` ns and moves
    ``nbytes[i]`` bytes (0 where none); a GPU operation ran on device ``device[i]`` (index
    into ``ReportInfo.devices``; -1 for NVTX ranges) and stream ``stream[i]``, which tell the
    rows an overlapping earlier report holds (``efficiency.repeats``)."""

    table: str
    labels: list[str]
    inverse: np.ndarray
    start: np.ndarray
    process: np.ndarray
    duration: np.ndarray
    nbytes: np.ndarray
    device: np.ndarray
    stream: np.ndarray

    def take(self, sel: np.ndarray) -> TableDetail:
        """The rows ``sel`` (a mask or indices)."""
        return TableDetail(self.table, self.labels, self.inverse[sel], self.start[sel],
                           self.process[sel], self.duration[sel], self.nbytes[sel],
                           self.device[sel], self.stream[sel])

    def rows(self) -> TableRows:
        """The rows aggregated per name."""
        return table_rows(self.table, self.labels, self.inverse, self.duration, self.nbytes)


def table_detail(table: str, labels: list[str], inverse: np.ndarray, start: np.ndarray,
                 process: np.ndarray, duration: np.ndarray,
                 nbytes: np.ndarray | None = None, device: np.ndarray | None = None,
                 stream: np.ndarray | None = None) -> TableDetail:
    """A ``TableDetail`` (``nbytes`` and ``stream`` zero, ``device`` -1 when None)."""
    n = len(inverse)
    return TableDetail(table, labels, np.asarray(inverse, np.int64).ravel(),
                       np.asarray(start, np.int64), np.asarray(process, np.int64),
                       np.asarray(duration, np.int64),
                       np.zeros(n, np.int64) if nbytes is None
                       else np.asarray(nbytes, np.int64),
                       np.full(n, -1, np.int32) if device is None
                       else np.asarray(device, np.int32),
                       np.zeros(n, np.int32) if stream is None
                       else np.asarray(stream, np.int32))


def table_rows(table: str, labels: list[str], inverse: np.ndarray, duration: np.ndarray,
               nbytes: np.ndarray | None = None) -> TableRows:
    """Aggregate rows whose name is ``labels[inverse[i]]`` (labels with no row are dropped)."""
    count, total, lo, hi, size = group_stats(inverse, duration, nbytes, len(labels))
    used = count.nonzero()[0]
    return TableRows(table, [labels[i] for i in used.tolist()], count[used], total[used],
                     lo[used], hi[used], size[used])


class Sink(Protocol):
    """What the daemon feeds, per report, in one time-ordered pass.

    ``begin_report`` comes first; then ``add_activity`` and ``add_phases`` are called in
    non-decreasing ``start`` order across both kinds (a phase starting at t arrives before any
    activity starting after t); ``end_report`` closes the report. Optional methods a sink may
    have: ``add_table_detail(TableDetail)`` (rows of the top-N tables, for the whole job and
    per phase, each batch after every phase that starts at or before its rows), else
    ``add_tables(TableRows)`` (the same rows aggregated per name, any order), and
    ``add_host(HOST_DTYPE rows)`` (host calls in non-decreasing start order, each after every
    phase that starts at or before it).
    """

    def begin_report(self, info: ReportInfo) -> None: ...

    def add_activity(self, batch: np.ndarray) -> None: ...

    def add_phases(self, batch: np.ndarray) -> None: ...

    def end_report(self) -> None: ...


def feed_interleaved(sink: Sink, activity: np.ndarray, phases: np.ndarray | None,
                     chunk_rows: int = 0) -> None:
    """Feed start-sorted activity and phases in the order the ``Sink`` protocol asks: the
    activity before each phase's start, then that phase (``chunk_rows`` > 0 bounds the size
    of each activity batch). A sink with ``add_interleaved`` takes the same calls in one."""
    take = getattr(sink, "add_interleaved", None)
    if take is not None:
        take(activity, phases, chunk_rows)
        return
    step = chunk_rows if chunk_rows > 0 else max(len(activity), 1)

    def upto(lo: int, hi: int) -> int:
        while lo < hi:
            sink.add_activity(activity[lo:min(hi, lo + step)])
            lo = min(hi, lo + step)
        return lo

    done = 0
    if phases is not None and len(phases):
        starts = np.ascontiguousarray(activity["start"])  # a field view is strided
        cuts = np.searchsorted(starts, phases["start"], side="left")
        for p, cut in enumerate(cuts.tolist()):
            done = upto(done, cut)
            sink.add_phases(phases[p : p + 1])
    upto(done, len(activity))
