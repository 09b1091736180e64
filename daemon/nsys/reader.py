"""A reader process that runs SQLite queries beside the converter, on the machine's other core.

Reading an export is half of a conversion's work, and almost all of it (SQLite's sort and step,
and building a Python int per value) holds the GIL, so a thread does not help. One child
process per prvstream process (``_readerchild``: the standard library and the compiled row
filler only) runs the ordered SELECTs and ships each chunk already laid out as the numpy
structured array the converters take; the parent converts, merges and writes meanwhile. Every
stream keeps one chunk requested ahead, so memory stays one or two chunks per stream.

The reader serves one report at a time: ``lease(path)`` returns a ``ReaderLease`` or None when
the reader is busy, unavailable (no compiled row filler, no
``sys.executable``) or broken; the caller then reads in-process, with the same bytes out.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import numpy as np

from prvstream.daemon import stages
from prvstream.daemon.nsys import presort, readerstart, rowfill, runscan, tables
from prvstream.daemon.nsys._readerchild import (
    FRAME,
    STATUS_BAD_VALUE,
    STATUS_OK,
    STATUS_RUNS,
    STATUS_TEXTS,
    STATUS_WINDOW,
    WINDOW,
)
from prvstream.daemon.nsys.export import ro_uri
from prvstream.sinks.errors import NotAnExport, PrvstreamError
from prvstream.sinks.logger import get_logger

__all__ = ["InlineTexts", "ReaderLease", "ReaderProcess", "enabled", "lease", "prestart",
           "retire", "shutdown"]

log = get_logger(__name__)

#: an inline-text stream's field, and what numbers its texts (the export's canonical ids)
InlineTexts = tuple[str, Callable[[list[str]], list[int]]]


def enabled() -> bool:
    """Whether the reader process can run here (``Settings.reader`` says whether to use it)."""
    return readerstart.enabled()


#: ``fcntl.F_SETPIPE_SZ`` (Linux; the module names it from Python 3.10 on, not everywhere)
_F_SETPIPE_SZ = 1031
#: the pipe the chunks come through holds a whole chunk (a few hundred KiB at the default
#: chunk size) where the system allows, instead of 64 KiB: fewer switches between the
#: processes per chunk
PIPE_BYTES = 1 << 20


def _widen_pipe(pipe: IO[bytes]) -> None:
    try:
        import fcntl

        fcntl.fcntl(pipe.fileno(), _F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, OSError):  # another system, or above /proc/sys/fs/pipe-max-size
        pass


class ReaderProcess:
    """The child process and the framing of its answers."""

    def __init__(self, started: subprocess.Popen[bytes] | None = None) -> None:
        """Start the child (the filler is built: ``enabled()`` checked it), or take one
        ``started`` already (``readerstart.take``)."""
        self._proc = started if started is not None else readerstart.spawn()
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._in: IO[bytes] = self._proc.stdin
        self._out: IO[bytes] = self._proc.stdout
        _widen_pipe(self._out)
        self._next_id = 0
        #: frames read while waiting for another stream's: id -> [(status, payload)]
        self._pending: dict[int, list[tuple[int, bytearray]]] = {}
        #: requests sent and not yet answered, per stream
        self._outstanding: dict[int, int] = {}
        self.broken = False
        #: asked to quit (``retire``): not leased again, reaped by ``close``
        self.retired = False
        log.debug("reader_started", pid=self._proc.pid)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def alive(self) -> bool:
        """Running, not retired and not known to be broken."""
        return not self.broken and not self.retired and self._proc.poll() is None

    def send(self, request: dict[str, object]) -> None:
        try:
            self._in.write(json.dumps(request).encode() + b"\n")
            self._in.flush()
        except OSError as exc:
            raise self._died(f"writing to it failed ({exc})") from exc

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def request_next(self, sid: int, rows: int) -> None:
        self.send({"op": "next", "id": sid, "rows": rows})
        self.expect_reply(sid)

    def expect_reply(self, sid: int) -> None:
        """Count one more frame owed to stream ``sid``."""
        self._outstanding[sid] = self._outstanding.get(sid, 0) + 1

    def receive(self, sid: int) -> tuple[int, bytearray]:
        """The next answer for stream ``sid`` (answers for other streams are kept)."""
        queue = self._pending.get(sid)
        while not queue:
            got_id, status, payload = self._read_frame()
            self._outstanding[got_id] -= 1
            self._pending.setdefault(got_id, []).append((status, payload))
            queue = self._pending.get(sid)
        return queue.pop(0)

    def drain(self, sid: int) -> None:
        """Forget stream ``sid``: read its unanswered requests' frames and close it."""
        while self._outstanding.get(sid, 0) > 0:
            got_id, status, payload = self._read_frame()
            self._outstanding[got_id] -= 1
            if got_id != sid:  # another stream's answer: keep it for that stream
                self._pending.setdefault(got_id, []).append((status, payload))
        self._outstanding.pop(sid, None)
        self._pending.pop(sid, None)
        self.send({"op": "close", "id": sid})

    def _read_frame(self) -> tuple[int, int, bytearray]:
        header = self._read_exactly(FRAME.size)
        sid, status, length = FRAME.unpack(header)
        return sid, status, self._read_exactly(length)

    def _read_exactly(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        clock = stages.current()  # ``convert --timings``: the wait is counted
        began = time.perf_counter() if clock is not None else 0.0
        while got < n:
            k = self._out.readinto(view[got:])  # type: ignore[attr-defined]
            if not k:
                raise self._died("its output ended")
            got += k
        if clock is not None:
            stages.waited(time.perf_counter() - began)
        return buf

    def _died(self, what: str) -> PrvstreamError:
        self.broken = True
        code = self._proc.poll()
        err = b""
        if code is not None and self._proc.stderr is not None:
            err = self._proc.stderr.read()[-2000:]
        log.error("reader_failed", what=what, exit_code=code,
                  stderr=err.decode(errors="replace"))
        return PrvstreamError(
            f"the reader process failed: {what} (exit code {code}); the conversion can be "
            f"retried, and PRVSTREAM_READER=0 reads exports in-process instead")

    def retire(self) -> None:
        """Ask the child to quit without waiting for it: it ends while this process goes on
        (``close`` reaps it). A failed request is left to ``close``, which kills the child."""
        if self.retired or self._proc.poll() is not None:
            return
        self.retired = True
        with contextlib.suppress(PrvstreamError, OSError):
            self.send({"op": "quit"})
            self._in.close()

    def close(self) -> None:
        """Ask the child to quit (kill it if it does not) and close the pipes."""
        if self._proc.poll() is None:
            try:
                if not self._in.closed:
                    self.send({"op": "quit"})
                    self._in.close()
                self._proc.wait(timeout=5)
            except (PrvstreamError, OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        for stream in (self._in, self._out, self._proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):  # a broken pipe's unflushed request
                    stream.close()


class ReaderLease:
    """Exclusive use of the reader for one export; release it when the report is done."""

    def __init__(self, process: ReaderProcess, path: Path) -> None:
        self._process = process
        self._open: set[int] = set()
        self.path = path
        process.send({"op": "db", "uri": ro_uri(path)})

    def stream(self, sql: str, dtype: np.dtype, layout: rowfill.Layout, chunk_rows: int,
               what: str, scan: tuple[str, str, str, str] | None = None,
               inline: InlineTexts | None = None, *, window: int | None = None,
               unwrapped: tables.UnwrappedStatements | None = None
               ) -> Iterator[np.ndarray]:
        """``dtype`` chunks of the ordered ``sql``, like ``tables.stream``.

        The query starts at once in the child. ``what`` names the data in error messages.
        ``scan`` (``tables.scan_plan``): read in storage order with a reorder buffer when the
        table's disorder allows it; ``window``: the table's reorder window when known already
        (``Export.known_window``: the child does not read its bounds), else the child reads
        them, and a table it finds to be a few runs is read as those (``stream_runs``).
        ``inline`` (field,
        numbering): each row's last value is an inline text or NULL; a row with one gets
        ``numbering(texts)``'s id in that field. ``unwrapped``: the same statements for the
        compiled row reader, which wraps their int32 values itself (the child reads them
        when it has that reader).
        """
        p = self._process
        sid = p.new_id()
        offsets, sizes = layout
        request: dict[str, object] = {"op": "open", "id": sid, "sql": sql,
                                      "itemsize": dtype.itemsize, "offsets": list(offsets),
                                      "sizes": list(sizes)}
        if scan is not None:
            bounds: dict[str, object] = {"scan": scan[0], "table": scan[1], "start": scan[2],
                                         "where": scan[3], "max_window": presort.MAX_WINDOW}
            if window is not None:
                bounds["window"] = window
            else:  # the child bounds it, and may answer with runs
                bounds["runs"] = True
            request["presort"] = bounds
        if inline is not None:
            request["inline"] = True
        elif unwrapped is not None:
            request["unwrapped"] = unwrapped._asdict()
        p.send(request)
        if scan is not None:
            p.expect_reply(sid)  # the reorder window
        for _ in range(AHEAD):
            p.request_next(sid, chunk_rows)
        self._open.add(sid)

        def by_runs(runs: tuple[runscan.Run, ...]) -> Iterator[np.ndarray]:
            assert scan is not None
            return self.stream_runs(sql, dtype, layout, chunk_rows, what, scan, runs, inline,
                                    unwrapped)

        return self._chunks(sid, dtype, chunk_rows, what, scan is not None, inline, by_runs)

    def stream_runs(self, sql: str, dtype: np.dtype, layout: rowfill.Layout, chunk_rows: int,
                    what: str, scan: tuple[str, str, str, str], runs: tuple[runscan.Run, ...],
                    inline: InlineTexts | None = None,
                    unwrapped: tables.UnwrappedStatements | None = None
                    ) -> Iterator[np.ndarray]:
        """``stream``'s chunks of a table read as ``runs`` (``runscan``): a stream per run,
        its storage-order ``scan`` restricted to the run's rowids with the run's window,
        merged by start (``runscan.merge``)."""
        table, where = scan[1], scan[3]
        return runscan.merge([self.stream(
            sql, dtype, layout, chunk_rows, what,
            (runscan.ranged(scan[0], table, where, run), *scan[1:]), inline, window=run.window,
            unwrapped=None if unwrapped is None else unwrapped._replace(
                scan=runscan.ranged(unwrapped.scan, table, where, run))) for run in runs],
            chunk_rows)

    def _chunks(self, sid: int, dtype: np.dtype, chunk_rows: int, what: str,
                presorted: bool, inline: InlineTexts | None,
                by_runs: Callable[[tuple[runscan.Run, ...]], Iterator[np.ndarray]]
                ) -> Iterator[np.ndarray]:
        p = self._process
        if presorted:
            status, payload = p.receive(sid)
            if status == STATUS_RUNS:  # read as runs: this stream ends without rows
                runs = tuple(runscan.Run(*run) for run in json.loads(payload))
                for _ in self._frames(sid, dtype, chunk_rows, what, inline):
                    pass
                yield from by_runs(runs)
                return
            window = WINDOW.unpack(payload)[0] if status == STATUS_WINDOW else 0
            yield from presort.reorder(self._frames(sid, dtype, chunk_rows, what, inline),
                                       window, chunk_rows)
        else:
            yield from self._frames(sid, dtype, chunk_rows, what, inline)

    def _frames(self, sid: int, dtype: np.dtype, chunk_rows: int, what: str,
                inline: InlineTexts | None) -> Iterator[np.ndarray]:
        p = self._process
        try:
            while True:
                status, payload = p.receive(sid)
                if status not in (STATUS_OK, STATUS_TEXTS):
                    raise self._error(status, payload.decode(errors="replace"), what)
                if not payload:
                    return
                p.request_next(sid, chunk_rows)  # the child keeps AHEAD chunks in flight
                if status == STATUS_TEXTS and inline is not None:
                    yield _numbered(payload, dtype, *inline)
                else:
                    yield np.frombuffer(payload, dtype=dtype)
        finally:
            if sid in self._open and not p.broken:
                self._open.discard(sid)
                p.drain(sid)

    def _error(self, status: int, message: str, what: str) -> NotAnExport:
        """The same error an in-process read gives (``tables.chunks``)."""
        if status == STATUS_BAD_VALUE:
            return tables.not_integer(self.path, what, message)
        return tables.read_failed(self.path, what, message)

    def release(self) -> None:
        """Close the lease's streams and hand the reader back."""
        p = self._process
        try:
            if not p.broken:
                for sid in sorted(self._open):
                    p.drain(sid)
                self._open.clear()
        finally:
            _release()


#: chunks requested ahead per stream, so the reader can fetch while the converter works on
#: what it delivered (1, 2 and 3 measured the same on 1M-row exports; 2 leaves some slack)
AHEAD = 2

_lock = threading.Lock()
_reader: ReaderProcess | None = None
_busy = False


def _numbered(payload: bytearray, dtype: np.dtype, field: str,
              numbering: Callable[[list[str]], list[int]]) -> np.ndarray:
    """An ``inline`` stream's chunk (``_readerchild``: status 4): its rows, each row with a
    text given that text's id in ``field``."""
    (size,) = WINDOW.unpack_from(payload)
    rows = np.frombuffer(payload, dtype=dtype, count=size // dtype.itemsize,
                         offset=WINDOW.size)  # writable: the payload is a bytearray
    found = json.loads(payload[WINDOW.size + size:])
    if found["at"]:
        ids = np.array(numbering(found["texts"]), dtype=np.int64)
        rows[field][np.array(found["at"], dtype=np.intp)] = ids[np.array(found["of"],
                                                                          dtype=np.intp)]
    return rows


def lease(path: Path) -> ReaderLease | None:
    """The reader for ``path``'s streams, or None: read in-process then."""
    global _reader, _busy
    if not enabled():
        return None
    with _lock:
        if _busy:
            return None
        if _reader is not None and not _reader.alive:
            _reader.close()
            _reader = None
        if _reader is None:
            try:
                _reader = ReaderProcess(readerstart.take())
            except OSError as exc:
                log.warning("reader_unavailable", error=str(exc))
                return None
        _busy = True
        process = _reader
    try:
        return ReaderLease(process, path)
    except PrvstreamError:
        _release()
        return None


def prestart() -> None:
    """Start the reader process now, when it can run here and none runs: a report about to
    lease it (``sources.open_source``) then finds it started, its interpreter having started
    while this process opened and planned the export, instead of after. A reader never
    leased quits as any idle one does (``retire``, ``shutdown``)."""
    global _reader
    if not enabled():
        return
    with _lock:
        if _reader is None:
            with contextlib.suppress(OSError):  # ``lease`` tries again and says why
                _reader = ReaderProcess(readerstart.take())


def _release() -> None:
    global _busy
    with _lock:
        _busy = False


def retire() -> None:
    """Let the reader process quit now if it is idle, without waiting for it: a batch whose
    last report has streamed has it end while this process writes the outputs, instead of
    waiting for it at exit (``shutdown`` reaps it); a later lease starts another."""
    with _lock:
        if _reader is not None and not _busy:
            _reader.retire()


@atexit.register
def shutdown() -> None:
    """Stop the reader process (at exit, or after a job)."""
    global _reader
    with _lock:
        if _reader is not None:
            _reader.close()
            _reader = None
