"""Paraver object and value ids: canonical (batch, finalize) or in arrival order (live trace).

Tasks are keyed by (host, pid), never pid alone; threads of a task by ``(0, tid, 0)`` for CPU
threads and ``(1, device, stream)`` for GPU streams; event values by their label within a value
group. Canonical order: tasks by MPI rank when known, else host then pid; threads CPU first by
tid, then streams by (device, stream); values by label. A canonical task always starts with a
CPU thread (its main thread, tid = pid, when it has GPU rows only).
A live numbering only ever appends, so published ids never change.
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Iterable

import msgspec

from prvstream.daemon.kinds.context import ThreadKey, cpu_key, gpu_key
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver.format import (
    MAX_PARAVER_OBJECTS,
    TaskLayout,
    TraceLayout,
    row_label,
)

__all__ = ["MAIN_THREAD", "Numbering", "NumberingState", "TaskEntry", "ThreadKey", "clean_label",
           "cpu_key", "gpu_key"]

log = get_logger(__name__)

#: Unicode categories never written into a label: controls (\t, \r, U+0085 ...) and the line
#: and paragraph separators (U+2028, U+2029): line-splitting readers of .pcf/.row break on them
_UNWRITTEN = frozenset({"Cc", "Zl", "Zp"})
#: name (before the tid) of the main thread a canonical task with GPU rows only gets
MAIN_THREAD = "(main thread)"
#: tasks whose thread lookups are kept at once (rebuilt from ``thread_keys`` when dropped)
_THREAD_INDEXES = 256
#: GPU thread keys and names (the same few in every task: ``(1, 0, 7)``, ``CUDA-D0.S7``)
#: kept once and shared by the tasks that have them, at most this many
_SHARED_KEPT = 4096


def clean_label(text: str) -> str:
    """``text`` with every control character and Unicode line break replaced by a space
    (runs of them by one); text that needs nothing comes back as it is."""
    if text.isprintable():
        return text
    out: list[str] = []
    for ch in text:
        if unicodedata.category(ch) in _UNWRITTEN:
            if out and out[-1] != " ":
                out.append(" ")
        else:
            out.append(ch)
    return "".join(out).strip()


class TaskEntry(msgspec.Struct, forbid_unknown_fields=True):
    """One task: its identity, display name and threads (keys and names in id order)."""

    host: str
    pid: int
    name: str
    rank: int | None = None
    thread_keys: list[ThreadKey] = msgspec.field(default_factory=list)
    thread_names: list[str] = msgspec.field(default_factory=list)


class NumberingState(msgspec.Struct, forbid_unknown_fields=True):
    """The persisted form of a numbering (journal)."""

    nodes: list[str] = msgspec.field(default_factory=list)
    tasks: list[TaskEntry] = msgspec.field(default_factory=list)
    #: value group -> labels in id order (id = position + 1)
    values: dict[str, list[str]] = msgspec.field(default_factory=dict)


class Numbering:
    """Every id published in a trace, with lookups; ``state`` is what the journal stores."""

    def __init__(self, state: NumberingState | None = None) -> None:
        self.state = state if state is not None else NumberingState()
        self.nodes = self.state.nodes
        self.tasks = self.state.tasks
        self.values = self.state.values
        #: pid -> its task id, or the ids of its tasks on several hosts (no (host, pid) tuple
        #: a task: a job of thousands of one-rank tasks holds a dict entry each)
        self._task_index: dict[int, int | list[int]] = {}
        self._value_index: dict[str, dict[str, int]] = {}
        #: task id -> thread key -> thread id (built on first use per task; a cache of at
        #: most ``_THREAD_INDEXES`` tasks: a job of thousands of tasks keeps no dict each)
        self._thread_index: dict[int, dict[ThreadKey, int]] = {}
        #: (task id, position) of each thread added since the last ``mark``
        self._grown: list[tuple[int, int]] = []
        #: one copy of each GPU thread key and name, shared by every task that has it (a
        #: job of thousands of one-rank tasks holds no tuple and string a stream and task)
        self._shared_keys: dict[ThreadKey, ThreadKey] = {}
        self._shared_names: dict[str, str] = {}
        self.reindex()

    def mark(self) -> tuple[int, int, dict[str, int]]:
        """A point to go back to with ``undo`` (ids added after it are forgotten); costs
        O(value groups), not O(tasks)."""
        self._grown.clear()
        return len(self.nodes), len(self.tasks), {g: len(v) for g, v in self.values.items()}

    def grown_since(self, mark: tuple[int, int, dict[str, int]]) -> bool:
        """Whether an id was added since ``mark`` (and no other ``mark`` since)."""
        nodes, tasks, values = mark
        return (bool(self._grown) or (nodes, tasks) != (len(self.nodes), len(self.tasks))
                or values != {g: len(v) for g, v in self.values.items()})

    def undo(self, mark: tuple[int, int, dict[str, int]]) -> None:
        """Forget every id added since ``mark`` (in place: ``state`` stays the same object)."""
        nodes, tasks, values = mark
        for task_id, position in self._grown:
            if task_id <= tasks:
                entry = self.tasks[task_id - 1]
                del entry.thread_keys[position:], entry.thread_names[position:]
        self._grown.clear()
        del self.nodes[nodes:], self.tasks[tasks:]
        for group in list(self.values):
            if group in values:
                del self.values[group][values[group]:]
            else:
                del self.values[group]
        self._thread_index.clear()
        self.reindex()

    def reindex(self) -> None:
        """Rebuild lookup dictionaries (after decoding)."""
        self._task_index = {}
        for i, t in enumerate(self.tasks, 1):
            self._index_task(t.pid, i)
        self._value_index = {
            group: {label: i + 1 for i, label in enumerate(labels)}
            for group, labels in self.values.items()
        }

    # -- objects ---------------------------------------------------------------------------
    def task(self, host: str, pid: int, name: str = "", rank: int | None = None) -> int:
        """Task id of (host, pid), added at the end if new."""
        found = self._task_of(host, pid)
        if found is not None:
            return found
        host, name = sys.intern(clean_label(host)), clean_label(name)
        found = self._task_of(host, pid)
        if found is not None:
            return found
        if host not in self.nodes:
            self.nodes.append(host)
        label = f"{host}:{pid} {name}".strip() if rank is None else f"rank {rank} {host}:{pid}"
        self.tasks.append(TaskEntry(host=host, pid=pid, name=label, rank=rank))
        task_id = len(self.tasks)
        self._index_task(pid, task_id)
        if task_id == MAX_PARAVER_OBJECTS + 1:
            log.warning("paraver_object_limit", tasks=task_id, limit=MAX_PARAVER_OBJECTS)
        return task_id

    def _task_of(self, host: str, pid: int) -> int | None:
        """The task id of (host, pid), None when it has none."""
        held = self._task_index.get(pid)
        if held is None:
            return None
        if isinstance(held, int):
            return held if self.tasks[held - 1].host == host else None
        return next((t for t in reversed(held) if self.tasks[t - 1].host == host), None)

    def _index_task(self, pid: int, task_id: int) -> None:
        held = self._task_index.get(pid)
        if held is None:
            self._task_index[pid] = task_id
        elif isinstance(held, int):
            self._task_index[pid] = [held, task_id]
        else:
            held.append(task_id)

    def thread(self, task_id: int, key: ThreadKey, name: str) -> int:
        """Thread id of ``key`` within a task, added at the end if new."""
        index = self._threads_of(task_id)
        entry = self.tasks[task_id - 1]
        tkey = (key[0], key[1], key[2])
        found = index.get(tkey)
        if found is not None:
            return found
        self._grown.append((task_id, len(entry.thread_keys)))
        name = clean_label(name)
        if key[0] != 0:  # CPU threads' tids and names differ from task to task
            key, name = self._share(tkey, name)
        elif key[1] == entry.pid:  # the main thread: the task's pid, not one more int
            key = (0, entry.pid, key[2])
        entry.thread_keys.append(key)
        entry.thread_names.append(name)
        index[tkey] = len(entry.thread_keys)
        return index[tkey]

    def trim(self, task_id: int) -> None:
        """Copy a task's thread lists without the spare room their appends left (kept as long
        as the job: a job of thousands of small tasks holds them all)."""
        entry = self.tasks[task_id - 1]
        entry.thread_keys = entry.thread_keys[:]
        entry.thread_names = entry.thread_names[:]

    def _share(self, key: ThreadKey, name: str) -> tuple[ThreadKey, str]:
        """The kept copies of an equal key and name (kept now while there is room)."""
        keys, names = self._shared_keys, self._shared_names
        shared_key, shared_name = keys.get(key), names.get(name)
        if shared_key is None and len(keys) < _SHARED_KEPT:
            shared_key = keys[key] = key
        if shared_name is None and len(names) < _SHARED_KEPT:
            shared_name = names[name] = name
        return (shared_key or key), (shared_name or name)

    def find_thread(self, host: str, pid: int, key: ThreadKey) -> tuple[int, int] | None:
        """(task id, thread id) of a thread already numbered, else None (adds nothing)."""
        task_id = self._task_of(host, pid) or self._task_of(clean_label(host), pid)
        if task_id is None:
            return None
        found = self._threads_of(task_id).get((key[0], key[1], key[2]))
        return None if found is None else (task_id, found)

    def _threads_of(self, task_id: int) -> dict[ThreadKey, int]:
        index = self._thread_index.get(task_id)
        if index is None:
            if len(self._thread_index) >= _THREAD_INDEXES:
                self._thread_index.clear()
            index = self._thread_index[task_id] = {
                (k[0], k[1], k[2]): i + 1
                for i, k in enumerate(self.tasks[task_id - 1].thread_keys)}
        return index

    # -- values ----------------------------------------------------------------------------
    def value(self, group: str, label: str) -> int:
        """Value id of ``label`` in ``group``, appended if new."""
        index = self._value_index.setdefault(group, {})
        found = index.get(label)
        if found is not None:
            return found
        clean = clean_label(label)
        found = index.get(clean)
        if found is None:
            labels = self.values.setdefault(group, [])
            labels.append(clean)
            found = index[clean] = len(labels)
        index[label] = found
        return found

    # -- views -----------------------------------------------------------------------------
    def layout(self) -> TraceLayout:
        """The trace's objects with their .row labels (``format.row_label``); the readable
        thread names (``thread_names``) stay in the numbering (journal)."""
        node_ids = {host: i + 1 for i, host in enumerate(self.nodes)}
        return TraceLayout(
            nodes=list(self.nodes),
            tasks=[
                TaskLayout(name=t.name, node=node_ids[t.host],
                           threads=[row_label(task_id, i, key, t.host)
                                    for i, key in enumerate(t.thread_keys, 1)])
                for task_id, t in enumerate(self.tasks, 1)
            ],
        )

    # -- canonical order -------------------------------------------------------------------
    @classmethod
    def canonical(
        cls,
        tasks: Iterable[tuple[str, int, str, int | None, dict[ThreadKey, str]]],
        values: dict[str, set[str]],
    ) -> Numbering:
        """Build the canonical numbering of a set of reports.

        ``tasks``: (host, pid, process name, rank, {thread key: thread name}) — the same task
        may appear several times (capture slices); threads are united. ``values``: value
        group -> every label used.
        """
        merged: dict[tuple[str, int], tuple[str, int | None, dict[ThreadKey, str]]] = {}
        for host, pid, name, rank, threads in tasks:
            old = merged.get((host, pid))
            if old is None:
                merged[(host, pid)] = (name, rank, dict(threads))
            else:
                old[2].update(threads)
                if rank is not None and old[1] is None:
                    merged[(host, pid)] = (old[0] or name, rank, old[2])

        def order(item: tuple[tuple[str, int], tuple[str, int | None, dict[ThreadKey, str]]]
                  ) -> tuple[int, int, str, int]:
            (host, pid), (_, rank, _) = item
            return (0, rank, "", 0) if rank is not None else (1, 0, host, pid)

        numbering = cls()
        for (host, pid), (name, rank, threads) in sorted(merged.items(), key=order):
            task_id = numbering.task(host, pid, name, rank)
            if threads and min(threads)[0] != 0:
                # a task's rows start with a CPU thread, as in Extrae traces: readers that take
                # the .row by position (BasicAnalysis) read a stream row before any THREAD row
                # as a thread of the previous task. A process with GPU rows only gets its main
                # thread (tid = pid), which holds no records.
                numbering.thread(task_id, cpu_key(pid), f"{MAIN_THREAD} {pid}")
            for key in sorted(threads):
                numbering.thread(task_id, key, threads[key])
        for group in sorted(values):
            for label in sorted(values[group]):
                numbering.value(group, label)
        return numbering
