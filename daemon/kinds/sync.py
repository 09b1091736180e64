"""CUDA synchronizations (CUPTI_ACTIVITY_KIND_SYNCHRONIZATION): begin/end events with the sync
type on the stream's thread (rows are placed on the device the process uses, see the plan).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import numpy as np

from prvstream.daemon.kinds.base import (
    I4,
    ChunkResult,
    KindSource,
    KindSpec,
    PcfBlocks,
    PlanScan,
)
from prvstream.daemon.kinds.context import ReportContext, factorize
from prvstream.daemon.kinds.intervals import interval_batch
from prvstream.daemon.kinds.kernel import GPU_COLUMNS, GPU_FIELDS
from prvstream.daemon.kinds.sql import wrap_i4
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.records import event_lines

__all__ = ["SPEC", "SYNC_TYPE_LABELS", "convert"]

log = get_logger(__name__)

#: CUPTI_SYNC_TYPE labels (as nsys writes them in ENUM_CUPTI_SYNC_TYPE); event value = id + 1
SYNC_TYPE_LABELS: Final[dict[int, str]] = {
    0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync",
    4: "Context sync",
}

RANK = 4


def convert(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    if ctx.sync_devices:
        chunk = chunk.copy()
        combos, inverse = factorize(chunk, ("gpid", "stream", "device"))
        placed = np.array([ctx.sync_devices.get(c, c[2]) for c in combos], dtype=np.int32)
        chunk["device"] = placed[inverse]
    start = chunk["start"] + ctx.offset
    end = chunk["end"] + ctx.offset
    task, thread = ctx.gpu_objects(chunk)
    value = np.maximum(chunk["sync_type"], 0) + 1
    # no correlation id: the runtime call that waited carries it (and corrId.cfg then
    # measures what nsys2prv's does)
    begin = event_lines(task, thread, start, (pv.EV_SYNC, value))
    finish = event_lines(task, thread, end, (pv.EV_SYNC, 0))
    return ChunkResult(
        interval_batch(ctx, "sync", RANK, start, end, task, thread, begin, finish),
        rows=len(chunk),
    )


def _plan(scan: PlanScan, src: KindSource) -> None:
    scan.gpu("sync", src.table, [("sync", wrap_i4(scan.col(src.table, "syncType")))],
             placed_later=True)


def _pcf(values: Mapping[str, list[str]]) -> PcfBlocks:
    labels = {k + 1: v for k, v in SYNC_TYPE_LABELS.items()}
    return [(50, pv.EventTypeSpec([(pv.EV_SYNC, "CUDA synchronization")], labels))]


SPEC = KindSpec(
    name="sync",
    title="CUDA synchronizations",
    rank=RANK,
    dtype=np.dtype([*GPU_FIELDS, ("sync_type", I4)]),
    columns=(*GPU_COLUMNS, ("syncType", "sync_type")),
    tables=(KindSource("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),),
    convert=convert,
    plan=_plan,
    pcf=_pcf,
    cuda=True,
)
