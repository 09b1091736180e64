"""Open one Nsight Systems SQLite export read-only and read what it holds before streaming.

Checks that it is one, reads its metadata, the rows and time range of every data table and a
one-pass aggregate plan; the connection (``exportbase``), names (``exportnames``) and trusted
times (``timebound``) are read by the classes ``Export`` builds on.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from prvstream.daemon.kinds import registry
from prvstream.daemon.kinds.base import KindSource
from prvstream.daemon.kinds.context import pid_of, process_of, tid_of
from prvstream.daemon.kinds.registry import TABLE_KINDS
from prvstream.daemon.kinds.sql import pack_i4_pair, quote_identifier, wrap_i4
from prvstream.daemon.nsys.exportmeta import ExportMeta, ProcessRow
from prvstream.daemon.nsys.plan import ExportPlan, HeldChunks, plan_export
from prvstream.daemon.nsys.sqlite import METADATA_TABLES, connect_read_only, ro_uri
from prvstream.daemon.nsys.timebound import BOUND_MARGIN_NS, ExportClock
from prvstream.sinks.errors import NotAnExport, UnsupportedSchema
from prvstream.sinks.logger import get_logger

if TYPE_CHECKING:
    from prvstream.daemon.nsys.runscan import Run

__all__ = [
    "BOUND_MARGIN_NS",
    "Export",
    "ExportMeta",
    "ExportPlan",
    "KindSource",
    "ProcessRow",
    "open_export",
    "pack_i4_pair",
    "pid_of",
    "process_of",
    "quote_identifier",
    "ro_uri",
    "tid_of",
    "wrap_i4",
]

log = get_logger(__name__)

_NSIGHT_MARKERS: Final = ("StringIds", "TARGET_INFO_SESSION_START_TIME", *METADATA_TABLES)
#: (schema key, the tables to aggregate) -> ``Export._all_plain_facts``'s statement
_AGGREGATES: dict[tuple[int, tuple[tuple[str, str], ...]], str] = {}
_AGGREGATES_KEPT = 64
#: schema key -> (kind, table) of the tables refused for lacking their end column
#: (``Export.refused_rows``): from the schema alone, so once per nsys version
_REFUSED: dict[int, tuple[tuple[str, KindSource], ...]] = {}
_REFUSED_KEPT = 64


def open_export(path: str | Path) -> Export:
    """Open ``path`` read-only and check that it is an Nsight Systems export with data.

    Raises ``NotAnExport`` (not SQLite, corrupt, truncated, or no Nsight tables) or
    ``UnsupportedSchema`` (an export without any data kind prvstream converts).
    """
    p = Path(path).resolve()
    con = connect_read_only(p)
    try:
        export = Export(con, p)
    except sqlite3.DatabaseError as exc:
        con.close()
        raise NotAnExport(f"{p}: unreadable SQLite database ({exc}); re-export the report "
                          f"with nsys export --type sqlite") from exc
    except BaseException:
        con.close()
        raise
    return export


class Export(ExportClock):
    """A read-only connection to one export, with its probed schema and cached names.

    Use from one thread at a time. Context manager; ``close()`` releases the file and
    ``reopen()`` takes it again, keeping everything read so far (schema, metadata, plan, names).
    """

    def __init__(self, con: sqlite3.Connection, path: Path) -> None:
        super().__init__(con, path)
        if not any(t in self.tables for t in _NSIGHT_MARKERS):
            raise NotAnExport(f"{path}: SQLite database without Nsight Systems tables "
                              f"(no StringIds, metadata or session start); point prvstream at "
                              f"an nsys SQLite export")
        self._meta: ExportMeta | None = None
        self._plan: ExportPlan | None = None
        #: (table, where) -> rows, and (rows, first, last) where the time range was scanned
        self._counts: dict[tuple[str, str], int] = {}
        self._facts: dict[tuple[str, str], tuple[int, int | None, int | None]] = {}
        #: (table, start, where) -> the reorder window its block bounds gave (``window_of``)
        self._windows: dict[tuple[str, str, str], int] = {}
        self._runs: dict[tuple[str, str, str], tuple[Run, ...]] = {}
        #: ``scan_facts_behind``'s thread, its sources, bounds and answer, until settled
        self._facts_job: tuple[threading.Thread, list[KindSource], tuple[int, int],
                               list[tuple[object, ...] | None]] | None = None
        if not any(self._nonempty(src) for kind in TABLE_KINDS for src in self.sources(kind)):
            endless = sorted({s.table for k in TABLE_KINDS for s in registry.get(k).no_end(self)})
            if endless:
                raise UnsupportedSchema(f"{path}: {', '.join(endless)} without its end column; "
                                        f"intervals without ends cannot be converted: re-export "
                                        f"the report with nsys export --type sqlite")
            raise UnsupportedSchema(f"{path}: the export holds no CUDA, GPU, NVTX, OS runtime, "
                                    f"MPI or OpenACC rows; profile with --trace=cuda,nvtx,... "
                                    f"to get something to convert")

    # -- schema -----------------------------------------------------------------------------
    def refused_rows(self) -> dict[str, int]:
        """Rows per kind of tables refused for lacking their end column (never converted)."""
        refused = _REFUSED.get(self.schema_key)
        if refused is None:
            refused = tuple((kind, src) for kind in TABLE_KINDS
                            for src in registry.get(kind).no_end(self))
            if len(_REFUSED) >= _REFUSED_KEPT:
                _REFUSED.clear()
            _REFUSED[self.schema_key] = refused
        out: dict[str, int] = {}
        for kind, src in refused:
            n = self.count_rows(src.table, src.where)
            if n:
                out[kind] = out.get(kind, 0) + n
        return out

    def _nonempty(self, src: KindSource) -> bool:
        facts = self._facts.get((src.table, src.where))
        if facts is not None:
            return facts[0] > 0
        where = f" WHERE {src.where}" if src.where else ""
        row = self._con.execute(f"SELECT 1 FROM {_q(src.table)}{where} LIMIT 1").fetchone()
        return row is not None

    def nonempty_kinds(self, *, scan: bool = True) -> list[str]:
        """Table kinds with at least one row, in registry order (from the one scan per table
        that also finds its time range: planning needs both; while ``scan_facts_behind``'s
        scan runs, or with ``scan`` False, from one row looked up per table: the scan is then
        the caller's to start, ``scan_facts``)."""
        if self._facts_job is not None or not scan:
            return [k for k in TABLE_KINDS if any(self._nonempty(s) for s in self.sources(k))]
        self._all_plain_facts()
        return [k for k in TABLE_KINDS if any(self._source_facts(s)[0] > 0
                                               for s in self.sources(k))]

    def scan_facts(self) -> None:
        """Every source table's rows and time range, scanned now in one statement where not
        known yet (``nonempty_kinds`` scans them unless told not to)."""
        self._all_plain_facts()

    def scan_facts_behind(self) -> None:
        """Start ``_all_plain_facts``'s statement in a thread, on a connection of its own
        (SQLite scans every table without the GIL), so that planning's DISTINCT scans run
        meanwhile; whatever needs the facts waits for it (``_settle_facts``). The facts are
        the same either way."""
        if self._facts_job is not None:
            return
        found = self._plain_statement()
        if found is None:
            return
        todo, sql = found
        bounds = self.time_bound()  # on this thread: it reads this connection
        con = connect_read_only(self.path)
        answer: list[tuple[object, ...] | None] = [None]

        def scan() -> None:
            try:
                answer[0] = _facts_row(con, sql)
            except sqlite3.DatabaseError:
                pass  # each table on its own, failing as it would alone
            finally:
                con.close()

        job = threading.Thread(target=scan, name="prvstream-facts", daemon=True)
        job.start()
        self._facts_job = (job, todo, bounds, answer)

    def _settle_facts(self) -> None:
        """Wait for ``scan_facts_behind``'s scan and keep what it found."""
        job, self._facts_job = self._facts_job, None
        if job is not None:
            thread, todo, (lo, hi), answer = job
            thread.join()
            if answer[0] is not None:
                self._judge_all(todo, answer[0], lo, hi)

    def close(self) -> None:
        self._settle_facts()  # its thread holds a connection of its own
        super().close()

    def _end_where(self, src: KindSource) -> tuple[str, str]:
        end = (f"COALESCE({_q(src.end)}, {_q(src.start)})"
               if src.end and self.has(src.table, src.end) else _q(src.start))
        return end, f" WHERE {src.where}" if src.where else ""

    def _all_plain_facts(self) -> None:
        """``_plain_facts`` of every source table not yet scanned, in one statement (one
        aggregate SELECT per table, ``_facts_row``); a table they do not settle, or a
        statement SQLite refuses, is left to ``_source_facts``."""
        self._settle_facts()
        found = self._plain_statement()
        if found is None:
            return
        todo, sql = found
        lo, hi = self.time_bound()
        try:
            row = _facts_row(self._con, sql)
        except sqlite3.DatabaseError:
            return  # each table on its own, failing as it would alone
        self._judge_all(todo, row, lo, hi)

    def _plain_statement(self) -> tuple[list[KindSource], str] | None:
        """The source tables not yet scanned and ``_all_plain_facts``'s statement over them
        (None for fewer than two)."""
        todo = list({(s.table, s.where): s for k in TABLE_KINDS for s in self.sources(k)
                     if (s.table, s.where) not in self._facts}.values())
        if len(todo) < 2:
            return None
        key = (self.schema_key, tuple((s.table, s.where) for s in todo))
        sql = _AGGREGATES.get(key)
        if sql is None:  # from the schema alone: once per nsys version
            sql = " UNION ALL ".join(_aggregates(src, *self._end_where(src), tag=f"{i}, ")
                                     for i, src in enumerate(todo))
            if len(_AGGREGATES) >= _AGGREGATES_KEPT:
                _AGGREGATES.clear()
            _AGGREGATES[key] = sql
        return todo, sql

    def _judge_all(self, todo: list[KindSource], row: tuple[object, ...], lo: int,
                   hi: int) -> None:
        for i, src in enumerate(todo):
            found = _judged(row[5 * i:5 * i + 5], lo, hi)
            if found is not None:
                self._facts[(src.table, src.where)] = found
                self._counts[(src.table, src.where)] = found[0]

    def _source_facts(self, src: KindSource) -> tuple[int, int | None, int | None]:
        """(rows, first start, last end or start) of one source table: one scan, read once."""
        self._settle_facts()
        key = (src.table, src.where)
        found = self._facts.get(key)
        if found is None:
            end, where = self._end_where(src)
            lo, hi = self.time_bound()
            found = self._plain_facts(src, end, where, lo, hi)
            if found is None:  # some value out of bounds, missing or not an integer
                start = (f"CASE WHEN {_q(src.start)} BETWEEN {lo} AND {hi} "
                         f"THEN {_q(src.start)} END")
                n, a, b, raw = self._con.execute(
                    f"SELECT COUNT(*), MIN({start}), MAX(MAX(CASE WHEN {start} IS NOT NULL AND "
                    f"{end} <= {hi} THEN {end} END), MAX({start})), MAX(MAX({end}), "
                    f"MAX({_q(src.start)})) FROM {_q(src.table)}{where}").fetchone()
                if raw is not None:
                    int(raw)  # text where nsys writes integers: refused by name (ValueError)
                found = (int(n), None if a is None else int(a), None if b is None else int(b))
            self._facts[key] = found
            self._counts[key] = found[0]
        return found

    def _plain_facts(self, src: KindSource, end: str, where: str, lo: int,
                     hi: int) -> tuple[int, int | None, int | None] | None:
        """``_source_facts`` from plain aggregates (a third of the bounded query's cost), or
        None unless every start is an integer within ``lo``..``hi`` and so is every end: then
        the bounded query's answer is the same."""
        return _judged(self._con.execute(_aggregates(src, end, where)).fetchone(), lo, hi)

    def known_rows(self, table: str, where: str = "") -> int | None:
        """Rows of ``table`` (matching ``where``) if counted already (planning counts every
        data table), else None: never a query."""
        return self._counts.get((table, where))

    def counted_rows(self) -> int:
        """Rows of the whole tables counted so far (planning counts every data table)."""
        return sum(n for (_, where), n in self._counts.items() if not where)

    def note_window(self, table: str, start: str, where: str, window: int,
                    runs: tuple[Run, ...] | None = None) -> None:
        """Keep the reorder window of ``table`` (quoted), by ``start`` (quoted) where ``where``
        holds, as its block bounds gave it (``storage_order.reorder_window``'s answer), and
        the runs it is scanned as beyond the largest window (``runscan.table_runs``)."""
        self._windows[(table, start, where)] = window
        if runs is not None:
            self._runs[(table, start, where)] = runs

    def known_window(self, table: str, start: str, where: str = "") -> int | None:
        """The reorder window ``note_window`` kept, else None: never a query."""
        return self._windows.get((table, start, where))

    def known_runs(self, table: str, start: str, where: str = "") -> tuple[Run, ...] | None:
        """The runs ``note_window`` kept, else None (one scan, or SQLite sorts)."""
        return self._runs.get((table, start, where))

    def count_rows(self, table: str, where: str = "") -> int:
        """Rows of ``table`` (matching ``where``), counted once per export."""
        key = (table, where)
        found = self._counts.get(key)
        if found is None:
            clause = f" WHERE {where}" if where else ""
            (n,) = self._con.execute(f"SELECT COUNT(*) FROM {_q(table)}{clause}").fetchone()
            found = self._counts[key] = int(n)
        return found

    # -- metadata ---------------------------------------------------------------------------
    @property
    def meta(self) -> ExportMeta:
        """Metadata and clock anchors (computed once; scans each data table once)."""
        if self._meta is None:
            self._meta = self._read_meta()
        return self._meta

    def _read_meta(self) -> ExportMeta:
        md_table = next((t for t in METADATA_TABLES if self.has(t, "name")), None)
        md: dict[str, str] = {}
        if md_table is not None and self.has(md_table, "value"):
            md = {str(n): "" if v is None else str(v)
                  for n, v in self._con.execute(f"SELECT name, value FROM {md_table}")}
        hostname = ""
        if self.has("TARGET_INFO_SYSTEM_ENV", "value") and self.has("TARGET_INFO_SYSTEM_ENV",
                                                                      "name"):
            for (v,) in self._con.execute(
                    "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'"):
                if v:
                    hostname = str(v)
                    break
        hostname = hostname or md.get("EXPORT_HOST", "") or "unknown"
        utc, sysclk = self._session_clock()
        anchor, session = self._anchor()
        lo, hi = self.time_bound()
        first, last = self._time_range()
        if anchor == "system_clock":
            assert utc is not None and sysclk is not None
            offset = utc - sysclk
        elif anchor == "session_start":
            assert utc is not None
            if sysclk is not None:
                # about the export, not the user's action: ExportMeta.notes() tells the summary
                log.debug("system_clock_ignored", path=str(self.path), system_clock_ns=sysclk,
                          first_ns=first)
            offset = utc
        else:
            offset = 0
        return ExportMeta(
            path=str(self.path),
            product_version=md.get("EXPORT_PRODUCT_VERSION", ""),
            schema_version=md.get("EXPORT_SCHEMA_VERSION", ""),
            metadata_table=md_table,
            export_complete=md_table is None or "EXPORT_TIME" in md,
            hostname=hostname,
            utc_epoch_ns=utc,
            system_clock_ns=sysclk,
            first_ns=first,
            last_ns=last,
            wall_offset_ns=offset,
            clock_anchor=anchor,
            session_start_ns=session,
            bound_lo_ns=lo,
            bound_hi_ns=hi,
        )

    def _time_range(self) -> tuple[int, int]:
        lo: int | None = None
        hi: int | None = None
        for kind in TABLE_KINDS:
            for src in self.sources(kind):
                _, a, b = self._source_facts(src)
                if a is not None:
                    lo = int(a) if lo is None else min(lo, int(a))
                if b is not None:
                    hi = int(b) if hi is None else max(hi, int(b))
        return (lo or 0, hi if hi is not None else (lo or 0))

    # -- plan -------------------------------------------------------------------------------
    def plan(self, held: HeldChunks | None = None,
             kinds: Iterable[str] | None = None) -> ExportPlan:
        """Streams, threads, counts and first appearances, one aggregate scan per table (or,
        for the kinds in ``held``, from their rows read already); the distinct values of the
        converted ``kinds`` only (default: every kind). Made once: a later call gets the first
        call's plan."""
        if self._plan is None:
            self._plan = plan_export(self, held, kinds)
        return self._plan


_q = quote_identifier


def _aggregates(src: KindSource, end: str, where: str, tag: str = "") -> str:
    """The plain aggregates ``_judged`` reads of one source table: rows, starts, least and
    greatest start, greatest end (``end``, ``where``: from ``Export._end_where``), after
    ``tag``'s columns."""
    start = _q(src.start)
    return (f"SELECT {tag}COUNT(*), COUNT({start}), MIN({start}), MAX({start}), MAX({end}) "
            f"FROM {_q(src.table)}{where}")


def _facts_row(con: sqlite3.Connection, sql: str) -> tuple[object, ...]:
    """The aggregates of ``_plain_statement``'s tables as one row, table after table: its
    statement is one tagged aggregate SELECT per table joined by UNION ALL, a row each (the
    same tables as subqueries of one SELECT's FROM cost SQLite three times as much: it
    plans their join), put back in table order by their tags."""
    rows = sorted(con.execute(sql).fetchall(), key=lambda r: int(r[0]))
    return tuple(v for r in rows for v in r[1:])


def _judged(row: tuple[object, ...], lo: int, hi: int
            ) -> tuple[int, int | None, int | None] | None:
    """A table's facts from its plain aggregates (rows, starts, least and greatest start,
    greatest end), or None unless every start is an integer within ``lo``..``hi`` and so is
    every end."""
    n, starts, least, most, last = row
    if n == 0:
        return (0, None, None)
    if type(n) is not int or starts != n or not (
            type(least) is int and type(most) is int and type(last) is int):
        return None
    if least < lo or most > hi or last > hi:
        return None
    return (n, least, max(last, most))
