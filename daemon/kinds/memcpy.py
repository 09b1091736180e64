"""CUDA memory copies (CUPTI_ACTIVITY_KIND_MEMCPY): a memory state and begin/end events with
the direction and size on the stream's thread; also the memory-operation helpers memset uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import numpy as np

from prvstream.daemon.kinds.base import (
    I4,
    I8,
    ChunkResult,
    KindSource,
    KindSpec,
    PcfBlocks,
    PlanScan,
)
from prvstream.daemon.kinds.context import ReportContext
from prvstream.daemon.kinds.intervals import (
    activity,
    interval_batch,
    process_indices,
    state_starts,
)
from prvstream.daemon.kinds.kernel import GPU_COLUMNS, GPU_FIELDS
from prvstream.daemon.kinds.sql import wrap_i4
from prvstream.sinks.arrays import unique_inverse
from prvstream.sinks.base import ActivityKind, table_detail
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.records import event_lines, state_lines

__all__ = [
    "MEMCPY_KIND_LABELS",
    "MEMCPY_UNKNOWN_VALUE",
    "MEMSET_VALUE",
    "SPEC",
    "convert",
    "convert_memop",
    "memop_labels",
]

log = get_logger(__name__)

#: memcpy directions (CUPTI copyKind) as nsys labels them in ENUM_CUDA_MEMCPY_OPER
MEMCPY_KIND_LABELS: Final[dict[int, str]] = {
    0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
    4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
    8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer",
    11: "Unified Host-to-Device", 12: "Unified Device-to-Host", 13: "Unified Device-to-Device",
}

#: memcpy values are the CUPTI copy kind (1..13); unknown copies and memsets get their own
MEMCPY_UNKNOWN_VALUE = 20
MEMSET_VALUE = 21

RANK = 2


def memop_labels(copy_kinds: dict[int, str]) -> dict[int, str]:
    """Labels of the memcpy/memset event values, worded as nsys2prv words them
    (``CUDA memcpy Host-to-Device``, ``CUDA memset``)."""
    labels = {k: f"CUDA memcpy {v}" for k, v in copy_kinds.items() if k > 0}
    labels[MEMCPY_UNKNOWN_VALUE] = f"CUDA memcpy {copy_kinds.get(0, 'Unknown')}"
    labels[MEMSET_VALUE] = "CUDA memset"
    return labels


def convert_memop(ctx: ReportContext, chunk: np.ndarray, kind: str, rank: int) -> ChunkResult:
    """A memcpy or memset chunk: memory state, begin event (direction, size, correlation)."""
    start = chunk["start"] + ctx.offset
    end = chunk["end"] + ctx.offset
    task, thread = ctx.gpu_objects(chunk)
    if kind == "memcpy":
        ck = chunk["copy_kind"]
        value = np.where((ck > 0) & (ck < MEMCPY_UNKNOWN_VALUE), ck, MEMCPY_UNKNOWN_VALUE)
        act_kind = ActivityKind.MEMCPY
    else:
        value = np.full(len(chunk), MEMSET_VALUE, dtype=np.int64)
        act_kind = ActivityKind.MEMSET
    size = np.maximum(chunk["bytes"], 0)
    corr = np.maximum(chunk["corr"], 0)
    shown = state_starts(ctx, kind, task, thread, start, end)
    begin = event_lines(task, thread, shown, (pv.EV_MEMOP, value), (pv.EV_MEMOP_BYTES, size),
                        (pv.EV_CORRELATION, corr))
    finish = event_lines(task, thread, end, (pv.EV_MEMOP, 0), (pv.EV_MEMOP_BYTES, 0),
                         (pv.EV_CORRELATION, 0))
    states = state_lines(task, thread, shown, end, pv.STATE_MEMORY)
    if kind == "memcpy":
        kinds, inverse = unique_inverse(chunk["copy_kind"])
        labels = [MEMCPY_KIND_LABELS.get(k, f"kind {k}") for k in kinds.tolist()]
    else:
        labels, inverse = ["memset"], np.zeros(len(chunk), np.int64)
    act = activity(ctx, chunk, start, end, act_kind)
    rows = table_detail("memcpy", labels, inverse.ravel(), start,
                        process_indices(ctx, chunk["gpid"]), np.maximum(end - start, 0), size,
                        device=act["device"], stream=act["stream"])
    return ChunkResult(
        interval_batch(ctx, kind, rank, shown, end, task, thread, begin, finish, states),
        activity=act, rows=len(chunk), tables=[rows],
    )


def convert(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    return convert_memop(ctx, chunk, "memcpy", RANK)


def _plan(scan: PlanScan, src: KindSource) -> None:
    scan.gpu("memcpy", src.table, [("memcpy", wrap_i4(scan.col(src.table, "copyKind")))])


def _pcf(values: Mapping[str, list[str]]) -> PcfBlocks:
    return [
        (30, pv.EventTypeSpec([(pv.EV_MEMOP, "CUDA memcpy kernel")],
                              memop_labels(MEMCPY_KIND_LABELS))),
        (40, pv.EventTypeSpec([(pv.EV_MEMOP_BYTES, "Memcopy size")])),
    ]


SPEC = KindSpec(
    name="memcpy",
    title="CUDA memory copies",
    rank=RANK,
    dtype=np.dtype([*GPU_FIELDS, ("bytes", I8), ("copy_kind", I4)]),
    columns=(*GPU_COLUMNS, ("bytes", "bytes"), ("copyKind", "copy_kind")),
    tables=(KindSource("CUPTI_ACTIVITY_KIND_MEMCPY"),),
    convert=convert,
    plan=_plan,
    pcf=_pcf,
    efficiency="activity",
    cuda=True,
)
