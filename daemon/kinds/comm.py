"""Launch -> kernel and API -> memcpy/memset arrows (Paraver communications, tags 55001 and
55002, as nsys2prv writes them): a derived kind, the join of CUDA API calls with the kernels,
copies and memsets they started.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from prvstream.daemon.kinds.base import I4, I8, ChunkResult, KindSpec, Schema
from prvstream.daemon.kinds.context import ReportContext
from prvstream.daemon.kinds.intervals import LINE_COMM
from prvstream.daemon.kinds.sql import pack_i4_pair, wrap_i4
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.records import PRIO_BEGIN, comm_lines, make_keys

__all__ = ["DRIVER", "SPEC", "convert", "copied_parts", "scan_parts", "select_sql",
           "unwrapped_part"]

log = get_logger(__name__)

RANK = 11

#: one row per arrow; device and stream travel packed in one int64 and the size with the
#: arrow's kind in its low bit (0: launch -> kernel, 1: API -> memcpy/memset), so a kernel's
#: last value is the small int 0 (fewer Python objects per fetched row)
_SQL = """
SELECT r.start, r.globalTid, g.start, g.globalPid, {device_stream}, {size_kind}{rowid}
FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r{scan}
JOIN {table} AS g
  ON g.correlationId = r.correlationId AND (g.globalPid >> 24) = (r.globalTid >> 24)
"""
#: the table whose start is the arrows' send time, and whose rowid order ``scan_parts`` follows
DRIVER = "CUPTI_ACTIVITY_KIND_RUNTIME"


_BARE_DEVICE_STREAM = "COALESCE(g.deviceId, -1), COALESCE(g.streamId, -1)"
#: the arrows' device and stream, each wrapped into int32 and packed into one int64
_DEVICE_STREAM = pack_i4_pair(wrap_i4("COALESCE(g.deviceId, -1)"),
                              wrap_i4("COALESCE(g.streamId, -1)"))


def unwrapped_part(sql: str) -> str | None:
    """A ``scan_parts`` part with its device and stream bare, two values instead of the
    packed pair, for the compiled row reader to wrap (``_sqlrows`` fill's ``wraps``: the
    same values); None for another statement."""
    if sql.count(_DEVICE_STREAM) != 1:
        return None
    return sql.replace(_DEVICE_STREAM, _BARE_DEVICE_STREAM)


#: the joined tables, in ``select_sql``'s part order, with each part's size-and-kind value
_JOINED = (("CUPTI_ACTIVITY_KIND_KERNEL", "0"),
           ("CUPTI_ACTIVITY_KIND_MEMCPY", "(COALESCE(g.bytes, 0) << 1) | 1"),
           ("CUPTI_ACTIVITY_KIND_MEMSET", "(COALESCE(g.bytes, 0) << 1) | 1"))
#: the joined tables' columns a part reads besides ``correlationId`` (``copied_parts``; the
#: kernel part all but the last)
_READ = ("start", "globalPid", "deviceId", "streamId", "bytes")
#: the TEMP copy of the i-th joined table (``copied_parts``)
_COPY = "prvstream_comm_{}"


def _parts(schema: Schema, scan: bool, copied: bool = False) -> list[str]:
    """One SELECT per joined table (kernel, memcpy, memset), in ``select_sql``'s order;
    ``scan``: the API table scanned in rowid order (``NOT INDEXED``, outer loop forced by
    ``CROSS JOIN``), its rowid the last value; ``copied``: each part joins its table's TEMP
    copy (``copied_parts``)."""
    if not schema.has(DRIVER, "correlationId"):
        return []
    parts = []
    extra = ({"rowid": ", r.rowid", "scan": " NOT INDEXED CROSS"} if scan
             else {"rowid": "", "scan": ""})
    for i, (table, size_kind) in enumerate(_JOINED):
        if schema.has(table, "correlationId"):
            joined = f"temp.{_COPY.format(i)}" if copied else table
            parts.append(_SQL.format(device_stream=_DEVICE_STREAM, size_kind=size_kind,
                                     table=joined, **extra))
    return parts


def select_sql(schema: Schema) -> str | None:
    """Launch -> kernel (tag 55001) and API -> memcpy/memset (tag 55002) arrows, by send
    time. SQLite sorts each part and merges them (ties: kernel, memcpy, memset, and within a
    part in the API table's rowid order: its sorter is stable)."""
    parts = _parts(schema, scan=False)
    return " UNION ALL ".join(parts) + " ORDER BY 1" if parts else None


def scan_parts(schema: Schema) -> tuple[str, list[str]] | None:
    """The API table and ``select_sql``'s parts unordered, each scanning it in rowid order
    with its rowid as a last value (``daemon.nsys.joinscan`` merges them into ``select_sql``'s
    order)."""
    parts = _parts(schema, scan=True)
    return (DRIVER, parts) if parts else None


def copied_parts(schema: Schema) -> tuple[list[str], list[str]] | None:
    """``scan_parts``' parts joining TEMP copies of the joined tables, and the statements that
    make the copies: each table's columns a part reads, with an index on ``correlationId``
    then those columns in the table's own order, as the automatic index SQLite builds for the
    join (a call with several GPU rows gets them in the same order), the copy's rows in the
    table's rowid order. A copy is made once for a connection's parts, where SQLite builds an
    automatic index for every statement: what lets the parts be read run by run
    (``daemon.nsys.joinscan``). The statements write the connection's TEMP schema only."""
    parts = _parts(schema, scan=True, copied=True)
    if not parts:
        return None
    setup = []
    for i, (table, _) in enumerate(_JOINED):
        if not schema.has(table, "correlationId"):
            continue
        wanted = _READ if i else _READ[:-1]  # a kernel's part reads no bytes
        read = [c for c in schema.tables[table] if c in wanted]
        copy = _COPY.format(i)
        columns = ", ".join(["correlationId", *read])
        setup += [f"DROP TABLE IF EXISTS temp.{copy}",
                  f"CREATE TEMP TABLE {copy} AS SELECT {columns} FROM {table}",
                  f"CREATE INDEX temp.{copy}_key ON {copy}({columns})"]
    return setup, parts


def convert(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    send = chunk["start"] + ctx.offset
    recv = chunk["recv"] + ctx.offset
    s_task, s_thread = ctx.cpu_objects(chunk["gtid"])
    r_task, r_thread = ctx.gpu_objects(chunk)
    tag = np.where(chunk["size_kind"] & 1, pv.TAG_API_MEMCPY, pv.TAG_LAUNCH_KERNEL)
    lines = comm_lines(s_task, s_thread, send, r_task, r_thread, recv,
                       chunk["size_kind"] >> 1, tag)
    seq = ctx.next_seq("comm", len(chunk))
    keys = make_keys(send, PRIO_BEGIN, s_task, s_thread, RANK * 4 + LINE_COMM,
                     ctx.report_index, seq)
    return ChunkResult(lines.batch(keys), rows=len(chunk))


def _available(present: set[str]) -> bool:
    return bool(present & {"kernel", "memcpy", "memset"}) and "runtime" in present


def _cost(rows: Mapping[str, int]) -> int:
    """The join: its rows x 8 plus a probe per API row."""
    gpu = rows.get("kernel", 0) + rows.get("memcpy", 0) + rows.get("memset", 0)
    return gpu * 8 + rows.get("runtime", 0) * 3


SPEC = KindSpec(
    name="comm",
    title="launch -> kernel and API -> memcpy/memset arrows",
    rank=RANK,
    dtype=np.dtype([("start", I8), ("gtid", I8), ("recv", I8), ("gpid", I8),
                    ("device", I4), ("stream", I4), ("size_kind", I8)]),
    select=select_sql,
    scan_parts=scan_parts,
    copied_parts=copied_parts,
    convert=convert,
    available=_available,
    other_times=("recv",),
    cost_inputs=("kernel", "memcpy", "memset", "runtime"),
    read_cost=_cost,
)
