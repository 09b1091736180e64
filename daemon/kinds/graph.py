"""CUDA graph launches and graph node events (CUDA_GRAPH_EVENTS, CUDA_GRAPH_NODE_EVENTS):
begin/end events numbered by graph name id (or graph id) on the calling thread.
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
    Schema,
    ValueGroup,
)
from prvstream.daemon.kinds.context import ReportContext
from prvstream.daemon.kinds.intervals import cpu_named
from prvstream.daemon.kinds.runtime import CPU_COLUMNS, CPU_FIELDS
from prvstream.daemon.kinds.sql import quote_identifier
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv

__all__ = ["SPEC", "convert"]

log = get_logger(__name__)

RANK = 9


def _numbered(names: Names, sid: int) -> str:
    return f"graph {sid}"


GROUP = ValueGroup("graph", label=_numbered, string_ids=False)


def convert(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    return cpu_named(ctx, chunk, "graph", RANK, "graph", lambda _: pv.EV_GRAPH)


def _name_sql(schema: Schema, table: str, fld: str, col: str, default: str) -> str | None:
    """Graph rows without a name column carry their graph id instead."""
    if fld != "name" or schema.has(table, "nameId"):
        return None
    return (f"COALESCE({quote_identifier('graphId')}, {default})"
            if schema.has(table, "graphId") else default)


def _plan(scan: PlanScan, src: KindSource) -> None:
    col = "nameId" if scan.schema.has(src.table, "nameId") else "graphId"
    scan.cpu("graph", src, scan.col(src.table, col))


def _pcf(values: Mapping[str, list[str]]) -> PcfBlocks:
    if "graph" not in values:
        return []
    labels = {i + 1: lab for i, lab in enumerate(values["graph"])}
    return [(110, pv.EventTypeSpec([(pv.EV_GRAPH, "CUDA graph")], labels))]


SPEC = KindSpec(
    name="graph",
    title="CUDA graph and graph node events",
    rank=RANK,
    dtype=np.dtype([*CPU_FIELDS, ("name", I8)]),
    columns=(*CPU_COLUMNS, ("nameId", "name")),
    tables=(KindSource("CUDA_GRAPH_EVENTS"), KindSource("CUDA_GRAPH_NODE_EVENTS")),
    column_sql=_name_sql,
    convert=convert,
    plan=_plan,
    value_groups={"graph": GROUP},
    pcf=_pcf,
)
