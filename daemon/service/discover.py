"""Watch for Nsight Systems exports under watched roots: native events (watchdog) or stat
polling (network file systems), an initial scan and per-path debouncing; which paths count is
decided by :mod:`prvstream.daemon.nsys.locate`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import math
import os
import stat
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from prvstream.daemon.config import Settings
from prvstream.daemon.nsys.locate import AUTO_NSYS, Candidate, DiscoveryScope
from prvstream.sinks.logger import get_logger

__all__ = ["EventBridge", "open_discovery", "watch_exports"]

log = get_logger(__name__)

#: seconds the native observer gets to stop
_STOP_LIMIT = 3.0
#: seconds between checks that each watched root is still the directory being watched
ROOT_CHECK = 2.0
#: paths classified (made candidates) at once when a burst is due
_CLASSIFY_AT_ONCE = 256


# ---------------------------------------------------------------------------------- watching

_RawEvent = tuple[str, bool]  # (path, is a directory)


async def _coalesce(raw: MemoryObjectReceiveStream[_RawEvent],
                    out: MemoryObjectSendStream[Candidate], scope: DiscoveryScope,
                    debounce: float) -> None:
    """Turn bursts of raw events into one candidate per path, ``debounce`` s after the last."""
    pending: dict[str, float] = {}
    closed = False
    while not closed or pending:
        timeout = math.inf
        if pending:
            timeout = max(0.0, min(pending.values()) - time.monotonic())
        if closed:
            await anyio.sleep(timeout)
        else:
            with anyio.move_on_after(timeout):
                try:
                    path, is_dir = await raw.receive()
                except anyio.EndOfStream:
                    closed = True
                else:
                    if is_dir:
                        files = await anyio.to_thread.run_sync(scope.walk_paths, Path(path))
                    else:
                        files = [path]
                    deadline = time.monotonic() + debounce
                    for p in files:
                        pending[p] = deadline
        now = time.monotonic()
        due = sorted(p for p, t in pending.items() if t <= now)
        for p in due:
            del pending[p]
        if not due:
            continue
        # a slice at a time: a flood's candidates (a Path each) are never all made at once
        sent: set[str] = set()
        for start in range(0, len(due), _CLASSIFY_AT_ONCE):
            found = await anyio.to_thread.run_sync(
                scope.classify_many, due[start:start + _CLASSIFY_AT_ONCE])
            for cand in found:
                # two names of one file (a symlink inside the root) are one unit of work
                if cand is None or (key := str(cand.path)) in sent:
                    continue
                sent.add(key)
                log.debug("export_discovered", path=key, job=cand.job_id)
                await out.send(cand)


async def _native(raw: MemoryObjectSendStream[_RawEvent], scope: DiscoveryScope,
                  task_status: anyio.abc.TaskStatus[None]) -> None:
    """inotify (or the platform's native API) through watchdog, bridged into the event loop."""
    from watchdog.events import (
        DirCreatedEvent,
        DirMovedEvent,
        FileClosedEvent,
        FileCreatedEvent,
        FileModifiedEvent,
        FileMovedEvent,
        FileSystemEvent,
        FileSystemEventHandler,
    )
    from watchdog.observers import Observer

    push = EventBridge(asyncio.get_running_loop(), raw).push

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: FileSystemEvent) -> None:
            if event.event_type in ("moved",):
                target = os.fsdecode(event.dest_path)
            elif event.event_type in ("created", "modified", "closed"):
                target = os.fsdecode(event.src_path)
            else:
                return
            push((target, event.is_directory))

    wanted: list[type[FileSystemEvent]] = [
        FileCreatedEvent, FileModifiedEvent, FileMovedEvent, FileClosedEvent,
        DirCreatedEvent, DirMovedEvent]
    observer = Observer()
    watches: dict[str, Any] = {}
    for root in scope.roots:
        watches[str(root)] = observer.schedule(Handler(), str(root), recursive=True,
                                               event_filter=wanted)
    await anyio.to_thread.run_sync(observer.start)

    def rewatch(root: str) -> None:
        # a root removed (or renamed away) and made again: its inotify watch went with the old
        # directory, so watch the new one (the old watch may already be gone)
        with contextlib.suppress(KeyError, OSError):
            observer.unschedule(watches[root])
        watches[root] = observer.schedule(Handler(), root, recursive=True, event_filter=wanted)

    try:
        # the initial scan runs after the observer started, so nothing falls in between
        for root in scope.roots:
            raw.send_nowait((str(root), True))
        log.info("discovery_started", mode="native", roots=[str(r) for r in scope.roots])
        task_status.started()
        identity = {root: _root_identity(root) for root in watches}
        while True:
            await anyio.sleep(ROOT_CHECK)
            for watched, seen in identity.items():
                now = await anyio.to_thread.run_sync(_root_identity, watched,
                                                     abandon_on_cancel=True)
                if now == seen:
                    continue
                identity[watched] = now
                if now is None:
                    log.warning("root_missing", root=watched,
                                hint="create it again: it is watched again once it is back")
                    continue
                try:
                    await anyio.to_thread.run_sync(rewatch, watched, abandon_on_cancel=True)
                except OSError as exc:  # gone again already: the next check tries again
                    identity[watched] = None
                    log.warning("root_rewatch_failed", root=watched, error=str(exc))
                    continue
                log.info("root_rewatched", root=watched)
                raw.send_nowait((watched, True))  # whatever it holds already
    finally:
        # off the loop and time-limited: a dispatch thread stuck on a dead mount must not
        # hold the shutdown (the thread is abandoned; the process exits without it)
        with anyio.CancelScope(shield=True), anyio.move_on_after(_STOP_LIMIT):
            await anyio.to_thread.run_sync(_stop_observer, observer, abandon_on_cancel=True)


def _root_identity(root: str) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of a watched root that is a directory now, else ``None``."""
    try:
        st = os.stat(root)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


class EventBridge:
    """Hands watchdog's events from its thread to the event loop with at most one wake-up of
    the loop in flight.

    Every ``call_soon_threadsafe`` writes a byte to the loop's self-pipe, which is also where
    the signal handlers' bytes go: a burst of events (a tool creating and renaming files in
    a loop) once called it per event, filled the pipe faster than the busy loop read it, and
    a SIGTERM that arrived then lost its byte, so the daemon never saw it. Events now queue
    here and one wake-up drains them all, in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 raw: MemoryObjectSendStream[_RawEvent]) -> None:
        self._loop = loop
        self._raw = raw
        self._pending: collections.deque[_RawEvent] = collections.deque()
        self._scheduled = False

    def push(self, item: _RawEvent) -> None:
        """Queue ``item`` (watchdog's thread). Never waits on the loop: the loop may be
        waiting on this thread (``observer.stop()`` joins it), which would deadlock."""
        self._pending.append(item)  # before the flag is read: ``_drain`` clears it first
        if self._scheduled:
            return
        self._scheduled = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing left to tell
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        pending = self._pending
        while pending:
            _send_quietly(self._raw, pending.popleft())


def _send_quietly(raw: MemoryObjectSendStream[_RawEvent], item: _RawEvent) -> None:
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        raw.send_nowait(item)


def _stop_observer(observer: Any) -> None:
    observer.stop()
    observer.join(_STOP_LIMIT)


async def _polling(raw: MemoryObjectSendStream[_RawEvent], scope: DiscoveryScope,
                   interval: float, task_status: anyio.abc.TaskStatus[None]) -> None:
    """Compare ``(size, mtime_ns, inode)`` snapshots every ``interval`` seconds (NFS, Lustre)."""
    seen: dict[str, tuple[int, int, int, int]] = {}

    def snapshot() -> dict[str, tuple[int, int, int, int]]:
        # the mode too: a file set aside as unreadable is looked at again after a chmod
        return {p: (st.st_size, st.st_mtime_ns, st.st_ino, st.st_mode)
                for p, st in scope.walk()}

    started = False
    while True:
        now = await anyio.to_thread.run_sync(snapshot)
        for path, sig in now.items():
            if seen.get(path) != sig:
                raw.send_nowait((path, False))
        seen = now
        if not started:
            started = True
            log.info("discovery_started", mode="poll", interval_s=interval,
                     roots=[str(r) for r in scope.roots])
            task_status.started()
        await anyio.sleep(interval)


async def watch_exports(out: MemoryObjectSendStream[Candidate],
                        roots: Sequence[str | os.PathLike[str]], *,
                        poll: float = 0.0, debounce: float = 0.2,
                        out_dir: str | os.PathLike[str] | None = None,
                        nsys: str | None = AUTO_NSYS,
                        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
                        ) -> None:
    """Send a :class:`Candidate` to ``out`` for every export found, now and from now on.

    ``poll > 0`` polls every ``poll`` seconds instead of using native events. A burst of
    events on one path yields one candidate, ``debounce`` seconds after the burst; a file that
    changes again later is sent again (readiness and the journal sort that out). A
    ``prvstream.done`` file in a job directory comes as ``kind="done"``. Signals
    ``task_status.started()`` once watching has begun (use ``await tg.start(...)``). Runs until
    cancelled; closes ``out`` when it ends.
    """
    scope = DiscoveryScope(roots, out_dir=out_dir, nsys=nsys)
    raw_send, raw_recv = anyio.create_memory_object_stream[_RawEvent](math.inf)
    async with out, raw_recv, anyio.create_task_group() as tg:
        tg.start_soon(_coalesce, raw_recv, out, scope, debounce)
        async with raw_send:
            if poll > 0:
                await tg.start(_polling, raw_send, scope, poll)
            else:
                await tg.start(_native, raw_send, scope)
            task_status.started()
            await anyio.sleep_forever()


@asynccontextmanager
async def open_discovery(roots: Sequence[str | os.PathLike[str]], *,
                         settings: Settings | None = None, poll: float | None = None,
                         debounce: float = 0.2, out_dir: str | os.PathLike[str] | None = None,
                         nsys: str | None = AUTO_NSYS, buffer: int = 256,
                         ) -> AsyncIterator[MemoryObjectReceiveStream[Candidate]]:
    """``async with open_discovery(roots, settings=s) as found: async for cand in found: ...``

    ``poll`` and ``out_dir`` default to the settings' values. Watching has begun when the
    block is entered; it stops when the block is left.
    """
    if poll is None:
        poll = settings.poll if settings is not None else 0.0
    if out_dir is None and settings is not None and settings.out_dir:
        out_dir = settings.out_dir
    send, recv = anyio.create_memory_object_stream[Candidate](buffer)
    async with anyio.create_task_group() as tg:
        await tg.start(functools.partial(watch_exports, send, roots, poll=poll,
                                         debounce=debounce, out_dir=out_dir, nsys=nsys))
        async with recv:
            yield recv
        tg.cancel_scope.cancel()
