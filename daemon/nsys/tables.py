"""One time-ordered chunk stream per data kind of an export, as numpy structured arrays
(the kinds' dtypes and SELECTs come from the registry).

A kind read from one table is scanned in storage (rowid) order and put into start order by a
bounded reorder buffer (``presort``) when the table's per-block start bounds
(``storage_order``) allow it, or as a few runs, each scanned so and the runs merged
(``runscan``); otherwise, and for kinds of several tables, the stream is one
``SELECT ... ORDER BY start`` (SQLite sorts with bounded memory, spilling to temp files). All
give the same rows in the same order (ties in rowid order). ``presort=False``
(``Settings.presort``) turns the reorder buffer off, for comparisons. Each stream holds one
chunk (or the reorder buffer) at a time. NULLs become -1.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, NamedTuple

import numpy as np

from prvstream.daemon.kinds import comm, registry
from prvstream.daemon.kinds.registry import TABLE_KINDS
from prvstream.daemon.kinds.sql import fetch_groups, quote_identifier
from prvstream.daemon.nsys import joinscan, runscan
from prvstream.daemon.nsys import presort as reorder_buffer
from prvstream.daemon.nsys.export import Export
from prvstream.daemon.nsys.rowfill import Layout, field_offset, rows_to_array
from prvstream.sinks.errors import NotAnExport
from prvstream.sinks.logger import get_logger

__all__ = [
    "DTYPES",
    "GROUPS",
    "KINDS",
    "LAYOUTS",
    "READER_ROWS",
    "UnwrappedStatements",
    "available_kinds",
    "chunks",
    "fetch_layout",
    "int_chunks",
    "join_stream",
    "not_integer",
    "read_failed",
    "select_sql",
    "stream",
    "unwrapped_part",
    "unwrapped_statements",
]

log = get_logger(__name__)

#: dtype of each table kind's chunks; times are raw session-clock ns (not rebased)
DTYPES: Final[dict[str, np.dtype]] = {k: registry.get(k).dtype for k in TABLE_KINDS}

#: every table kind, in registry order
KINDS: Final[tuple[str, ...]] = TABLE_KINDS


def fetch_layout(dtype: np.dtype) -> Layout:
    """Where each fetched value lands when adjacent int32 fields are fetched as one packed
    int64 (``kinds.sql.pack_i4_pair``), in ``kinds.sql.fetch_groups`` order."""
    groups = fetch_groups(dtype)
    return (tuple(field_offset(dtype, g[0]) for g in groups),
            tuple(4 if len(g) == 1 and dtype[g[0]].itemsize == 4 else 8 for g in groups))


#: kind -> fetched value groups, and where each value lands in the kind's dtype (every kind,
#: derived ones included)
GROUPS: Final[dict[str, tuple[tuple[str, ...], ...]]] = {
    k: s.groups for k, s in registry.KINDS.items()}
LAYOUTS: Final[dict[str, Layout]] = {k: fetch_layout(s.dtype) for k, s in registry.KINDS.items()}


#: (schema key, kind) -> (ordered SELECT, storage-order scan, its table): built from the
#: schema alone, so exports of one nsys version share them
_STATEMENTS: dict[tuple[int, str], tuple[str | None, tuple[str, str, str, str] | None, str]] = {}
_STATEMENTS_KEPT = 512


def _statements(export: Export, kind: str
                ) -> tuple[str | None, tuple[str, str, str, str] | None, str]:
    key = (export.schema_key, kind)
    found = _STATEMENTS.get(key)
    if found is None:
        spec = registry.get(kind)
        sources = spec.sources(export) if spec.select is None else []
        plan = None
        if len(sources) == 1:
            src = sources[0]
            plan = (spec.select_source(export, src), quote_identifier(src.table),
                    quote_identifier(src.start), src.where)
        found = (spec.select_sql(export), plan, sources[0].table if plan is not None else "")
        if len(_STATEMENTS) >= _STATEMENTS_KEPT:
            _STATEMENTS.clear()
        _STATEMENTS[key] = found
    return found


#: (schema key, kind) -> the compiled row reader's form of the kind's statements, or None
_UNWRAPPED: dict[tuple[int, str], UnwrappedStatements | None] = {}


class UnwrappedStatements(NamedTuple):
    """A kind's statements for the compiled row reader, which wraps int32 values itself
    (``KindSpec.select_source_unwrapped``): the ordered SELECT, the storage-order scan, and
    where each value lands (``fill``'s offsets, sizes, wraps and names)."""

    sql: str
    scan: str
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    wraps: tuple[int, ...]
    names: tuple[int, ...]


def unwrapped_statements(export: Export, kind: str) -> UnwrappedStatements | None:
    """The kind's statements with int32 values wrapped by the compiled row reader instead of
    SQL (the same values; a kind read from one table only), or None."""
    key = (export.schema_key, kind)
    if key in _UNWRAPPED:
        return _UNWRAPPED[key]
    spec = registry.get(kind)
    sources = spec.sources(export) if spec.select is None else []
    found = None
    select = spec.select_source_unwrapped(export, sources[0]) if len(sources) == 1 else None
    if select is not None and any(select.wraps):
        found = _unwrapped(f"{select.sql} ORDER BY start", select.sql, spec.dtype,
                           select.fields, select.wraps, select.names)
    if len(_UNWRAPPED) >= _STATEMENTS_KEPT:
        _UNWRAPPED.clear()
    _UNWRAPPED[key] = found
    return found


def unwrapped_part(sql: str, dtype: np.dtype) -> UnwrappedStatements | None:
    """A comm join's part (``comm.scan_parts``, read into ``dtype``) for the compiled row
    reader, which wraps its device and stream itself; None for another statement."""
    bare = comm.unwrapped_part(sql)
    groups = fetch_groups(dtype)
    if bare is None or [g for g in groups if len(g) == 2] != [("device", "stream")]:
        return None
    return _unwrapped(bare, bare, dtype, [f for g in groups for f in g],
                      tuple(int(len(g) == 2) for g in groups for _ in g),
                      tuple(j for j, g in enumerate(groups) for _ in g))


def _unwrapped(sql: str, scan: str, dtype: np.dtype, fields: Sequence[str],
               wraps: tuple[int, ...], names: tuple[int, ...]) -> UnwrappedStatements:
    """The statements with where each field's value lands in ``dtype`` (offset, size)."""
    return UnwrappedStatements(sql, scan, tuple(field_offset(dtype, f) for f in fields),
                               tuple(int(dtype[f].itemsize) for f in fields), wraps, names)


def scan_plan(export: Export, kind: str) -> tuple[str, str, str, str] | None:
    """(SELECT in storage order, table, start column, condition) of a kind read from one
    table, for a rowid-order scan with a reorder buffer; None for other kinds."""
    return _statements(export, kind)[1]


def select_sql(export: Export, kind: str) -> str | None:
    """The ordered SELECT behind ``stream(export, kind)``, or None if no table feeds it."""
    return _statements(export, kind)[0]


def available_kinds(export: Export, *, scan: bool = True) -> list[str]:
    """Table kinds whose tables exist and hold at least one row, in registry order (``scan``:
    ``Export.nonempty_kinds``'s)."""
    present = set(export.nonempty_kinds(scan=scan))
    return [k for k in KINDS if k in present]


def stream(export: Export, kind: str, chunk_rows: int = 65536, *,
           presort: bool = True) -> Iterator[np.ndarray]:
    """Yield the kind's dtype arrays of at most ``chunk_rows`` rows in non-decreasing start.

    ``presort`` False (``Settings.presort``) always lets SQLite sort.

    A kind with inline texts (NVTX ``text`` with a NULL ``textId``) gets them as negative ids
    that ``export.string()`` resolves. Raises ``NotAnExport`` if SQLite finds the file damaged.
    """
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be at least 1")
    sql = select_sql(export, kind)
    if sql is None:
        return
    joined = join_stream(export, kind, chunk_rows, lambda part, wide: int_chunks(
        export, part, kind, chunk_rows, wide, fetch_layout(wide))) if presort else None
    if joined is not None:
        yield from joined
        return
    window = 0
    runs = None
    plan = scan_plan(export, kind) if presort else None
    if plan is not None:
        known = export.known_rows(_statements(export, kind)[2], plan[3])
        try:  # a table planned to fit in one chunk is held whole: no bounds to read
            if known is not None and 0 < known <= chunk_rows:
                window = chunk_rows
            else:
                window, runs = _storage_order(export, plan[1], plan[2], plan[3])
        except sqlite3.DatabaseError:
            window = 0  # the ordered query reports the damage
        if runs is not None:  # a few runs, each scanned with its own reorder buffer
            yield from runscan.merge([_scan(export, kind, runscan.ranged(
                plan[0], plan[1], plan[3], run), chunk_rows, run.window) for run in runs],
                chunk_rows)
            return
        if 0 < window <= reorder_buffer.MAX_WINDOW:
            sql = plan[0]
        else:
            window = 0
    yield from _scan(export, kind, sql, chunk_rows, window)


def _scan(export: Export, kind: str, sql: str, chunk_rows: int, window: int
          ) -> Iterator[np.ndarray]:
    """The kind's chunks read by ``sql`` (``window`` > 0: a storage-order scan put into
    start order by a reorder buffer of that many rows)."""
    spec = registry.get(kind)
    dtype, layout = spec.dtype, LAYOUTS[kind]
    read: Iterator[np.ndarray]
    if spec.inline_text:
        export.inline_ids()  # number inline texts canonically before the first chunk
        read = chunks(export, sql, kind, chunk_rows, lambda rows: _inline_chunk(
            export, rows, dtype, layout, spec.inline_text))
    else:
        read = int_chunks(export, sql, kind, chunk_rows, dtype, layout)
    return reorder_buffer.reorder(read, window, chunk_rows)


def join_stream(export: Export, kind: str, chunk_rows: int,
                open_part: Callable[[str, np.dtype], Iterator[np.ndarray]]
                ) -> Iterator[np.ndarray] | None:
    """A join kind's chunks from its parts read in storage order (``joinscan``), each part's
    chunks from ``open_part(sql, dtype)``; None when the kind has no such parts or its driving
    table is too far from start order (its ordered SELECT is to run)."""
    spec = registry.get(kind)
    found = spec.scan_parts(export) if spec.scan_parts is not None else None
    if found is None:
        return None
    known = export.known_rows(found[0], "")
    if known is not None and known <= chunk_rows:
        return None  # planned to fit in a chunk: SQLite sorts it in memory, no bounds read
    driver = quote_identifier(found[0])
    copied = spec.copied_parts
    return joinscan.stream(export.connection, driver, found[1], spec.dtype, chunk_rows,
                           open_part, reorder_buffer.MAX_WINDOW,
                           lambda window, runs: export.note_window(driver, '"start"', "",
                                                                   window, runs),
                           None if copied is None else lambda: copied(export))


def _storage_order(export: Export, table: str, start: str, where: str
                   ) -> tuple[int, tuple[runscan.Run, ...] | None]:
    """The table's reorder window and, beyond the largest one, the runs it is scanned as
    (``runscan.table_runs``; None: one scan, or SQLite sorts): kept from a join's floors of
    the same table (read once), else read now and kept."""
    known = export.known_window(table, start, where)
    if known is not None:
        return known, export.known_runs(table, start, where)
    first, least, greatest = runscan.block_columns(export.connection, table, start, where)
    window = runscan.window(least, greatest)
    runs = None
    if window > reorder_buffer.MAX_WINDOW:
        runs = runscan.table_runs(export.connection, table, start, where, first, least,
                                  greatest, reorder_buffer.MAX_WINDOW)
    export.note_window(table, start, where, window, runs)
    return window, runs


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


def int_chunks(export: Export, sql: str, what: str, chunk_rows: int, dtype: np.dtype,
               layout: Layout) -> Iterator[np.ndarray]:
    """``chunks`` of ``rows_to_array(rows, dtype, layout)``: read by the compiled row reader,
    which puts each row's integers straight into the chunk, on the export's own connection
    (``Export.borrowed_reader``) where it can borrow it, else on a second connection
    (``Export.row_reader``) when the export holds ``READER_ROWS`` rows or more; fetched as
    tuples and filled otherwise. The same chunks, and the same errors for SQLite's failures
    and values that are not integers."""
    db = export.borrowed_reader()
    if db is None and export.counted_rows() >= READER_ROWS:
        db = export.row_reader()
    if db is None:
        return chunks(export, sql, what, chunk_rows,
                      lambda rows: rows_to_array(rows, dtype, layout))
    return _read_chunks(export, db, sql, what, chunk_rows, dtype, layout)


def _read_chunks(export: Export, db: Any, sql: str, what: str, chunk_rows: int,
                 dtype: np.dtype, layout: Layout) -> Iterator[np.ndarray]:
    offsets, sizes = layout
    try:
        query = db.query(sql)
    except RuntimeError as exc:
        raise read_failed(export.path, what, str(exc)) from exc
    while True:
        status, got = query.fill(chunk_rows, dtype.itemsize, offsets, sizes)
        if status == _SQLITE_FAILED:
            raise read_failed(export.path, what, got)
        if status == _NOT_INTEGER:
            raise not_integer(export.path, what, got)
        if not got:
            return
        yield np.frombuffer(got, dtype=dtype)


#: the rows an export's tables hold (as planning counted them) from which ``int_chunks``
#: opens the compiled reader's second connection where it cannot borrow the export's: its
#: opening (the schema read again) cost a 115-row export 3.8 M instructions more than the
#: fetch it saves, and saved a 4,639-row export 35 M
READER_ROWS: Final = 1000
#: the compiled reader's statuses besides 0 (``_sqlrows.c``): SQLite failed, with its message;
#: a value is not an integer or out of its field's range, with the fill's message
_SQLITE_FAILED: Final = 1
_NOT_INTEGER: Final = 2


def _inline_chunk(export: Export, rows: list[tuple[object, ...]], dtype: np.dtype,
                  layout: Layout, field: str) -> np.ndarray:
    """Convert rows whose trailing inline text becomes a negative interned id in ``field``."""
    out = rows_to_array(rows, dtype, layout)
    inline = [(i, row[-1]) for i, row in enumerate(rows) if row[-1] is not None]
    if inline:
        ids = export.inline_ids()
        out[field][[i for i, _ in inline]] = [ids.get(str(t)) or export.intern_inline(str(t))
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
