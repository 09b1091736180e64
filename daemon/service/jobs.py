"""One job's single writer: opens the journal and live trace, appends, sets aside, finalizes;
every failure is caught here, at the job boundary, and never ends the service.

Input faults set the report aside (retried when the file changes); output-side faults keep the
work pending, mark the job ``degraded`` in ``status.json`` and retry it with backoff.
"""

from __future__ import annotations

import collections
import itertools
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.abc
import msgspec

from prvstream.daemon.config import Settings
from prvstream.daemon.live.group import GROUP_MAX_REPORTS, MemberFailed, append_group
from prvstream.daemon.live.inputs import (
    InputChanged,
    InputRefused,
    ReportIdentity,
    report_identity,
)
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.live.livetrace import LiveTrace, output_dir_for
from prvstream.daemon.live.outcomes import AppendInterrupted, AppendResult, DuplicateReport
from prvstream.daemon.service.expect import RankTally
from prvstream.daemon.service.faults import Health, classify
from prvstream.daemon.service.flow import JobFlow
from prvstream.daemon.service.readiness import Ready
from prvstream.daemon.service.status import JobStatus, StatusOf, write_status
from prvstream.sinks.errors import JournalCorrupt, OutputLocked, StateDirUnusable
from prvstream.sinks.logger import get_logger

if TYPE_CHECKING:
    from prvstream.daemon.live.remote import RemoteAppender

__all__ = ["Append", "Finalize", "Job", "JobStatus", "Refresh", "SetAside", "Shared"]

log = get_logger(__name__)


class Append:
    """A report found complete: its path and the identity the journal will record. A flood
    holds up to ``readiness_ahead`` of them waiting, so each keeps its path's text and its
    identity packed in one ``bytes`` (about 250 bytes, where a ``Path`` with its parts and
    the identity's struct took about 1 KiB); ``path`` and ``ready`` are made when read."""

    __slots__ = ("_identity", "text")

    def __init__(self, path: Path | str, ready: Ready) -> None:
        #: the path as text (what the flow keys the report by)
        self.text = os.fspath(path)
        self._identity = msgspec.msgpack.encode(ready.identity)

    @property
    def path(self) -> Path:
        return Path(self.text)

    @property
    def ready(self) -> Ready:
        return Ready(msgspec.msgpack.decode(self._identity, type=ReportIdentity))


@dataclass(frozen=True, slots=True)
class SetAside:
    path: Path
    reason: str


@dataclass(frozen=True, slots=True)
class Finalize:
    why: str


@dataclass(frozen=True, slots=True)
class Refresh:
    """Write ``status.json`` again (the job's ``prvstream.expect`` changed)."""


Item = Append | SetAside | Finalize | Refresh


@dataclass
class Shared:
    """What every job's writer shares with the service."""

    settings: Settings
    limiter: anyio.CapacityLimiter
    once: bool
    stopping: Callable[[], bool]
    #: called when a job's work or health changed (``--once`` waits on it)
    changed: Callable[[], None]
    #: a report landed (for the service's counters and systemd STATUS)
    appended: Callable[[Job, Path], None]
    #: the state directory is unusable: the service must stop
    fatal: Callable[[BaseException], None]
    #: the job directory vanished: forget the job
    vanished: Callable[[Job], None]
    #: the Dask client with ``--dask`` (set when the service starts), else None
    client: Any = None


@dataclass
class Job:
    """One job directory and its single writer task."""

    job_dir: Path
    root: Path
    name: str
    shared: Shared
    journal: JobJournal | None = None
    trace: LiveTrace | None = None
    health: Health = field(default_factory=Health)
    backlog: collections.deque[Item] = field(default_factory=collections.deque)
    #: the path text of every file found and not yet handed to the backlog (readiness)
    waiting: set[str] = field(default_factory=set)
    #: of them, the files being checked now (in the readiness queue or looked at)
    checking: int = 0
    #: of them, the files the readiness pool holds back, not looked at yet (a flood beyond
    #: ``readiness_ahead``): path text, or (path text, root, whether it is an ``.nsys-rep``)
    held: collections.deque[str | tuple[str, Path, bool]] | None = None
    #: backlog items of the group commit in progress (0 between commits)
    committing: int = 0
    last_change: float = field(default_factory=time.monotonic)
    done_marker: bool = False
    #: a finalize is queued; the reason it was asked for
    finalize_queued: str = ""
    #: ``last_change`` when finalize last failed for an input reason: not retried until
    #: something changes
    finalize_failed_at: float | None = None
    #: with ``--dask``: plans and converts backlog reports on the cluster ahead of the writer
    remote: RemoteAppender | None = None
    flow: JobFlow = field(default_factory=JobFlow)
    #: backlog items to append one by one after the head (a group commit of them failed, or
    #: they come up to a report that failed in a group)
    _alone: int = 0
    _wake: anyio.Event = field(default_factory=anyio.Event)
    _logged: str = ""
    #: the committed reports' ranks, for ``missing_ranks`` (read once each)
    _ranks: RankTally = field(default_factory=RankTally)

    @property
    def out_dir(self) -> Path:
        return output_dir_for(self.job_dir, self.root, self.shared.settings)

    @property
    def finalized(self) -> bool:
        return self.journal is not None and self.journal.state.finalized

    def idle(self) -> bool:
        return not self.waiting and not self.backlog

    def expect_changed(self) -> None:
        """The job's expected rank count may have changed: rewrite its status (an unopened
        job writes it when its first report opens it)."""
        if self.trace is not None and not any(isinstance(i, Refresh) for i in self.backlog):
            self.submit(Refresh())

    def submit(self, item: Item) -> None:
        self.backlog.append(item)
        if isinstance(item, Append):
            self.flow.ready(item.text)
        if self.remote is not None and isinstance(item, Append):
            self.remote.submit(item.path)  # workers convert it while it waits
        self._wake.set()

    # -- the writer ----------------------------------------------------------------------
    async def run(self) -> None:
        """Work through the backlog forever (cancelled when the service stops)."""
        try:
            while True:
                if not self.backlog:
                    self._wake = anyio.Event()
                    if not self.backlog:
                        await self._wake.wait()
                    continue
                if self.shared.stopping():
                    return
                taken = await self._append_group() if await self._ensure_open() else -1
                if taken > 0:
                    for _ in range(taken):
                        self.backlog.popleft()
                    self.last_change = time.monotonic()
                    self.shared.changed()
                    continue
                if taken < 0 or not await self._handle(self.backlog[0]):
                    if self.trace is None and not self.job_dir.is_dir():
                        self._vanish()
                        return
                    if self.shared.once:  # nobody will retry: drop what cannot be done
                        self.backlog.clear()
                        self.shared.changed()
                        continue
                    await self._sleep_until_retry()
                    continue
                done = self.backlog.popleft()
                if not isinstance(done, Finalize | Refresh):  # a failed finalize waits for a change
                    self.last_change = time.monotonic()
                self.shared.changed()
        finally:
            self.close()

    async def _sleep_until_retry(self) -> None:
        delay = max(0.05, (self.health.next_retry_ns - time.time_ns()) / 1e9)
        await anyio.sleep(delay)

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()
            self.remote = None
        if self.trace is not None:
            self.trace.close()
            self.trace = None
        if self.journal is not None:
            self.journal.unlock()
            self.journal = None

    def _vanish(self) -> None:
        log.warning("job_vanished", job=str(self.job_dir), dropped=len(self.backlog),
                    hint="its reports and outputs went with it; nothing else is affected")
        self.backlog.clear()
        self.close()
        self.shared.vanished(self)

    # -- opening -------------------------------------------------------------------------
    async def _ensure_open(self) -> bool:
        if self.trace is not None:
            return True
        try:
            await anyio.to_thread.run_sync(self._open)
        except StateDirUnusable as exc:
            self.shared.fatal(exc)
            return False
        except OutputLocked as exc:
            self.close()
            self._degrade(str(exc), "refused", writable=False)
            return False
        except JournalCorrupt as exc:
            self.close()
            self._degrade(str(exc), "refused", writable=False)
            return False
        except Exception as exc:
            if not self.job_dir.is_dir():
                self.close()
                return False
            _, reason = classify(exc, inputs=(), out_dir=self.out_dir, job_dir=self.job_dir)
            self._degrade(reason, "degraded", writable=self.trace is not None)
            self.close()
            return False
        if self.health.state != "ok":
            self._healthy()
        assert self.journal is not None
        log.info("job_opened", job=str(self.job_dir), out=str(self.out_dir),
                 reports=len(self.journal.reports))
        return True

    def _open(self) -> None:
        """(worker thread) Journal, locks, live trace, recovery; raises on any failure."""
        if not self.job_dir.is_dir():
            raise FileNotFoundError(2, "job directory vanished", str(self.job_dir))
        settings = self.shared.settings
        journal = JobJournal.open(settings.state_dir, self.job_dir, root=self.root)
        journal.lock()
        self.journal = journal
        trace = LiveTrace(journal, self.out_dir, self.name or "trace", settings)
        self.trace = trace
        trace.recover()
        journal.commit()
        self._write_status()
        if self.shared.client is not None:
            from prvstream.daemon.live.remote import RemoteAppender

            self.remote = RemoteAppender(trace, self.shared.client)
            for item in list(self.backlog):
                if isinstance(item, Append):
                    self.remote.submit(item.path)

    # -- items ---------------------------------------------------------------------------
    async def _handle(self, item: Item) -> bool:
        """Do ``item``; False when it must be retried later (the job is degraded)."""
        assert self.journal is not None and self.trace is not None
        try:
            if isinstance(item, Append):
                await self._append(item)
            elif isinstance(item, SetAside):
                await anyio.to_thread.run_sync(self._set_aside, item.path, item.reason, None)
            elif isinstance(item, Refresh):
                await anyio.to_thread.run_sync(self._write_status)
            else:
                await self._finalize(item.why)
                self.finalize_queued = ""
        except AppendInterrupted:
            log.info("append_rolled_back", job=str(self.job_dir))
            return True
        except DuplicateReport as exc:
            assert isinstance(item, Append)
            await anyio.to_thread.run_sync(self._duplicate, item, exc)
            return True
        except InputChanged as exc:  # discovery hands it to readiness again
            log.info("report_changed_before_append", job=str(self.job_dir), error=str(exc))
            return True
        except StateDirUnusable as exc:
            self.shared.fatal(exc)
            return False
        except Exception as exc:
            inputs = (item.path,) if isinstance(item, Append | SetAside) else ()
            fault, reason = classify(exc, inputs=inputs, out_dir=self.out_dir,
                                     job_dir=self.job_dir)
            if fault == "output":
                # the outputs may be half-written: reopen (recover) before the next try
                self._degrade(reason, "degraded", writable=True)
                self.close()
                return False
            return await self._input_fault(item, exc, reason)
        if self.health.state != "ok":
            self._healthy()
        return True

    async def _input_fault(self, item: Item, exc: Exception, reason: str) -> bool:
        if isinstance(item, Refresh):  # best effort: the next step writes the status again
            log.warning("status_refresh_failed", job=str(self.job_dir), error=reason)
            return True
        if isinstance(item, Finalize):
            self.finalize_failed_at = self.last_change
            self.finalize_queued = ""
            log.error("finalize_failed", job=str(self.job_dir), error=reason,
                      kind=type(exc).__name__, retry="after the next change to the job")
            return True
        if reason.startswith("internal error"):
            log.error("report_failed", job=str(self.job_dir), report=item.path.name,
                      exc_info=exc)
        identity = item.ready.identity if isinstance(item, Append) else None
        try:
            await anyio.to_thread.run_sync(self._set_aside, item.path, reason, identity)
        except StateDirUnusable as fatal:
            self.shared.fatal(fatal)
            return False
        except Exception as again:
            _, why = classify(again, inputs=(), out_dir=self.out_dir, job_dir=self.job_dir)
            self._degrade(why, "degraded", writable=True)
            self.close()
            return False
        return True

    async def _append(self, item: Append) -> None:
        journal, trace = self.journal, self.trace
        assert journal is not None and trace is not None
        identity = item.ready.identity
        remote = self.remote
        if self._skip(item):
            if remote is not None:
                remote.forget(item.path)
            self.flow.gone(item.text)
            return
        append = trace.append if remote is None else remote.commit

        def work() -> None:
            try:
                result = append(item.path, identity)
            except BaseException:
                self.flow.gone(item.text)
                raise
            self.flow.landed(item.text, result.records)
            self._write_status(landed=1)  # the head of the backlog is in
            log.info("job_flow", job=str(self.job_dir), **self.flow.snapshot())

        async with self.shared.limiter:
            await anyio.to_thread.run_sync(work)
        self.shared.appended(self, item.path)

    def _skip(self, item: Append) -> bool:
        """Nothing to do for ``item`` (already in, set aside or a duplicate, or stopping)."""
        journal = self.journal
        assert journal is not None
        identity = item.ready.identity
        return (self.shared.stopping() or journal.has_report(identity)
                or journal.is_quarantined(item.path, identity)
                or journal.is_duplicate(item.path, identity))

    async def _append_group(self) -> int:
        """Append the reports ready at the head of the backlog as one commit (group commit);
        how many backlog items that took. 0: the head is done alone (not an append, the last
        group failed, or a group of one); -1: the job must wait (the head is not done)."""
        trace = self.trace
        if self.remote is not None or trace is None or self._alone > 0:
            self._alone = max(0, self._alone - 1)
            return 0
        items: list[Append] = []
        # at most readiness_ahead: the files readiness checks meanwhile are counted beside
        # these, so a group that takes fewer than it was handed must not let the ready ones
        # pile up (each commit would hand the next a larger backlog: 4,860 ready at once in a
        # flood of 10,000, against the 2 x readiness_ahead this bounds them to)
        cap = min(GROUP_MAX_REPORTS, self.shared.settings.readiness_ahead)
        for item in itertools.islice(self.backlog, cap):
            if not isinstance(item, Append):
                break
            items.append(item)
        fresh = [item for item in items if not self._skip(item)]
        if len(fresh) < 2:
            return 0

        failed: list[Append] = []

        def work() -> list[AppendResult]:
            batch = [(i.path, i.ready.identity) for i in fresh]
            try:
                results = append_group(trace, batch)
            except MemberFailed as exc:  # the ones before it again together, then it alone
                cause = exc.__cause__
                log.info("group_member_failed", job=str(self.job_dir), report=exc.report,
                         at=exc.at, error=str(cause), kind=type(cause).__name__)
                failed.append(fresh[exc.at])
                results = append_group(trace, batch[:exc.at]) if exc.at >= 2 else []
            for item, result in zip(fresh, results, strict=False):
                self.flow.landed(item.text, result.records)
            if results:
                self._write_status(landed=len(results))
                log.info("job_flow", job=str(self.job_dir), **self.flow.snapshot())
            return results

        self.committing = len(items)
        self.shared.changed()  # readiness may check the next group's files meanwhile
        try:
            async with self.shared.limiter:
                results = await anyio.to_thread.run_sync(work)
        except StateDirUnusable as exc:
            self.shared.fatal(exc)
            return -1
        except Exception as exc:  # each report again, alone, to meet its own fate
            log.info("group_commit_failed_appending_one_by_one", job=str(self.job_dir),
                     reports=len(fresh), error=str(exc), kind=type(exc).__name__)
            self._alone = len(items)
            return 0
        finally:  # the caller takes the landed ones from the backlog before anything awaits
            self.committing = 0
        if self.health.state != "ok":
            self._healthy()
        landed = {id(item) for item in fresh[:len(results)]}
        for item in fresh[:len(results)]:
            self.shared.appended(self, item.path)
        taken = 0
        while len(landed):
            item = items[taken]
            taken += 1
            if id(item) in landed:
                landed.discard(id(item))
            else:
                self.flow.gone(item.text)  # skipped: already in, or set aside
        if failed:  # the items left up to the failed report, it included, one by one
            left = items.index(failed[0]) + 1 - taken
            # nothing taken: the caller appends the head alone now, ``_alone`` the rest
            self._alone = left if taken else left - 1
        return taken

    def _duplicate(self, item: Append, exc: DuplicateReport) -> None:
        """(worker thread) Record a second copy of a committed report: never appended."""
        assert self.journal is not None
        self.journal.add_duplicate(item.path, item.ready.identity, exc.of)
        self.journal.commit()
        log.warning("report_duplicate", job=str(self.job_dir), path=str(item.path),
                    of=exc.of, reason=str(exc))
        self._write_status(landed=1)

    def _set_aside(self, path: Path, reason: str, identity: ReportIdentity | None) -> None:
        """(worker thread) Record ``path`` as set aside, once per identity."""
        journal = self.journal
        assert journal is not None
        ident = identity
        if ident is None:
            try:
                ident = report_identity(path, self.root)
            except (OSError, InputRefused):
                ident = None
        if journal.is_quarantined(path, ident):
            return
        journal.quarantine(path, reason, ident)
        journal.commit()
        log.warning("report_quarantined", job=str(self.job_dir), path=str(path), reason=reason)
        self._write_status()

    async def _finalize(self, why: str) -> None:
        journal, trace = self.journal, self.trace
        assert journal is not None and trace is not None
        if journal.state.finalized or not journal.reports or self.shared.stopping():
            return
        log.info("job_finalizing", job=str(self.job_dir), reason=why)
        def work() -> None:
            trace.finalize()
            self._write_status()

        async with self.shared.limiter:
            await anyio.to_thread.run_sync(work)

    # -- health and status ---------------------------------------------------------------
    def _degrade(self, reason: str, state: Literal["degraded", "refused"], *,
                 writable: bool) -> None:
        delay = self.health.degrade(reason, state)
        if self.shared.once:
            delay = math.inf
        if reason != self._logged:  # logged once per reason, not once per retry
            self._logged = reason
            log.warning("job_degraded" if state == "degraded" else "job_refused",
                        job=str(self.job_dir), reason=reason, pending=len(self.backlog),
                        retry_in_s=None if math.isinf(delay) else round(delay, 1))
        if writable:
            self._write_status()
        self.shared.changed()

    def _healthy(self) -> None:
        if self.health.recover():
            log.info("job_resumed", job=str(self.job_dir))
        self._logged = ""

    def _write_status(self, landed: int = 0) -> None:
        """Replace ``status.json`` (best effort: the next successful step writes it again)."""
        if self.journal is not None and self.trace is not None:
            pending = sum(isinstance(i, Append) for i in list(self.backlog)) - landed
            write_status(self.journal, self.trace, self.job_dir, self.shared.settings,
                         StatusOf(self.health, self.flow.snapshot(), pending,
                                  len(self.waiting)), self._ranks)
