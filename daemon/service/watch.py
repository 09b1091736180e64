"""The daemon (``prvstream watch``): discovery, readiness, one writer per job, shutdown.

An anyio task group runs discovery (native events or polling, plus an initial scan), one
readiness waiter per candidate file, one writer task per job (appends run in worker threads,
bounded by ``workers``), idle/marker finalization, the systemd watchdog and signal handling.
SIGTERM/SIGINT stop taking work, roll back the block in progress and exit 0; SIGHUP is
acknowledged (logs go to stderr/journald, nothing to reopen).
"""

from __future__ import annotations

import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from prvstream.daemon.config import Settings
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.live.livetrace import AppendInterrupted, LiveTrace, output_dir_for
from prvstream.daemon.service.discover import Candidate, open_discovery, scan_once
from prvstream.daemon.service.notify import (
    notify_ready,
    notify_status,
    notify_stopping,
    run_watchdog,
)
from prvstream.daemon.service.readiness import Invalid, Ready, export_with_nsys, wait_ready
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger

__all__ = ["Service"]

log = get_logger(__name__)


class JobStatus(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``status.json`` beside a job's outputs: what is in, what was set aside."""

    job: str
    reports: int
    records: int
    finalized: bool
    prv: str
    quarantined: list[dict[str, str]] = msgspec.field(default_factory=list)
    updated_ns: int = 0


@dataclass
class Job:
    """One job directory: its journal, live trace, queue and bookkeeping."""

    job_dir: Path
    root: Path
    journal: JobJournal
    trace: LiveTrace
    #: reports to append, or None: finalize (the writer does both, so they never overlap)
    send: MemoryObjectSendStream[tuple[Path, Ready] | None]
    receive: MemoryObjectReceiveStream[tuple[Path, Ready] | None]
    waiting: set[Path] = field(default_factory=set)
    queued: int = 0
    last_change: float = field(default_factory=time.monotonic)
    done_marker: bool = False
    #: a finalize is queued; the reason it was asked for
    finalize_queued: str = ""
    #: ``last_change`` when finalize last failed: not retried until something changes
    finalize_failed_at: float | None = None


class Service:
    """The daemon; ``await Service(roots, settings).run()``."""

    def __init__(self, roots: list[str], settings: Settings, *, once: bool = False,
                 exit_when_finalized: bool = False) -> None:
        self.roots = roots
        self.settings = settings
        self.once = once
        self.exit_when_finalized = exit_when_finalized
        self.jobs: dict[Path, Job] = {}
        self.limiter = anyio.CapacityLimiter(settings.workers)
        self.appended = 0
        self.stopping = False
        self._tg: anyio.abc.TaskGroup | None = None
        #: set whenever a job's queue or waiters change (``--once`` waits on it)
        self._changed = anyio.Event()

    # -- jobs ------------------------------------------------------------------------------
    def _job(self, cand: Candidate) -> Job:
        job = self.jobs.get(cand.job_dir)
        if job is not None:
            return job
        journal = JobJournal.open(self.settings.state_dir, cand.job_dir, root=cand.root)
        journal.lock()
        try:
            out_dir = output_dir_for(cand.job_dir, cand.root, self.settings)
            trace = LiveTrace(journal, out_dir, cand.job_name or "trace", self.settings)
            trace.recover()
            journal.commit()
        except BaseException:
            journal.unlock()
            raise
        send, receive = anyio.create_memory_object_stream[tuple[Path, Ready] | None](math.inf)
        job = Job(cand.job_dir, cand.root, journal, trace, send, receive)
        self.jobs[cand.job_dir] = job
        assert self._tg is not None
        self._tg.start_soon(self._writer, job)
        if journal.state.reports or journal.state.quarantined:
            # a crash between a journal commit and its status.json leaves the status behind
            self._write_status(job)
        log.info("job_opened", job=str(cand.job_dir), out=str(out_dir),
                 reports=len(journal.state.reports))
        return job

    def _write_status(self, job: Job) -> None:
        state = job.journal.state
        status = JobStatus(
            job=str(job.job_dir), reports=len(state.reports), records=sum(
                r.records for r in state.reports), finalized=state.finalized,
            prv=str(job.trace.prv),
            quarantined=[{"path": q.path, "reason": q.reason} for q in state.quarantined],
            updated_ns=time.time_ns())
        job.trace.out.replace("status.json", msgspec.json.encode(status) + b"\n")

    # -- candidates ------------------------------------------------------------------------
    def _accept(self, cand: Candidate) -> None:
        if self.stopping:
            return
        try:
            job = self._job(cand)
        except PrvstreamError as exc:
            log.error("job_unavailable", job=str(cand.job_dir), error=str(exc))
            return
        if cand.kind == "done":
            if not job.done_marker:
                log.info("job_end_marker", job=str(job.job_dir))
            job.done_marker = True
            return
        if cand.path in job.waiting:
            return
        job.waiting.add(cand.path)
        assert self._tg is not None
        self._tg.start_soon(self._await_ready, job, cand)

    async def _await_ready(self, job: Job, cand: Candidate) -> None:
        path = cand.path
        try:
            if cand.kind == "nsys-rep":
                try:
                    path = await anyio.to_thread.run_sync(export_with_nsys, cand.path)
                except PrvstreamError as exc:
                    self._quarantine(job, cand.path, str(exc), None)
                    return
            verdict = await wait_ready(path, settle=self.settings.settle)
            if isinstance(verdict, Invalid):
                if not verdict.gone:
                    self._quarantine(job, path, verdict.reason, None)
                return
            if job.journal.has_report(verdict.identity):
                return
            if job.journal.is_quarantined(path, verdict.identity):
                return
            job.queued += 1
            await job.send.send((path, verdict))
        finally:
            job.waiting.discard(cand.path)
            job.last_change = time.monotonic()
            self._changed.set()

    def _quarantine(self, job: Job, path: Path, reason: str, identity: object) -> None:
        from prvstream.daemon.service.readiness import ReportIdentity, report_identity

        ident = identity if isinstance(identity, ReportIdentity) else None
        if ident is None:
            try:
                ident = report_identity(path)
            except OSError:
                ident = None
        if job.journal.is_quarantined(path, ident):
            return
        job.journal.quarantine(path, reason, ident)
        job.journal.commit()
        log.warning("report_quarantined", job=str(job.job_dir), path=str(path), reason=reason)
        self._write_status(job)

    # -- the single writer of a job ----------------------------------------------------------
    async def _writer(self, job: Job) -> None:
        async with job.receive:
            async for item in job.receive:
                try:
                    if item is None:
                        await self._finalize(job, job.finalize_queued)
                        job.finalize_queued = ""
                    else:
                        await self._append(job, *item)
                finally:
                    job.queued -= 1
                    self._changed.set()

    async def _append(self, job: Job, path: Path, ready: Ready) -> None:
        if self.stopping or job.journal.has_report(ready.identity):
            return
        try:
            async with self.limiter:
                await anyio.to_thread.run_sync(job.trace.append, path, ready.identity)
        except AppendInterrupted:
            log.info("append_rolled_back", job=str(job.job_dir), report=path.name)
            return
        except PrvstreamError as exc:
            self._quarantine(job, path, str(exc), ready.identity)
            return
        except Exception as exc:  # one bad report must not stop the job
            log.exception("report_failed", job=str(job.job_dir), report=path.name)
            self._quarantine(job, path, f"internal error: {exc!r}", ready.identity)
            return
        self.appended += 1
        job.last_change = time.monotonic()
        self._write_status(job)
        notify_status(f"{len(self.jobs)} job(s), {self.appended} report(s) appended; "
                      f"last {path.name}")

    # -- finalization ------------------------------------------------------------------------
    def _idle(self, job: Job) -> bool:
        return not job.waiting and job.queued == 0

    async def _finalize(self, job: Job, why: str) -> None:
        """Compact the job (called by its writer, or by ``--once`` when nothing else runs)."""
        state = job.journal.state
        if state.finalized or not state.reports or self.stopping:
            return
        log.info("job_finalizing", job=str(job.job_dir), reason=why)
        try:
            async with self.limiter:
                await anyio.to_thread.run_sync(job.trace.finalize)
        except Exception as exc:  # one job's failure must not stop the others
            job.finalize_failed_at = job.last_change
            log.error("finalize_failed", job=str(job.job_dir), error=str(exc),
                      kind=type(exc).__name__, retry="after the next change to the job")
            return
        self._write_status(job)

    async def _request_finalize(self, job: Job, why: str) -> None:
        """Queue a finalize behind the job's pending appends (single writer per job)."""
        if job.finalize_queued or job.finalize_failed_at == job.last_change:
            return
        job.finalize_queued = why
        job.queued += 1
        await job.send.send(None)

    async def _finalizer(self) -> None:
        idle = self.settings.idle_finalize
        while True:
            await anyio.sleep(0.2 if self.once else 1.0)
            now = time.monotonic()
            for job in list(self.jobs.values()):
                if not self._idle(job) or job.journal.state.finalized:
                    continue
                if job.done_marker:
                    await self._request_finalize(job, "marker")
                elif idle > 0 and now - job.last_change >= idle:
                    await self._request_finalize(job, "idle")
            if self.exit_when_finalized and self.jobs and all(
                    j.journal.state.finalized and self._idle(j) for j in self.jobs.values()):
                log.info("all_jobs_finalized_exiting", jobs=len(self.jobs))
                self.stop()
                assert self._tg is not None
                self._tg.cancel_scope.cancel()
                return

    # -- signals -----------------------------------------------------------------------------
    async def _signals(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as sigs:
            async for signum in sigs:
                if signum == signal.SIGHUP:
                    log.info("logs_reopened")
                    continue
                log.info("stopping", signal=signal.Signals(signum).name)
                self.stop()
                scope.cancel()
                return

    def stop(self) -> None:
        """Stop taking work and roll back any block in progress."""
        self.stopping = True
        notify_stopping("stopping")
        for job in self.jobs.values():
            job.trace.abort.set()

    # -- main ----------------------------------------------------------------------------------
    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._signals, tg.cancel_scope)
            tg.start_soon(run_watchdog)
            tg.start_soon(self._finalizer)
            if self.once:
                await self._run_once()
                tg.cancel_scope.cancel()
                return
            async with open_discovery(self.roots, settings=self.settings) as found:
                notify_ready(f"watching {len(self.roots)} root(s)")
                log.info("service_ready", roots=self.roots, poll=self.settings.poll or None,
                         workers=self.settings.workers)
                async for cand in found:
                    self._accept(cand)
        for job in self.jobs.values():
            job.journal.unlock()
        log.info("service_stopped", reports=self.appended)

    async def _run_once(self) -> None:
        for cand in scan_once(self.roots, out_dir=self.settings.out_dir or None):
            self._accept(cand)
        notify_ready("processing once")
        while any(not self._idle(j) for j in self.jobs.values()):
            self._changed = anyio.Event()
            await self._changed.wait()
        for job in self.jobs.values():
            if job.done_marker:
                await self._finalize(job, "marker")
        log.info("once_done", jobs=len(self.jobs), reports=self.appended)
