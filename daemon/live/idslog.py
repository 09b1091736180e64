"""A job's published ids (its live numbering) journaled as append-only deltas beside its
journal: each commit appends what it added (nodes, tasks, threads of older tasks, labels), so
that a commit costs what it added, not every id the trace holds.
"""

from __future__ import annotations

import secrets
import struct
from array import array
from pathlib import Path

import msgspec

from prvstream.daemon.kinds.context import ThreadKey
from prvstream.daemon.live.frames import FrameCut, append_frames, split_frames
from prvstream.daemon.stream.numbering import NumberingState, TaskEntry
from prvstream.daemon.stream.tasktable import TaskTable
from prvstream.sinks.errors import JournalCorrupt, StateDirUnusable
from prvstream.sinks.logger import get_logger

__all__ = ["IdsDelta", "IdsLog"]

log = get_logger(__name__)



class IdsDelta(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The ids one commit added (or, ``whole``, every id: a numbering replaced)."""

    whole: bool = False
    nodes: list[str] = msgspec.field(default_factory=list)
    tasks: list[TaskEntry] = msgspec.field(default_factory=list)
    #: threads appended to tasks published by earlier commits: (task id, keys, names)
    threads: list[tuple[int, list[ThreadKey], list[str]]] = msgspec.field(
        default_factory=list)
    #: labels appended to each value group
    values: dict[str, list[str]] = msgspec.field(default_factory=dict)


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(IdsDelta)


class IdsLog:
    """The numbering's file of deltas (single writer: the job's journal)."""

    def __init__(self, folder: Path, stem: str) -> None:
        self.folder = folder
        self.stem = stem
        self.name = ""
        self.length = 0
        #: the numbering object last written, and what of it is written: nodes, tasks,
        #: threads per task, labels per value group
        self._of: NumberingState | None = None
        self._nodes = 0
        self._threads = array("I")
        self._values: dict[str, int] = {}

    # -- reading -----------------------------------------------------------------------------
    def load(self, name: str, length: int) -> NumberingState:
        """The numbering as of the last commit (``length`` bytes of ``name``)."""
        self.name, self.length = name, length
        state = NumberingState()
        path = self.folder / name
        try:
            with path.open("rb") as fh:
                raw = fh.read(length)
        except OSError as exc:
            raise self._corrupt(f"it cannot be read ({exc})") from exc
        if len(raw) < length:
            raise self._corrupt(f"it holds {len(raw)} of {length} committed bytes")
        try:
            for _, payload in split_frames(raw):
                _apply(state, _decoder.decode(payload))
        except FrameCut:
            raise self._corrupt("it ends inside a frame") from None
        except (struct.error, msgspec.DecodeError, msgspec.ValidationError, IndexError) as exc:
            raise self._corrupt(f"a delta is unreadable ({exc})") from exc
        self._written(state)
        return state

    # -- writing -----------------------------------------------------------------------------
    def write(self, state: NumberingState) -> None:
        """Append (fsynced) what ``state`` added since the last write; a numbering object
        other than the one last written goes whole into a new file."""
        whole = state is not self._of or not self.name
        delta = IdsDelta(whole=True, nodes=list(state.nodes), tasks=list(state.tasks),
                         values={g: list(v) for g, v in state.values.items()}) if whole \
            else self._delta(state)
        if not whole and not (delta.nodes or delta.tasks or delta.threads or delta.values):
            return
        name = f"{self.stem}.ids.{secrets.token_hex(6)}" if whole else self.name
        path = self.folder / name
        try:
            end = append_frames(path, 0 if whole else self.length, [_encoder.encode(delta)])
        except OSError as exc:
            raise StateDirUnusable(
                f"cannot write the trace's ids {path} ({exc.strerror or exc}); free space or "
                f"fix the permissions of {path.parent} (--state), then restart") from exc
        self.name = name
        self.length = end
        if whole:
            self._written(state)
        else:  # what this delta added, without a pass over every task
            self._nodes = len(state.nodes)
            for task_id, keys, _ in delta.threads:
                self._threads[task_id - 1] += len(keys)
            self._threads.extend(len(t.thread_keys) for t in delta.tasks)
            for group, labels in delta.values.items():
                self._values[group] = self._values.get(group, 0) + len(labels)

    def drop_others(self) -> None:
        """After a journal commit (and at recovery): id files the journal does not name."""
        for path in self.folder.glob(f"{self.stem}.ids.*"):
            if path.name != self.name:
                path.unlink(missing_ok=True)

    # -- inside ------------------------------------------------------------------------------
    def _written(self, state: NumberingState) -> None:
        self._of = state
        self._nodes = len(state.nodes)
        tasks = state.tasks
        self._threads = array("I", (_thread_count(tasks, i) for i in range(len(tasks))))
        self._values = {g: len(v) for g, v in state.values.items()}

    def _delta(self, state: NumberingState) -> IdsDelta:
        old = len(self._threads)
        threads = []
        tasks = state.tasks
        for task_id in range(1, min(old, len(tasks)) + 1):
            had = self._threads[task_id - 1]
            if _thread_count(tasks, task_id - 1) > had:
                threads.append((task_id, *_threads_from(tasks, task_id - 1, had)))
        values = {g: v[self._values.get(g, 0):] for g, v in state.values.items()
                  if len(v) > self._values.get(g, 0)}
        return IdsDelta(nodes=state.nodes[self._nodes:], tasks=state.tasks[old:],
                        threads=threads, values=values)

    def _corrupt(self, what: str) -> JournalCorrupt:
        return JournalCorrupt(
            f"the trace's ids beside a journal in {self.folder} ({self.name}) are corrupt: "
            f"{what}; move the journal and its files ({self.stem}.*) aside and restart: the "
            "job's outputs will be rebuilt from its reports")


def _thread_count(tasks: list[TaskEntry], i: int) -> int:
    """How many threads task ``i`` has (a table's column, or its entry's list)."""
    if isinstance(tasks, TaskTable):
        return tasks.thread_count(i)
    return len(tasks[i].thread_keys)


def _threads_from(tasks: list[TaskEntry], i: int, start: int
                  ) -> tuple[list[ThreadKey], list[str]]:
    """Task ``i``'s thread keys and names from its ``start``-th on."""
    if isinstance(tasks, TaskTable):
        return tasks.keys(i, start), tasks.names(i, start)
    entry = tasks[i]
    return entry.thread_keys[start:], entry.thread_names[start:]


def _apply(state: NumberingState, delta: IdsDelta) -> None:
    if delta.whole:
        state.nodes.clear()
        state.tasks.clear()
        state.values.clear()
    state.nodes.extend(delta.nodes)
    state.tasks.extend(delta.tasks)
    for task_id, keys, names in delta.threads:
        entry = state.tasks[task_id - 1]
        entry.thread_keys.extend(keys)
        entry.thread_names.extend(names)
    for group, labels in delta.values.items():
        state.values.setdefault(group, []).extend(labels)
