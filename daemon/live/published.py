"""What a live trace publishes besides its blocks (header task list, ``.row``, ``.pcf``), kept
formatted between commits: a commit formats only the objects and labels it added, so its cost
does not grow with the tasks already in the trace.
"""

from __future__ import annotations

from array import array

from prvstream.daemon.stream.numbering import Numbering
from prvstream.daemon.stream.trace import event_types
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv

__all__ = ["Published"]

log = get_logger(__name__)

#: distinct header entries (``threads:node``) kept to be shared by the tasks that have them
_HEADER_KEPT = 4096


class Published:
    """The formatted parts of one numbering's header, ``.row`` and ``.pcf``; byte for byte
    what ``pv.header_line``, ``trace_metadata`` write for it. The numbering only grows (live
    ids); ``reset`` after it is replaced."""

    def __init__(self, numbering: Numbering) -> None:
        self.reset(numbering)

    def reset(self, numbering: Numbering) -> None:
        self.numbering = numbering
        self._nodes: list[str] = []
        self._node_ids: dict[str, int] = {}
        #: every task's .row line (its label), newline-ended and encoded, in task order
        self._task_rows = bytearray()
        self._header_tasks: list[str] = []
        self._header_kept: dict[str, str] = {}
        #: every thread's .row line, newline-ended and encoded, in task then thread order (one
        #: buffer: no string a task); where each task's lines end in it, and how many it has
        self._rows = bytearray()
        self._ends = array("q")
        self._counts = array("q")
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
            self._task_rows += (pv.sanitize_once(tasks.label(i)) + "\n").encode()
            self._ends.append(len(self._rows))
            self._counts.append(0)
            self._header_tasks.append(self._shared(pv.header_task(0,
                                                                  self._node_ids[tasks.host(i)])))
        ends = self._ends
        shift = 0  # bytes inserted before the task at hand: its end moves by them
        for i in range(len(tasks)):
            if shift:
                ends[i] += shift
            count = self._counts[i]
            if count == tasks.thread_count(i):
                continue
            host = tasks.host(i)
            lines = "".join(pv.row_line(i + 1, thread, key, host) + "\n"
                            for thread, key in enumerate(tasks.keys(i, count), count + 1)
                            ).encode()
            end = ends[i]
            self._rows[end:end] = lines  # behind the task's lines: an append but for old tasks
            ends[i] = end + len(lines)
            shift += len(lines)
            self._counts[i] = count = tasks.thread_count(i)
            self._header_tasks[i] = self._shared(pv.header_task(count, self._node_ids[host]))

    def header(self, end_time: int, origin_wall_ns: int, capacity: int) -> bytes:
        """``pv.header_line`` of the numbering (``ValueError`` when over ``capacity``)."""
        self._catch_up()
        return pv.header_from_parts(len(self._nodes), self._header_tasks, end_time,
                                    origin_wall_ns, capacity)

    def row(self) -> bytes:
        self._catch_up()
        return pv.row_from_lines(self._nodes, len(self._ends), self._task_rows,
                                 sum(self._counts), self._rows)

    def pcf(self) -> bytes:
        """The ``.pcf`` (it follows from the value labels only: rebuilt when they grew)."""
        key = tuple((group, len(labels)) for group, labels in self.numbering.values.items())
        if key != self._pcf_key:
            self._pcf = pv.pcf_text(event_types(self.numbering)).encode()
            self._pcf_key = key
        return self._pcf
