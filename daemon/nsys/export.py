"""Open one Nsight Systems SQLite export read-only and read what it holds before streaming.

Probes the schema (every table and column is optional), reads metadata, clock anchors, names
(strings, processes, threads, GPUs, NVTX domains, MPI ranks) and a one-pass aggregate plan.
"""

from __future__ import annotations

import functools
import sqlite3
import struct
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Final, NamedTuple, TypeVar

import msgspec

from prvstream.sinks.errors import NotAnExport, UnsupportedSchema
from prvstream.sinks.logger import get_logger

__all__ = [
    "ENUM_FALLBACKS",
    "KIND_TABLES",
    "MEMCPY_KIND_SHORT",
    "NVTX_DOMAIN_CREATE",
    "NVTX_KINDS",
    "NVTX_MARK",
    "NVTX_PUSH_POP",
    "NVTX_START_END",
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

#: NVTX_EVENTS.eventType values we convert (from ENUM_NSYS_EVENT_TYPE, stable since 2020)
NVTX_MARK: Final = 34
NVTX_PUSH_POP: Final = 59
NVTX_START_END: Final = 60
NVTX_DOMAIN_CREATE: Final = 75
NVTX_KINDS: Final = (NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END)
_NVTX_WHERE: Final = "eventType IN (34, 59, 60)"

#: short memcpy direction names (CUPTI copyKind), for compact labels
MEMCPY_KIND_SHORT: Final[dict[int, str]] = {
    0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD",
}

#: labels of the stable enums, used when the export has no ENUM_<name> table (before 2024.5);
#: they are the labels nsys itself writes in ENUM_* tables, so every export labels alike
ENUM_FALLBACKS: Final[dict[str, dict[int, str]]] = {
    "CUDA_MEMCPY_OPER": {
        0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
        4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
        8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer",
        11: "Unified Host-to-Device", 12: "Unified Device-to-Host",
        13: "Unified Device-to-Device",
    },
    "CUPTI_SYNC_TYPE": {
        0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync",
        4: "Context sync",
    },
    "NSYS_EVENT_TYPE": {
        33: "NvtxCategory", 34: "NvtxMark", 39: "NvtxThread", 59: "NvtxPushPopRange",
        60: "NvtxStartEndRange", 75: "NvtxDomainCreate", 76: "NvtxDomainDestroy",
    },
}


class KindSource(NamedTuple):
    """One table feeding a data kind: its time columns and the rows it contributes."""

    table: str
    start: str = "start"
    end: str | None = "end"
    where: str = ""


#: the tables behind each data kind (MPI tables are discovered: any ``MPI_*_EVENTS`` table
#: with start, end and globalTid)
KIND_TABLES: Final[dict[str, tuple[KindSource, ...]]] = {
    "kernel": (KindSource("CUPTI_ACTIVITY_KIND_KERNEL"),),
    "memcpy": (KindSource("CUPTI_ACTIVITY_KIND_MEMCPY"),),
    "memset": (KindSource("CUPTI_ACTIVITY_KIND_MEMSET"),),
    "sync": (KindSource("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),),
    "runtime": (KindSource("CUPTI_ACTIVITY_KIND_RUNTIME"),),
    "nvtx": (KindSource("NVTX_EVENTS", where=_NVTX_WHERE),),
    "osrt": (KindSource("OSRT_API"),),
    "mpi": (),
    "graph": (KindSource("CUDA_GRAPH_EVENTS"), KindSource("CUDA_GRAPH_NODE_EVENTS")),
    "openacc": (
        KindSource("CUPTI_ACTIVITY_KIND_OPENACC_DATA"),
        KindSource("CUPTI_ACTIVITY_KIND_OPENACC_LAUNCH"),
        KindSource("CUPTI_ACTIVITY_KIND_OPENACC_OTHER"),
    ),
    "gpu_metrics": (KindSource("GPU_METRICS", start="timestamp", end=None),),
}

_METADATA_TABLES: Final = ("META_DATA_EXPORT", "EXPORT_META_DATA")
_NSIGHT_MARKERS: Final = ("StringIds", "TARGET_INFO_SESSION_START_TIME", *_METADATA_TABLES)
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_IN_BATCH: Final = 500
#: events may precede the recorded session start by this much and still trust systemClockNs
_CLOCK_SLACK_NS: Final = 1_000_000_000
#: planner value columns that are 64-bit string ids (the others are int32 enums)
_ID_COLUMNS: Final = frozenset({"shortName", "demangledName", "nameId", "textId", "graphId"})


def pid_of(gtid: int) -> int:
    """OS pid encoded in a globalTid/globalPid."""
    return (gtid >> 24) & 0xFFFFFF


def tid_of(gtid: int) -> int:
    """OS tid encoded in a globalTid."""
    return gtid & 0xFFFFFF


def process_of(gtid: int) -> int:
    """The globalPid a globalTid belongs to (tid bits cleared, host bits kept)."""
    return gtid & ~0xFFFFFF


class ProcessRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One row of PROCESSES."""

    global_pid: int
    pid: int
    name: str = ""


class ExportMeta(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What an export says about itself, and how its session clock maps to wall time.

    ``wall_ns = session_ns + wall_offset_ns``. With ``systemClockNs`` (2025+) the offset is
    ``utcEpochNs - systemClockNs`` (exact); without it the earliest converted timestamp is
    anchored on the session start wall time (``utcEpochNs - first_ns``); with no
    ``utcEpochNs`` at all the earliest timestamp becomes wall time 0 (``-first_ns``).
    A ``systemClockNs`` later than the first event (by more than 1 s) is not on the events'
    clock (seen in a 2026.1 WSL export: 515396 s vs events at 1.3 s) and is ignored.
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
    #: how wall_offset_ns was derived: "system_clock", "first_event" or "none"
    clock_anchor: str = "system_clock"


class ExportPlan(msgspec.Struct, forbid_unknown_fields=True):
    """Distinct objects and values of an export, from DISTINCT scans per table (no sorts).

    ``values[kind]`` lists the distinct values, sorted; they are string ids (kernel
    shortName, runtime/osrt nameId, NVTX textId or negative interned inline text, MPI textId,
    graph name), or enum ids (memcpy copyKind, sync syncType, openacc
    eventKind, GPU metricId). Extra key: ``nvtx_domain`` (domainId).
    """

    #: (globalPid, deviceId, streamId) of every GPU stream with activity, sorted
    streams: list[tuple[int, int, int]]
    #: globalTid of every CPU thread with activity, sorted
    threads: list[int]
    #: globalPid -> its active globalTids (sorted)
    threads_by_process: dict[int, list[int]]
    #: every globalPid with CPU or GPU activity, sorted
    processes: list[int]
    #: rows per kind (only kinds with rows)
    counts: dict[str, int]
    values: dict[str, list[int]]
    #: (gpu, metricId) pairs of GPU_METRICS
    gpu_metrics: list[tuple[int, int]] = msgspec.field(default_factory=list)
    #: (globalPid, streamId, deviceId as written, device it belongs to) of sync rows
    sync_devices: list[tuple[int, int, int, int]] = msgspec.field(default_factory=list)


def _header_problem(path: Path) -> str | None:
    """Why the file cannot be a complete SQLite database, from its 100-byte header."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(100)
    except OSError as exc:
        return f"cannot read the file ({exc.strerror or exc})"
    if size == 0:
        return "the file is empty"
    if len(head) < 100 or not head.startswith(_SQLITE_MAGIC):
        return "not an SQLite database (bad header)"
    (page_size,) = struct.unpack(">H", head[16:18])
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        return "corrupt SQLite header (bad page size)"
    change, pages = struct.unpack(">II", head[24:32])
    (valid_for,) = struct.unpack(">I", head[92:96])
    if size % page_size:
        return f"truncated (size {size} is not a multiple of the page size {page_size})"
    if pages and valid_for == change and size < pages * page_size:
        return f"truncated ({size} bytes, the header announces {pages * page_size})"
    return None


def ro_uri(path: Path) -> str:
    """A read-only SQLite URI for ``path`` (quoted: a ``#`` or ``?`` in it stays in the path)."""
    return "file:" + urllib.parse.quote(str(Path(path).resolve())) + "?mode=ro"


_T = TypeVar("_T")


def _memoized(method: Callable[[Export], _T]) -> Callable[[Export], _T]:
    """Read a small table once per export (the result survives ``PreparedReport.reopen``)."""
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self: Export) -> _T:
        if name not in self.memo:
            self.memo[name] = method(self)
        found: _T = self.memo[name]
        return found

    return wrapper


def open_export(path: str | Path) -> Export:
    """Open ``path`` read-only and check that it is an Nsight Systems export with data.

    Raises ``NotAnExport`` (not SQLite, corrupt, truncated, or no Nsight tables) or
    ``UnsupportedSchema`` (an export without any data kind prvstream converts).
    """
    p = Path(path).resolve()
    problem = _header_problem(p)
    if problem is not None:
        raise NotAnExport(f"{p}: {problem}; point prvstream at an Nsight Systems SQLite "
                          f"export (nsys export --type sqlite) that has been fully written")
    try:
        con = sqlite3.connect(ro_uri(p), uri=True, check_same_thread=False)
    except sqlite3.Error as exc:
        raise NotAnExport(f"{p}: cannot open as SQLite ({exc}); check the file and its "
                          f"permissions") from exc
    try:
        con.execute("PRAGMA query_only=1")
        con.execute("PRAGMA cache_size=-512")  # 512 KiB: sorts spill to temp files sooner
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

    Use from one thread at a time. Context manager; ``close()`` releases the file.
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
        self.memo: dict[str, Any] = {}
        self._plan: ExportPlan | None = None
        if not any(self._nonempty(src) for kind in KIND_TABLES for src in self.sources(kind)):
            raise UnsupportedSchema(f"{path}: the export holds no CUDA, GPU, NVTX, OS runtime, "
                                    f"MPI or OpenACC rows; profile with --trace=cuda,nvtx,... "
                                    f"to get something to convert")

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> Export:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def connection(self) -> sqlite3.Connection:
        """The read-only connection (for table streams)."""
        return self._con

    def check_integrity(self) -> None:
        """Run ``PRAGMA quick_check``; raise ``NotAnExport`` when the file is damaged."""
        try:
            rows = self._con.execute("PRAGMA quick_check").fetchall()
        except sqlite3.DatabaseError as exc:
            raise NotAnExport(f"{self.path}: integrity check failed ({exc}); the file is "
                              f"damaged or still being written: re-export it") from exc
        if [r[0] for r in rows] != ["ok"]:
            detail = "; ".join(str(r[0]) for r in rows[:3])
            raise NotAnExport(f"{self.path}: integrity check failed ({detail}); the file is "
                              f"damaged or still being written: re-export it")

    # -- schema -----------------------------------------------------------------------------
    def _probe_tables(self) -> dict[str, list[str]]:
        names = [r[0] for r in self._con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {n: [r[1] for r in self._con.execute(f"PRAGMA table_info({_q(n)})")]
                for n in names}

    def has(self, table: str, column: str | None = None) -> bool:
        """Whether ``table`` (and ``column`` in it) exists."""
        cols = self.tables.get(table)
        if cols is None:
            return False
        return column is None or column in cols

    def sources(self, kind: str) -> list[KindSource]:
        """The tables present in this export that feed ``kind`` (possibly empty ones)."""
        if kind == "mpi":
            return [KindSource(t) for t in sorted(self.tables)
                    if t.startswith("MPI_") and t.endswith("_EVENTS")
                    and all(self.has(t, c) for c in ("start", "end", "globalTid"))]
        return [s for s in KIND_TABLES[kind] if self.has(s.table, s.start)]

    def _nonempty(self, src: KindSource) -> bool:
        where = f" WHERE {src.where}" if src.where else ""
        row = self._con.execute(f"SELECT 1 FROM {_q(src.table)}{where} LIMIT 1").fetchone()
        return row is not None

    def nonempty_kinds(self) -> list[str]:
        """Kinds with at least one row, in ``KIND_TABLES`` order."""
        return [k for k in KIND_TABLES if any(self._nonempty(s) for s in self.sources(k))]

    def enum_labels(self, name: str) -> dict[int, str]:
        """Labels of ``ENUM_<name>`` (id -> label), or the built-in fallback, or {}."""
        table = f"ENUM_{name}"
        if self.has(table, "id"):
            col = "label" if self.has(table, "label") else "name" if self.has(table, "name") \
                else None
            if col is not None:
                return {int(i): str(v) for i, v in self._con.execute(
                    f"SELECT id, {col} FROM {_q(table)}") if i is not None}
        return dict(ENUM_FALLBACKS.get(name, {}))

    # -- metadata ---------------------------------------------------------------------------
    @property
    def meta(self) -> ExportMeta:
        """Metadata and clock anchors (computed once; scans each data table once)."""
        if self._meta is None:
            self._meta = self._read_meta()
        return self._meta

    def _read_meta(self) -> ExportMeta:
        md_table = next((t for t in _METADATA_TABLES if self.has(t, "name")), None)
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
        utc = sysclk = None
        if self.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
            cols = "utcEpochNs, " + ("systemClockNs" if self.has(
                "TARGET_INFO_SESSION_START_TIME", "systemClockNs") else "NULL")
            row = self._con.execute(
                f"SELECT {cols} FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
            if row is not None:
                utc = None if row[0] is None else int(row[0])
                sysclk = None if row[1] is None else int(row[1])
        first, last = self._time_range()
        anchor = "none"
        if utc is not None and sysclk is not None and sysclk <= first + _CLOCK_SLACK_NS:
            offset, anchor = utc - sysclk, "system_clock"
        elif utc is not None:
            if sysclk is not None:
                log.warning("system_clock_ignored", path=str(self.path), system_clock_ns=sysclk,
                            first_ns=first)
            offset, anchor = utc - first, "first_event"
        else:
            offset = -first
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
        )

    def _time_range(self) -> tuple[int, int]:
        lo: int | None = None
        hi: int | None = None
        for kind in KIND_TABLES:
            for src in self.sources(kind):
                end = (f"COALESCE({_q(src.end)}, {_q(src.start)})"
                       if src.end and self.has(src.table, src.end) else _q(src.start))
                where = f" WHERE {src.where}" if src.where else ""
                a, b = self._con.execute(
                    f"SELECT MIN({_q(src.start)}), MAX(MAX({end}), MAX({_q(src.start)})) "
                    f"FROM {_q(src.table)}{where}").fetchone()
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
                    f" AND {_NVTX_WHERE}")]
            self._intern_sorted(found)
        assert self._inline_ids is not None
        return self._inline_ids

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

    def gpus(self) -> dict[int, str]:
        """CUDA device id (as in activity ``deviceId``) -> GPU name.

        TARGET_INFO_GPU.id -> name when present; else TARGET_INFO_CUDA_DEVICE.gpuId -> "GPU n"
        (that table carries no names); else {}.
        """
        if self.has("TARGET_INFO_GPU", "id") and self.has("TARGET_INFO_GPU", "name"):
            return {int(i): str(n or f"GPU {i}") for i, n in self._con.execute(
                "SELECT id, name FROM TARGET_INFO_GPU ORDER BY id") if i is not None}
        if self.has("TARGET_INFO_CUDA_DEVICE", "gpuId"):
            return {int(i): f"GPU {i}" for (i,) in self._con.execute(
                "SELECT DISTINCT gpuId FROM TARGET_INFO_CUDA_DEVICE ORDER BY 1")
                if i is not None}
        return {}

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
            self._plan = _Planner(self).run()
        return self._plan

    def rows(self, sql: str, params: Iterable[object] = ()) -> Iterator[tuple[object, ...]]:
        """Run a read-only query (used by the planner and table streams)."""
        return iter(self._con.execute(sql, tuple(params)))


def wrap_i4(expr: str) -> str:
    """SQL wrapping an integer into int32 two's complement (CUPTI's UINT32_MAX becomes -1)."""
    return f"((({expr}) + 2147483648) & 4294967295) - 2147483648"


def pack_i4_pair(lo: str, hi: str) -> str:
    """SQL packing two int32 values into one int64, low half first: read back over two
    adjacent int32 fields of a little-endian structured array (``rowfill``)."""
    return f"(({lo}) & 4294967295) | (({hi}) << 32)"


def quote_identifier(name: str) -> str:
    """Quote an SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


_q = quote_identifier


class _Planner:
    """Builds an ExportPlan from COUNT and DISTINCT scans: SQLite keeps a small b-tree of the
    distinct values and never sorts a table (a GROUP BY would sort every row)."""

    def __init__(self, export: Export) -> None:
        self.x = export
        self.streams: set[tuple[int, int, int]] = set()
        #: (globalPid, deviceId, streamId) of synchronization rows, placed after the others
        self.sync_keys: set[tuple[int, int, int]] = set()
        self.threads: set[int] = set()
        self.counts: dict[str, int] = {}
        self.values: dict[str, set[int]] = {}
        self.metrics: set[tuple[int, int]] = set()

    def _col(self, table: str, col: str, default: str = "-1") -> str:
        return f"COALESCE({_q(col)}, {default})" if self.x.has(table, col) else default

    def _see(self, kind: str, value: int) -> None:
        self.values.setdefault(kind, set()).add(value)

    def _count(self, kind: str, n: int) -> None:
        if n:
            self.counts[kind] = self.counts.get(kind, 0) + n

    def _distinct(self, key: str, table: str, column: str, where: str = "") -> None:
        """Every value of ``column`` (one DISTINCT per column: much cheaper in SQLite than one
        over every key column together)."""
        for (v,) in self.x.rows(f"SELECT DISTINCT {column} FROM {_q(table)}{where}"):
            self._see(key, int(v))  # type: ignore[call-overload]

    def _gpu(self, kind: str, table: str, values: list[tuple[str, str]]) -> None:
        """GPU activity table: stream keys plus named values (kind key, column)."""
        keys = [self._col(table, "globalPid"), wrap_i4(self._col(table, "deviceId")),
                wrap_i4(self._col(table, "streamId"))]
        for g, d, s in self.x.rows(f"SELECT DISTINCT {', '.join(keys)} FROM {_q(table)}"):
            key = (int(g), int(d), int(s))  # type: ignore[call-overload]
            (self.sync_keys if kind == "sync" else self.streams).add(key)
        for (count,) in self.x.rows(f"SELECT COUNT(*) FROM {_q(table)}"):
            self._count(kind, int(count))  # type: ignore[call-overload]
        for key_name, c in values:
            column = self._col(table, c) if c in _ID_COLUMNS else wrap_i4(self._col(table, c))
            self._distinct(key_name, table, column)

    def _cpu(self, kind: str, src: KindSource, value: str | None, key: str | None = None,
             extra: str | None = None, extra_key: str | None = None) -> None:
        t = src.table
        where = f" WHERE {src.where}" if src.where else ""
        for (g,) in self.x.rows(f"SELECT DISTINCT {self._col(t, 'globalTid')} FROM {_q(t)}"
                                f"{where}"):
            self.threads.add(int(g))  # type: ignore[call-overload]
        for (count,) in self.x.rows(f"SELECT COUNT(*) FROM {_q(t)}{where}"):
            self._count(kind, int(count))  # type: ignore[call-overload]
        self._distinct(key or kind, t, value or "-1", where)
        if extra_key is not None:
            self._distinct(extra_key, t, extra or "0", where)

    def run(self) -> ExportPlan:
        x = self.x
        for src in x.sources("kernel"):
            self._gpu("kernel", src.table, [("kernel", "shortName")])
        for src in x.sources("memcpy"):
            self._gpu("memcpy", src.table, [("memcpy", "copyKind")])
        for src in x.sources("memset"):
            self._gpu("memset", src.table, [])
        for src in x.sources("sync"):
            self._gpu("sync", src.table, [("sync", "syncType")])
        for src in x.sources("runtime"):
            self._cpu("runtime", src, self._col(src.table, "nameId"))
        for src in x.sources("osrt"):
            self._cpu("osrt", src, self._col(src.table, "nameId"))
        for src in x.sources("mpi"):
            self._cpu("mpi", src, self._col(src.table, "textId"))
        for src in x.sources("graph"):
            col = "nameId" if x.has(src.table, "nameId") else "graphId"
            self._cpu("graph", src, self._col(src.table, col))
        for src in x.sources("openacc"):
            self._cpu("openacc", src, wrap_i4(self._col(src.table, "eventKind")))
        for src in x.sources("nvtx"):
            self._nvtx(src)
        for src in x.sources("gpu_metrics"):
            t = src.table
            sql = (f"SELECT DISTINCT {self._col(t, 'typeId')} & 255, "
                   f"{wrap_i4(self._col(t, 'metricId'))} FROM {_q(t)}")
            for gpu, metric in x.rows(sql):
                self.metrics.add((int(gpu), int(metric)))  # type: ignore[call-overload]
                self._see("gpu_metrics", int(metric))  # type: ignore[call-overload]
            for (count,) in x.rows(f"SELECT COUNT(*) FROM {_q(t)}"):
                self._count("gpu_metrics", int(count))  # type: ignore[call-overload]
        sync_devices = self._place_syncs()
        by_proc: dict[int, list[int]] = {}
        for g in sorted(self.threads):
            by_proc.setdefault(process_of(g), []).append(g)
        procs = sorted(set(by_proc) | {s[0] for s in self.streams})
        values = {k: sorted(d) for k, d in self.values.items()}
        return ExportPlan(streams=sorted(self.streams), threads=sorted(self.threads),
                          threads_by_process=by_proc, processes=procs, counts=self.counts,
                          values=values, gpu_metrics=sorted(self.metrics),
                          sync_devices=sync_devices)

    def _place_syncs(self) -> list[tuple[int, int, int, int]]:
        """Synchronization rows carry deviceId 0 in real exports whatever the GPU: take the
        device from the process's other activity on the same stream, or its only device."""
        devices_of: dict[tuple[int, int], set[int]] = {}
        per_process: dict[int, set[int]] = {}
        for g, d, s in self.streams:
            devices_of.setdefault((g, s), set()).add(d)
            per_process.setdefault(g, set()).add(d)
        placed: list[tuple[int, int, int, int]] = []
        for g, d, s in sorted(self.sync_keys):
            on_stream = devices_of.get((g, s), set())
            in_process = per_process.get(g, set())
            if len(on_stream) == 1:
                device = next(iter(on_stream))
            elif s < 0 and len(in_process) == 1:
                device = next(iter(in_process))
            else:
                device = d
            placed.append((g, s, d, device))
            self.streams.add((g, device, s))
        return placed

    def _nvtx(self, src: KindSource) -> None:
        """NVTX: threads, text ids, inline texts (interned) and domains in one DISTINCT scan."""
        x, t = self.x, src.table
        has_text = x.has(t, "text")
        tid = self._col(t, "textId")
        inline = "CASE WHEN textId IS NULL THEN text END" if has_text and x.has(t, "textId") \
            else "text" if has_text else "NULL"
        sql = (f"SELECT DISTINCT {self._col(t, 'globalTid')}, {tid}, {inline}, "
               f"{self._col(t, 'domainId', '0')} FROM {_q(t)} WHERE {src.where}")
        texts: set[str] = set()
        rows: list[tuple[int, str | None]] = []
        for g, v, txt, dom in x.rows(sql):
            self.threads.add(int(g))  # type: ignore[call-overload]
            self._see("nvtx_domain", int(dom))  # type: ignore[call-overload]
            if txt is not None:
                texts.add(str(txt))
            rows.append((int(v), None if txt is None else str(txt)))  # type: ignore[call-overload]
        for (count,) in x.rows(f"SELECT COUNT(*) FROM {_q(t)} WHERE {src.where}"):
            self._count("nvtx", int(count))  # type: ignore[call-overload]
        if x._inline_ids is None:
            x._intern_sorted(list(texts))
        ids = x.inline_ids()
        for v, txt in rows:
            self._see("nvtx", ids[txt] if txt is not None else v)
