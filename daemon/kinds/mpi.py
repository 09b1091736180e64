"""MPI calls (any ``MPI_*_EVENTS`` table with start, end and globalTid): begin/end events typed
point-to-point, collective or other by the call's name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from prvstream.daemon.kinds.base import (
    I8,
    ChunkResult,
    KindSource,
    KindSpec,
    PcfBlocks,
    PlanScan,
    Schema,
    ValueGroup,
)
from prvstream.daemon.kinds.context import ReportContext
from prvstream.daemon.kinds.intervals import cpu_named
from prvstream.daemon.kinds.runtime import CPU_COLUMNS, CPU_FIELDS
from prvstream.sinks.base import HostKind
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv

__all__ = ["SPEC", "convert", "mpi_type"]

log = get_logger(__name__)

RANK = 8
GROUP = ValueGroup("mpi")

#: the call names of MPI's collective and point-to-point families, compiled at the first MPI
#: label (a conversion without MPI rows never searches them; compiling both took 0.2 ms)
_MPI_COLL = r"(?i)reduce|bcast|barrier|gather|scatter|alltoall|scan|allgather"
_MPI_P2P = r"(?i)send|recv|probe|wait|test|sendrecv"
_TYPE_NAMES = {pv.EV_MPI_BASE + 1: "MPI point-to-point", pv.EV_MPI_BASE + 2: "MPI collective",
               pv.EV_MPI_BASE + 3: "MPI other"}


def mpi_type(label: str) -> int:
    """MPI event type by call name: 50000001 point-to-point, ...02 collective, ...03 other."""
    if re.search(_MPI_COLL, label):  # re's own cache keeps both compiled
        return pv.EV_MPI_BASE + 2
    if re.search(_MPI_P2P, label):
        return pv.EV_MPI_BASE + 1
    return pv.EV_MPI_BASE + 3


def convert(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    return cpu_named(ctx, chunk, "mpi", RANK, "mpi", mpi_type, host=HostKind.MPI)


def _discover(schema: Schema) -> list[KindSource]:
    return [KindSource(t) for t in sorted(schema.tables)
            if t.startswith("MPI_") and t.endswith("_EVENTS")
            and all(schema.has(t, c) for c in ("start", "end", "globalTid"))]


def _plan(scan: PlanScan, src: KindSource) -> None:
    scan.cpu("mpi", src, scan.col(src.table, "textId"))


def _pcf(values: Mapping[str, list[str]]) -> PcfBlocks:
    if "mpi" not in values:
        return []
    types = sorted({mpi_type(lab) for lab in values["mpi"]})
    labels = {i + 1: lab for i, lab in enumerate(values["mpi"])}
    return [(100, pv.EventTypeSpec([(t, _TYPE_NAMES[t]) for t in types], labels))]


SPEC = KindSpec(
    name="mpi",
    title="MPI calls",
    rank=RANK,
    dtype=np.dtype([*CPU_FIELDS, ("name", I8)]),
    columns=(*CPU_COLUMNS, ("textId", "name")),
    discover=_discover,
    convert=convert,
    plan=_plan,
    value_groups={"mpi": GROUP},
    pcf=_pcf,
    efficiency="host",
)
