"""An unlinked temporary file that bytes are appended to and read back from by offset: the
spilled summary records, an update's kept records and a batch's held rows all live in one.
"""

from __future__ import annotations

import errno
import os
import sys
import weakref
from collections.abc import Iterable, Iterator
from typing import IO

__all__ = ["ScratchFile", "read_at", "unnamed_file", "write_at"]

#: bytes read back at a time
READ_BYTES = 1 << 18


def _candidates() -> list[str]:
    """The directories ``tempfile.gettempdir`` tries, in its order (Linux)."""
    found = [d for d in (os.environ.get(v) for v in ("TMPDIR", "TEMP", "TMP")) if d]
    found += ["/tmp", "/var/tmp", "/usr/tmp"]
    try:
        found.append(os.getcwd())
    except OSError:
        found.append(os.curdir)
    return found


def unnamed_file(prefix: str, directory: str | os.PathLike[str] | None = None) -> IO[bytes]:
    """``tempfile.TemporaryFile(prefix=prefix, dir=directory)``, without loading ``tempfile``
    where it can: with no directory given, and no ``tempfile.tempdir`` set, a file without a
    name (Linux's ``O_TMPFILE``) in the first of ``gettempdir``'s candidates that takes one,
    the directory ``tempfile`` would choose. ``tempfile`` with its ``random`` and its probe of
    the temporary directory (a named file written and removed) was 1.5 ms of a small
    conversion, which makes two such files. Anywhere else (a directory given, no
    ``O_TMPFILE``, a file system without it) ``tempfile`` decides."""
    tmpfile = getattr(os, "O_TMPFILE", None)
    loaded = sys.modules.get("tempfile")
    if directory is None and tmpfile is not None and getattr(loaded, "tempdir", None) is None:
        flags = os.O_RDWR | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC | tmpfile  # tempfile's
        for candidate in _candidates():
            try:
                fd = os.open(candidate, flags, 0o600)
            except OSError as exc:
                if exc.errno in (errno.EISDIR, errno.EOPNOTSUPP, errno.EINVAL):
                    break  # no O_TMPFILE there: tempfile's own way
                continue  # not a writable directory: the next, as gettempdir does
            return open(fd, "w+b")
    import tempfile

    return tempfile.TemporaryFile(prefix=prefix, dir=directory)


class ScratchFile:
    """Created at the first append (in ``directory``, else the temporary directory), removed
    at once (nothing is left behind), closed by ``close`` or with its owner."""

    def __init__(self, prefix: str, directory: str | os.PathLike[str] | None = None) -> None:
        self._prefix = prefix
        self._directory = directory
        self._fh: IO[bytes] | None = None
        #: bytes appended so far (the next append's offset)
        self.end = 0

    def fileno(self) -> int:
        """The file's descriptor (it is created if it was not yet)."""
        if self._fh is None:
            self._fh = unnamed_file(self._prefix, self._directory)
            weakref.finalize(self, self._fh.close)
        return self._fh.fileno()

    def append(self, pieces: Iterable[bytes | memoryview]) -> tuple[int, int]:
        """Write ``pieces`` one after the other at the end (each whole, short writes
        continued); their offset and total length."""
        fd, start = self.fileno(), self.end
        for piece in pieces:
            view = memoryview(piece).cast("B")
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], self.end + done)
            self.end += done
        return start, self.end - start

    def read_slices(self, offset: int, length: int) -> Iterator[bytes]:
        """``length`` bytes from ``offset``, ``READ_BYTES`` at a time."""
        fd, end = self.fileno(), offset + length
        while offset < end:
            data = os.pread(fd, min(READ_BYTES, end - offset), offset)
            if not data:
                raise OSError(f"a scratch file ({self._prefix}) ends early at byte {offset}")
            offset += len(data)
            yield data

    def clear(self) -> None:
        """Forget everything appended (the space is reused)."""
        if self._fh is not None and self.end:
            os.ftruncate(self._fh.fileno(), 0)
        self.end = 0

    def close(self) -> None:
        """Remove the file now (its contents are gone)."""
        if self._fh is not None:
            fh, self._fh = self._fh, None
            fh.close()
        self.end = 0


def read_at(fd: int, size: int, offset: int) -> bytes:
    """Exactly ``size`` bytes of ``fd`` from ``offset`` (``os.pread`` until done); ``OSError``
    when the file ends before them."""
    parts = []
    while size > 0:
        got = os.pread(fd, size, offset)
        if not got:
            raise OSError(f"a temporary file ended {size} bytes early (read at {offset})")
        parts.append(got)
        size -= len(got)
        offset += len(got)
    return b"".join(parts)


def write_at(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    """All of ``data`` into ``fd`` at ``offset`` (``os.pwrite`` until done)."""
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        view = view[done:]
        offset += done
