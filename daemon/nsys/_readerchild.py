"""The reader process: runs a report's ordered SELECTs and ships packed rows to its parent.

Started by ``reader.ReaderProcess`` as ``python -I -S _readerchild.py FILLER [SQLROWS]`` (an
isolated interpreter without site packages; FILLER is the path of the compiled row filler,
SQLROWS that of the compiled SQLite row reader, each loaded by path: with SQLROWS, streams
other than ``inline`` ones fetch their rows in C, on a connection of its own, without a
Python object per value); it imports nothing else but the standard library, so it stays small.
Its SQLite runs in multi-thread mode (``sqlitemode``, loaded by path): one thread uses it.
Requests arrive on stdin, one JSON object per line:

- ``{"op": "db", "uri": U}`` opens a database (read-only URI) for the streams that follow,
  closing the previous one;
- ``{"op": "open", "id": N, "sql": ..., "itemsize": B, "offsets": [...], "sizes": [...]}``
  runs the query at once (SQLite sorts while the parent is busy elsewhere); with
  ``"presort": {"scan": SQL, "table": T, "start": C, "where": W, "max_window": M}`` it first
  bounds the table's disorder (``storage_order``, loaded by path) and runs the storage-order
  ``scan`` instead when the reorder window is at most M rows, and answers at once with one
  frame of status 3 whose payload is the window (``<q``; 0: the ordered ``sql`` runs); a
  ``"window": W`` in ``presort`` is the table's window, read by the parent, not read again;
  with ``"runs": true`` a table beyond the window that is a few runs (``storage_order.
  table_runs``) is answered with one frame of status 5 instead, its payload the runs as JSON
  ``[[first rowid, last rowid, window], ...]``, and the stream has no rows: the parent opens
  one stream per run (its rowid range, its window);
  ``"inline": true`` (NVTX): each row's last value is an inline text or NULL, which the
  parent numbers (its canonical ids); every chunk is then answered with status 4;
  ``"unwrapped": {"sql", "scan", "offsets", "sizes", "wraps", "names"}`` (``tables.
  UnwrappedStatements``): the same statements without their int32 wrapping, which the
  compiled row reader then does (``_sqlrows`` fill's ``wraps``), read instead when it is
  loaded;
- ``{"op": "next", "id": N, "rows": R}`` asks for the next chunk of at most R rows;
- ``{"op": "close", "id": N}`` drops a stream; ``{"op": "quit"}`` ends the process.

Every ``next`` gets one frame on stdout: a header ``<iiq`` (stream id, status, payload bytes)
then the payload: the rows filled into the parent's structured layout (status 0, an empty
payload at the end of the stream) or a UTF-8 error message (status 1: SQLite error, 2: a value
that is not an integer). An ``inline`` stream's chunk has status 4: ``<q`` the rows' bytes, the
rows, then JSON ``{"at": rows with a text, "of": each one's index in "texts", "texts": the
chunk's distinct texts}``, texts decoded as the parent decodes them (invalid UTF-8 replaced).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sqlite3
import struct
import sys

#: ``typing.TYPE_CHECKING`` without importing typing (type checkers know the name): typing and
#: pathlib would be 1 MiB of this small process
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, BinaryIO

__all__ = ["FRAME", "PRAGMAS", "STATUS_BAD_VALUE", "STATUS_OK", "STATUS_RUNS", "STATUS_SQLITE",
           "STATUS_TEXTS", "STATUS_WINDOW", "WINDOW", "main"]

#: frame header: stream id, status, payload length
FRAME = struct.Struct("<iiq")
STATUS_OK, STATUS_SQLITE, STATUS_BAD_VALUE = 0, 1, 2
#: a 256 KiB page cache, which also sizes SQLite's sorted runs (setting ``temp_store=FILE``,
#: ``temp.cache_size=-256`` and ``threads=0`` as well measured 10 MiB more at 10M rows), and a
#: soft heap limit: the comm join's automatic indexes (one per joined table) are temporary
#: b-trees whose page caches no pragma sizes (2 MiB each), which the limit makes recycle pages
#: instead of growing (the comm query alone at 10M rows: 9.3 -> 5.2 MiB of SQLite memory,
#: 1M rows: 4.6 -> 3.0; the same rows, no slower)
PRAGMAS = ("PRAGMA query_only=1", "PRAGMA cache_size=-256", "PRAGMA soft_heap_limit=1000000")
#: the answer to an ``open`` with ``presort``: the reorder window (``<q``; 0: SQLite sorts)
STATUS_WINDOW = 3
WINDOW = struct.Struct("<q")
#: an ``inline`` stream's chunk: its rows and their inline texts (module docstring)
STATUS_TEXTS = 4
#: the answer to an ``open`` with ``presort`` and ``"runs"`` whose table is read as runs:
#: JSON ``[[first rowid, last rowid, window], ...]``; the stream itself has no rows
STATUS_RUNS = 5


class _Stream:
    def __init__(self, cursor: sqlite3.Cursor | None, request: dict[str, Any],
                 error: tuple[int, bytes] | None, query: Any = None) -> None:
        self.cursor = cursor
        #: the C reader's statement (``_sqlrows``), read instead of the cursor
        self.query = query
        self.itemsize = int(request["itemsize"])
        self.offsets = tuple(int(x) for x in request["offsets"])
        self.sizes = tuple(int(x) for x in request["sizes"])
        #: ``fill``'s arguments after the rows and itemsize (``unwrapped``: its wraps too)
        self.layout: tuple[tuple[int, ...], ...] = (self.offsets, self.sizes)
        self.inline = bool(request.get("inline"))
        self.error = error


def _send(out: BinaryIO, stream_id: int, status: int,
          payload: bytes | bytearray | list[bytearray]) -> None:
    parts = payload if isinstance(payload, list) else [payload]
    out.write(FRAME.pack(stream_id, status, sum(len(p) for p in parts)))
    for part in parts:
        out.write(part)
    out.flush()


def _window(con: sqlite3.Connection, presort: dict[str, Any]
            ) -> tuple[int, list[tuple[int, int, int]] | None]:
    """The reorder window of a rowid-order scan (the parent's when it sent one: it read the
    table's bounds already), or 0 when SQLite is to sort; and, with ``"runs"`` asked for,
    the runs a table beyond the window is read as instead (``storage_order.table_runs``),
    else None."""
    limit = int(presort["max_window"])
    if "window" in presort:
        window = int(presort["window"])
        return (window if 0 < window <= limit else 0), None
    table, start, where = presort["table"], presort["start"], presort["where"]
    try:
        first, least, greatest = storage_order.block_columns(con, table, start, where)
        window = int(storage_order.columns_window(least, greatest))
        runs = None
        if window > limit and presort.get("runs"):
            runs = storage_order.table_runs(con, table, start, where, first, least, greatest,
                                            limit)
    except sqlite3.Error:
        return 0, None  # the ordered query reports the error
    return (window if 0 < window <= limit else 0), runs


def _open(con: sqlite3.Connection, request: dict[str, Any], window: int,
          db: Any = None) -> _Stream:
    if db is not None and not request.get("inline"):
        unwrapped = request.get("unwrapped")
        sql, scan = ((unwrapped["sql"], unwrapped["scan"]) if unwrapped is not None else
                     (request["sql"], request.get("presort", {}).get("scan")))
        try:
            query = db.query(scan if window else sql)
        except RuntimeError as exc:
            return _Stream(None, request, (STATUS_SQLITE, str(exc).encode()))
        stream = _Stream(None, request, None, query)
        if unwrapped is not None:
            stream.layout = tuple(tuple(int(x) for x in unwrapped[k])
                                  for k in ("offsets", "sizes", "wraps", "names"))
        return stream
    cursor = con.cursor()
    try:
        cursor.execute(request["presort"]["scan"] if window else request["sql"])
    except sqlite3.Error as exc:
        return _Stream(None, request, (STATUS_SQLITE, str(exc).encode()))
    return _Stream(cursor, request, None)


#: the compiled row filler (``_rowfill.fill_rows``), loaded by ``main``
fill_rows: Callable[..., None]
#: the compiled SQLite row reader (``_sqlrows``) or None, loaded by ``main``
sqlrows: Any = None
#: ``storage_order`` (standard library only), loaded by path by ``main``
storage_order: Any


def _load_extension(name: str, path: str) -> Any:
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _load_filler(path: str) -> Callable[..., None]:
    filler: Callable[..., None] = _load_extension("_rowfill", path).fill_rows
    return filler


def _load_sibling(name: str) -> Any:
    """A standard-library-only module beside this file (``storage_order``, ``sqlitemode``),
    loaded by path."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: rows fetched (as Python tuples) at a time for a chunk: a chunk's 2,048 rows fetched at
#: once were about 0.7 MiB of tuples and ints
FETCH_ROWS = 512


def _next(stream: _Stream, rows_wanted: int) -> tuple[int, bytes | list[bytearray]]:
    """The next chunk filled into the stream's layout (in pieces: ``FETCH_ROWS`` rows are
    Python objects at a time), or the stream's error."""
    if stream.error is not None:
        return stream.error
    if stream.query is not None:
        status, got = stream.query.fill(rows_wanted, stream.itemsize, *stream.layout)
        if status != STATUS_OK:
            stream.error = (status, got.encode())
            return stream.error
        return STATUS_OK, [got]
    if stream.cursor is None:
        return STATUS_OK, []  # a table read as runs: no rows of its own
    parts: list[bytearray] = []
    texts: dict[str, int] | None = {} if stream.inline else None
    at: list[int] = []
    of: list[int] = []
    done = 0
    while rows_wanted > 0:
        try:
            rows = stream.cursor.fetchmany(min(rows_wanted, FETCH_ROWS))
        except sqlite3.Error as exc:
            stream.error = (STATUS_SQLITE, str(exc).encode())
            return stream.error
        if not rows:
            break
        buf = bytearray(len(rows) * stream.itemsize)
        try:
            fill_rows(rows, buf, stream.itemsize, stream.offsets, stream.sizes)
        except (TypeError, OverflowError, ValueError) as exc:
            stream.error = (STATUS_BAD_VALUE, str(exc).encode())
            return stream.error
        parts.append(buf)
        if texts is not None:
            for i, row in enumerate(rows):
                text = row[-1]
                if text is not None:
                    at.append(done + i)
                    of.append(texts.setdefault(str(text), len(texts)))
        done += len(rows)
        rows_wanted -= len(rows)
        del rows  # before the next fetch makes its own
    if texts is None or not done:
        return STATUS_OK, parts
    trailer = json.dumps({"at": at, "of": of, "texts": list(texts)}).encode()
    return STATUS_TEXTS, [bytearray(WINDOW.pack(sum(len(p) for p in parts))), *parts,
                          bytearray(trailer)]


def _decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _connect(uri: str) -> tuple[sqlite3.Connection | None, bytes]:
    try:
        con = sqlite3.connect(uri, uri=True)
        con.text_factory = _decode_text  # as the parent's connections decode
        for pragma in PRAGMAS:
            con.execute(pragma)
    except sqlite3.Error as exc:
        return None, str(exc).encode()
    return con, b""


def serve(requests: BinaryIO, out: BinaryIO) -> None:
    """Answer requests until ``quit`` or the end of input."""
    con: sqlite3.Connection | None = None
    db: Any = None  # the C reader's connection to the same database
    failed = b"no database opened"
    streams: dict[int, _Stream] = {}
    try:
        for line in requests:
            request = json.loads(line)
            op = request["op"]
            if op == "quit":
                break
            if op == "db":
                for stream in streams.values():
                    if stream.cursor is not None:
                        stream.cursor.close()
                streams.clear()
                db = None
                if con is not None:
                    con.close()
                con, failed = _connect(request["uri"])
                if con is not None and sqlrows is not None:
                    try:
                        db = sqlrows.open(request["uri"], list(PRAGMAS))
                    except RuntimeError:
                        db = None  # the Python fetch reads (and reports) instead
                continue
            sid = int(request["id"])
            if op == "open":
                window, runs = 0, None
                if con is not None and request.get("presort"):
                    window, runs = _window(con, request["presort"])
                if runs is not None:  # the parent opens a stream per run instead
                    streams[sid] = _Stream(None, request, None)
                    _send(out, sid, STATUS_RUNS, json.dumps(runs).encode())
                    continue
                streams[sid] = (_open(con, request, window, db) if con is not None
                                else _Stream(None, request, (STATUS_SQLITE, failed)))
                if request.get("presort"):
                    _send(out, sid, STATUS_WINDOW, WINDOW.pack(window))
            elif op == "next":
                status, payload = _next(streams[sid], int(request["rows"]))
                _send(out, sid, status, payload)
            elif op == "close" and sid in streams:
                closing = streams.pop(sid)
                if closing.cursor is not None:
                    closing.cursor.close()
    finally:
        if con is not None:
            con.close()


def main() -> None:
    global fill_rows, storage_order, sqlrows
    # every connection here is used by this one thread: SQLite's multi-thread mode, without
    # a lock taken at every column read (before any connection opens); its memory statistics
    # stay on, which PRAGMAS' soft heap limit needs to be enforced
    _load_sibling("sqlitemode").unlock_connections(statistics=True)
    fill_rows = _load_filler(sys.argv[1])
    if len(sys.argv) > 2 and sys.argv[2]:
        sqlrows = _load_extension("_sqlrows", sys.argv[2])
    storage_order = _load_sibling("storage_order")
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
