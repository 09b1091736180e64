"""The read-only connection under ``Export``: its lifetime (``close``/``reopen`` keep what was
read), the probed tables and columns, and small tables read once per export.
"""

from __future__ import annotations

import functools
import itertools
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from prvstream.daemon.kinds.sql import quote_identifier
from prvstream.daemon.nsys.sqlite import connect_read_only
from prvstream.sinks.logger import get_logger

__all__ = ["ExportBase", "TableColumns", "memoized"]

log = get_logger(__name__)

_T = TypeVar("_T")
_E = TypeVar("_E", bound="ExportBase")

#: table definitions (name, CREATE sql) -> columns of the tables asked about: exports of one
#: nsys version share them, so the PRAGMA per table runs once per version and process
_SCHEMAS: dict[tuple[tuple[object, ...], ...], tuple[int, dict[str, list[str]]]] = {}
_SCHEMAS_KEPT = 16
#: rows ``ExportBase.int_column`` reads a time
_INT_COLUMN_ROWS = 1024
#: numbers the distinct schemas this process has seen (``ExportBase.schema_key``)
_SCHEMA_KEYS = itertools.count()


def memoized(method: Callable[[_E], _T]) -> Callable[[_E], _T]:
    """Read a small table once per export (the result survives ``Export.reopen``)."""
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self: _E) -> _T:
        if name not in self._memo:
            self._memo[name] = method(self)
        found: _T = self._memo[name]
        return found

    return wrapper


#: tables whose columns are read only when asked for: nsys's enumerations (value -> label),
#: two thirds of an export's 40 to 90 tables, which no kind reads (a PRAGMA each was about
#: 1 ms of cloverleaf's conversion); every other table's are read when the export opens
_LAZY_PREFIX = "ENUM_"


class TableColumns(Mapping[str, list[str]]):
    """An export's tables and their columns; those not in ``known`` (``_LAZY_PREFIX``) are
    read (``PRAGMA table_info``) when first asked for. ``known`` is shared by the exports of
    one schema."""

    def __init__(self, names: Iterable[str], known: dict[str, list[str]],
                 probe: Callable[[str], list[str]]) -> None:
        self._names = dict.fromkeys(names)
        self._known = known
        self._probe = probe

    def __getitem__(self, table: str) -> list[str]:
        cols = self._known.get(table)
        if cols is None:
            if table not in self._names:
                raise KeyError(table)
            cols = self._known[table] = self._probe(table)
        return cols

    def __contains__(self, table: object) -> bool:
        return table in self._names

    def columns(self, table: str) -> list[str] | None:
        """The columns of ``table``, or None where there is no such table (``get`` without
        its KeyError: ``ExportBase.has`` asks about 150 times a report)."""
        cols = self._known.get(table)
        if cols is not None:
            return cols
        return self[table] if table in self._names else None

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    """(device, inode, size, modification time) of the file at ``path``, or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class ExportBase:
    """A read-only connection to one export and its tables. Use from one thread at a time.

    Context manager; ``close()`` releases the file and ``reopen()`` takes it again.
    """

    def __init__(self, con: sqlite3.Connection, path: Path) -> None:
        self._open_con = con
        #: reconnect when a statement needs the connection after ``close`` (``reopen_on_use``)
        self._lazy = False
        self._closed = False
        self.path = path
        #: the same number for exports whose tables are defined alike (what is built from
        #: the schema alone, such as a kind's SELECT, may be kept under it)
        self.schema_key = -1
        self.tables: TableColumns = self._probe_tables()
        #: small tables read once (processes, thread and domain names, ...)
        self._memo: dict[str, Any] = {}
        #: the compiled row reader's connection to the same file (``row_reader``)
        self._rows_db: Any = None
        #: (the connection, the compiled reader borrowing it) (``borrowed_reader``)
        self._borrowed: tuple[sqlite3.Connection, Any] | None = None
        #: the file this connection opened, as (device, inode, size, mtime): a second
        #: connection by path must find the same one (``row_reader``); None where it could
        #: not be read or the path has named another file since (no second connection)
        self._identity = _identity(path)
        #: the same, kept as it was at opening (``changed_since_opened``)
        self.opened_identity = self._identity

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Release the file; what was read stays (``reopen`` continues from it)."""
        if not self._closed:
            self._closed = True
            self._rows_db = None  # a stream still reading keeps it open until it ends
            self._borrowed = None
            self._open_con.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def reopen(self) -> None:
        """A fresh connection after ``close`` (a no-op while open); nothing is read again."""
        if self._closed:
            self._open_con = connect_read_only(self.path)
            self._closed = False

    def reopen_on_use(self) -> None:
        """From now on a statement run while closed reconnects first (a report whose rows
        are held stays closed unless something it did not hold is asked for)."""
        self._lazy = True

    @property
    def _con(self) -> sqlite3.Connection:
        if self._closed and self._lazy:
            self.reopen()
        return self._open_con

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def connection(self) -> sqlite3.Connection:
        """The read-only connection (for table streams)."""
        return self._con

    def row_reader(self) -> Any:
        """The compiled SQLite row reader's connection to this file (``_sqlrows``: a
        statement's integer rows straight into a chunk's layout, without a Python tuple and
        int a row and value), opened at first use in the same read-only mode, with the
        connection's pragmas and a read transaction of its own (its shared lock keeps the
        file as the main connection sees it); None while the export is closed, where the
        extension was not built, when the settings prefer Python, or where it fails to open
        (the Python fetch then reads, and reports what it finds)."""
        if self._rows_db is None and not self._closed and self._identity is not None:
            from prvstream.daemon.nsys.rowfill import SQL_ROWS
            from prvstream.daemon.nsys.sqlite import READ_PRAGMAS, ro_uri

            opener = SQL_ROWS.use()
            if opener is None:
                return None
            try:
                rows_db = opener(ro_uri(self.path), [*READ_PRAGMAS, "BEGIN"])
            except RuntimeError as exc:
                log.debug("row_reader_unavailable", path=str(self.path), error=str(exc))
                return None
            if _identity(self.path) != self._identity:
                # replaced or changed since this connection opened it: its rows would not
                # be the planned file's; this connection reads on, from its own snapshot,
                # and no later stream tries again
                self._identity = None
                log.debug("row_reader_unavailable", path=str(self.path),
                          error="the file at this path changed since the export was opened")
                return None
            self._rows_db = rows_db
        return self._rows_db

    def changed_since_opened(self) -> bool:
        """Does the path now name another file than the one opened, or the same file with
        another size or modification time? (A file removed since is not a change: whatever
        read it had it open; a connection opened after could not have read another file.)"""
        now = _identity(self.path)
        return now is not None and now != self.opened_identity

    def borrowed_reader(self) -> Any:
        """The compiled SQLite row reader on this export's own connection (``_sqlrows.borrow``:
        no second connection, so no schema read again; the statements run in this
        connection's read transaction), made at first use while the export is open; None
        while it is closed, where the extension was not built or the settings prefer Python,
        or where it cannot borrow this connection (another Python, another SQLite library)."""
        if self._closed:
            return None
        if self._borrowed is None or self._borrowed[0] is not self._open_con:
            from prvstream.daemon.nsys.rowfill import sql_borrow

            borrow = sql_borrow()
            if borrow is None:
                return None
            import _sqlite3

            try:
                self._borrowed = (self._open_con,
                                  borrow(self._open_con, getattr(_sqlite3, "__file__", "")))
            except RuntimeError as exc:
                log.debug("row_reader_unavailable", path=str(self.path), error=str(exc))
                return None
        return self._borrowed[1]

    def int_column(self, sql: str) -> list[int] | None:
        """The one column of ``sql``'s rows, in its order, read by ``borrowed_reader`` where
        every value is an integer; None where there is no such reader, SQLite fails or a
        value is not an integer (the caller then runs ``sql`` itself, as before)."""
        db = self.borrowed_reader()
        if db is None:
            return None
        try:
            query = db.query(sql)
        except RuntimeError:
            return None
        out: list[int] = []
        while True:
            status, got = query.fill(_INT_COLUMN_ROWS, 8, (0,), (8,))
            if status != 0:
                return None
            if not got:
                return out
            out.extend(memoryview(got).cast("q").tolist())

    def rows(self, sql: str, params: Iterable[object] = ()) -> Iterator[tuple[object, ...]]:
        """Run a read-only query (used by the planner and table streams)."""
        return iter(self._con.execute(sql, tuple(params)))

    def texts(self, sql: str) -> list[str]:
        """``str`` of the first column of every row of ``sql``, its texts decoded as ``rows``
        decodes them (invalid UTF-8 replaced). SQLite's rows are first read with the
        ``sqlite3`` module's own decoding, in C (the connection's replacing decoder is a
        Python call per text: 18,000 inline NVTX texts in a real export); only when one is not
        valid UTF-8, which that decoding refuses, are they read again through ``rows``."""
        con = self._con
        decode = con.text_factory
        con.text_factory = str
        try:
            found: list[tuple[object, ...]] | None = con.execute(sql).fetchall()
        except sqlite3.OperationalError:  # a text not UTF-8 (or an error ``rows`` raises)
            found = None
        finally:
            con.text_factory = decode
        if found is None:
            found = list(self.rows(sql))
        return [v if type(v) is str else str(v) for v, *_ in found]

    # -- schema -----------------------------------------------------------------------------
    def _probe_tables(self) -> TableColumns:
        """Tables and their columns (an enumeration's read when asked for); an export whose
        table definitions were seen before (the same nsys version) costs one query."""
        found = tuple(self._con.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"))
        cached = _SCHEMAS.get(found)
        if cached is None:
            cached = (next(_SCHEMA_KEYS), {str(n): self._columns(str(n)) for n, _ in found
                                           if not str(n).startswith(_LAZY_PREFIX)})
            if len(_SCHEMAS) >= _SCHEMAS_KEPT:
                _SCHEMAS.pop(next(iter(_SCHEMAS)))
            _SCHEMAS[found] = cached
        self.schema_key = cached[0]
        return TableColumns((str(n) for n, _ in found), cached[1], self._columns)

    def _columns(self, table: str) -> list[str]:
        return [str(r[1]) for r in self._con.execute(
            f"PRAGMA table_info({quote_identifier(table)})")]

    def has(self, table: str, column: str | None = None) -> bool:
        """Whether ``table`` (and ``column`` in it) exists."""
        cols = self.tables.columns(table)
        if cols is None:
            return False
        return column is None or column in cols
