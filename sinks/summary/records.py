"""Summary record types (msgspec Structs, schema in docs/summary-schema.md) and their codec."""

from __future__ import annotations

import functools
from typing import Literal

import msgspec

from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger

__all__ = [
    "DEFAULT_RECENT",
    "SCHEMA_VERSION",
    "Culprit",
    "DeviceRow",
    "GroupRow",
    "HostMetrics",
    "HostRow",
    "Metrics",
    "RecordHead",
    "SummaryRecord",
    "SummaryState",
    "TableRow",
    "Verdict",
    "View",
    "decode_head",
    "decode_record",
    "decode_state",
    "encode_record",
    "encode_state",
    "zero_metrics",
]

log = get_logger(__name__)


#: version of the records this code writes; changes are additive (new fields with defaults),
#: so readers accept every version and ignore fields they do not know. 2: the state is bounded
#: (latest ``recent`` windows and instances per phase name) and has ``phase_totals``. 3:
#: captured time (``captured_ns``), verdict, host metrics, top-N tables
SCHEMA_VERSION = 3

#: windows, and instances per phase name, that the state keeps by default
DEFAULT_RECENT = 64

View = Literal["cumulative", "window", "phase", "phase_total"]


class Metrics(msgspec.Struct, kw_only=True):
    """The POP device metrics of one interval, as fractions in [0, 1]."""

    load_balance: float
    communication_efficiency: float
    orchestration_efficiency: float
    parallel_efficiency: float


class DeviceRow(msgspec.Struct, kw_only=True):
    """One device (host + CUDA device id) over the record's interval; times in integer ns."""

    host: str
    device: int
    useful_ns: int
    comm_ns: int
    idle_ns: int
    overlap_ns: int
    #: overlap_ns / (comm_ns + overlap_ns): the part of all communication hidden under compute
    overlap_share: float = 0.0
    #: time with 0, 1, 2, 3 and 4 or more kernels running at once
    inflight_ns: list[int] = msgspec.field(default_factory=lambda: [0, 0, 0, 0, 0])
    #: idle stretches longer than the gap threshold that overlap the interval, and their time
    #: inside the interval
    gaps: int = 0
    gap_ns: int = 0
    rank: int | None = None
    pid: int = 0
    #: time its reports captured inside the interval (schema 3; 0 in older files: the span)
    captured_ns: int = 0


class Culprit(msgspec.Struct, kw_only=True):
    """The device that causes the dominant loss, and the process using it."""

    host: str
    device: int
    rank: int | None = None
    pid: int = 0


class Verdict(msgspec.Struct, kw_only=True):
    """The dominant loss of an interval and the device that causes it (schema 3)."""

    #: "load imbalance", "communication", "orchestration", or "none" (all above 99.5%)
    loss: str
    #: the Metrics field of the loss ("" for none) and its value
    metric: str = ""
    value: float = 1.0
    culprit: Culprit | None = None
    #: one readable line, e.g. "load imbalance: rank 7 (node01 GPU 3) computes 25% longer
    #: than the mean (LB 79.8%)"
    text: str = ""


class TableRow(msgspec.Struct, kw_only=True):
    """One row of a top-N table (schema 3): a kernel, NCCL collective, memcpy kind or NVTX
    range name, or ``other`` (every name below the top N)."""

    name: str
    count: int
    total_ns: int
    mean_ns: float
    min_ns: int
    max_ns: int
    #: total_ns / the table's total
    share: float
    #: bytes moved (memcpy; 0 where the export has none) and the achieved GB/s (memcpy)
    bytes: int = 0
    gbps: float | None = None


class GroupRow(msgspec.Struct, kw_only=True):
    """Metrics over a subset of the devices (one host, or one rank) over the same interval."""

    name: str
    devices: int
    useful_ns: int
    comm_ns: int
    metrics: Metrics


class HostRow(msgspec.Struct, kw_only=True):
    """One host process over the record's interval (schema 3): its captured time and the part
    of it in the CUDA runtime, in MPI and in neither (useful), as a process (union over its
    threads) and summed over its host threads (each thread's own calls)."""

    host: str
    pid: int
    rank: int | None = None
    captured_ns: int = 0
    useful_ns: int = 0
    runtime_ns: int = 0
    mpi_ns: int = 0
    #: thread_useful_ns / (thread_useful_ns + thread_runtime_ns), BasicAnalysis's device
    #: offload efficiency of this process's host threads; null when both are 0
    device_offload_efficiency: float | None = None
    #: useful_ns / (useful_ns + runtime_ns): the same ratio with the process as the unit
    process_offload_efficiency: float | None = None
    #: its host threads (those the trace gives host states) and, summed over them, each
    #: one's captured time and its time in the CUDA runtime, in MPI and in neither
    threads: int = 0
    thread_captured_ns: int = 0
    thread_useful_ns: int = 0
    thread_runtime_ns: int = 0
    thread_mpi_ns: int = 0


class HostMetrics(msgspec.Struct, kw_only=True):
    """The host-side POP metrics (BasicAnalysis / TALP), kept apart from the device metrics
    and never multiplied with them (schema 3). Null where not computable: the MPI ones without
    MPI tables (``parallel_efficiency`` is then the device offload efficiency)."""

    parallel_efficiency: float | None = None
    mpi_parallel_efficiency: float | None = None
    #: BasicAnalysis's host "device offload efficiency": host threads' useful time (outside
    #: CUDA runtime and MPI calls) over their useful plus CUDA runtime time, summed per thread
    device_offload_efficiency: float | None = None
    load_balance: float | None = None
    communication_efficiency: float | None = None
    #: per host process, by (host, pid)
    hosts: list[HostRow] = msgspec.field(default_factory=list)
    #: the offload ratio with processes as the unit: a process is in the CUDA runtime while
    #: any of its threads is (TALP-like; never used in ``parallel_efficiency``)
    process_offload_efficiency: float | None = None


class SummaryRecord(msgspec.Struct, kw_only=True):
    """One update of one view's interval: a line of ``summary.jsonl``."""

    schema: int
    job: str
    view: str
    #: phase name (phase and phase_total views); "" otherwise
    name: str = ""
    #: window number (start // window_ns), phase occurrence, or for phase_total the number of
    #: instances of the name so far; 0 for the cumulative view
    index: int = 0
    #: the interval, in wall-clock ns since the epoch, and its length T (phase_total: the sum
    #: of its instances' spans, from the first start to the last end)
    start_ns: int
    end_ns: int
    span_ns: int
    #: time inside the interval at least one device was captured (schema 3; capture ranges
    #: and the time before a rank's first or after its last report excluded)
    captured_ns: int = 0
    #: wall-clock ns of the latest data included (the end of the job's span so far); this is
    #: data time, not the time the record was written, so recomputation is byte-identical
    wall_ns: int = 0
    #: reports included so far, and the one whose arrival produced this update
    reports: int = 0
    last_report: str = ""
    metrics: Metrics
    devices: list[DeviceRow]
    hosts: list[GroupRow] = msgspec.field(default_factory=list)
    ranks: list[GroupRow] = msgspec.field(default_factory=list)
    window_ns: int = 0
    gap_threshold_ns: int = 0
    #: dominant loss and its culprit device (schema 3; None in older files)
    verdict: Verdict | None = None
    #: how NCCL kernels counted: "communication" (BasicAnalysis) or "useful" (TALP) (schema 3)
    nccl_as: str = "communication"
    #: top-N tables of the cumulative view (schema 3): "kernels", "nccl", "memcpy", "nvtx"
    tables: dict[str, list[TableRow]] = msgspec.field(default_factory=dict)
    #: host metrics (schema 3), every view; null where no host process was captured
    host_metrics: HostMetrics | None = None
    #: what a reader should know about the reports themselves (cumulative view only), e.g.
    #: a clock that could not be used: notes about the data, not warnings about the run
    notes: list[str] = msgspec.field(default_factory=list)


class SummaryState(SummaryRecord, kw_only=True):
    """The latest state (``summary.json``): the cumulative record plus bounded recent rows."""

    #: latest record of each of the ``recent`` highest windows, by index
    windows: list[SummaryRecord] = msgspec.field(default_factory=list)
    #: latest record of each of the ``recent`` highest occurrences of every phase name, by start
    phases: list[SummaryRecord] = msgspec.field(default_factory=list)
    #: latest ``phase_total`` record of every phase name, by name
    phase_totals: list[SummaryRecord] = msgspec.field(default_factory=list)
    #: the bound applied to ``windows`` and to each name's ``phases`` (0: written before schema 2)
    recent: int = 0



class RecordHead(msgspec.Struct, kw_only=True):
    """What ``convert``'s closing lines show of a record or state: its span, metrics, verdict
    and notes and how many devices it lists, decoded without the types of its rows (a
    decoder of the whole record resolves the annotations of every type it can reach)."""

    span_ns: int
    metrics: Metrics
    devices: list[msgspec.Raw] = msgspec.field(default_factory=list)
    verdict: Verdict | None = None
    notes: list[str] = msgspec.field(default_factory=list)


_ENCODER = msgspec.json.Encoder()


@functools.cache
def _record_decoder() -> msgspec.json.Decoder[SummaryRecord]:
    """Built at the first decode (a conversion only encodes; building a decoder resolves the
    annotations of every type it can reach)."""
    return msgspec.json.Decoder(SummaryRecord)


@functools.cache
def _state_decoder() -> msgspec.json.Decoder[SummaryState]:
    """Built at the first decode, like ``_record_decoder``."""
    return msgspec.json.Decoder(SummaryState)


def encode_record(record: SummaryRecord) -> bytes:
    """One JSON line (with its newline)."""
    return _ENCODER.encode(record) + b"\n"


def decode_state(data: bytes) -> SummaryState:
    """Decode ``summary.json`` (or a single record, read as a state without windows/phases)."""
    try:
        return _state_decoder().decode(data)
    except msgspec.DecodeError as exc:
        raise PrvstreamError(f"not a prvstream summary ({exc}); pass a summary.json, "
                             f"summary.jsonl or a job directory") from exc



@functools.cache
def _head_decoder() -> msgspec.json.Decoder[RecordHead]:
    """Built at the first decode, like ``_record_decoder``."""
    return msgspec.json.Decoder(RecordHead)


def decode_head(data: bytes) -> RecordHead:
    """The ``RecordHead`` of one record's (or a state's) JSON."""
    return _head_decoder().decode(data)



def decode_record(line: bytes) -> SummaryRecord:
    """Decode one line of ``summary.jsonl`` (raises ``msgspec.DecodeError``)."""
    return _record_decoder().decode(line)


def encode_state(state: SummaryState) -> bytes:
    """``summary.json`` content: the state, indented, with a final newline."""
    return msgspec.json.format(_ENCODER.encode(state), indent=1) + b"\n"


def zero_metrics() -> Metrics:
    """All four metrics zero (no data)."""
    return Metrics(load_balance=0.0, communication_efficiency=0.0,
                   orchestration_efficiency=0.0, parallel_efficiency=0.0)
