"""GPU metric samples (GPU_METRICS): event 9400 + metricId with the sampled value, on a
metrics thread of the GPU's owning process (the lowest one with activity on that device).
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
    Names,
    PcfBlocks,
    PlanScan,
    Schema,
    ValueGroup,
)
from prvstream.daemon.kinds.context import ReportContext
from prvstream.daemon.kinds.intervals import LINE_EVENT
from prvstream.daemon.kinds.sql import quote_identifier, wrap_i4
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.records import PRIO_BEGIN, event_lines, make_keys

__all__ = ["SPEC", "convert", "gpu_metric_label"]

log = get_logger(__name__)

RANK = 12


def gpu_metric_label(metric: int, name: str) -> str:
    """The label a GPU metric is published under: ``<metricId>:<name>`` (the .pcf block
    splits it back)."""
    return f"{metric}:{pv.sanitize_label(name)}"


def _label(names: Names, sid: int) -> str:
    return gpu_metric_label(sid, names.gpu_metric_names().get(sid, f"metric {sid}"))


GROUP = ValueGroup("gpu_metric", label=_label, string_ids=False)


def convert(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    start = chunk["start"] + ctx.offset
    gpus, inverse = np.unique(chunk["gpu"], return_inverse=True)
    task_u = np.empty(len(gpus), dtype=np.int64)
    thread_u = np.empty(len(gpus), dtype=np.int64)
    for i, gpu in enumerate(gpus.tolist()):
        task_u[i] = ctx.task_of(ctx.metric_owner.get(gpu, next(iter(ctx.process_index), 0)))
        thread_u[i] = ctx.metrics_thread(int(task_u[i]), gpu)
    tasks, threads = task_u[inverse], thread_u[inverse]
    metrics, minv = np.unique(chunk["metric"], return_inverse=True)
    for m in metrics.tolist():  # publish the metric's label for the .pcf
        ctx.value_id("gpu_metric", ctx.label("gpu_metric", m))
    etype = (pv.EV_GPU_METRIC_BASE + metrics)[minv]
    lines = event_lines(tasks, threads, start, (etype, np.maximum(chunk["value"], 0)))
    seq = ctx.next_seq("gpu_metrics", len(chunk))
    keys = make_keys(start, PRIO_BEGIN, tasks, threads, RANK * 4 + LINE_EVENT,
                     ctx.report_index, seq)
    return ChunkResult(lines.batch(keys), rows=len(chunk))


def _column_sql(schema: Schema, table: str, fld: str, col: str, default: str) -> str | None:
    if not schema.has(table, col):
        return None
    if fld == "gpu":  # the GPU is the low byte of typeId
        return "(COALESCE(typeId, -1) & 255)"
    if fld == "value":
        return "CAST(COALESCE(value, -1) AS INTEGER)"
    return None


def _plan(scan: PlanScan, src: KindSource) -> None:
    t = src.table
    sql = (f"SELECT DISTINCT {scan.col(t, 'typeId')} & 255, "
           f"{wrap_i4(scan.col(t, 'metricId'))} FROM {quote_identifier(t)}")
    for gpu, metric in scan.rows(sql):
        scan.metric(int(gpu), int(metric))  # type: ignore[call-overload]
        scan.see("gpu_metrics", int(metric))  # type: ignore[call-overload]
    scan.count("gpu_metrics", scan.count_rows(t))


def _pcf(values: Mapping[str, list[str]]) -> PcfBlocks:
    out: PcfBlocks = []
    for label in values.get("gpu_metric", []):
        metric, _, name = label.partition(":")
        out.append((120, pv.EventTypeSpec([(pv.EV_GPU_METRIC_BASE + int(metric),
                                             f"GPU metric: {name}")])))
    return out


SPEC = KindSpec(
    name="gpu_metrics",
    title="GPU metric samples",
    rank=RANK,
    dtype=np.dtype([("start", I8), ("end", I8), ("gpu", I4), ("metric", I4), ("value", I8)]),
    columns=(("timestamp", "start"), ("timestamp", "end"), ("typeId", "gpu"),
             ("metricId", "metric"), ("value", "value")),
    tables=(KindSource("GPU_METRICS", start="timestamp", end=None),),
    column_sql=_column_sql,
    convert=convert,
    plan=_plan,
    value_groups={"gpu_metrics": GROUP},
    pcf=_pcf,
)
