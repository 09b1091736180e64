"""The Paraver trace writer, for batch conversion and the live trace alike: record batches as
text behind a fixed-capacity header, the header written last (or rewritten in place, or the
file rewritten when it outgrew its capacity), and the .pcf/.row that follow from the layout.

It takes what the daemon computed (layout, event types, record batches) and imports nothing of
the daemon.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Final

from prvstream.sinks.files import fsync_dir
from prvstream.sinks.logger import get_logger
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


class PrvWriter:
    """Appends time-sorted record batches to an open .prv at its current position, counting
    records and the latest record time (the header's end time)."""

    def __init__(self, fh: IO[bytes], end_time: int = 0) -> None:
        self.fh = fh
        self.records = 0
        self.end_time = end_time

    def write(self, batch: RecordBatch) -> None:
        if not len(batch):
            return
        self.fh.write(batch.text())
        self.records += len(batch)
        self.end_time = max(self.end_time, int(batch.keys[:, KEY_TIME].max()))

    def finish(self, header: bytes) -> None:
        """Write the header over the placeholder at the start and make the file durable."""
        self.fh.flush()
        self.fh.seek(0)
        self.fh.write(header)
        self.fh.flush()
        os.fsync(self.fh.fileno())


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
