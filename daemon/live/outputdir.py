"""Safe output paths: one writer per output directory, never through a symlink, never over a
file prvstream did not create, never waiting on a FIFO put where a trace file was."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Literal

from prvstream.sinks.errors import OutputConflict, OutputLocked
from prvstream.sinks.files import OWNED_MARKER, atomic_write

__all__ = ["OUTPUT_LOCK", "OutputDir", "exclusive_lock"]

#: lock file in an output directory: one writer per output directory, whatever --state says
OUTPUT_LOCK = ".prvstream.lock"


def exclusive_lock(lock_path: Path, held: str) -> int:
    """A descriptor holding an exclusive advisory lock on ``lock_path`` (created, never through
    a symlink); ``OutputLocked(held)`` when another process holds it."""
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputConflict(f"{lock_path} is a symlink; remove it") from exc
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise OutputLocked(held) from exc
        raise
    return fd


class OutputDir:
    """An output directory whose files prvstream may (re)write: the ones it created.

    Ownership is recorded in the ``.prvstream-owned`` sidecar (plus any ``owned`` names the
    caller passes, e.g. from the journal's ``outputs``). Files are claimed before they are
    first created; a file that exists but is not owned, or any symlink, is an OutputConflict.
    """

    def __init__(self, path: str | os.PathLike[str], *, owned: Iterable[str] = ()):
        self.path = Path(os.path.abspath(os.fspath(path)))
        self._owned: set[str] = {Path(p).name for p in owned}
        self._prepared = False
        self._lock_fd: int | None = None

    def lock(self, job: str = "") -> None:
        """Become the only writer of this directory (``.prvstream.lock``, an advisory lock
        another daemon or ``prvstream finalize`` meets whatever its ``--state``)."""
        if self._lock_fd is not None:
            return
        if not self._prepared:
            self.prepare()
        self._lock_fd = exclusive_lock(
            self.path / OUTPUT_LOCK,
            f"another prvstream process is writing {self.path}{f' (job {job})' if job else ''}"
            "; stop it first, or touch JOB/prvstream.done to have it finalize the job")

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def prepare(self) -> OutputDir:
        """Create the directory (not through a symlink) and read its ownership list."""
        if self.path.is_symlink():
            raise OutputConflict(
                f"output directory {self.path} is a symlink; prvstream never writes through "
                f"symlinks: replace it with a real directory or choose another --out")
        with contextlib.suppress(FileExistsError, NotADirectoryError):  # said below
            self.path.mkdir(parents=True, exist_ok=True)
        if not self.path.is_dir():
            raise OutputConflict(f"{self.path} exists and is not a directory; move it away")
        marker = self.path / OWNED_MARKER
        if marker.is_symlink():
            raise OutputConflict(f"{marker} is a symlink; remove it")
        if marker.exists():
            self._owned.update(n for n in marker.read_text().splitlines() if n)
        self._prepared = True
        return self

    @property
    def owned(self) -> frozenset[str]:
        return frozenset(self._owned)

    def path_for(self, name: str) -> Path:
        """Checked path of output ``name`` in this directory, claimed as prvstream's."""
        if not self._prepared:
            self.prepare()
        if not name or "/" in name or name in (".", "..", OWNED_MARKER):
            raise OutputConflict(f"{name!r} is not a valid output file name")
        target = self.path / name
        if target.is_symlink():
            raise OutputConflict(
                f"output {target} is a symlink; prvstream never writes through symlinks: "
                f"remove it or choose another --out")
        if name not in self._owned:
            if target.exists():
                raise OutputConflict(
                    f"output {target} exists and was not created by prvstream; move it away, "
                    f"or choose another --out, so that it is not overwritten")
            self._owned.add(name)
            atomic_write(self.path / OWNED_MARKER,
                         "".join(f"{n}\n" for n in sorted(self._owned)).encode())
        return target

    def open(self, name: str, mode: Literal["rb+", "ab", "wb", "r+b"] = "ab") -> IO[bytes]:
        """Open output ``name`` for writing without following a symlink (created if absent);
        anything but a regular file in its place (a FIFO, device, socket) is an
        ``OutputConflict``, never waited on."""
        target = self.path_for(name)
        flags = os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        flags |= {"ab": os.O_WRONLY | os.O_APPEND, "wb": os.O_WRONLY | os.O_TRUNC}.get(
            mode, os.O_RDWR)
        try:
            fd = os.open(target, flags, 0o666)
        except OSError as exc:
            if exc.errno not in (errno.ENXIO, errno.EAGAIN):  # a FIFO without reader, a socket
                raise
            raise _not_regular(target) from exc
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise _not_regular(target)
        os.set_blocking(fd, True)
        return os.fdopen(fd, mode)

    def replace(self, name: str, data: bytes | Iterable[bytes]) -> Path:
        """Atomically replace output ``name`` with ``data`` or its pieces (temp file, fsync,
        rename)."""
        target = self.path_for(name)
        atomic_write(target, data)
        return target


def _not_regular(target: Path) -> OutputConflict:
    return OutputConflict(f"output {target} is not a regular file (a FIFO, device or socket "
                          f"was put in its place); remove it and prvstream writes the trace "
                          f"again")
