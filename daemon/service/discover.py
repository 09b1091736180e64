"""Find Nsight Systems exports under watched roots: native events (watchdog) or stat polling
(network file systems), an initial scan, per-path debouncing, and no escape through symlinks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import stat
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from prvstream.daemon.config import Settings
from prvstream.daemon.live.journal import OWNED_MARKER
from prvstream.daemon.nsys.exporter import nsys_executable
from prvstream.sinks.errors import ConfigError
from prvstream.sinks.logger import get_logger

__all__ = [
    "DONE_MARKER",
    "OUTPUT_DIRNAME",
    "Candidate",
    "DiscoveryScope",
    "open_discovery",
    "scan_once",
    "watch_exports",
]

log = get_logger(__name__)

#: the folder prvstream writes into beside a job's reports (``<job>/prvstream/``)
OUTPUT_DIRNAME = "prvstream"
#: touched in a job directory (e.g. by a Slurm epilog) when the job has ended: finalize it
DONE_MARKER = "prvstream.done"
_IGNORED_SUFFIXES = (".tmp", "-journal", "-wal", "-shm")
Kind = Literal["sqlite", "nsys-rep", "done"]
_EXPORT_SUFFIXES: dict[str, Kind] = {".sqlite": "sqlite", ".nsys-rep": "nsys-rep"}
#: ``nsys`` argument default: look it up on PATH
_AUTO = "auto"
#: seconds the native observer gets to stop
_STOP_LIMIT = 3.0


@dataclass(frozen=True, slots=True)
class Candidate:
    """An export worth a readiness check, or (``kind == "done"``) a job's end marker.

    Paths are real (symlinks resolved) and absolute.
    """

    path: Path
    #: the directory directly containing the export: one job
    job_dir: Path
    #: the watched root (real path) it was found under
    root: Path
    kind: Kind = "sqlite"

    @property
    def job_id(self) -> str:
        """The job directory relative to its root (``"."`` for the root itself)."""
        return os.path.relpath(self.job_dir, self.root)

    @property
    def job_name(self) -> str:
        return self.job_dir.name


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)


class DiscoveryScope:
    """Which paths are inputs: the rules of discovery, shared by every mode (thread-safe enough:
    it is only called from one worker thread at a time).
    """

    def __init__(self, roots: Sequence[str | os.PathLike[str]], *,
                 out_dir: str | os.PathLike[str] | None = None,
                 output_dirname: str = OUTPUT_DIRNAME,
                 nsys: str | None = _AUTO) -> None:
        self.roots: list[Path] = []
        for r in roots:
            real = Path(os.path.realpath(os.fspath(r)))
            if not real.is_dir():
                raise ConfigError(
                    f"watched root {r} is not an existing directory; create it or fix the path")
            if real not in self.roots:
                self.roots.append(real)
        self.out_dir = os.path.realpath(os.fspath(out_dir)) if out_dir else None
        self.output_dirname = output_dirname
        self.nsys = nsys_executable() if nsys == _AUTO else nsys
        self._refused: set[str] = set()
        self._waiting_reps: set[str] = set()

    # -- rules -------------------------------------------------------------------------------
    def root_of(self, path: str) -> Path | None:
        best: Path | None = None
        for root in self.roots:
            if _under(path, str(root)) and (best is None or len(str(root)) > len(str(best))):
                best = root
        return best

    def ignored_name(self, name: str) -> bool:
        return name.startswith(".") or name.endswith(_IGNORED_SUFFIXES)

    def ignored_dir(self, real_dir: str, name: str) -> bool:
        """Hidden folders, prvstream's output folders (by name, --out, or ownership marker)."""
        if name.startswith(".") or name == self.output_dirname:
            return True
        if self.out_dir is not None and _under(real_dir, self.out_dir):
            return True
        return os.path.lexists(os.path.join(real_dir, OWNED_MARKER))

    def refuse_symlink(self, path: str, target: str, root: Path) -> None:
        if path not in self._refused:
            self._refused.add(path)
            log.warning("symlink_refused", path=path, target=target, root=str(root),
                        hint="prvstream never follows a symlink out of a watched root")

    def classify(self, path: str) -> Candidate | None:
        """The candidate ``path`` stands for, or ``None`` when it is not an input."""
        path = os.path.abspath(path)
        name = os.path.basename(path)
        kind: Kind | None = "done" if name == DONE_MARKER else _EXPORT_SUFFIXES.get(
            os.path.splitext(name)[1])
        if kind is None or self.ignored_name(name):
            return None
        root = self.root_of(path)
        if root is None:
            return None
        real = os.path.realpath(path)
        if not _under(real, str(root)):
            self.refuse_symlink(path, real, root)
            return None
        # every folder between the root and the file must be an input folder
        rel_dirs = Path(os.path.relpath(os.path.dirname(real), root)).parts
        current = str(root)
        for part in rel_dirs:
            if part in (".", ""):
                continue
            current = os.path.join(current, part)
            if self.ignored_dir(current, part):
                return None
        try:
            st = os.stat(real)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        job_dir = os.path.dirname(real)
        if self.out_dir is not None and _under(real, self.out_dir):
            return None
        if os.path.lexists(os.path.join(job_dir, OWNED_MARKER)):
            return None
        if kind == "nsys-rep":
            if os.path.exists(os.path.splitext(real)[0] + ".sqlite"):
                return None
            if self.nsys is None:
                if real not in self._waiting_reps:
                    self._waiting_reps.add(real)
                    log.info("nsys_rep_waiting", path=real,
                             hint="nsys is not on PATH: waiting for its .sqlite export")
                return None
        return Candidate(Path(real), Path(job_dir), root, kind)

    # -- walking -----------------------------------------------------------------------------
    def walk(self, top: Path | None = None) -> Iterator[tuple[str, os.stat_result]]:
        """``(path, stat)`` of every file with an export name under ``top`` (default: all roots),
        never descending into ignored folders or symlinked folders.
        """
        tops = [top] if top is not None else list(self.roots)
        for start in tops:
            root = self.root_of(os.path.realpath(start))
            if root is None:
                continue
            stack = [os.path.realpath(start)]
            while stack:
                folder = stack.pop()
                try:
                    entries = list(os.scandir(folder))
                except OSError:
                    continue
                for entry in entries:
                    try:
                        if entry.is_symlink():
                            real = os.path.realpath(entry.path)
                            if not _under(real, str(root)):
                                self.refuse_symlink(entry.path, real, root)
                                continue
                            if os.path.isdir(real):
                                continue  # its real folder is walked on its own
                        if entry.is_dir(follow_symlinks=False):
                            if not self.ignored_dir(entry.path, entry.name):
                                stack.append(entry.path)
                            continue
                        if ((os.path.splitext(entry.name)[1] in _EXPORT_SUFFIXES
                             or entry.name == DONE_MARKER)
                                and not self.ignored_name(entry.name)):
                            yield entry.path, entry.stat(follow_symlinks=True)
                    except OSError:
                        continue

    def walk_paths(self, top: Path | None = None) -> list[str]:
        return [p for p, _ in self.walk(top)]

    def classify_many(self, paths: Sequence[str]) -> list[Candidate | None]:
        return [self.classify(p) for p in paths]

    def scan(self, top: Path | None = None) -> list[Candidate]:
        """Every candidate present now (sorted by path)."""
        found = {c.path: c for p, _ in self.walk(top) if (c := self.classify(p)) is not None}
        return [found[p] for p in sorted(found)]


def scan_once(roots: Sequence[str | os.PathLike[str]], *,
              out_dir: str | os.PathLike[str] | None = None,
              nsys: str | None = _AUTO) -> list[Candidate]:
    """The exports present under ``roots`` now (for ``watch --once`` and batch conversion)."""
    return DiscoveryScope(roots, out_dir=out_dir, nsys=nsys).scan()


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
        found = await anyio.to_thread.run_sync(scope.classify_many, due)
        # two names of one file (a symlink inside the root) are one unit of work
        unique = {c.path: c for c in found if c is not None}
        for cand in unique.values():
            log.debug("export_discovered", path=str(cand.path), job=cand.job_id)
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

    loop = asyncio.get_running_loop()

    def push(item: _RawEvent) -> None:
        # never wait on the loop from watchdog's thread: the loop may be waiting on this
        # thread (observer.stop() joins it), which would deadlock
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing left to tell
            loop.call_soon_threadsafe(_send_quietly, raw, item)

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
    for root in scope.roots:
        observer.schedule(Handler(), str(root), recursive=True, event_filter=wanted)
    await anyio.to_thread.run_sync(observer.start)
    try:
        # the initial scan runs after the observer started, so nothing falls in between
        for root in scope.roots:
            raw.send_nowait((str(root), True))
        log.info("discovery_started", mode="native", roots=[str(r) for r in scope.roots])
        task_status.started()
        await anyio.sleep_forever()
    finally:
        # off the loop and time-limited: a dispatch thread stuck on a dead mount must not
        # hold the shutdown (the thread is abandoned; the process exits without it)
        with anyio.CancelScope(shield=True), anyio.move_on_after(_STOP_LIMIT):
            await anyio.to_thread.run_sync(_stop_observer, observer, abandon_on_cancel=True)


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
                        nsys: str | None = _AUTO,
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
                         nsys: str | None = _AUTO, buffer: int = 256,
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
