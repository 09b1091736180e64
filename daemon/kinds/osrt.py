"""OS runtime calls (OSRT_API): begin/end events with the call name on the calling thread."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from prvstream.daemon.kinds.base import (
    I8,
    ChunkResult,
    KindSource,
    KindSpec,
    PcfBlocks,
    PlanScan,
    ValueGroup,
)
from prvstream.daemon.kinds.context import ReportContext
from prvstream.daemon.kinds.intervals import cpu_named
from prvstream.daemon.kinds.runtime import CPU_COLUMNS, CPU_FIELDS
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv

__all__ = ["SPEC", "convert"]

log = get_logger(__name__)

RANK = 7
GROUP = ValueGroup("osrt")


def convert(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    return cpu_named(ctx, chunk, "osrt", RANK, "osrt", lambda _: pv.EV_OSRT)


def _plan(scan: PlanScan, src: KindSource) -> None:
    scan.cpu("osrt", src, scan.col(src.table, "nameId"))


def _pcf(values: Mapping[str, list[str]]) -> PcfBlocks:
    if "osrt" not in values:
        return []
    labels = {i + 1: lab for i, lab in enumerate(values["osrt"])}
    return [(90, pv.EventTypeSpec([(pv.EV_OSRT, "OS runtime call")], labels))]


SPEC = KindSpec(
    name="osrt",
    title="OS runtime calls",
    rank=RANK,
    dtype=np.dtype([*CPU_FIELDS, ("name", I8)]),
    columns=(*CPU_COLUMNS, ("nameId", "name")),
    tables=(KindSource("OSRT_API"),),
    convert=convert,
    plan=_plan,
    value_groups={"osrt": GROUP},
    pcf=_pcf,
)
