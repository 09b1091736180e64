"""Facts of SQLite files and Nsight Systems exports that several rooms check, defined once: the
file magic, the metadata table names, the header check and the read-only connection.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import struct
import urllib.parse
from pathlib import Path
from typing import Final

from prvstream.sinks.errors import NotAnExport
from prvstream.sinks.logger import get_logger

__all__ = [
    "METADATA_TABLES",
    "READ_PRAGMAS",
    "SQLITE_MAGIC",
    "connect_read_only",
    "header_problem",
    "ro_uri",
]

log = get_logger(__name__)

#: the first bytes of every SQLite database (an Nsight Systems export is one)
SQLITE_MAGIC: Final = b"SQLite format 3\x00"
#: the export's metadata table, by name since 2024 and before (the last row, EXPORT_TIME, is
#: written when the export is complete)
METADATA_TABLES: Final = ("META_DATA_EXPORT", "EXPORT_META_DATA")


#: every read connection's settings (the cache of 512 KiB: sorts spill to temp files sooner)
READ_PRAGMAS: Final = ("PRAGMA query_only=1", "PRAGMA cache_size=-512")


def ro_uri(path: Path) -> str:
    """A read-only SQLite URI for ``path`` (quoted: a ``#`` or ``?`` in it stays in the path,
    and a name that is not UTF-8 keeps its bytes)."""
    return _uri(Path(path).resolve())


def _uri(resolved: Path) -> str:
    return "file:" + urllib.parse.quote(os.fsencode(resolved)) + "?mode=ro"


def header_problem(path: Path) -> str | None:
    """Why the file cannot be a complete SQLite database, from its 100-byte header (read
    without blocking: a FIFO or device put in its place since it was checked is named, never
    waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return "not a regular file (a FIFO, device or socket)"
            size = st.st_size
            head = os.pread(fd, 100, 0)
        finally:
            os.close(fd)
    except OSError as exc:
        return f"cannot read the file ({exc.strerror or exc})"
    if size == 0:
        return "the file is empty"
    if len(head) < 100 or not head.startswith(SQLITE_MAGIC):
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


def _decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def connect_read_only(p: Path) -> sqlite3.Connection:
    """A read-only connection to the file at ``p`` (a resolved path: ``Export`` keeps its
    own, resolved once) after checking its SQLite header."""
    problem = header_problem(p)
    if problem is not None:
        raise NotAnExport(f"{p}: {problem}; point prvstream at an Nsight Systems SQLite "
                          f"export (nsys export --type sqlite) that has been fully written")
    try:
        con = sqlite3.connect(_uri(p), uri=True, check_same_thread=False)
    except sqlite3.Error as exc:
        raise NotAnExport(f"{p}: cannot open as SQLite ({exc}); check the file and its "
                          f"permissions") from exc
    # a name that is not UTF-8 is read with replacement characters, never an error
    con.text_factory = _decode_text
    try:
        for pragma in READ_PRAGMAS:
            con.execute(pragma)
        # one read transaction for the connection's life: its statements share one shared
        # lock and one check of the file (without it SQLite locks, looks for a hot journal
        # and re-reads the header at every statement: 8 system calls each)
        con.execute("BEGIN")
    except sqlite3.DatabaseError as exc:
        con.close()
        raise NotAnExport(f"{p}: unreadable SQLite database ({exc}); re-export the report "
                          f"with nsys export --type sqlite") from exc
    return con
