"""A batch's second core: a forked helper process plans, reads and converts the later part of
a batch of many small reports, and hands back what the converter needs of them (facts for
the numbering, one merged run of their records, and either each report's sink feed or the
state of a model it fed them into); the plans, the exports and their schemas stay in the
helper, so nothing of a schema crosses processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import select
import shutil
import signal
import struct
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prvstream.daemon.config import Settings
from prvstream.daemon.nsys.heldrows import RowSpill
from prvstream.daemon.stream.claims import Claim, host_claims
from prvstream.daemon.stream.merge import Stream, merge, read_run, reduce_streams, write_run
from prvstream.daemon.stream.numbering import Numbering
from prvstream.daemon.stream.pipeline import (
    PreparedReport,
    objects_of,
    report_context,
    report_stream,
    value_labels_of,
)
from prvstream.daemon.stream.planned import (
    MIN_REPORTS,
    HelperDiverged,
    RemoteReport,
    plan_one,
    use_helper,
)
from prvstream.daemon.stream.spool import InOrderReplay, ReportSpool
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger
from prvstream.sinks.scratch import ScratchFile

if TYPE_CHECKING:
    from prvstream.sinks.efficiency import EfficiencyModel
    from prvstream.sinks.efficiency.partial import EfficiencyState

__all__ = ["MIN_REPORTS", "OWN_SHARE", "BatchHelper", "HelperDiverged", "RemoteReport",
           "handed_runs", "plan_one", "use_helper"]

log = get_logger(__name__)

#: share of a batch's reports the converter plans and converts itself, the rest going to the
#: helper: half balances the planning (1.0 s of CPU on each side for 400 small reports, the
#: converter's start-up included); the converter's share of the conversion then waits on it
#: feeding the model, merging and writing (1.36 against the helper's 0.63 s)
OWN_SHARE = 1 / 2
#: bytes the helper's message pipe buffers (its messages never wait for the converter)
_PIPE_BYTES = 1 << 20


class _Channel:
    """One direction of a pipe carrying pickled messages, each behind its length."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, msg: tuple[Any, ...]) -> None:
        body = pickle.dumps(msg, protocol=5)
        data = memoryview(struct.pack("<Q", len(body)) + body)
        while len(data):
            data = data[os.write(self.fd, data):]

    def recv(self) -> tuple[Any, ...]:
        (size,) = struct.unpack("<Q", self._read(8))
        msg: tuple[Any, ...] = pickle.loads(self._read(size))  # from the other side of a fork
        return msg

    def poll(self) -> bool:
        """Whether a message (or the end) waits to be read."""
        return bool(select.select([self.fd], [], [], 0)[0])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def _read(self, size: int) -> bytes:
        parts, left = [], size
        while left:
            part = os.read(self.fd, min(left, _PIPE_BYTES))
            if not part:
                raise EOFError("the other process closed the pipe")
            parts.append(part)
            left -= len(part)
        return b"".join(parts)


def _pipe() -> tuple[_Channel, _Channel]:
    """(read end, write end)."""
    r, w = os.pipe()
    return _Channel(r), _Channel(w)


class BatchHelper:
    """The converter's side of a helper process (``start`` forks it)."""

    def __init__(self, pid: int, inbox: _Channel, outbox: _Channel, scratch: Path,
                 xfer: ScratchFile) -> None:
        self.pid = pid
        self._inbox, self._outbox = inbox, outbox
        self._scratch, self._xfer = scratch, xfer
        #: called with each report's path and recorded sink feed, as it arrives
        self.on_fed: Callable[[Path, ReportSpool], None] | None = None
        #: called with each report's file name and hostile rows (``kinds.bounds``)
        self.on_hostile: Callable[[str, Counter[str]], None] | None = None
        self.rows: Counter[str] = Counter()
        self.kind_records: Counter[str] = Counter()
        self._runs: list[Path] | None = None
        #: where the helper's model state lies in the hand-over file (``group_state``)
        self._state: tuple[int, int] | None = None
        #: the reports it planned (``planned``)
        self.remote: list[RemoteReport] = []
        #: whether the helper feeds its reports into its own copy of the model and hands
        #: over the state (``group_state``) instead of each report's feed
        self.models = False

    @classmethod
    def start(cls, paths: list[Path], settings: Settings, reports: int,
              model: EfficiencyModel | None = None) -> BatchHelper:
        """Fork a helper that plans ``paths`` (of a batch of ``reports``) at once; ``model``,
        fed nothing yet, is what its own copy starts from (``models``)."""
        scratch = Path(tempfile.mkdtemp(prefix="prvstream-helper-"))
        xfer = ScratchFile("prvstream-helper-")
        xfer.fileno()  # opened before the fork: both processes hold it
        inbox, child_out = _pipe()
        child_in, outbox = _pipe()
        with contextlib.suppress(OSError):  # a smaller pipe only makes the helper wait
            fcntl.fcntl(child_out.fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the helper: never returns into the converter's stack
            code = 1
            try:
                inbox.close()
                outbox.close()
                _helper_main(child_in, child_out, paths, settings, reports, scratch, xfer,
                             model)
                code = 0
            except BaseException as exc:
                with contextlib.suppress(BaseException):
                    child_out.send(("error", f"{type(exc).__name__}: {exc}"))
            finally:
                if os.getppid() != parent:  # the converter was killed: nobody else will
                    shutil.rmtree(scratch, ignore_errors=True)
                os._exit(code)
        child_in.close()
        child_out.close()
        return cls(pid, inbox, outbox, scratch, xfer)

    def planned(self) -> tuple[list[RemoteReport], list[tuple[str, str]]]:
        """The helper's plans and the inputs it could not plan, with why."""
        msg = self._receive()
        if msg[0] != "planned":
            raise HelperDiverged(f"the helper sent {msg[0]!r} instead of its plans")
        self.remote = msg[1]
        return msg[1], msg[2]

    def convert(self, ids: Numbering, origin: int,
                jobs: list[tuple[RemoteReport, int, list[Claim]]], chunk_rows: int,
                feed: bool) -> None:
        """Ask the helper to convert its reports (each with its canonical index and the
        earlier claims on its threads) with the batch's numbering."""
        self._outbox.send(("convert", pickle.dumps(ids.state, protocol=5), origin,
                           [(str(r.path), i, e) for r, i, e in jobs], chunk_rows,
                           feed and not self.models, feed and self.models))

    def poll(self) -> None:
        """Take in whatever the helper has sent, without waiting."""
        while self._runs is None and self._inbox.poll():
            self._take(self._receive())

    def run_count(self, fan_in: int) -> int:
        """How many runs the helper hands over (``handed_runs``)."""
        return handed_runs(len(self.remote), fan_in)

    def streams(self, fan_in: int) -> list[tuple[Stream, int]]:
        """The runs of the helper's reports' records (each read once the helper has
        converted them all), with about how many reports each holds."""
        count = self.run_count(fan_in)
        return [(self._stream(i), -(-len(self.remote) // count)) for i in range(count)]

    def merge(self, runs: list[Path], prv: Path, fd: int, at: int) -> None:
        """Once the helper has converted its reports: ask it to merge its runs with ``runs``
        (this process's, read and removed by it) and write the records into the file at
        ``prv`` (the one open here as ``fd``: the helper checks it opened that very file)
        from byte ``at`` on (``merged`` waits for it)."""
        while self._runs is None:
            self._take(self._receive())
        st = os.fstat(fd)
        self._outbox.send(("merge", [str(run) for run in runs], str(prv),
                           (st.st_dev, st.st_ino), at))

    def merged(self) -> tuple[int, int]:
        """(records, end time) of the helper's final merge (``merge``)."""
        msg = self._receive()
        if msg[0] != "merged":
            raise HelperDiverged(f"the helper sent {msg[0]!r} instead of its merge")
        return int(msg[1]), int(msg[2])

    def _stream(self, index: int) -> Stream:
        while self._runs is None:
            self._take(self._receive())
        yield from read_run(self._runs[index])

    def group_state(self) -> tuple[EfficiencyState, list[int]]:
        """The state of the helper's model, fed its reports (``models``), and the windows
        they touched (``partial.group_state``); once its runs are in."""
        from prvstream.sinks.efficiency.partial import decode_partial

        while self._runs is None:
            self._take(self._receive())
        if self._state is None:
            raise HelperDiverged("the helper sent no model state")
        data, windows = pickle.loads(b"".join(self._xfer.read_slices(*self._state)))
        return decode_partial(data), windows

    def close(self) -> None:
        """Stop the helper if it still runs, reap it, and remove what it left."""
        with contextlib.suppress(OSError):
            self._outbox.send(("stop",))
        for conn in (self._inbox, self._outbox):
            conn.close()
        with contextlib.suppress(ChildProcessError):
            done, _ = os.waitpid(self.pid, os.WNOHANG)
            if done == 0:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        self._xfer.close()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def _receive(self) -> tuple[Any, ...]:
        try:
            msg: tuple[Any, ...] = self._inbox.recv()
        except (EOFError, OSError) as exc:
            raise HelperDiverged("the helper process ended without its results") from exc
        if msg[0] == "error":
            raise HelperDiverged(f"the helper failed: {msg[1]}")
        return msg

    def _take(self, msg: tuple[Any, ...]) -> None:
        if msg[0] == "fed":
            _, path, at, size = msg
            name, info, parts, hostile = pickle.loads(b"".join(
                self._xfer.read_slices(at, size)))
            if self.on_hostile is not None:
                self.on_hostile(name, Counter(hostile))
            if self.on_fed is not None and info is not None:
                self.on_fed(Path(path), ReportSpool.recorded(info, parts))
        elif msg[0] == "done":
            _, runs, rows, kind_records, grew, self._state = msg
            if grew:
                raise HelperDiverged("the helper registered ids the numbering lacked")
            self.rows.update(rows)
            self.kind_records.update(kind_records)
            self._runs = [Path(run) for run in runs]
        else:
            raise HelperDiverged(f"the helper sent {msg[0]!r} while converting")


def _helper_main(inbox: _Channel, outbox: _Channel, paths: list[Path], settings: Settings,
                 reports: int, scratch: Path, xfer: ScratchFile,
                 model: EfficiencyModel | None = None) -> None:
    """The helper process: plan, send the facts, then convert on request (each report's
    feed sent over, or fed into its copy of ``model`` whose state is sent at the end)."""
    spill = RowSpill()  # its own: the converter's spill is not shared
    planned: dict[str, PreparedReport] = {}
    remote: list[RemoteReport] = []
    failed: list[tuple[str, str]] = []
    for path in paths:
        try:
            rep = plan_one(path, settings, spill, reports)
        except PrvstreamError as exc:
            failed.append((str(path), str(exc)))
            continue
        planned[str(path)] = rep
        remote.append(RemoteReport(
            path=path, host=rep.host, wall_start=rep.wall_start, kinds=rep.kinds,
            counts=dict(rep.plan.counts), objects=objects_of(rep),
            value_labels=value_labels_of(rep), claims=host_claims(rep)))
    outbox.send(("planned", remote, failed))
    msg = inbox.recv()
    if msg[0] != "convert":
        return
    _, state, origin, jobs, chunk_rows, feed, models = msg
    ids = Numbering(pickle.loads(state))
    replay = None
    if models:
        if model is None:
            raise RuntimeError("asked to feed a model the helper was not given")
        model.hold_updates()  # converted together: the converter makes the one update
        replay = InOrderReplay(model, [path for path, _, _ in jobs], settings.fan_in)
    mark = ids.mark()
    rows: Counter[str] = Counter()
    kind_records: Counter[str] = Counter()

    def lazy(path: str, index: int, earlier: list[Claim]) -> Stream:
        from prvstream.daemon.stream.trace import whole_rows

        rep = planned[path]
        rep.open(chunk_rows)
        ctx, info = report_context(rep, ids, origin, index, settings.phase_pattern,
                                   settings.rank_pattern, earlier)
        spool = (replay.spool(path) if replay is not None
                 else ReportSpool(in_memory=True) if feed else None)
        try:
            yield from report_stream(rep, ctx, info, chunk_rows, spool, rows, kind_records,
                                     whole_rows=whole_rows(settings))
        finally:
            rep.close()
        blob = pickle.dumps((rep.path.name, info if feed else None,
                             list(spool.parts()) if spool is not None and feed else [],
                             dict(ctx.hostile)), protocol=5)
        at, size = xfer.append([blob])
        outbox.send(("fed", path, at, size))

    left = reduce_streams([lazy(*job) for job in jobs], settings.fan_in,
                          handed_runs(len(jobs), settings.fan_in), scratch)
    runs = [str(path if path is not None else write_run(stream, scratch))
            for stream, _, path in left]
    spill.close()
    handed = None
    if replay is not None and model is not None:
        from prvstream.sinks.efficiency.partial import encode_partial, group_state

        replay.finish()
        group, windows = group_state(model)
        handed = xfer.append([pickle.dumps((encode_partial(group), windows), protocol=5)])
    outbox.send(("done", runs, rows, kind_records, ids.grown_since(mark), handed))
    msg = inbox.recv()
    if msg[0] == "merge":  # the final merge: ours and the converter's runs into the trace
        _, theirs, prv, file_id, at = msg
        outbox.send(("merged", *_final_merge([*runs, *theirs], Path(prv), file_id, at)))


def _final_merge(runs: list[str], prv: Path, file_id: tuple[int, int], at: int
                 ) -> tuple[int, int]:
    """Merge the run files (each removed once read) and write their records into the file at
    ``prv`` from byte ``at`` on, unless ``prv`` is no longer the file (device, inode)
    ``file_id`` the converter holds open; (records, end time)."""
    from prvstream.sinks.paraver.writer import PrvWriter

    fd = os.open(prv, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)  # never created here
    with os.fdopen(fd, "wb") as fh:  # an open descriptor: not truncated
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != file_id:
            raise RuntimeError(f"{prv} was replaced while the trace was written")
        fh.seek(at)
        writer = PrvWriter(fh, behind=True)  # text formatted and written by a thread
        try:
            for batch, _ in merge([read_run(Path(run)) for run in runs]):
                writer.write(batch)
            writer.flush()
        finally:
            writer.close()
    return writer.records, writer.end_time


def handed_runs(reports: int, fan_in: int) -> int:
    """Runs the helper hands over for ``reports``: half the fan-in (the converter's final
    merge takes them beside as many of its own), so no record is spilled more often than
    in one process."""
    return min(reports, max(1, fan_in // 2))

