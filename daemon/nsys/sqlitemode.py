"""SQLite without its own locks in ``convert`` and the reader process, whose connections are
each used by one thread at a time: serialized SQLite locks the connection at every call (every
column of every row read) and its allocator at every allocation; 8% of planning 400 small
exports. Standard library only: the reader process loads it by path.
"""

from __future__ import annotations

import ctypes
import os

#: ``typing.TYPE_CHECKING`` without importing typing (the reader process loads this module)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = ["MULTITHREAD_ENV", "unlock_connections", "unlocked"]

#: set to 0 to keep SQLite serialized (its default: every connection locked at every call)
MULTITHREAD_ENV: Final = "PRVSTREAM_SQLITE_MULTITHREAD"
#: ``sqlite3_config`` options (sqlite3.h)
_CONFIG_MULTITHREAD: Final = 2
_CONFIG_MEMSTATUS: Final = 9
_OK: Final = 0

_done = False
#: the library this process switched (``unlock_connections``), for the command to log
_unlocked: str | None = None


def _loaded_library() -> str | None:
    """The SQLite library the ``sqlite3`` module runs on, where it is a shared library this
    process has mapped (Linux); None otherwise (linked in: left alone)."""
    import sqlite3  # noqa: F401 - maps the library the module is linked with

    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            maps = fh.read()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1]
        if "/libsqlite3" in path and path.startswith("/"):
            return path
    return None


def unlock_connections(*, statistics: bool = False) -> bool:
    """Switch SQLite to its multi-thread mode (a connection used by one thread at a time, as
    every connection of ``convert`` is), without memory statistics unless ``statistics``:
    once, by a process entry before any connection is opened (SQLite holds no memory then;
    where it does, or where ``PRVSTREAM_SQLITE_MULTITHREAD=0``, nothing changes). Returns
    whether it did. The reader process calls it too (it reads from one thread) and keeps
    the statistics: its ``soft_heap_limit`` needs them (without, SQLite ignores the limit
    and the reader's comm join held 4 MiB more at 10M rows)."""
    global _done, _unlocked
    if _done:
        return False
    _done = True
    if os.environ.get(MULTITHREAD_ENV, "1") == "0":
        return False
    found = _loaded_library()
    if found is None:
        return False
    try:
        lib = ctypes.CDLL(found)  # the library already mapped: the same one
        shutdown, config, initialize = lib.sqlite3_shutdown, lib.sqlite3_config, \
            lib.sqlite3_initialize
    except (OSError, AttributeError):
        return False
    lib.sqlite3_memory_used.restype = ctypes.c_int64
    if lib.sqlite3_threadsafe() == 0 or lib.sqlite3_compileoption_used(
            b"DEFAULT_MEMSTATUS=0") or lib.sqlite3_memory_used() != 0:
        return False  # built without locks, or cannot tell that no connection is open
    if shutdown() != _OK:
        return False
    done = bool(config(_CONFIG_MULTITHREAD) == _OK)
    if done and not statistics:
        config(_CONFIG_MEMSTATUS, ctypes.c_int(0))
    initialize()
    _unlocked = found if done else None
    return done


def unlocked() -> str | None:
    """The SQLite library this process switched to multi-thread mode, if it did (logged by
    the command: ``unlock_connections`` runs before logging is set up)."""
    return _unlocked
