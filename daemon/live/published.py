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
        self._tasks: list[str] = []
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
        for entry in nb.tasks[len(self._tasks):]:
            self._tasks.append(pv.sanitize_once(entry.name))
            self._ends.append(len(self._rows))
            self._counts.append(0)
            self._header_tasks.append(self._shared(pv.header_task(0,
                                                                  self._node_ids[entry.host])))
        ends = self._ends
        shift = 0  # bytes inserted before the task at hand: its end moves by them
        for task_id, entry in enumerate(nb.tasks, 1):
            if shift:
                ends[task_id - 1] += shift
            count = self._counts[task_id - 1]
            if count == len(entry.thread_keys):
                continue
            lines = "".join(pv.row_line(task_id, thread, key, entry.host) + "\n"
                            for thread, key in enumerate(entry.thread_keys[count:], count + 1)
                            ).encode()
            end = ends[task_id - 1]
            self._rows[end:end] = lines  # behind the task's lines: an append but for old tasks
            ends[task_id - 1] = end + len(lines)
            shift += len(lines)
            self._counts[task_id - 1] = count = len(entry.thread_keys)
            self._header_tasks[task_id - 1] = self._shared(
                pv.header_task(count, self._node_ids[entry.host]))

    def header(self, end_time: int, origin_wall_ns: int, capacity: int) -> bytes:
        """``pv.header_line`` of the numbering (``ValueError`` when over ``capacity``)."""
        self._catch_up()
        return pv.header_from_parts(len(self._nodes), self._header_tasks, end_time,
                                    origin_wall_ns, capacity)

    def row(self) -> bytes:
        self._catch_up()
        return pv.row_from_lines(self._nodes, self._tasks, self._rows, sum(self._counts))

    def pcf(self) -> bytes:
        """The ``.pcf`` (it follows from the value labels only: rebuilt when they grew)."""
        key = tuple((group, len(labels)) for group, labels in self.numbering.values.items())
        if key != self._pcf_key:
            self._pcf = pv.pcf_text(event_types(self.numbering)).encode()
            self._pcf_key = key
        return self._pcf
