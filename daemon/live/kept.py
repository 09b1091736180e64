"""Committed reports are kept: a hard link (or a copy-on-write clone) of each committed export
beside the job's outputs, so that deleting or renaming over the original cannot change what
finalize and recovery read.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from prvstream.daemon.live.inputs import open_input
from prvstream.sinks.logger import get_logger

__all__ = ["KEPT_DIRNAME", "keep", "kept_path", "source_of"]

log = get_logger(__name__)

#: hidden folder in a job's output directory holding the kept exports
KEPT_DIRNAME = ".prvstream-kept"
#: Linux ``FICLONE`` ioctl (copy-on-write clone on btrfs, XFS, bcachefs, ...)
_FICLONE = 0x40049409


def kept_path(out_dir: Path, fingerprint: str) -> Path:
    return out_dir / KEPT_DIRNAME / f"{fingerprint}.sqlite"


def keep(path: Path, out_dir: Path, fingerprint: str, root: str | None) -> str:
    """Link or clone the export at ``path`` into the kept folder; its path, or "" when the
    file system allows neither (then the original is read, and checked, as before)."""
    target = kept_path(out_dir, fingerprint)
    if target.exists():
        return str(target)
    target.parent.mkdir(exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    with open_input(path, root) as (fd, st):
        try:
            os.link(path, tmp, follow_symlinks=False)
            linked = os.lstat(tmp)
            if (linked.st_dev, linked.st_ino) != (st.st_dev, st.st_ino):  # swapped meanwhile
                tmp.unlink()
                raise OSError(errno.ESTALE, "the file changed while being linked")
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.ENOENT, errno.EMLINK,
                                 errno.ENOTSUP, errno.EACCES, errno.ESTALE):
                raise
            if not _clone(fd, tmp):
                log.info("report_not_kept", report=str(path), reason=exc.strerror,
                         hint="finalize reads the original export (checked unchanged)")
                return ""
    os.replace(tmp, target)
    return str(target)


def _clone(src_fd: int, tmp: Path) -> bool:
    try:
        dst = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      0o666)
    except OSError:
        return False
    try:
        fcntl.ioctl(dst, _FICLONE, src_fd)
    except OSError:
        os.close(dst)
        tmp.unlink(missing_ok=True)
        return False
    os.close(dst)
    return True


def source_of(path: str, kept: str) -> Path:
    """What to read for a committed report: its kept copy when there is one."""
    if kept:
        with contextlib.suppress(OSError):
            if os.path.isfile(kept):
                return Path(kept)
    return Path(path)
