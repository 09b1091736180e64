"""Committed ``.prv`` lines back into records: parse the text, renumber objects, event types and
values from the live ids to canonical ones, and shift the times to another origin.

The renumbering follows from two numberings alone: objects by (host, pid) and thread key,
event types and values by what the ``.pcf`` of each numbering says they mean (an event type
whose number follows from a label, like an NVTX domain's, is matched by its description).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from prvstream.daemon.kinds import registry
from prvstream.daemon.stream.numbering import Numbering
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver.fastfmt import WIDTH, template

__all__ = ["BlockRecords", "Renumber", "parse_lines"]

log = get_logger(__name__)


class BlockUnreadable(PrvstreamError):
    """A committed block's text is not what prvstream writes."""


@dataclass
class BlockRecords:
    """Parsed lines: the record type and every integer field of each line (zero-padded)."""

    kind: np.ndarray
    fields: np.ndarray
    counts: np.ndarray


def parse_lines(data: bytes) -> BlockRecords:
    """Every ``:``-separated integer of complete ``.prv`` record lines."""
    if not data:
        empty = np.empty(0, np.int64)
        return BlockRecords(empty, np.empty((0, 0), np.int64), empty)
    buf = np.frombuffer(data, np.uint8)
    ends = np.flatnonzero(buf == 10)
    colons = np.flatnonzero(buf == 58)
    counts = np.diff(np.searchsorted(colons, ends), prepend=0) + 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flat = np.fromstring(data[:-1].replace(b"\n", b":").decode("ascii"),
                             dtype=np.int64, sep=":")
    if len(flat) != int(counts.sum()):
        raise BlockUnreadable("a committed block holds a line that is not a Paraver record")
    n, width = len(counts), int(counts.max())
    fields = np.zeros((n, width), np.int64)
    firsts = np.cumsum(counts) - counts
    rows = np.repeat(np.arange(n), counts)
    cols = np.arange(len(flat)) - np.repeat(firsts, counts)
    fields[rows, cols] = flat
    return BlockRecords(fields[:, 0].copy(), fields, counts)


@dataclass
class Renumber:
    """Live ids -> canonical ids (objects, event types, values) and a time shift."""

    task: np.ndarray
    thread_base: np.ndarray
    thread: np.ndarray
    types: dict[int, int]
    values: dict[int, np.ndarray]
    shift: int
    _templates: dict[tuple[int, ...], int] = field(default_factory=dict)

    @classmethod
    def between(cls, live: Numbering, canon: Numbering, shift: int) -> Renumber:
        task = np.zeros(len(live.tasks) + 1, np.int64)
        base = np.zeros(len(live.tasks) + 2, np.int64)
        threads: list[int] = [0]
        index = {(t.host, t.pid): i for i, t in enumerate(canon.tasks, 1)}
        for i, entry in enumerate(live.tasks, 1):
            ct = index.get((entry.host, entry.pid))
            if ct is None:
                raise BlockUnreadable(f"task {entry.host}:{entry.pid} has no canonical id")
            task[i] = ct
            base[i] = len(threads) - 1
            keys = {tuple(k): j for j, k in enumerate(canon.tasks[ct - 1].thread_keys, 1)}
            for key in entry.thread_keys:
                found = keys.get(tuple(key))
                if found is None:
                    raise BlockUnreadable(f"thread {key} of task {entry.host}:{entry.pid} "
                                          "has no canonical id")
                threads.append(found)
        base[len(live.tasks) + 1] = len(threads) - 1
        types, values = _event_maps(live, canon)
        return cls(task=task, thread_base=base, thread=np.array(threads, np.int64),
                   types=types, values=values, shift=shift)

    @property
    def identity(self) -> bool:
        return (not self.types and not self.values and self.shift == 0
                and bool(np.all(self.task == np.arange(len(self.task))))
                and bool(np.all(self.thread[1:] == self._live_thread_ids())))

    def _live_thread_ids(self) -> np.ndarray:
        counts = np.diff(self.thread_base[1:])
        return np.concatenate([np.arange(1, c + 1) for c in counts.tolist()]) if len(
            counts) else np.empty(0, np.int64)

    def objects(self, task: np.ndarray, thread: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if task.size and (int(task.max()) >= len(self.task) or int(task.min()) < 1):
            raise BlockUnreadable("a committed record names a task the journal does not hold")
        return self.task[task], self.thread[self.thread_base[task] + thread]

    def event_pairs(self, types: np.ndarray, values: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Canonical (types, values) of event pairs."""
        out_t, out_v = types, values
        if self.types:
            out_t = types.copy()
            for old, new in self.types.items():
                out_t[types == old] = new
        if self.values:
            out_v = values.copy()
            for etype, table in self.values.items():
                sel = (types == etype) & (values > 0) & (values < len(table))
                if sel.any():
                    out_v[sel] = table[values[sel]]
        return out_t, out_v

    def template(self, shape: tuple[int, ...]) -> int:
        """Template id of an event line whose type literals are ``shape``."""
        found = self._templates.get(shape)
        if found is None:
            if 3 + len(shape) > WIDTH:
                raise BlockUnreadable(f"an event line with {len(shape)} pairs is too wide")
            fmt = "2:0:1:%d:%d:%d" + "".join(f":{t}:%d" for t in shape)
            found = self._templates[shape] = template(fmt)
        return found


def _event_maps(live: Numbering, canon: Numbering
                ) -> tuple[dict[int, int], dict[int, np.ndarray]]:
    live_specs = registry.event_types(live.values)
    canon_specs = registry.event_types(canon.values)
    canon_type: dict[int, tuple[str, dict[str, int]]] = {}
    by_label: dict[str, list[int]] = {}
    for spec in canon_specs:
        labels = {lab: k for k, lab in spec.values.items()}
        for type_id, desc in spec.types:
            canon_type[type_id] = (desc, labels)
            by_label.setdefault(desc, []).append(type_id)
    types: dict[int, int] = {}
    values: dict[int, np.ndarray] = {}
    for spec in live_specs:
        for type_id, desc in spec.types:
            new = type_id
            if canon_type.get(type_id, ("",))[0] != desc:
                matches = by_label.get(desc, [])
                if len(matches) != 1:
                    raise BlockUnreadable(f"event type {type_id} ({desc}) has no canonical "
                                          "counterpart")
                new = matches[0]
                types[type_id] = new
            if not spec.values:
                continue
            labels = canon_type[new][1] if new in canon_type else {}
            table = np.arange(max(spec.values) + 1, dtype=np.int64)
            for k, lab in spec.values.items():
                if lab not in labels:
                    raise BlockUnreadable(f"value {lab!r} of event type {type_id} has no "
                                          "canonical id")
                table[k] = labels[lab]
            if not np.array_equal(table, np.arange(len(table))):
                values[type_id] = table
    return types, values
