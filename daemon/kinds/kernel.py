"""CUDA kernels (CUPTI_ACTIVITY_KIND_KERNEL): a state and begin/end events on the stream's
thread, with launch attributes; NCCL kernels get their own event type and state.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from prvstream.daemon.kinds.base import (
    I4,
    I8,
    ChunkResult,
    KindSource,
    KindSpec,
    PcfBlocks,
    PlanScan,
    ValueGroup,
)
from prvstream.daemon.kinds.context import ReportContext
from prvstream.daemon.kinds.intervals import (
    activity,
    interval_batch,
    process_indices,
    state_starts,
)
from prvstream.sinks.base import ActivityKind, table_detail
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.records import event_lines, state_lines

__all__ = ["GPU_COLUMNS", "GPU_FIELDS", "SPEC", "convert"]

log = get_logger(__name__)

#: the fields every GPU activity kind starts with, and their columns
GPU_FIELDS = [("start", I8), ("end", I8), ("gpid", I8), ("device", I4), ("stream", I4),
              ("corr", I8)]
GPU_COLUMNS = (("start", "start"), ("end", "end"), ("globalPid", "gpid"),
               ("deviceId", "device"), ("streamId", "stream"), ("correlationId", "corr"))

RANK = 1
GROUP = ValueGroup("kernel")


def convert(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    start = chunk["start"] + ctx.offset
    end = chunk["end"] + ctx.offset
    task, thread = ctx.gpu_objects(chunk)
    value, labels, inverse = ctx.values("kernel", chunk["name"])
    nccl_u = np.array([lab.lower().startswith("nccl") for lab in labels], dtype=bool)
    nccl = nccl_u[inverse]
    etype = np.where(nccl, pv.EV_NCCL, pv.EV_KERNEL)
    state = np.where(nccl, pv.STATE_COMM, pv.STATE_RUNNING)
    attrs = [(t, np.maximum(chunk[col], 0)) for t, _, col in pv.EV_KERNEL_ATTRS]
    # a kernel overlapping its predecessor on the stream shows from the predecessor's end
    shown = state_starts(ctx, "kernel", task, thread, start, end)
    begin = event_lines(task, thread, shown, (etype, value),
                        (pv.EV_CORRELATION, np.maximum(chunk["corr"], 0)), *attrs)
    # the end zeroes the correlation id and every attribute, as nsys2prv does
    finish = event_lines(task, thread, end, (etype, 0), (pv.EV_CORRELATION, 0),
                         *((t, 0) for t, _, _ in pv.EV_KERNEL_ATTRS))
    states = state_lines(task, thread, shown, end, state)
    kind = np.where(nccl, ActivityKind.NCCL, ActivityKind.COMPUTE).astype(np.uint8)
    dur = np.maximum(end - start, 0)
    procs = process_indices(ctx, chunk["gpid"])
    act = activity(ctx, chunk, start, end, kind)
    tables = [table_detail(name, labels, inverse[sel], start[sel], procs[sel], dur[sel],
                           device=act["device"][sel], stream=act["stream"][sel])
              for name, sel in (("kernels", ~nccl), ("nccl", nccl)) if sel.any()]
    return ChunkResult(
        interval_batch(ctx, "kernel", RANK, shown, end, task, thread, begin, finish, states),
        activity=act, rows=len(chunk), tables=tables,
    )


def _plan(scan: PlanScan, src: KindSource) -> None:
    scan.gpu("kernel", src.table, [("kernel", scan.col(src.table, "shortName"))])


def _pcf(values: Mapping[str, list[str]]) -> PcfBlocks:
    labels = {i + 1: lab for i, lab in enumerate(values.get("kernel", []))}
    return [
        (20, pv.EventTypeSpec([(pv.EV_KERNEL, "CUDA kernel"), (pv.EV_NCCL, "NCCL kernel")],
                              labels)),
        (70, pv.EventTypeSpec([(t, label) for t, label, _ in pv.EV_KERNEL_ATTRS])),
    ]


SPEC = KindSpec(
    name="kernel",
    title="CUDA kernels (NCCL kernels apart)",
    rank=RANK,
    dtype=np.dtype([
        *GPU_FIELDS, ("name", I8),
        ("grid_x", I4), ("grid_y", I4), ("grid_z", I4),
        ("block_x", I4), ("block_y", I4), ("block_z", I4),
        ("registers", I4), ("smem_static", I4), ("smem_dynamic", I4), ("local_mem", I8),
    ]),
    columns=(*GPU_COLUMNS, ("shortName", "name"),
             ("gridX", "grid_x"), ("gridY", "grid_y"), ("gridZ", "grid_z"),
             ("blockX", "block_x"), ("blockY", "block_y"), ("blockZ", "block_z"),
             ("registersPerThread", "registers"), ("staticSharedMemory", "smem_static"),
             ("dynamicSharedMemory", "smem_dynamic"), ("localMemoryTotal", "local_mem")),
    tables=(KindSource("CUPTI_ACTIVITY_KIND_KERNEL"),),
    convert=convert,
    plan=_plan,
    value_groups={"kernel": GROUP},
    pcf=_pcf,
    efficiency="activity",
    cuda=True,
)
