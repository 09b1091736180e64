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
from collections.abc import Iterable, Sequence
from typing import cast

import msgspec

from prvstream.daemon.kinds.context import ThreadKey, cpu_key, gpu_key
from prvstream.daemon.stream.tasktable import PidIndex, TaskTable
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver.format import (
    MAX_PARAVER_OBJECTS,
    TaskLayout,
    TraceLayout,
    row_label,
)

__all__ = ["MAIN_THREAD", "Numbering", "NumberingState", "TaskEntry", "ThreadKey", "clean_label",
           "cpu_key", "gpu_key", "state_json"]

log = get_logger(__name__)

#: Unicode categories never written into a label: controls (\t, \r, U+0085 ...) and the line
#: and paragraph separators (U+2028, U+2029): line-splitting readers of .pcf/.row break on them
_UNWRITTEN = frozenset({"Cc", "Zl", "Zp"})
#: name (before the tid) of the main thread a canonical task with GPU rows only gets
MAIN_THREAD = "(main thread)"
#: tasks whose thread lookups are kept at once (rebuilt from ``thread_keys`` when dropped)
_THREAD_INDEXES = 256


def clean_label(text: str) -> str:
    """``text`` with every control character and Unicode line break replaced by a space
    (runs of them by one); text that needs nothing comes back as it is."""
    if text.isprintable():
        return text
    import unicodedata  # only here: nearly every label is printable

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
    """The persisted form of a numbering (journal). A ``Numbering`` made on it replaces its
    task list by a ``TaskTable`` of the same tasks (columns): encode it with ``state_json``,
    or its task list as ``list(state.tasks)``."""

    nodes: list[str] = msgspec.field(default_factory=list)
    tasks: list[TaskEntry] = msgspec.field(default_factory=list)
    #: value group -> labels in id order (id = position + 1)
    values: dict[str, list[str]] = msgspec.field(default_factory=dict)


def _enc_hook(obj: object) -> object:
    if isinstance(obj, TaskTable):
        return list(obj)
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


_json = msgspec.json.Encoder(enc_hook=_enc_hook)


def state_json(state: NumberingState) -> bytes:
    """``msgspec.json.encode(state)``, its tasks as a table or a list (the same bytes)."""
    return _json.encode(state)


def table_of(state: NumberingState) -> TaskTable:
    """The state's tasks as a ``TaskTable``, put in place of its list when they are one."""
    tasks = state.tasks
    if isinstance(tasks, TaskTable):
        return tasks
    table = TaskTable(tasks)
    setattr(state, "tasks", table)  # noqa: B010 (the field's declared type is its decoded form)
    return table


class Numbering:
    """Every id published in a trace, with lookups; ``state`` is what the journal stores."""

    def __init__(self, state: NumberingState | None = None) -> None:
        self.state = state if state is not None else NumberingState()
        self.nodes = self.state.nodes
        #: the tasks as columns (``tasktable``): no object a task
        self.tasks = table_of(self.state)
        self.values = self.state.values
        #: pid -> the ids of its tasks (one a host), packed (no (host, pid) tuple, dict entry
        #: and int a task)
        self._task_index = PidIndex()
        self._value_index: dict[str, dict[str, int]] = {}
        #: task id -> thread key -> thread id (built on first use per task; a cache of at
        #: most ``_THREAD_INDEXES`` tasks: a job of thousands of tasks keeps no dict each)
        self._thread_index: dict[int, dict[ThreadKey, int]] = {}
        #: (task id, position) of each thread added since the last ``mark`` (none before
        #: the first: a numbering never marked keeps no tuple a thread)
        self._grown: list[tuple[int, int]] = []
        self._marked = False
        self.reindex()

    def mark(self) -> tuple[int, int, dict[str, int]]:
        """A point to go back to with ``undo`` (ids added after it are forgotten); costs
        O(value groups), not O(tasks)."""
        self._grown.clear()
        self._marked = True
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
                self.tasks.keep_threads(task_id - 1, position)
        self._grown.clear()
        del self.nodes[nodes:]
        self.tasks.keep(tasks)
        for group in list(self.values):
            if group in values:
                del self.values[group][values[group]:]
            else:
                del self.values[group]
        self._thread_index.clear()
        self.reindex()

    def reindex(self) -> None:
        """Rebuild lookup dictionaries (after decoding)."""
        self._task_index = PidIndex()
        for i in range(len(self.tasks)):
            self._task_index.add(self.tasks.pid(i), i + 1)
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
        self._task_index.add(pid, task_id)
        if task_id == MAX_PARAVER_OBJECTS + 1:
            log.warning("paraver_object_limit", tasks=task_id, limit=MAX_PARAVER_OBJECTS)
        return task_id

    def _task_of(self, host: str, pid: int) -> int | None:
        """The task id of (host, pid), None when it has none."""
        held = self._task_index.tasks(pid)
        return next((t for t in reversed(held) if self.tasks.host(t - 1) == host), None)

    def thread(self, task_id: int, key: ThreadKey, name: str) -> int:
        """Thread id of ``key`` within a task, added at the end if new."""
        index = self._threads_of(task_id)
        tkey = (key[0], key[1], key[2])
        found = index.get(tkey)
        if found is not None:
            return found
        position = self.tasks.thread_count(task_id - 1)
        if self._marked:
            self._grown.append((task_id, position))
        self.tasks.add_threads(task_id - 1, [tkey], [clean_label(name)])
        index[tkey] = position + 1
        return position + 1

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
                k: i + 1 for i, k in enumerate(self.tasks.keys(task_id - 1))}
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

    def values_of(self, group: str, labels: Sequence[str]) -> list[int]:
        """``value`` of every label, in order (new ones appended in that order): in one pass
        when every new label is distinct and printable, each then its own clean label (an
        export's thousands of inline NVTX texts), else label by label."""
        index = self._value_index.setdefault(group, {})
        get = index.get
        found = [get(label) for label in labels]
        if None not in found:
            return cast(list[int], found)
        new = [label for label, v in zip(labels, found, strict=True) if v is None]
        if len(set(new)) == len(new) and "".join(new).isprintable():
            known = self.values.setdefault(group, [])
            first = len(known) + 1
            known.extend(new)
            index.update(zip(new, range(first, first + len(new)), strict=True))
            return [index[label] for label in labels]
        value = self.value
        return [value(group, label) if v is None else v
                for label, v in zip(labels, found, strict=True)]

    # -- views -----------------------------------------------------------------------------
    def layout(self) -> TraceLayout:
        """The trace's objects with their .row labels (``format.row_label``); the readable
        thread names (``thread_names``) stay in the numbering (journal)."""
        node_ids = {host: i + 1 for i, host in enumerate(self.nodes)}
        tasks = self.tasks
        return TraceLayout(
            nodes=list(self.nodes),
            tasks=[
                TaskLayout(name=tasks.label(t), node=node_ids[tasks.host(t)],
                           threads=[row_label(t + 1, i, key, tasks.host(t))
                                    for i, key in enumerate(tasks.keys(t), 1)])
                for t in range(len(tasks))
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
            numbering.values_of(group, sorted(values[group]))
        return numbering
