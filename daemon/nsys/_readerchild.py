"""The reader process: runs a report's ordered SELECTs and ships packed rows to its parent.

Started by ``reader.ReaderProcess`` as ``python -I -S _readerchild.py FILLER`` (an isolated
interpreter without site packages; FILLER is the path of the compiled row filler, loaded by
path); it imports nothing else but the standard library, so it stays small.
Requests arrive on stdin, one JSON object per line:

- ``{"op": "db", "uri": U}`` opens a database (read-only URI) for the streams that follow,
  closing the previous one;
- ``{"op": "open", "id": N, "sql": ..., "itemsize": B, "offsets": [...], "sizes": [...]}``
  runs the query at once (SQLite sorts while the parent is busy elsewhere);
- ``{"op": "next", "id": N, "rows": R}`` asks for the next chunk of at most R rows;
- ``{"op": "close", "id": N}`` drops a stream; ``{"op": "quit"}`` ends the process.

Every ``next`` gets one frame on stdout: a header ``<iiq`` (stream id, status, payload bytes)
then the payload: the rows filled into the parent's structured layout (status 0, an empty
payload at the end of the stream) or a UTF-8 error message (status 1: SQLite error, 2: a value
that is not an integer).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sqlite3
import struct
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

__all__ = ["FRAME", "STATUS_BAD_VALUE", "STATUS_OK", "STATUS_SQLITE", "main"]

#: frame header: stream id, status, payload length
FRAME = struct.Struct("<iiq")
STATUS_OK, STATUS_SQLITE, STATUS_BAD_VALUE = 0, 1, 2


class _Stream:
    def __init__(self, cursor: sqlite3.Cursor | None, request: dict[str, Any],
                 error: tuple[int, bytes] | None) -> None:
        self.cursor = cursor
        self.itemsize = int(request["itemsize"])
        self.offsets = tuple(int(x) for x in request["offsets"])
        self.sizes = tuple(int(x) for x in request["sizes"])
        self.error = error


def _send(out: BinaryIO, stream_id: int, status: int, payload: bytes | bytearray) -> None:
    out.write(FRAME.pack(stream_id, status, len(payload)))
    out.write(payload)
    out.flush()


def _open(con: sqlite3.Connection, request: dict[str, Any]) -> _Stream:
    cursor = con.cursor()
    try:
        cursor.execute(request["sql"])
    except sqlite3.Error as exc:
        return _Stream(None, request, (STATUS_SQLITE, str(exc).encode()))
    return _Stream(cursor, request, None)


#: the compiled row filler (``_rowfill.fill_rows``), loaded by ``main``
fill_rows: Callable[..., None]


def _load_filler(path: str) -> Callable[..., None]:
    loader = importlib.machinery.ExtensionFileLoader("_rowfill", path)
    spec = importlib.util.spec_from_file_location("_rowfill", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    filler: Callable[..., None] = module.fill_rows
    return filler


def _next(stream: _Stream, rows_wanted: int) -> tuple[int, bytes | bytearray]:
    """The next chunk filled into the stream's layout, or the stream's error."""
    if stream.error is not None:
        return stream.error
    assert stream.cursor is not None
    try:
        rows = stream.cursor.fetchmany(rows_wanted)
    except sqlite3.Error as exc:
        stream.error = (STATUS_SQLITE, str(exc).encode())
        return stream.error
    buf = bytearray(len(rows) * stream.itemsize)
    try:
        fill_rows(rows, buf, stream.itemsize, stream.offsets, stream.sizes)
    except (TypeError, OverflowError, ValueError) as exc:
        stream.error = (STATUS_BAD_VALUE, str(exc).encode())
        return stream.error
    return STATUS_OK, buf


def _connect(uri: str) -> tuple[sqlite3.Connection | None, bytes]:
    try:
        con = sqlite3.connect(uri, uri=True)
        con.execute("PRAGMA query_only=1")
        con.execute("PRAGMA cache_size=-256")
    except sqlite3.Error as exc:
        return None, str(exc).encode()
    return con, b""


def serve(requests: BinaryIO, out: BinaryIO) -> None:
    """Answer requests until ``quit`` or the end of input."""
    con: sqlite3.Connection | None = None
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
                if con is not None:
                    con.close()
                con, failed = _connect(request["uri"])
                continue
            sid = int(request["id"])
            if op == "open":
                streams[sid] = (_open(con, request) if con is not None
                                else _Stream(None, request, (STATUS_SQLITE, failed)))
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
    global fill_rows
    fill_rows = _load_filler(sys.argv[1])
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
