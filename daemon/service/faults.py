"""Whose fault is a failure: the input (set the report aside) or the output side (keep it
pending, mark the job degraded, retry with backoff); the backoff and a job's health.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from prvstream.sinks.errors import OutputConflict, PrvstreamError
from prvstream.sinks.logger import get_logger

__all__ = [
    "OUTPUT_ERRNOS",
    "Backoff",
    "Fault",
    "Health",
    "classify",
    "probe_dir",
]

log = get_logger(__name__)

#: errors that say the place being written to is the problem, never the report being read
OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT})
#: errors that belong to whichever file they name (input when it is the report)
_NAMED_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR,
                           errno.ELOOP, errno.EISDIR})
#: SQLite's words for "the temporary or output space ran out"
_SQLITE_SPACE = ("disk is full", "database or disk is full", "no space")

Fault = Literal["input", "output"]


@dataclass
class Backoff:
    """Exponential retry delays: ``first`` doubling up to ``most`` seconds."""

    first: float = 1.0
    most: float = 60.0
    failures: int = 0

    def next_delay(self) -> float:
        delay: float = min(self.most, self.first * 2.0 ** min(self.failures, 30))
        self.failures += 1
        return delay

    def reset(self) -> None:
        self.failures = 0


@dataclass
class Health:
    """A job's state for ``status.json``: ``ok``, ``degraded`` (retrying) or ``refused``."""

    state: Literal["ok", "degraded", "refused"] = "ok"
    reason: str = ""
    #: wall-clock ns of the next retry (0: none planned)
    next_retry_ns: int = 0
    backoff: Backoff | None = None

    def degrade(self, reason: str, state: Literal["degraded", "refused"] = "degraded"
                ) -> float:
        """Record the failure; return the delay before the next retry (logged by the caller)."""
        if self.backoff is None:
            self.backoff = Backoff()
        delay = self.backoff.next_delay()
        self.state = state
        self.reason = reason
        self.next_retry_ns = time.time_ns() + int(delay * 1e9)
        return delay

    def recover(self) -> bool:
        """Back to ``ok``; True when the job was not ok before."""
        was = self.state != "ok"
        self.state, self.reason, self.next_retry_ns, self.backoff = "ok", "", 0, None
        return was


def probe_dir(path: Path) -> str | None:
    """None when a small file can be created, written, synced and removed in ``path``;
    otherwise why not (never creates ``path`` itself)."""
    probe = path / f".prvstream-probe.{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        return f"cannot create files in {path}: {exc.strerror or exc}"
    try:
        os.write(fd, b"\0" * 4096)
        os.fsync(fd)
    except OSError as exc:
        return f"cannot write in {path}: {exc.strerror or exc}"
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _names_input(exc: OSError, inputs: tuple[Path, ...]) -> bool:
    named = {os.fspath(f) for f in (exc.filename, exc.filename2) if f is not None}
    return any(os.fspath(p) in named or any(n.startswith(f"{p}-") for n in named)
               for p in inputs)


def classify(exc: BaseException, *, inputs: tuple[Path, ...], out_dir: Path,
             job_dir: Path) -> tuple[Fault, str]:
    """Is ``exc`` (raised while handling ``inputs`` for the job) the input's fault or the
    output side's? Returns the fault and a one-line reason.

    Output side: no space or quota, a read-only file system, the job or output directory gone
    or unwritable, an output path prvstream may not write. Input: anything the report's own
    content or permissions explain. When an error names neither, the output directory is
    probed: if it cannot be written, the output side is at fault.
    """
    reason = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, OutputConflict):
        return "output", str(exc)
    for link in _chain(exc):
        if isinstance(link, OSError) and link.errno in OUTPUT_ERRNOS:
            return "output", f"{link.strerror or link} ({link.filename or out_dir})"
        if isinstance(link, sqlite3.OperationalError) and any(
                word in str(link).lower() for word in _SQLITE_SPACE):
            return "output", f"no space for SQLite's temporary files: {link}"
    if not os.path.isdir(job_dir):
        return "output", f"the job directory {job_dir} vanished"
    if os.path.lexists(out_dir) and not os.path.isdir(out_dir):
        return "output", f"the output path {out_dir} exists and is not a directory"
    for link in _chain(exc):
        if isinstance(link, OSError) and link.errno in _NAMED_ERRNOS:
            if _names_input(link, inputs):
                return "input", reason
            return "output", f"{link.strerror or link} ({link.filename or out_dir})"
    if isinstance(exc, PrvstreamError):
        return "input", str(exc)
    if os.path.isdir(out_dir):
        problem = probe_dir(out_dir)
        if problem is not None:
            return "output", problem
    elif (problem := probe_dir(out_dir.parent)) is not None and out_dir.parent.exists():
        return "output", problem
    return "input", f"internal error: {exc!r}"
