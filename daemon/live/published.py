"""What a live trace publishes besides its blocks (header task list, ``.row``, ``.pcf``), kept
formatted between commits: a commit formats only the objects and labels it added, so its cost
does not grow with the tasks already in the trace. The ``.row``'s task and thread lines are
kept in memory up to a bound, then in an unlinked file beside the journal (issue 11: memory
flat in the number of reports).
"""

from __future__ import annotations

import weakref
from array import array
from collections.abc import Iterator
from pathlib import Path

from prvstream.daemon.stream.numbering import Numbering
from prvstream.daemon.stream.trace import event_types
from prvstream.sinks.logger import get_logger
from prvstream.sinks.narrowcols import extended, set_item
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.scratch import read_at, unnamed_file, write_at

__all__ = ["Published"]

log = get_logger(__name__)

#: distinct header entries (``threads:node``) kept to be shared by the tasks that have them
_HEADER_KEPT = 4096
#: bytes of ``.row`` lines a buffer keeps in memory before it moves them to its file
SPILL_AT = 16 * 1024
#: bytes of spilled lines read at a time as the ``.row`` is published
PIECE = 1 << 18


class SpillBuffer:
    """Bytes that grow at the end (and now and then in the middle): in memory up to
    ``spill_at`` bytes, then in an unlinked temporary file in ``folder`` (none: always in
    memory). Reading them back copies them, as the in-memory buffer's join did. The file
    has no name from its start and its descriptor is closed with the buffer."""

    __slots__ = ("__weakref__", "_close", "_fd", "_folder", "_mem", "_size", "_spill_at")

    def __init__(self, folder: Path | None, spill_at: int | None = None) -> None:
        self._folder = folder
        self._spill_at = SPILL_AT if spill_at is None else spill_at
        self._mem = bytearray()
        self._fd = -1
        self._close: weakref.finalize[[], SpillBuffer] | None = None
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def insert(self, at: int, data: bytes) -> None:
        """``data`` placed at byte ``at`` (the end: an append), what followed moved behind."""
        if not data:
            return
        if self._fd < 0:
            self._mem[at:at] = data
            self._size = len(self._mem)
            if self._size > self._spill_at and self._folder is not None:
                self._spill()
            return
        fd = self._fd
        if at < self._size:  # behind an old task's lines: what follows is written again
            data += read_at(fd, self._size - at, at)
        write_at(fd, data, at)
        self._size = at + len(data)

    def _spill(self) -> None:
        spill = unnamed_file(".prvstream-row-", self._folder)
        self._close = weakref.finalize(self, spill.close)
        self._fd = fd = spill.fileno()
        write_at(fd, bytes(self._mem), 0)
        self._mem = bytearray()
        log.debug("row_lines_spilled", bytes=self._size)

    def pieces(self) -> Iterator[bytes]:
        """Every byte, in order: a copy of the in-memory bytes while not spilled (at most
        ``spill_at`` where the buffer has a folder), then ``PIECE`` bytes at a time from the
        file (a job of thousands of tasks publishes its ``.row`` without holding its lines
        twice)."""
        if self._fd < 0:
            yield bytes(self._mem)
            return
        for at in range(0, self._size, PIECE):
            yield read_at(self._fd, min(PIECE, self._size - at), at)

    def close(self) -> None:
        if self._close is not None:
            self._close()
            self._close, self._fd = None, -1
        self._mem = bytearray()
        self._size = 0


class Published:
    """The formatted parts of one numbering's header, ``.row`` and ``.pcf``; byte for byte
    what ``pv.header_line``, ``trace_metadata`` write for it. The numbering only grows (live
    ids); ``reset`` after it is replaced."""

    def __init__(self, numbering: Numbering, folder: Path | None = None) -> None:
        """``folder``: where the ``.row`` lines go once they pass ``SPILL_AT`` bytes (none:
        they stay in memory)."""
        self._folder = folder
        self._task_rows = SpillBuffer(None)
        self._rows = SpillBuffer(None)
        self.reset(numbering)

    def reset(self, numbering: Numbering) -> None:
        self.numbering = numbering
        self._nodes: list[str] = []
        self._node_ids: dict[str, int] = {}
        #: every task's .row line (its label), newline-ended and encoded, in task order
        self._task_rows.close()
        self._task_rows = SpillBuffer(self._folder)
        self._header_tasks: list[str] = []
        self._header_kept: dict[str, str] = {}
        #: every thread's .row line, newline-ended and encoded, in task then thread order (one
        #: buffer: no string a task); where each task's lines end in it, and how many it has
        self._rows.close()
        self._rows = SpillBuffer(self._folder)
        self._ends = array("i")
        self._counts = array("i")
        self._pcf_key: tuple[tuple[str, int], ...] | None = None
        self._pcf = b""

    def _shared(self, text: str) -> str:
        """The kept copy of an equal header entry (``threads:node``: the same few in most
        tasks), kept now while there is room."""
        found = self._header_kept.get(text)
        if found is None:
            found = text
            if len(self._header_kept) < _HEADER_KEPT:
                self._header_kept[text] = text
        return found

    def _catch_up(self) -> None:
        """Format what the numbering gained since the last call (a length check per task)."""
        nb = self.numbering
        for host in nb.nodes[len(self._nodes):]:
            self._node_ids[host] = len(self._nodes) + 1
            self._nodes.append(pv.sanitize_label(host))
        tasks = nb.tasks  # columns: no entry is made a task
        for i in range(len(self._ends), len(tasks)):
            self._task_rows.insert(len(self._task_rows),
                                   (pv.sanitize_once(tasks.label(i)) + "\n").encode())
            self._ends = extended(self._ends, (len(self._rows),))
            self._counts.append(0)
            self._header_tasks.append(self._shared(pv.header_task(0,
                                                                  self._node_ids[tasks.host(i)])))
        shift = 0  # bytes inserted before the task at hand: its end moves by them
        for i in range(len(tasks)):
            if shift:
                self._ends = set_item(self._ends, i, self._ends[i] + shift)
            count = self._counts[i]
            if count == tasks.thread_count(i):
                continue
            host = tasks.host(i)
            lines = "".join(pv.row_line(i + 1, thread, key, host) + "\n"
                            for thread, key in enumerate(tasks.keys(i, count), count + 1)
                            ).encode()
            end = self._ends[i]
            self._rows.insert(end, lines)  # behind the task's lines: an append but old tasks'
            self._ends = set_item(self._ends, i, end + len(lines))
            shift += len(lines)
            count = tasks.thread_count(i)
            self._counts = set_item(self._counts, i, count)
            self._header_tasks[i] = self._shared(pv.header_task(count, self._node_ids[host]))

    def header(self, end_time: int, origin_wall_ns: int, capacity: int) -> bytes:
        """``pv.header_line`` of the numbering (``ValueError`` when over ``capacity``)."""
        self._catch_up()
        return pv.header_from_parts(len(self._nodes), self._header_tasks, end_time,
                                    origin_wall_ns, capacity)

    def row_pieces(self) -> Iterator[bytes]:
        """The ``.row`` in pieces (``pv.row_pieces``), its lines read as they are written."""
        self._catch_up()
        return pv.row_pieces(self._nodes, len(self._ends), self._task_rows.pieces(),
                             sum(self._counts), self._rows.pieces())

    def pcf(self) -> bytes:
        """The ``.pcf`` (it follows from the value labels only: rebuilt when they grew)."""
        key = tuple((group, len(labels)) for group, labels in self.numbering.values.items())
        if key != self._pcf_key:
            self._pcf = pv.pcf_text(event_types(self.numbering)).encode()
            self._pcf_key = key
        return self._pcf
