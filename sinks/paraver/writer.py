"""The Paraver trace writer, for batch conversion and the live trace alike: record batches as
text behind a fixed-capacity header, the header written last (or rewritten in place, or the
file rewritten when it outgrew its capacity), and the .pcf/.row that follow from the layout.

It takes what the daemon computed (layout, event types, record batches) and imports nothing of
the daemon. With ``behind`` the text is formatted and written by a thread of its own: the C
formatter and the file write run without the GIL, so they overlap the caller's work (into a
real file: a C thread that never takes the GIL, so the caller never waits for it to be
scheduled; into a file object without a descriptor: a Python thread).
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Final

from prvstream.sinks.files import fsync_dir
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import fastfmt
from prvstream.sinks.paraver.fastfmt import RecordThread, text_slices, write_records
from prvstream.sinks.paraver.format import (
    EventTypeSpec,
    TraceLayout,
    header_line,
    pcf_text,
    row_text,
)
from prvstream.sinks.paraver.records import KEY_TIME, RecordBatch

__all__ = [
    "MAX_END_TIME",
    "PrvWriter",
    "grow_header",
    "header_capacity",
    "metadata",
    "placeholder",
]

log = get_logger(__name__)

#: headers are sized for an end time this large (18 digits), so the end never outgrows them
MAX_END_TIME: Final = 10**17


def header_capacity(layout: TraceLayout, origin_wall_ns: int, at_least: int = 0,
                    slack: int = 16) -> int:
    """Bytes to reserve for the header of ``layout``: room for any end time plus ``slack``,
    and at least ``at_least``."""
    return max(at_least, len(header_line(layout, MAX_END_TIME, origin_wall_ns)) + slack)


def placeholder(capacity: int) -> bytes:
    """The blank header line a new .prv starts with (spaces and a newline)."""
    return b" " * (capacity - 1) + b"\n"


def metadata(event_types: Iterable[EventTypeSpec], layout: TraceLayout) -> tuple[bytes, bytes]:
    """The .pcf and .row of a trace."""
    return pcf_text(event_types).encode(), row_text(layout).encode()


#: batches a ``behind`` writer holds queued beside the one it is writing (each a merged
#: batch: at most 4,096 records, ~0.5 MiB of fields)
BEHIND_BATCHES = 1
#: the interpreter's switch interval while a ``behind`` writer runs: the thread takes the GIL
#: twice a batch (queue, the C call) into a real file, and each time the default 5 ms would
#: leave it waiting on the caller's Python code
_SWITCH_S = 0.0005


def _write_text(fh: IO[bytes], batch: RecordBatch) -> None:
    """Write the batch's lines, formatted ``TEXT_RECORDS`` at a time (the same bytes): a merged
    batch's whole text (up to 16k records) was 2.5 MiB at once."""
    for text in text_slices(batch.fields, batch.tmpl):
        fh.write(text)


class PrvWriter:
    """Appends time-sorted record batches to an open .prv at its current position, counting
    records and the latest record time (the header's end time).

    ``behind``: format and write in a thread (only where the C formatter is in use: the
    Python one holds the GIL), at most ``BEHIND_BATCHES`` batches behind the caller; a write
    error is raised by the next ``write`` or by ``flush``/``finish``. The caller must not
    change a batch's arrays once written, and calls ``close`` when it abandons the file.
    """

    def __init__(self, fh: IO[bytes], end_time: int = 0, *, behind: bool = False) -> None:
        self.fh = fh
        self.records = 0
        self.end_time = end_time
        self._queue: queue.Queue[RecordBatch | None] | None = None
        self._thread: threading.Thread | None = None
        self._failed: BaseException | None = None
        #: the file descriptor the thread writes to (None: through ``fh``)
        self._fd: int | None = None
        #: the C thread writing to ``_fd`` (None: none, or the Python thread)
        self._c: RecordThread | None = None
        if behind and fastfmt.WRITER.compiled():
            self._fd = _descriptor(fh)
            if self._fd is not None and fastfmt.THREAD.compiled():
                self._c = RecordThread(self._fd)
                return
            self._queue = queue.Queue(maxsize=BEHIND_BATCHES)
            _short_switches(True)
            self._thread = threading.Thread(target=self._drain, name="prv-writer", daemon=True)
            self._thread.start()

    def write(self, batch: RecordBatch) -> None:
        if not len(batch):
            return
        self.records += len(batch)
        self.end_time = max(self.end_time, int(batch.keys[:, KEY_TIME].max()))
        if self._c is not None:
            self._c.write(batch.fields, batch.tmpl)
            return
        if self._queue is None:
            _write_text(self.fh, batch)
            return
        self._raise_failed()
        self._queue.put(batch)

    def _drain(self) -> None:
        assert self._queue is not None
        while (batch := self._queue.get()) is not None:
            if self._failed is None:
                try:
                    if self._fd is not None:
                        write_records(self._fd, batch.fields, batch.tmpl)
                    else:
                        _write_text(self.fh, batch)
                except BaseException as exc:  # raised in the caller's thread
                    self._failed = exc

    def _raise_failed(self) -> None:
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed

    def close(self) -> None:
        """Stop the writing thread (what it has not written is dropped); errors are not
        raised. Idempotent; a writer without a thread has nothing to stop."""
        if self._c is not None:
            self._c.close(drop=True)
            self._stop()
            return
        if self._thread is None or self._queue is None:
            return
        self._failed = self._failed or _Stopped()  # the thread drops what is queued
        self._stop()

    def flush(self) -> None:
        """Wait until every batch is written; raise a write error."""
        self._stop()
        self._raise_failed()

    def _stop(self) -> None:
        if self._c is not None:
            try:
                self._c.close()  # raises a write error
            finally:
                self._c = None
                self._seek_after_fd()
            return
        if self._thread is not None and self._queue is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = self._queue = None
            _short_switches(False)
        self._seek_after_fd()

    def _seek_after_fd(self) -> None:
        if self._fd is not None:  # the file object's position after the direct writes
            self.fh.seek(os.lseek(self._fd, 0, os.SEEK_CUR))
            self._fd = None

    def finish(self, header: bytes, *, sync: bool = True) -> None:
        """Write the header over the placeholder at the start and make the file durable
        (``sync=False``: the caller fsyncs it, with its other outputs)."""
        self.flush()
        self.fh.flush()
        self.fh.seek(0)
        self.fh.write(header)
        self.fh.flush()
        if sync:
            os.fsync(self.fh.fileno())


def _descriptor(fh: IO[bytes]) -> int | None:
    """``fh``'s file descriptor, its buffer flushed (writes go to it directly from now on), or
    None when it has none (an in-memory file)."""
    try:
        fd = fh.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return None
    fh.flush()
    return fd


class _Stopped(Exception):
    """The writer was closed: nothing more is written."""


_switch_lock = threading.Lock()
_switch_users = 0
_switch_default = 0.0


def _short_switches(on: bool) -> None:
    """Shorten the switch interval while any ``behind`` writer runs; restore it after."""
    global _switch_users, _switch_default
    with _switch_lock:
        if on:
            if _switch_users == 0:
                _switch_default = sys.getswitchinterval()
                sys.setswitchinterval(min(_switch_default, _SWITCH_S))
            _switch_users += 1
        else:
            _switch_users -= 1
            if _switch_users == 0:
                sys.setswitchinterval(_switch_default)


def grow_header(prv: Path, old_capacity: int, header: bytes) -> None:
    """Rewrite ``prv`` with ``header`` (larger than ``old_capacity``) before its body, through a
    temporary file renamed into place."""
    tmp = prv.with_name(f".{prv.name}.grow")
    with prv.open("rb") as src, tmp.open("wb") as dst:
        dst.write(header)
        src.seek(old_capacity)
        while chunk := src.read(1 << 20):
            dst.write(chunk)
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, prv)
    fsync_dir(prv.parent)
    log.info("header_grown", prv=str(prv), capacity=len(header))
