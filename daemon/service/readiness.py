"""Is an export complete? Settle time, no journal beside it, a read-only open, quick_check, and
the final ``EXPORT_TIME`` metadata row (``nsys export`` of reports is ``nsys.exporter``).
"""

from __future__ import annotations

import os
import sqlite3
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import msgspec

from prvstream.daemon.live.inputs import (
    HEAD_BYTES,
    InputRefused,
    ReportIdentity,
    open_input,
    report_identity,
)
from prvstream.daemon.nsys.sqlite import METADATA_TABLES, SQLITE_MAGIC, ro_uri
from prvstream.sinks.logger import get_logger

__all__ = [
    "CHECK_LIMIT",
    "HEAD_BYTES",
    "Invalid",
    "NotYet",
    "Pace",
    "Ready",
    "ReportIdentity",
    "Settling",
    "Verdict",
    "check_export",
    "look",
    "report_identity",
    "stat_signature",
    "wait_ready",
]

log = get_logger(__name__)

#: seconds one readiness check may take before it is abandoned and retried later
CHECK_LIMIT = 60.0
#: threads readiness checks may use (a hung mount holds these, never the converters')
_CHECK_THREADS = 8
_check_pool: anyio.CapacityLimiter | None = None
#: siblings that mean "a writer is in the middle of a transaction"
_BUSY_SUFFIXES = ("-journal", "-wal")


class Ready(msgspec.Struct, frozen=True, tag="ready"):
    """The export is complete; ``identity`` is what the journal should record."""

    identity: ReportIdentity


class NotYet(msgspec.Struct, frozen=True, tag="not_yet"):
    """Still being written (or not yet stable); look again later.

    ``corrupt`` marks failures that only a writer still at work can explain (not SQLite yet,
    quick_check fails): once the file has been stable for the settle time they become Invalid.
    """

    reason: str
    corrupt: bool = False


class Invalid(msgspec.Struct, frozen=True, tag="invalid"):
    """Stable, and still not a complete export: report once and set aside.

    ``gone``: the file disappeared (renamed away or deleted): nothing to set aside.
    """

    reason: str
    gone: bool = False


Verdict = Ready | NotYet | Invalid


#: a stat signature as one ``bytes`` (a flood of waiting files keeps one object a file for it,
#: not a tuple and four ints); equal exactly when the signatures are
_PACKED_SIG = struct.Struct("<QQqq")


def stat_signature(path: Path) -> tuple[int, int, int, int]:
    """``(device, inode, size, mtime_ns)`` of ``path`` itself (a symlink is not followed)."""
    st = os.lstat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def check_export(path: Path, root: str | os.PathLike[str] | None = None) -> Verdict:
    """One look at ``path`` (blocking, no waiting): the checks of DESIGN §3 except settling.

    Ready, NotYet (a writer may still be at work) or NotYet(corrupt=True) (broken unless a
    writer is still at work). Never Invalid: only :func:`wait_ready` knows how long the file
    has been stable.
    """
    for suffix in _BUSY_SUFFIXES:
        if os.path.lexists(f"{path}{suffix}"):
            return NotYet(f"a {suffix} file stands beside it (a writer is in a transaction)")
    try:
        before = report_identity(path, root)
        with open_input(path, root) as (fd, _):
            magic = os.pread(fd, len(SQLITE_MAGIC), 0)
    except FileNotFoundError:
        return NotYet("the file vanished (renamed or deleted)")
    except InputRefused as exc:
        return NotYet(str(exc), corrupt=True)
    except OSError as exc:
        return NotYet(f"cannot read it: {exc}", corrupt=True)
    if before.size == 0:
        return NotYet("the file is empty")
    if magic != SQLITE_MAGIC:
        return NotYet("not an SQLite database (bad header)", corrupt=True)
    try:
        con = sqlite3.connect(ro_uri(path), uri=True, check_same_thread=False)
    except sqlite3.Error as exc:
        return NotYet(f"a read-only open fails: {exc}", corrupt=True)
    try:
        try:
            rows = con.execute("PRAGMA quick_check").fetchall()
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return NotYet(f"the database is locked: {exc}")
            return NotYet(f"quick_check cannot run: {exc}", corrupt=True)
        except sqlite3.DatabaseError as exc:
            return NotYet(f"quick_check cannot run: {exc}", corrupt=True)
        if [tuple(r) for r in rows] != [("ok",)]:
            first = "; ".join(str(r[0]) for r in rows[:3])
            return NotYet(f"quick_check fails: {first}", corrupt=True)
        tables = {r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
        for table in METADATA_TABLES:
            if table in tables:
                found = con.execute(
                    f"SELECT 1 FROM {table} WHERE name = 'EXPORT_TIME' LIMIT 1").fetchone()
                if found is None:
                    return NotYet(f"{table} has no EXPORT_TIME row yet (export unfinished)")
                break
    except sqlite3.DatabaseError as exc:
        return NotYet(f"reading it fails: {exc}", corrupt=True)
    finally:
        con.close()
    try:
        after = report_identity(path, root)
    except OSError:
        return NotYet("the file vanished while being checked")
    if after != before:
        return NotYet("the file changed while being checked")
    return Ready(after)


def _packed_signature(path: Path) -> bytes:
    """``stat_signature(path)`` packed (its text when a value does not fit 64 bits)."""
    sig = stat_signature(path)
    try:
        return _PACKED_SIG.pack(*sig)
    except struct.error:
        return repr(sig).encode()


@dataclass(frozen=True, slots=True)
class Pace:
    """How :func:`look` paces a file (shared by every file a service waits on)."""

    settle: float
    max_wait: float = 3600.0
    first_delay: float | None = None
    max_delay: float = 30.0
    check_limit: float = CHECK_LIMIT

    @property
    def base(self) -> float:
        return max(0.02, self.settle / 4) if self.first_delay is None else self.first_delay


@dataclass(slots=True)
class Settling:
    """One file's progress toward Ready or Invalid between looks: a few numbers, no task."""

    start: float
    delay: float
    stable_since: float
    #: the last and the last corrupt-looking signature, packed (``_PACKED_SIG``)
    last_sig: bytes | None = None
    corrupt_sig: bytes | None = None
    corrupt_since: float = 0.0
    reason: str = "never checked"
    missing_since: float | None = None

    @classmethod
    def begin(cls, pace: Pace, now: float | None = None) -> Settling:
        now = time.monotonic() if now is None else now
        return cls(start=now, delay=pace.base, stable_since=now)


async def look(path: Path, st: Settling, pace: Pace,
               root: str | os.PathLike[str] | None = None) -> Ready | Invalid | float:
    """One step of :func:`wait_ready` for ``path``: Ready, Invalid, or the seconds to wait
    before the next look (``st`` carries what the looks so far found)."""
    now = time.monotonic()
    settle = pace.settle
    try:
        sig: bytes | None = _packed_signature(path)
    except FileNotFoundError:
        sig = None
        st.reason = "the file does not exist"
        if st.missing_since is None:
            st.missing_since = now
        elif now - st.missing_since >= settle:
            log.info("export_gone", path=str(path))
            return Invalid("the file disappeared", gone=True)
    else:
        st.missing_since = None
    if sig is not None:
        if sig != st.last_sig:
            st.last_sig, st.stable_since, st.delay = sig, now, pace.base
            st.reason = "still changing"
        elif now - st.stable_since >= settle:
            verdict = await _timed_check(path, root, pace.check_limit)
            if isinstance(verdict, Ready):
                return verdict
            if isinstance(verdict, Invalid):  # pragma: no cover - check_export never does
                return verdict
            st.reason = verdict.reason
            if verdict.corrupt:
                if st.corrupt_sig != sig:
                    st.corrupt_sig, st.corrupt_since = sig, time.monotonic()
                elif time.monotonic() - st.corrupt_since >= settle:
                    log.warning("export_invalid", path=str(path), reason=st.reason)
                    return Invalid(st.reason)
            else:
                st.corrupt_sig = None
    if now - st.start >= pace.max_wait:
        log.warning("export_invalid", path=str(path), reason=st.reason, waited_s=pace.max_wait)
        return Invalid(f"not complete after {pace.max_wait:g} s: {st.reason}")
    pause = st.delay
    if sig is not None and sig == st.last_sig and now - st.stable_since < settle:
        pause = min(st.delay, settle - (now - st.stable_since))
    if st.corrupt_sig is not None:
        pause = min(pause, max(0.02, settle - (time.monotonic() - st.corrupt_since)))
    st.delay = min(pace.max_delay, st.delay * 2)
    return max(0.01, pause)


async def wait_ready(path: Path, *, settle: float, max_wait: float = 3600.0,
                     first_delay: float | None = None, max_delay: float = 30.0,
                     root: str | os.PathLike[str] | None = None,
                     check_limit: float = CHECK_LIMIT) -> Ready | Invalid:
    """Wait until ``path`` is a complete export (Ready) or clearly never will be (Invalid).

    The file must keep the same (device, inode, size, mtime) for ``settle`` seconds before the
    SQLite checks run in a worker thread. A NotYet re-checks after an exponentially growing
    delay (``first_delay`` doubling up to ``max_delay``; a change resets it). Invalid when a
    corrupt-looking file stays unchanged for ``settle`` seconds after a failed check, or when
    nothing is Ready after ``max_wait`` seconds, or ``Invalid(gone=True)`` when the file has
    been missing for ``settle`` seconds (two looks a settle time apart, so that a stale
    NFS attribute cache cannot condemn a file still being written). Cancel to stop waiting.
    Each check runs in a thread of its own pool for at most ``check_limit`` seconds (a hung
    file system costs a retry, never a stuck service); opens never block (``open_input``).
    The daemon runs the same steps (:func:`look`) from a fixed pool of checkers instead.
    """
    pace = Pace(settle, max_wait, first_delay, max_delay, check_limit)
    st = Settling.begin(pace)
    while True:
        step = await look(path, st, pace, root)
        if not isinstance(step, float):
            return step
        await anyio.sleep(step)


async def _timed_check(path: Path, root: str | os.PathLike[str] | None, limit: float
                       ) -> Verdict:
    global _check_pool
    if _check_pool is None:
        _check_pool = anyio.CapacityLimiter(_CHECK_THREADS)
    with anyio.move_on_after(limit):
        return await anyio.to_thread.run_sync(check_export, path, root, limiter=_check_pool,
                                              abandon_on_cancel=True)
    log.warning("export_check_timed_out", path=str(path), limit_s=limit)
    return NotYet(f"checking it took longer than {limit:g} s (a hung file system?)")


