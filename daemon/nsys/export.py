"""Open one Nsight Systems SQLite export read-only and read what it holds before streaming.

Probes the schema (every table and column is optional), reads metadata, clock anchors, names
(strings, processes, threads, GPUs, NVTX domains, MPI ranks) and a one-pass aggregate plan.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar

import msgspec

from prvstream.daemon.kinds import registry
from prvstream.daemon.kinds.base import KindSource
from prvstream.daemon.kinds.context import pid_of, process_of, tid_of
from prvstream.daemon.kinds.nvtx import NVTX_DOMAIN_CREATE, NVTX_WHERE
from prvstream.daemon.kinds.registry import TABLE_KINDS
from prvstream.daemon.kinds.sql import pack_i4_pair, quote_identifier, wrap_i4
from prvstream.daemon.nsys.plan import ExportPlan, plan_export
from prvstream.daemon.nsys.sqlite import METADATA_TABLES, connect_read_only, ro_uri
from prvstream.sinks.errors import NotAnExport, UnsupportedSchema
from prvstream.sinks.logger import get_logger

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
_IN_BATCH: Final = 500
#: events may precede the recorded session start by this much and still trust systemClockNs
_CLOCK_SLACK_NS: Final = 1_000_000_000
#: rows sampled per table (evenly by rowid) to find where the bulk of an export's times lie
_SAMPLES: Final = 65
#: a row is trusted within this much of the sampled median time (see ``Export.time_bound``)
BOUND_MARGIN_NS: Final = 7 * 86_400 * 1_000_000_000
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


class ProcessRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One row of PROCESSES."""

    global_pid: int
    pid: int
    name: str = ""


class ExportMeta(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What an export says about itself, and how its session clock maps to wall time.

    ``wall_ns = session_ns + wall_offset_ns``; the session starts at ``session_start_ns`` on
    the export's clock, which is wall time ``utcEpochNs``. With ``systemClockNs`` (2025+) the
    timestamps are on the system clock and the session starts at ``systemClockNs``; otherwise
    they count from the session start (0), as in every export before 2025 and in the Nsight
    Systems GUI. A ``systemClockNs`` later than the bulk of the events (their sampled median,
    by more than 1 s) is not on the events' clock (seen in a 2026.1 WSL export: 515396 s vs
    events at 1.3 s) and is ignored. With no ``utcEpochNs`` at all, wall time is the
    export's own clock.
    """

    path: str
    product_version: str
    schema_version: str
    metadata_table: str | None
    export_complete: bool
    hostname: str
    utc_epoch_ns: int | None
    system_clock_ns: int | None
    first_ns: int
    last_ns: int
    wall_offset_ns: int
    #: how wall_offset_ns was derived: "system_clock", "session_start" or "none"
    clock_anchor: str = "system_clock"
    #: where the session starts on the export's clock (time 0 of the Nsight Systems GUI)
    session_start_ns: int = 0
    #: the times trusted on the export's clock (``Export.time_bound``); rows outside are
    #: dropped, counted per kind (``kinds.bounds``)
    bound_lo_ns: int = _I64_MIN
    bound_hi_ns: int = _I64_MAX

    def notes(self) -> list[str]:
        """What a reader of this export's summary should know about the export itself."""
        if self.clock_anchor == "session_start" and self.system_clock_ns is not None:
            return ["session start clock (systemClockNs) is not the events' clock: timestamps "
                    "taken as counting from the session start (utcEpochNs), so alignment with "
                    "other nodes' reports is less exact"]
        return []


_T = TypeVar("_T")

#: table definitions (name, CREATE sql) -> columns of every table: exports of one nsys
#: version share them, so the PRAGMA per table runs once per version and process
_SCHEMAS: dict[tuple[tuple[object, ...], ...], dict[str, list[str]]] = {}
_SCHEMAS_KEPT = 16


def _memoized(method: Callable[[Export], _T]) -> Callable[[Export], _T]:
    """Read a small table once per export (the result survives ``Export.reopen``)."""
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self: Export) -> _T:
        if name not in self._memo:
            self._memo[name] = method(self)
        found: _T = self._memo[name]
        return found

    return wrapper


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


class Export:
    """A read-only connection to one export, with its probed schema and cached names.

    Use from one thread at a time. Context manager; ``close()`` releases the file and
    ``reopen()`` takes it again, keeping everything read so far (schema, metadata, plan, names).
    """

    def __init__(self, con: sqlite3.Connection, path: Path) -> None:
        self._con = con
        self.path = path
        self.tables: dict[str, list[str]] = self._probe_tables()
        if not any(t in self.tables for t in _NSIGHT_MARKERS):
            raise NotAnExport(f"{path}: SQLite database without Nsight Systems tables "
                              f"(no StringIds, metadata or session start); point prvstream at "
                              f"an nsys SQLite export")
        self._strings: dict[int, str] = {-1: ""}
        self._inline: dict[int, str] = {}
        self._inline_ids: dict[str, int] | None = None
        self._meta: ExportMeta | None = None
        #: small tables read once (processes, thread and domain names, ...)
        self._memo: dict[str, Any] = {}
        self._closed = False
        self._plan: ExportPlan | None = None
        #: (table, where) -> rows, and (rows, first, last) where the time range was scanned
        self._counts: dict[tuple[str, str], int] = {}
        self._facts: dict[tuple[str, str], tuple[int, int | None, int | None]] = {}
        if not any(self._nonempty(src) for kind in TABLE_KINDS for src in self.sources(kind)):
            endless = sorted({s.table for k in TABLE_KINDS for s in registry.get(k).no_end(self)})
            if endless:
                raise UnsupportedSchema(f"{path}: {', '.join(endless)} without its end column; "
                                        f"intervals without ends cannot be converted: re-export "
                                        f"the report with nsys export --type sqlite")
            raise UnsupportedSchema(f"{path}: the export holds no CUDA, GPU, NVTX, OS runtime, "
                                    f"MPI or OpenACC rows; profile with --trace=cuda,nvtx,... "
                                    f"to get something to convert")

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Release the file; what was read stays (``reopen`` continues from it)."""
        if not self._closed:
            self._closed = True
            self._con.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def reopen(self) -> None:
        """A fresh connection after ``close`` (a no-op while open); nothing is read again."""
        if self._closed:
            self._con = connect_read_only(self.path)
            self._closed = False

    def __enter__(self) -> Export:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def connection(self) -> sqlite3.Connection:
        """The read-only connection (for table streams)."""
        return self._con

    # -- schema -----------------------------------------------------------------------------
    def _probe_tables(self) -> dict[str, list[str]]:
        """Tables and their columns; an export whose table definitions were seen before (the
        same nsys version) costs one query instead of one per table."""
        found = tuple(self._con.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"))
        cached = _SCHEMAS.get(found)
        if cached is None:
            cached = {str(n): [str(r[1]) for r in self._con.execute(
                f"PRAGMA table_info({_q(str(n))})")] for n, _ in found}
            if len(_SCHEMAS) >= _SCHEMAS_KEPT:
                _SCHEMAS.pop(next(iter(_SCHEMAS)))
            _SCHEMAS[found] = cached
        return {n: list(cols) for n, cols in cached.items()}

    def has(self, table: str, column: str | None = None) -> bool:
        """Whether ``table`` (and ``column`` in it) exists."""
        cols = self.tables.get(table)
        if cols is None:
            return False
        return column is None or column in cols

    def sources(self, kind: str) -> list[KindSource]:
        """The tables present in this export that feed ``kind`` (possibly empty ones)."""
        return registry.get(kind).sources(self)

    def refused_rows(self) -> dict[str, int]:
        """Rows per kind of tables refused for lacking their end column (never converted)."""
        out: dict[str, int] = {}
        for kind in TABLE_KINDS:
            for src in registry.get(kind).no_end(self):
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

    def nonempty_kinds(self) -> list[str]:
        """Table kinds with at least one row, in registry order (from the one scan per table
        that also finds its time range: planning needs both)."""
        return [k for k in TABLE_KINDS if any(self._source_facts(s)[0] > 0
                                               for s in self.sources(k))]

    def _source_facts(self, src: KindSource) -> tuple[int, int | None, int | None]:
        """(rows, first start, last end or start) of one source table: one scan, read once."""
        key = (src.table, src.where)
        found = self._facts.get(key)
        if found is None:
            end = (f"COALESCE({_q(src.end)}, {_q(src.start)})"
                   if src.end and self.has(src.table, src.end) else _q(src.start))
            where = f" WHERE {src.where}" if src.where else ""
            lo, hi = self.time_bound()
            start = f"CASE WHEN {_q(src.start)} BETWEEN {lo} AND {hi} THEN {_q(src.start)} END"
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

    @_memoized
    def _session_clock(self) -> tuple[int | None, int | None]:
        """(utcEpochNs, systemClockNs) of TARGET_INFO_SESSION_START_TIME, where present."""
        if not self.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
            return None, None
        cols = "utcEpochNs, " + ("systemClockNs" if self.has(
            "TARGET_INFO_SESSION_START_TIME", "systemClockNs") else "NULL")
        row = self._con.execute(
            f"SELECT {cols} FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
        if row is None:
            return None, None
        return (None if row[0] is None else int(row[0]), None if row[1] is None else int(row[1]))

    def _anchor(self) -> tuple[str, int]:
        """(clock anchor, session start on the export's clock): ``systemClockNs`` is on the
        events' clock unless it follows the bulk of them (the sampled median, plus the slack),
        so that one hostile early row cannot move the anchor."""
        utc, sysclk = self._session_clock()
        self.time_bound()
        mid = self._memo.get("median")
        if utc is not None and sysclk is not None and (
                mid is None or sysclk <= int(mid) + _CLOCK_SLACK_NS):
            return "system_clock", sysclk
        return ("session_start", 0) if utc is not None else ("none", 0)

    def time_bound(self) -> tuple[int, int]:
        """The times trusted on the export's clock: within ``BOUND_MARGIN_NS`` of the median
        of rows sampled evenly (by rowid) from every data table.

        Nothing before the session start either (less 1 s of slack). Not min/max, which one
        hostile value widens (``end = INT64_MAX``); not
        ``ANALYSIS_DETAILS``, which is on another clock in some real exports. The median
        holds while fewer than half the sampled rows are hostile; a real session longer than
        the margin on either side of its median would lose its far rows (counted).
        """
        found = self._memo.get("time_bound")
        if found is None:
            samples: list[int] = []
            seen: set[str] = set()
            for kind in TABLE_KINDS:
                for src in self.sources(kind):
                    if src.table not in seen:
                        seen.add(src.table)
                        samples.extend(self._sample_starts(src))
            if not samples:
                found = (_I64_MIN, _I64_MAX)
            else:
                mid = self._memo["median"] = sorted(samples)[len(samples) // 2]
                found = (max(_I64_MIN, mid - BOUND_MARGIN_NS),
                         min(_I64_MAX, mid + BOUND_MARGIN_NS))
            self._memo["time_bound"] = found
            anchor, session = self._anchor()
            if anchor != "none":  # nothing before the session start, less the anchor's slack
                found = (max(found[0], session - _CLOCK_SLACK_NS), found[1])
                self._memo["time_bound"] = found
        bound: tuple[int, int] = found
        return bound

    def _sample_starts(self, src: KindSource) -> list[int]:
        """Start times of up to ``_SAMPLES`` rows spread evenly over the table's rowids."""
        t = _q(src.table)
        steps = ",".join(f"({k})" for k in range(_SAMPLES))
        where = f" AND ({src.where})" if src.where else ""
        try:  # one statement: the rowid range, and the rows at evenly spaced rowids
            rows = self._con.execute(
                f"SELECT {_q(src.start)} FROM {t} WHERE rowid IN (SELECT lo + (hi - lo) * k / "
                f"{_SAMPLES - 1} FROM (SELECT MIN(rowid) AS lo, MAX(rowid) AS hi FROM {t}), "
                f"(SELECT column1 AS k FROM (VALUES {steps}))){where}").fetchall()
        except sqlite3.OperationalError:  # a table without rowid: not sampled
            return []
        return [int(v) for (v,) in rows if isinstance(v, int)]

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

    # -- strings ----------------------------------------------------------------------------
    def string(self, sid: int) -> str:
        """The text of a string id ("" for -1 or an id the export does not hold)."""
        if sid < 0:
            return self._strings.get(sid) or self._inline.get(sid, "")
        got = self._strings.get(sid)
        if got is None:
            got = self.strings((sid,)).get(sid, "")
        return got

    def strings(self, ids: Iterable[int]) -> dict[int, str]:
        """Texts of many string ids at once (missing ids map to "")."""
        wanted = set(ids)
        out: dict[int, str] = {}
        missing: list[int] = []
        for sid in wanted:
            if sid < 0:
                out[sid] = self._inline.get(sid, "")
            elif sid in self._strings:
                out[sid] = self._strings[sid]
            else:
                missing.append(sid)
        if missing and self.has("StringIds", "value"):
            for i in range(0, len(missing), _IN_BATCH):
                batch = missing[i:i + _IN_BATCH]
                marks = ",".join("?" * len(batch))
                for sid, value in self._con.execute(
                        f"SELECT id, value FROM StringIds WHERE id IN ({marks})", batch):
                    self._strings[int(sid)] = "" if value is None else str(value)
        for sid in missing:
            out[sid] = self._strings.setdefault(sid, "")
        return out

    def inline_ids(self) -> dict[str, int]:
        """Negative ids of inline NVTX texts, numbered in text order."""
        if self._inline_ids is None:
            found: list[str] = []
            if self.has("NVTX_EVENTS", "text") and self.has("NVTX_EVENTS", "eventType"):
                tid_null = "textId IS NULL AND " if self.has("NVTX_EVENTS", "textId") else ""
                found = [str(t) for (t,) in self._con.execute(
                    f"SELECT DISTINCT text FROM NVTX_EVENTS WHERE {tid_null}text IS NOT NULL"
                    f" AND {NVTX_WHERE}")]
            self._intern_sorted(found)
        assert self._inline_ids is not None
        return self._inline_ids

    def number_inline_texts(self, texts: Iterable[str]) -> dict[str, int]:
        """Number inline NVTX texts from a scan that found them all (the plan's), unless they
        are numbered already; the numbering is the same either way (text order)."""
        if self._inline_ids is None:
            self._intern_sorted(list(texts))
        return self.inline_ids()

    def _intern_sorted(self, found: list[str]) -> None:
        self._inline_ids = {}
        for text in sorted(found):
            if text not in self._inline_ids:
                nid = -(len(self._inline_ids) + 2)  # -1 stays "no string"
                self._inline_ids[text] = nid
                self._inline[nid] = text

    def intern_inline(self, text: str) -> int:
        """Negative id for an inline NVTX text (new texts get the next free id)."""
        ids = self.inline_ids()
        nid = ids.get(text)
        if nid is None:
            nid = -(len(ids) + 2)
            ids[text] = nid
            self._inline[nid] = text
        return nid

    # -- objects ----------------------------------------------------------------------------
    @_memoized
    def processes(self) -> dict[int, ProcessRow]:
        """globalPid -> PROCESSES row."""
        if not self.has("PROCESSES", "globalPid"):
            return {}
        pid = "pid" if self.has("PROCESSES", "pid") else "NULL"
        name = "name" if self.has("PROCESSES", "name") else "NULL"
        out: dict[int, ProcessRow] = {}
        for g, p, n in self._con.execute(f"SELECT globalPid, {pid}, {name} FROM PROCESSES"):
            if g is None:
                continue
            g = int(g)
            out[g] = ProcessRow(g, pid_of(g) if p is None else int(p), "" if n is None
                                else str(n))
        return out

    @_memoized
    def thread_names(self) -> dict[int, str]:
        """globalTid -> thread name (ThreadNames joined to StringIds; highest priority wins)."""
        if not (self.has("ThreadNames", "globalTid") and self.has("ThreadNames", "nameId")):
            return {}
        order = " ORDER BY priority" if self.has("ThreadNames", "priority") else ""
        rows = self._con.execute(
            f"SELECT globalTid, nameId FROM ThreadNames{order}").fetchall()
        names = self.strings(int(n) for _, n in rows if n is not None)
        return {int(g): names[int(n)] for g, n in rows if g is not None and n is not None}

    @_memoized
    def nvtx_domains(self) -> dict[int, str]:
        """domainId -> domain name, from NvtxDomainCreate rows (domain 0 is the default)."""
        if not (self.has("NVTX_EVENTS", "domainId") and self.has("NVTX_EVENTS", "eventType")):
            return {}
        text = "text" if self.has("NVTX_EVENTS", "text") else "NULL"
        tid = "textId" if self.has("NVTX_EVENTS", "textId") else "NULL"
        rows = self._con.execute(
            f"SELECT domainId, {text}, {tid} FROM NVTX_EVENTS WHERE eventType = "
            f"{NVTX_DOMAIN_CREATE} ORDER BY start").fetchall()
        names = self.strings(int(t) for _, _, t in rows if t is not None)
        out: dict[int, str] = {}
        for dom, txt, t in rows:
            if dom is None:
                continue
            out.setdefault(int(dom), str(txt) if txt is not None else
                           names.get(int(t), "") if t is not None else "")
        return out

    @_memoized
    def mpi_ranks(self) -> dict[int, int]:
        """globalPid -> MPI rank, from MPI_RANKS (rank, globalTid) when present."""
        if not self.has("MPI_RANKS", "rank"):
            return {}
        key = "globalTid" if self.has("MPI_RANKS", "globalTid") else \
            "globalPid" if self.has("MPI_RANKS", "globalPid") else None
        if key is None:
            return {}
        return {process_of(int(g)): int(r) for g, r in self._con.execute(
            f"SELECT {key}, rank FROM MPI_RANKS") if g is not None and r is not None}

    @_memoized
    def gpu_metric_names(self) -> dict[int, str]:
        """metricId -> metric name, from TARGET_INFO_GPU_METRICS."""
        t = "TARGET_INFO_GPU_METRICS"
        if not (self.has(t, "metricId") and self.has(t, "metricName")):
            return {}
        return {int(i): str(n) for i, n in self._con.execute(
            f"SELECT metricId, metricName FROM {t} ORDER BY metricId") if i is not None}

    # -- plan -------------------------------------------------------------------------------
    def plan(self) -> ExportPlan:
        """Streams, threads, counts and first appearances, one aggregate scan per table."""
        if self._plan is None:
            self._plan = plan_export(self)
        return self._plan

    def rows(self, sql: str, params: Iterable[object] = ()) -> Iterator[tuple[object, ...]]:
        """Run a read-only query (used by the planner and table streams)."""
        return iter(self._con.execute(sql, tuple(params)))


_q = quote_identifier


