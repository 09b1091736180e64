"""One time-ordered chunk stream per data kind of an export, as numpy structured arrays.

Each stream is one ``SELECT ... ORDER BY start`` read with ``fetchmany``: SQLite sorts (with
bounded memory, spilling to temp files) and we hold one chunk at a time. NULLs become -1.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import numpy as np

from prvstream.daemon.nsys.export import Export, KindSource, pack_i4_pair, quote_identifier, wrap_i4
from prvstream.daemon.nsys.rowfill import Layout, field_offset, rows_to_array
from prvstream.sinks.errors import NotAnExport
from prvstream.sinks.logger import get_logger

__all__ = [
    "DTYPES",
    "GROUPS",
    "KINDS",
    "LAYOUTS",
    "available_kinds",
    "chunks",
    "fetch_layout",
    "not_integer",
    "read_failed",
    "select_sql",
    "stream",
]

log = get_logger(__name__)

_I8, _I4 = "<i8", "<i4"

#: dtype of each kind's chunks; times are raw session-clock ns (not rebased)
DTYPES: Final[dict[str, np.dtype]] = {
    "kernel": np.dtype([
        ("start", _I8), ("end", _I8), ("gpid", _I8), ("device", _I4), ("stream", _I4),
        ("corr", _I8), ("name", _I8), ("dname", _I8),
        ("grid_x", _I4), ("grid_y", _I4), ("grid_z", _I4),
        ("block_x", _I4), ("block_y", _I4), ("block_z", _I4),
        ("registers", _I4), ("smem_static", _I4), ("smem_dynamic", _I4),
    ]),
    "memcpy": np.dtype([
        ("start", _I8), ("end", _I8), ("gpid", _I8), ("device", _I4), ("stream", _I4),
        ("corr", _I8), ("bytes", _I8), ("copy_kind", _I4),
    ]),
    "memset": np.dtype([
        ("start", _I8), ("end", _I8), ("gpid", _I8), ("device", _I4), ("stream", _I4),
        ("corr", _I8), ("bytes", _I8), ("value", _I4),
    ]),
    "sync": np.dtype([
        ("start", _I8), ("end", _I8), ("gpid", _I8), ("device", _I4), ("stream", _I4),
        ("corr", _I8), ("sync_type", _I4),
    ]),
    "runtime": np.dtype([
        ("start", _I8), ("end", _I8), ("gtid", _I8), ("corr", _I8), ("name", _I8),
    ]),
    "nvtx": np.dtype([
        ("start", _I8), ("end", _I8), ("gtid", _I8), ("event_type", _I4), ("domain", _I8),
        ("text", _I8), ("range_id", _I8),
    ]),
    "osrt": np.dtype([("start", _I8), ("end", _I8), ("gtid", _I8), ("name", _I8)]),
    "mpi": np.dtype([("start", _I8), ("end", _I8), ("gtid", _I8), ("name", _I8)]),
    "graph": np.dtype([("start", _I8), ("end", _I8), ("gtid", _I8), ("name", _I8)]),
    "openacc": np.dtype([("start", _I8), ("end", _I8), ("gtid", _I8), ("name", _I8)]),
    "gpu_metrics": np.dtype([
        ("start", _I8), ("end", _I8), ("gpu", _I4), ("metric", _I4), ("value", _I8),
    ]),
}

#: every kind, in the order ``DTYPES`` lists them
KINDS: Final[tuple[str, ...]] = tuple(DTYPES)

_GPU_COMMON: Final = (("start", "start"), ("end", "end"), ("globalPid", "gpid"),
                      ("deviceId", "device"), ("streamId", "stream"),
                      ("correlationId", "corr"))

#: kind -> (source column or SQL expression, dtype field) in dtype order
_COLUMNS: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "kernel": (*_GPU_COMMON, ("shortName", "name"), ("demangledName", "dname"),
               ("gridX", "grid_x"), ("gridY", "grid_y"), ("gridZ", "grid_z"),
               ("blockX", "block_x"), ("blockY", "block_y"), ("blockZ", "block_z"),
               ("registersPerThread", "registers"), ("staticSharedMemory", "smem_static"),
               ("dynamicSharedMemory", "smem_dynamic")),
    "memcpy": (*_GPU_COMMON, ("bytes", "bytes"), ("copyKind", "copy_kind")),
    "memset": (*_GPU_COMMON, ("bytes", "bytes"), ("value", "value")),
    "sync": (*_GPU_COMMON, ("syncType", "sync_type")),
    "runtime": (("start", "start"), ("end", "end"), ("globalTid", "gtid"),
                ("correlationId", "corr"), ("nameId", "name")),
    "nvtx": (("start", "start"), ("end", "end"), ("globalTid", "gtid"),
             ("eventType", "event_type"), ("domainId", "domain"), ("textId", "text"),
             ("rangeId", "range_id")),
    "osrt": (("start", "start"), ("end", "end"), ("globalTid", "gtid"), ("nameId", "name")),
    "mpi": (("start", "start"), ("end", "end"), ("globalTid", "gtid"), ("textId", "name")),
    "graph": (("start", "start"), ("end", "end"), ("globalTid", "gtid"), ("nameId", "name")),
    "openacc": (("start", "start"), ("end", "end"), ("globalTid", "gtid"),
                ("eventKind", "name")),
    "gpu_metrics": (("timestamp", "start"), ("timestamp", "end"), ("typeId", "gpu"),
                    ("metricId", "metric"), ("value", "value")),
}

def _groups(dtype: np.dtype) -> tuple[tuple[str, ...], ...]:
    """Fields fetched together: two adjacent int32 fields travel as one packed int64."""
    names = dtype.names or ()
    out: list[tuple[str, ...]] = []
    i = 0
    while i < len(names):
        a = names[i]
        if i + 1 < len(names) and dtype[a].itemsize == 4:
            b = names[i + 1]
            if dtype[b].itemsize == 4 and field_offset(dtype, b) == field_offset(dtype, a) + 4:
                out.append((a, b))
                i += 2
                continue
        out.append((a,))
        i += 1
    return tuple(out)


def fetch_layout(dtype: np.dtype) -> Layout:
    """Where each fetched value lands when adjacent int32 fields are fetched as one packed
    int64 (``export.pack_i4_pair``), in ``_groups`` order."""
    groups = _groups(dtype)
    return (tuple(field_offset(dtype, g[0]) for g in groups),
            tuple(4 if len(g) == 1 and dtype[g[0]].itemsize == 4 else 8 for g in groups))


#: kind -> fetched value groups, and where each value lands in the kind's dtype
GROUPS: Final[dict[str, tuple[tuple[str, ...], ...]]] = {k: _groups(d) for k, d in DTYPES.items()}
LAYOUTS: Final[dict[str, Layout]] = {k: fetch_layout(d) for k, d in DTYPES.items()}

#: defaults for missing/NULL columns other than -1
_DEFAULTS: Final[dict[tuple[str, str], str]] = {("nvtx", "domain"): "0"}


def _select_one(export: Export, kind: str, src: KindSource) -> str:
    t = src.table
    by_field: dict[str, str] = {}
    for col, field in _COLUMNS[kind]:
        default = _DEFAULTS.get((kind, field), "-1")
        if kind == "graph" and field == "name" and not export.has(t, "nameId"):
            col = "graphId"  # graph rows without a name column carry their graph id
        if field == "start":
            expr = quote_identifier(src.start)
        elif kind == "gpu_metrics" and field == "gpu":
            expr = "(COALESCE(typeId, -1) & 255)" if export.has(t, col) else default
        elif kind == "gpu_metrics" and field == "value":
            expr = ("CAST(COALESCE(value, -1) AS INTEGER)" if export.has(t, col)
                    else default)
        elif export.has(t, col):
            expr = f"COALESCE({quote_identifier(col)}, {default})"
        else:
            expr = default
        if DTYPES[kind][field] == np.dtype(_I4) and expr != default:
            expr = wrap_i4(expr)
        by_field[field] = expr
    exprs: list[str] = []
    for group in GROUPS[kind]:
        if len(group) == 1:
            exprs.append(f"{by_field[group[0]]} AS {group[0]}")
        else:
            packed = pack_i4_pair(by_field[group[0]], by_field[group[1]])
            exprs.append(f"{packed} AS {'_'.join(group)}")
    if kind == "nvtx":
        if export.has(t, "text"):
            inline = ("CASE WHEN textId IS NULL THEN text END" if export.has(t, "textId")
                      else "text")
        else:
            inline = "NULL"
        exprs.append(f"{inline} AS inline_text")
    where = f" WHERE {src.where}" if src.where else ""
    return f"SELECT {', '.join(exprs)} FROM {quote_identifier(t)}{where}"


def select_sql(export: Export, kind: str) -> str | None:
    """The ordered SELECT behind ``stream(export, kind)``, or None if no table feeds it."""
    if kind not in DTYPES:
        raise ValueError(f"unknown data kind {kind!r}; known: {', '.join(KINDS)}")
    sources = export.sources(kind)
    if not sources:
        return None
    body = " UNION ALL ".join(_select_one(export, kind, s) for s in sources)
    return f"{body} ORDER BY start"


def available_kinds(export: Export) -> list[str]:
    """Kinds whose tables exist and hold at least one row, in ``KINDS`` order."""
    present = set(export.nonempty_kinds())
    return [k for k in KINDS if k in present]


def stream(export: Export, kind: str, chunk_rows: int = 65536) -> Iterator[np.ndarray]:
    """Yield ``DTYPES[kind]`` arrays of at most ``chunk_rows`` rows in non-decreasing start.

    NVTX inline texts (``text`` with a NULL ``textId``) come out as negative ids that
    ``export.string()`` resolves. Raises ``NotAnExport`` if SQLite finds the file damaged.
    """
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be at least 1")
    sql = select_sql(export, kind)
    if sql is None:
        return
    dtype = DTYPES[kind]
    if kind == "nvtx":
        export.inline_ids()  # number inline texts canonically before the first chunk
        yield from chunks(export, sql, kind, chunk_rows,
                          lambda rows: _nvtx_chunk(export, rows, dtype))
    else:
        yield from chunks(export, sql, kind, chunk_rows,
                          lambda rows: rows_to_array(rows, dtype, LAYOUTS[kind]))


def chunks(export: Export, sql: str, what: str, chunk_rows: int,
           fill: Callable[[list[tuple[object, ...]]], np.ndarray]) -> Iterator[np.ndarray]:
    """Run ``sql`` on the export and yield ``fill(rows)`` per ``fetchmany`` of ``chunk_rows``.

    SQLite errors and values ``fill`` refuses become ``NotAnExport`` naming ``what``.
    """
    cur = export.connection.cursor()
    try:
        try:
            cur.execute(sql)
        except sqlite3.DatabaseError as exc:
            raise read_failed(export.path, what, str(exc)) from exc
        while True:
            try:
                rows = cur.fetchmany(chunk_rows)
            except sqlite3.DatabaseError as exc:
                raise read_failed(export.path, what, str(exc)) from exc
            if not rows:
                break
            try:
                chunk = fill(rows)
            except (ValueError, TypeError, OverflowError) as exc:
                raise not_integer(export.path, what, str(exc)) from exc
            del rows  # a suspended stream must not keep its fetched tuples alive
            yield chunk
    finally:
        with contextlib.suppress(sqlite3.ProgrammingError):  # the export closed first
            cur.close()


def _nvtx_chunk(export: Export, rows: list[tuple[object, ...]], dtype: np.dtype) -> np.ndarray:
    """Convert NVTX rows; the trailing inline text becomes a negative interned id."""
    out = rows_to_array(rows, dtype, LAYOUTS["nvtx"])
    inline = [(i, row[-1]) for i, row in enumerate(rows) if row[-1] is not None]
    if inline:
        ids = export.inline_ids()
        out["text"][[i for i, _ in inline]] = [ids.get(str(t)) or export.intern_inline(str(t))
                                               for _, t in inline]
    return out


def read_failed(path: Path, what: str, message: str) -> NotAnExport:
    """The error (logged once here) for SQLite failing to read ``what`` rows of an export."""
    log.warning("export_read_failed", path=str(path), kind=what, error=message)
    return NotAnExport(f"{path}: reading {what} rows failed ({message}); the file is damaged "
                       f"or was truncated: re-export the report")


def not_integer(path: Path, what: str, message: str) -> NotAnExport:
    """The error for ``what`` rows holding a value that is not an integer."""
    return NotAnExport(
        f"{path}: the {what} rows hold a value that is not an integer ({message}); this is "
        f"not an intact Nsight Systems export, re-export it")
