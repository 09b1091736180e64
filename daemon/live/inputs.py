"""Opening a report safely: relative to its job directory, never through a symlink, never
blocking (O_NONBLOCK), only regular files, and only inside the watched root, at every open.

FIFOs, devices, sockets and active swap files are refused with a reason a user can act on.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from prvstream.sinks.errors import ExportChanged, NotAnExport
from prvstream.sinks.logger import get_logger

__all__ = [
    "HEAD_BYTES",
    "InputChanged",
    "InputRefused",
    "ReportIdentity",
    "fingerprint",
    "inside",
    "open_input",
    "report_identity",
    "stat_input",
]

log = get_logger(__name__)

#: bytes of an export hashed into its identity
HEAD_BYTES = 64 * 1024
#: SQLite's header: the page size is the big-endian u16 at offset 16 (1 means 65536)
_PAGE_SIZE_AT = 16

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a directory"))
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class ReportIdentity(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What makes one report file *this* report: a changed file is a different report."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    #: SHA-256 (hex) of the first 64 KiB
    head_sha256: str


class InputRefused(NotAnExport):
    """The path is not a regular file inside its root (a FIFO, device, socket, swap file, or
    a symlink or folder leading elsewhere): never read."""


class InputChanged(ExportChanged):
    """The file at the path is no longer the one that was checked: it will be looked at again."""


def inside(path: str, root: str) -> bool:
    """Is ``path`` ``root`` or below it (both real paths)?"""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _swap_files() -> set[tuple[int, int]]:
    """(device, inode) of every active swap file (Linux ``/proc/swaps``)."""
    found: set[tuple[int, int]] = set()
    try:
        with open("/proc/swaps", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()[1:]
    except OSError:
        return found
    for line in lines:
        name = line.split()[0] if line.split() else ""
        with contextlib.suppress(OSError):
            st = os.stat(name.replace("\\040", " "))
            if stat.S_ISREG(st.st_mode):
                found.add((st.st_dev, st.st_ino))
    return found


def _refuse(path: Path, what: str) -> InputRefused:
    log.warning("input_refused", path=str(path), reason=what)
    return InputRefused(f"{path} is {what}, not an export; prvstream never reads it (put the "
                        "Nsight Systems .sqlite export itself in the job directory)")


@contextlib.contextmanager
def open_input(path: Path, root: str | os.PathLike[str] | None = None
               ) -> Iterator[tuple[int, os.stat_result]]:
    """``(fd, fstat)`` of the report at ``path``, opened read-only and non-blocking relative
    to a descriptor of its directory, without following a symlink; raises ``InputRefused``
    for anything but a regular file inside ``root`` and ``FileNotFoundError`` when absent.
    """
    path = Path(path)
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except NotADirectoryError as exc:
        raise FileNotFoundError(2, "its directory is gone", str(path.parent)) from exc
    try:
        try:
            fd = os.open(path.name, _FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # the name is a symlink
                raise _refuse(path, "a symlink") from exc
            if exc.errno == errno.ENXIO:  # a socket
                raise _refuse(path, "a socket") from exc
            raise
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        for test, what in _KINDS:
            if test(st.st_mode):
                raise _refuse(path, what)
        if root is not None:
            real = _fd_path(fd, path)
            top = os.path.realpath(os.fspath(root))
            if not inside(real, top):
                raise _refuse(path, f"now reached through a link leading to {real}, outside "
                              f"the watched root {top}")
        if (st.st_dev, st.st_ino) in _swap_files():
            raise _refuse(path, "an active swap file")
        yield fd, st
    finally:
        os.close(fd)


def _fd_path(fd: int, path: Path) -> str:
    """The real path of an open descriptor (``/proc``), else of ``path``."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)


def stat_input(path: Path, root: str | os.PathLike[str] | None = None
               ) -> tuple[int, int, int, int]:
    """``(device, inode, size, mtime_ns)`` of the report, opened safely (``open_input``)."""
    with open_input(path, root) as (_, st):
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def report_identity(path: Path, root: str | os.PathLike[str] | None = None) -> ReportIdentity:
    """Identity of ``path``: device, inode, size, mtime and a hash of its first 64 KiB (opened
    safely: ``InputRefused`` for anything but a regular file inside ``root``)."""
    with open_input(path, root) as (fd, st):
        head = os.pread(fd, HEAD_BYTES, 0)
    return ReportIdentity(device=st.st_dev, inode=st.st_ino, size=st.st_size,
                          mtime_ns=st.st_mtime_ns, head_sha256=hashlib.sha256(head).hexdigest())


def fingerprint(path: Path, session_start_ns: int, processes: Iterable[tuple[str, int]],
                root: str | os.PathLike[str] | None = None) -> str:
    """What a report *is*, whatever its name or inode: SHA-256 of its SQLite header page, its
    session start and the set of its (host, pid). A copy under another name has the same."""
    with open_input(path, root) as (fd, _):
        head = os.pread(fd, 100, 0)
        size = int.from_bytes(head[_PAGE_SIZE_AT:_PAGE_SIZE_AT + 2], "big") if len(
            head) >= _PAGE_SIZE_AT + 2 else 0
        page = os.pread(fd, 65536 if size == 1 else max(size, 100), 0)
    digest = hashlib.sha256(page)
    digest.update(f"\n{session_start_ns}\n".encode())
    for host, pid in sorted(set(processes)):
        digest.update(f"{host}\0{pid}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()
