"""CUDA runtime and driver API calls (CUPTI_ACTIVITY_KIND_RUNTIME): begin/end events with the
call name (without its ``_vNNNNN`` suffix, as nsys's reports and nsys2prv name it) and the
correlation id on the calling CPU thread, and the host-thread states (``kinds.hoststates``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from prvstream.daemon.kinds import hoststates
from prvstream.daemon.kinds.base import (
    I8,
    ChunkResult,
    KindSource,
    KindSpec,
    Names,
    PcfBlocks,
    PlanScan,
    ValueGroup,
    string_label,
)
from prvstream.daemon.kinds.context import ReportContext
from prvstream.daemon.kinds.intervals import host_calls, interval_batch
from prvstream.sinks.base import HostKind
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.records import RecordBatch, event_lines

__all__ = ["CPU_COLUMNS", "CPU_FIELDS", "SPEC", "api_label", "convert"]

log = get_logger(__name__)

#: the fields every CPU call kind starts with, and their columns
CPU_FIELDS = [("start", I8), ("end", I8), ("gtid", I8)]
CPU_COLUMNS = (("start", "start"), ("end", "end"), ("globalTid", "gtid"))

RANK = 5
_VERSION = re.compile(r"_v\d+$")


def api_label(names: Names, sid: int) -> str:
    """A call's name without its ``_vNNNNN`` version suffix (``cudaLaunchKernel_v7000`` ->
    ``cudaLaunchKernel``)."""
    return _VERSION.sub("", string_label(names, sid))


GROUP = ValueGroup("api", label=api_label)


def convert(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    start = chunk["start"] + ctx.offset
    end = chunk["end"] + ctx.offset
    task, thread = ctx.cpu_objects(chunk["gtid"])
    value, labels, inverse = ctx.values("api", chunk["name"])
    begin = event_lines(task, thread, start, (pv.EV_API, value),
                        (pv.EV_CORRELATION, np.maximum(chunk["corr"], 0)))
    finish = event_lines(task, thread, end, (pv.EV_API, 0), (pv.EV_CORRELATION, 0))
    inside = np.array([hoststates.api_state(lab) for lab in labels], dtype=np.int64)[inverse]
    host = hoststates.states(ctx, task, thread, start, end, inside)
    return ChunkResult(RecordBatch.concat([
        interval_batch(ctx, "runtime", RANK, start, end, task, thread, begin, finish), host]),
        rows=len(chunk), host=host_calls(ctx, chunk["gtid"], start, end, HostKind.RUNTIME))


def _plan(scan: PlanScan, src: KindSource) -> None:
    scan.cpu("runtime", src, scan.col(src.table, "nameId"))


def _pcf(values: Mapping[str, list[str]]) -> PcfBlocks:
    labels = {i + 1: lab for i, lab in enumerate(values.get("api", []))}
    return [(10, pv.EventTypeSpec([(pv.EV_API, "CUDA library call")], labels)),
            (60, pv.EventTypeSpec([(pv.EV_CORRELATION, "Correlation ID")]))]


SPEC = KindSpec(
    name="runtime",
    title="CUDA runtime and driver API calls",
    rank=RANK,
    dtype=np.dtype([*CPU_FIELDS, ("corr", I8), ("name", I8)]),
    columns=(*CPU_COLUMNS, ("correlationId", "corr"), ("nameId", "name")),
    tables=(KindSource("CUPTI_ACTIVITY_KIND_RUNTIME"),),
    convert=convert,
    plan=_plan,
    value_groups={"runtime": GROUP},
    pcf=_pcf,
    cuda=True,
    efficiency="host",
    watermark=hoststates.watermark,
    finish=hoststates.finish,
)
