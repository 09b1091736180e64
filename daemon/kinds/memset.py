"""CUDA memory sets (CUPTI_ACTIVITY_KIND_MEMSET): like memcpy, with the memset value."""

from __future__ import annotations

import numpy as np

from prvstream.daemon.kinds.base import I4, I8, ChunkResult, KindSource, KindSpec, PlanScan
from prvstream.daemon.kinds.context import ReportContext
from prvstream.daemon.kinds.kernel import GPU_COLUMNS, GPU_FIELDS
from prvstream.daemon.kinds.memcpy import convert_memop
from prvstream.sinks.logger import get_logger

__all__ = ["SPEC", "convert"]

log = get_logger(__name__)

RANK = 3


def convert(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    return convert_memop(ctx, chunk, "memset", RANK)


def _plan(scan: PlanScan, src: KindSource) -> None:
    scan.gpu("memset", src.table, [])


SPEC = KindSpec(
    name="memset",
    title="CUDA memory sets",
    rank=RANK,
    dtype=np.dtype([*GPU_FIELDS, ("bytes", I8), ("value", I4)]),
    columns=(*GPU_COLUMNS, ("bytes", "bytes"), ("value", "value")),
    tables=(KindSource("CUPTI_ACTIVITY_KIND_MEMSET"),),
    convert=convert,
    plan=_plan,
    efficiency="activity",
    cuda=True,
)
