"""Crash-safe file replacement: every whole-file output goes through a temp file and a rename.

One implementation for the trace's .pcf/.row, the summaries, the journal and status files.
"""

from __future__ import annotations

import _thread
import contextlib
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from prvstream.sinks.errors import OutputConflict
from prvstream.sinks.logger import get_logger

__all__ = ["OWNED_MARKER", "atomic_write", "atomic_write_all", "exclusive_file", "fsync_all",
           "fsync_dir", "output_mode"]

log = get_logger(__name__)

#: sidecar in an output directory listing, one per line, the files prvstream created there
#: (discovery never reads inside such a directory)
OWNED_MARKER = ".prvstream-owned"


def output_mode() -> int:
    """The mode an ordinary new file gets here: 0666 less the process umask (0644 under 022).

    Read from ``/proc/self/status`` where it can be (changing the umask to read it is not
    thread-safe); elsewhere the umask is swapped back at once."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def exclusive_file(directory: str | os.PathLike[str], prefix: str,
                   suffix: str) -> tuple[int, str]:
    """A new file ``prefix`` + a random part + ``suffix`` in ``directory``, created by this
    call (never through a link), mode 0600: its descriptor and path (``tempfile.mkstemp``'s
    contract, without loading ``tempfile``)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        path = os.path.join(directory, f"{prefix}{os.urandom(5).hex()}{suffix}")
        try:
            return os.open(path, flags, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free name for a temporary file in {directory}")


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory so that a rename in it survives a power cut (where supported)."""
    with contextlib.suppress(OSError):  # some file systems cannot fsync a directory
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_all(fds: Sequence[int], meanwhile: Callable[[], None] | None = None) -> None:
    """fsync every descriptor, all at once (a thread each beyond the first): the file system
    commits concurrent fsyncs together (ext4's journal: 5 small files in 6-9 ms rather than
    15-17 ms one after another here). The threads are started without waiting for each to
    run (``_thread``: ``threading.Thread.start`` waits, up to milliseconds on a busy machine).
    The first error is raised after all end.

    ``meanwhile``: called while they run (every fsync on a thread of its own), for work that
    does not need them done (a large trace's fsync is I/O its converter would wait for);
    what it raises is raised once every fsync has ended."""
    errors: list[OSError] = []
    waits: list[_thread.LockType] = []

    def one(fd: int, done: _thread.LockType | None = None) -> None:
        try:
            os.fsync(fd)
        except OSError as exc:
            errors.append(exc)
        finally:
            if done is not None:
                done.release()

    own = 1 if meanwhile is None else 0
    for fd in fds[own:]:
        done = _thread.allocate_lock()
        done.acquire()
        try:
            _thread.start_new_thread(one, (fd, done))
        except RuntimeError:  # no thread to be had: this one syncs it
            one(fd, done)
        waits.append(done)
    try:
        if meanwhile is not None:
            meanwhile()
        elif fds:
            one(fds[0])
    finally:
        for done in waits:
            done.acquire()
    if errors:
        raise errors[0]


def atomic_write(path: str | os.PathLike[str], data: bytes | str | Iterable[bytes], *,
                 sync_dir: bool = True) -> None:
    """Replace ``path`` with ``data`` (or its pieces, written as they come): temp file beside
    it (never through a link), fsync, ``os.replace``, fsync of the directory. A symlink at
    ``path`` is refused. ``sync_dir=False``: the caller renames more files into the same
    directory and fsyncs it once after the last (``fsync_dir``), before it reports them
    written."""
    atomic_write_all([(path, data)], sync_dir=sync_dir)


def atomic_write_all(files: Sequence[tuple[str | os.PathLike[str],
                                           bytes | str | Iterable[bytes]]], *,
                     also: Sequence[int] = (), sync_dir: bool = True,
                     meanwhile: Callable[[], None] | None = None) -> None:
    """``atomic_write`` of several files, their fsyncs (and those of ``also``: descriptors of
    files the caller renames after this returns) at once (``fsync_all``, with its
    ``meanwhile``), then their renames in order and one fsync of each directory (none with
    ``sync_dir=False``)."""
    staged: list[tuple[Path, Path, int]] = []
    try:
        for path, data in files:
            target = Path(path)
            tmp, fd = _write_temp(target, data)
            staged.append((tmp, target, fd))
        fsync_all([*(fd for _, _, fd in staged), *also], meanwhile)
    except BaseException:
        for tmp, _, fd in staged:
            os.close(fd)
            tmp.unlink(missing_ok=True)
        raise
    for tmp, target, fd in staged:
        os.close(fd)
        os.replace(tmp, target)
    if sync_dir:
        for parent in dict.fromkeys(target.parent for _, target, _ in staged):
            fsync_dir(parent)


def _write_temp(target: Path, data: bytes | str | Iterable[bytes]) -> tuple[Path, int]:
    """``data`` written (not synced) to a new temp file beside ``target``: its path and open
    descriptor. A symlink at ``target`` is refused."""
    if target.is_symlink():
        raise OutputConflict(f"{target} is a symlink; prvstream never writes through symlinks: "
                             "remove it or choose another output path")
    pieces = (data.encode(),) if isinstance(data, str) else (
        (data,) if isinstance(data, bytes) else data)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o666)  # less the umask, like any new file
    try:
        for piece in pieces:
            view = memoryview(piece)
            while view:
                view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    return tmp, fd
