"""The daemon (``prvstream watch``): discovery, readiness, one writer per job, shutdown.

An anyio task group runs discovery (native events or polling, plus an initial scan), a fixed
pool of readiness checkers fed from a queue of candidate files, one writer task per job
(appends run in worker threads, bounded by ``workers``), idle/marker finalization, the
systemd watchdog and signal handling.
SIGTERM/SIGINT stop taking work, roll back the block in progress and exit 0; SIGHUP is
acknowledged (logs go to stderr/journald, nothing to reopen).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import anyio
import anyio.abc

from prvstream.daemon.config import Settings
from prvstream.daemon.nsys.locate import Candidate, scan_once
from prvstream.daemon.service.checkers import ReadinessPool, default_checkers
from prvstream.daemon.service.discover import open_discovery
from prvstream.daemon.service.jobs import Finalize, Job, Shared
from prvstream.daemon.service.notify import (
    notify_ready,
    notify_status,
    notify_stopping,
    run_watchdog,
)
from prvstream.daemon.service.readiness import Pace
from prvstream.sinks.logger import get_logger

__all__ = ["SHUTDOWN_LIMIT", "Service"]

log = get_logger(__name__)

#: seconds between SIGTERM and the process being gone, whatever the file systems do
SHUTDOWN_LIMIT = 8.0


def _force_exit(status: int) -> None:
    """(timer thread) A worker is stuck in the kernel: leave without it."""
    log.error("shutdown_forced", after_s=SHUTDOWN_LIMIT,
              hint="a file operation did not return; the journals hold every commit")
    sys.stderr.flush()
    os._exit(status)


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
        #: the exit status ``prvstream watch`` returns (non-zero: the state dir is unusable)
        self.exit_status = 0
        self._tg: anyio.abc.TaskGroup | None = None
        #: set whenever a job's queue or waiters change (``--once`` waits on it)
        self._changed = anyio.Event()
        self._shared = Shared(settings=settings, limiter=self.limiter, once=once,
                              stopping=lambda: self.stopping, changed=self._set_changed,
                              appended=self._on_appended, fatal=self._fatal,
                              vanished=self._on_vanished)
        #: every candidate file waits here, checked by a fixed number of checkers
        self.pool = ReadinessPool(settings.readiness_checkers or default_checkers(
            settings.workers), Pace(settings.settle), self._set_changed,
            ahead=settings.readiness_ahead)

    # -- jobs ------------------------------------------------------------------------------
    def _job(self, cand: Candidate) -> Job:
        job = self.jobs.get(cand.job_dir)
        if job is not None:
            return job
        job = Job(cand.job_dir, cand.root, cand.job_name, self._shared)
        self.jobs[cand.job_dir] = job
        assert self._tg is not None
        self._tg.start_soon(job.run)
        return job

    def _set_changed(self) -> None:
        self.pool.refill()  # a job's writer took reports: files held back may be checked now
        self._changed.set()

    def _on_appended(self, job: Job, path: Path) -> None:
        self.appended += 1
        notify_status(f"{len(self.jobs)} job(s), {self.appended} report(s) appended; "
                      f"last {path.name}")

    def _on_vanished(self, job: Job) -> None:
        if self.jobs.get(job.job_dir) is job:
            del self.jobs[job.job_dir]
        self._changed.set()

    def _fatal(self, exc: BaseException) -> None:
        """The state directory is unusable: log one line and stop with a non-zero status."""
        if self.exit_status == 0:
            log.error("state_dir_unusable", error=str(exc), state=self.settings.state_dir)
            self.exit_status = getattr(exc, "exit_status", 1)
        self.stop()
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    # -- candidates ------------------------------------------------------------------------
    def _accept(self, cand: Candidate) -> None:
        if self.stopping:
            return
        job = self._job(cand)
        if cand.kind == "expect":
            job.expect_changed()
            return
        if cand.kind == "done":
            if not job.done_marker:
                log.info("job_end_marker", job=str(job.job_dir))
            job.done_marker = True
            return
        self.pool.add(job, cand.path, cand.root, nsys_rep=cand.kind == "nsys-rep")

    # -- finalization ------------------------------------------------------------------------
    def _request_finalize(self, job: Job, why: str) -> None:
        """Queue a finalize behind the job's pending appends (single writer per job)."""
        if job.finalize_queued or job.finalize_failed_at == job.last_change:
            return
        job.finalize_queued = why
        job.submit(Finalize(why))

    async def _finalizer(self) -> None:
        idle = self.settings.idle_finalize
        while True:
            await anyio.sleep(0.2 if self.once else 1.0)
            now = time.monotonic()
            for job in list(self.jobs.values()):
                if not job.idle() or job.finalized or job.journal is None:
                    continue
                if job.done_marker:
                    self._request_finalize(job, "marker")
                elif idle > 0 and now - job.last_change >= idle:
                    self._request_finalize(job, "idle")
            if self.exit_when_finalized and self.jobs and all(
                    j.finalized and j.idle() for j in self.jobs.values()):
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
        """Stop taking work and roll back any block in progress; whatever a stuck file system
        does, the process is gone ``SHUTDOWN_LIMIT`` seconds later (the journals are
        committed last, so an exit at any point loses nothing committed)."""
        if self.stopping:
            return
        self.stopping = True
        notify_stopping("stopping")
        for job in self.jobs.values():
            if job.trace is not None:
                job.trace.abort.set()
        timer = threading.Timer(SHUTDOWN_LIMIT, _force_exit, (self.exit_status,))
        timer.daemon = True
        timer.start()

    # -- main ----------------------------------------------------------------------------------
    async def run(self) -> None:
        if self.settings.dask:  # connected off the event loop: Dask runs its own
            from prvstream.daemon.scale.cluster import get_client

            self._shared.client = await anyio.to_thread.run_sync(get_client, self.settings.dask)
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._signals, tg.cancel_scope)
            tg.start_soon(run_watchdog)
            tg.start_soon(self._finalizer)
            tg.start_soon(self.pool.run)
            if self.once:
                await self._run_once()
                tg.cancel_scope.cancel()
                return
            async with open_discovery(self.roots, settings=self.settings) as found:
                notify_ready(f"watching {len(self.roots)} root(s)")
                log.info("service_ready", roots=self.roots, poll=self.settings.poll or None,
                         workers=self.settings.workers, checkers=self.pool.size)
                async for cand in found:
                    self._accept(cand)
        for job in self.jobs.values():
            job.close()
        log.info("service_stopped", reports=self.appended)

    async def _run_once(self) -> None:
        for cand in scan_once(self.roots, out_dir=self.settings.out_dir or None):
            self._accept(cand)
        notify_ready("processing once")
        await self._until_idle()
        for job in list(self.jobs.values()):
            if job.done_marker and not job.finalized:
                self._request_finalize(job, "marker")
        await self._until_idle()
        if any(j.health.state != "ok" for j in self.jobs.values()):
            self.exit_status = self.exit_status or 1
        log.info("once_done", jobs=len(self.jobs), reports=self.appended,
                 degraded=sorted(str(j.job_dir) for j in self.jobs.values()
                                 if j.health.state != "ok"))

    async def _until_idle(self) -> None:
        while any(not j.idle() for j in self.jobs.values()):
            self._changed = anyio.Event()
            await self._changed.wait()
