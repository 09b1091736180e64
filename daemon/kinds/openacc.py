"""OpenACC activity (CUPTI_ACTIVITY_KIND_OPENACC_DATA/LAUNCH/OTHER): begin/end events numbered
by OpenACC event kind on the calling thread.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from prvstream.daemon.kinds.base import (
    I8,
    ChunkResult,
    KindSource,
    KindSpec,
    Names,
    PcfBlocks,
    PlanScan,
    ValueGroup,
)
from prvstream.daemon.kinds.context import ReportContext
from prvstream.daemon.kinds.intervals import cpu_named
from prvstream.daemon.kinds.runtime import CPU_COLUMNS, CPU_FIELDS
from prvstream.daemon.kinds.sql import wrap_i4
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv

__all__ = ["SPEC", "convert"]

log = get_logger(__name__)

RANK = 10


def _numbered(names: Names, sid: int) -> str:
    return f"openacc {sid}"


GROUP = ValueGroup("openacc", label=_numbered, string_ids=False)


def convert(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    return cpu_named(ctx, chunk, "openacc", RANK, "openacc", lambda _: pv.EV_OPENACC)


def _plan(scan: PlanScan, src: KindSource) -> None:
    scan.cpu("openacc", src, wrap_i4(scan.col(src.table, "eventKind")))


def _pcf(values: Mapping[str, list[str]]) -> PcfBlocks:
    if "openacc" not in values:
        return []
    labels = {i + 1: lab for i, lab in enumerate(values["openacc"])}
    return [(130, pv.EventTypeSpec([(pv.EV_OPENACC, "OpenACC")], labels))]


SPEC = KindSpec(
    name="openacc",
    title="OpenACC data, launch and other activity",
    rank=RANK,
    dtype=np.dtype([*CPU_FIELDS, ("name", I8)]),
    columns=(*CPU_COLUMNS, ("eventKind", "name")),
    tables=(KindSource("CUPTI_ACTIVITY_KIND_OPENACC_DATA"),
            KindSource("CUPTI_ACTIVITY_KIND_OPENACC_LAUNCH"),
            KindSource("CUPTI_ACTIVITY_KIND_OPENACC_OTHER")),
    convert=convert,
    plan=_plan,
    value_groups={"openacc": GROUP},
    pcf=_pcf,
)
