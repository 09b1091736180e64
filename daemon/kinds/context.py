"""What a kind's converter sees of one report and of the trace it goes into (``ReportContext``):
objects and value ids, sequence numbers, and the per-thread state that spans chunks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar, cast

import msgspec
import numpy as np

from prvstream.daemon.kinds.base import Names
from prvstream.sinks.arrays import unique_inverse
from prvstream.sinks.logger import get_logger

__all__ = [
    "Ids",
    "ReportContext",
    "ThreadKey",
    "cpu_key",
    "factorize",
    "gpu_key",
    "metrics_key",
    "metrics_name",
    "pid_of",
    "process_of",
    "stream_name",
    "tid_of",
]

log = get_logger(__name__)

#: (0, tid, 0) for a CPU thread, (1, device, stream) for a GPU stream, (2, gpu, 0) for a
#: GPU's metrics
ThreadKey = tuple[int, int, int]

_ID_BITS = 24
_ID_MASK = (1 << _ID_BITS) - 1


#: a globalTid/globalPid, or an array of them
_Gtid = TypeVar("_Gtid", int, np.ndarray)


def pid_of(gtid: _Gtid) -> _Gtid:
    """OS pid encoded in a globalTid/globalPid."""
    return (gtid >> _ID_BITS) & _ID_MASK


def tid_of(gtid: _Gtid) -> _Gtid:
    """OS tid encoded in a globalTid."""
    return gtid & _ID_MASK


def process_of(gtid: _Gtid) -> _Gtid:
    """The globalPid a globalTid belongs to (tid bits cleared, host bits kept)."""
    return gtid & ~_ID_MASK


def cpu_key(tid: int) -> ThreadKey:
    return (0, tid, 0)


def gpu_key(device: int, stream: int) -> ThreadKey:
    return (1, device, stream)


def metrics_key(gpu: int) -> ThreadKey:
    """Thread key of a GPU's metrics thread (after the CPU threads and the streams)."""
    return (2, gpu, 0)


def metrics_name(gpu: int) -> str:
    return f"Metrics GPU{gpu}"


def stream_name(device: int, stream: int) -> str:
    return f"CUDA-D{device}.S{stream}" if stream >= 0 else f"CUDA-D{device}.sync"


class Ids(Protocol):
    """The trace's ids (``stream.numbering.Numbering``): tasks, threads, values."""

    def task(self, host: str, pid: int, name: str = "", rank: int | None = None) -> int: ...

    def thread(self, task_id: int, key: ThreadKey, name: str) -> int: ...

    def value(self, group: str, label: str) -> int: ...

    def values_of(self, group: str, labels: Sequence[str]) -> list[int]: ...


#: ``state_end`` of a thread that showed no state yet
_NO_STATE = int(np.iinfo(np.int64).min)


def factorize(chunk: np.ndarray, columns: tuple[str, ...]
              ) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """Distinct combinations of integer columns and each row's index into them.

    Much faster than ``np.unique`` on a structured view: each column is factorized on its own
    and the small codes are combined into one integer.
    """
    n = len(chunk)
    if not n:
        return [], np.zeros(0, dtype=np.intp)
    # a column of one value adds nothing to the code (its inverse is all zeros): only the
    # columns that vary are combined, and one that varies alone is its own code
    code: np.ndarray | None = None
    varying = width = 0
    uniques = []
    for name in columns:
        values, inverse = unique_inverse(chunk[name])
        uniques.append(values.tolist())
        if len(values) > 1:
            code = inverse if code is None else code * len(values) + inverse
            varying, width = varying + 1, len(values)
    if code is None:  # one combination
        return [tuple(u[0] for u in uniques)], np.zeros(n, dtype=np.intp)
    if varying == 1:  # one column's codes: each of them present, in order
        codes, inverse = list(range(width)), code
    else:
        distinct, inverse = unique_inverse(code)
        codes = distinct.tolist()
    combos: list[tuple[int, ...]] = []
    for c in codes:
        parts = []
        for values in reversed(uniques):
            c, r = divmod(c, len(values))
            parts.append(values[r])
        combos.append(tuple(reversed(parts)))
    return combos, inverse


def _no_label(names: Names, group: str, sid: int) -> str:
    raise KeyError(group)


class ReportContext(msgspec.Struct):
    """Everything the converters need about one report and the trace it goes into."""

    names: Names
    ids: Ids
    host: str
    #: add to a session-clock timestamp to get trace-relative ns
    offset: int
    #: canonical index of the report in the trace (sort tie-breaker)
    report_index: int
    #: trace-relative end of the report (unterminated NVTX ranges end here)
    end_rel: int
    #: globalPid -> index into ReportInfo.processes
    process_index: dict[int, int]
    #: (globalPid, device) -> index into ReportInfo.devices
    device_index: dict[tuple[int, int], int]
    #: the phase pattern (``Settings.phase_pattern``), compiled where NVTX ranges are named
    phase_pattern: str
    #: (names, value group, id) -> label (``registry.value_label``)
    value_label: Callable[[Names, str, int], str] = _no_label
    phase_names: list[str] = msgspec.field(default_factory=list)
    thread_names: dict[int, str] = msgspec.field(default_factory=dict)
    nvtx_domain_names: dict[int, str] = msgspec.field(default_factory=dict)
    #: GPU -> globalPid of the process whose thread carries that GPU's metrics
    metric_owner: dict[int, int] = msgspec.field(default_factory=dict)
    #: (globalPid, stream, device as written) -> the device synchronization rows belong to
    sync_devices: dict[tuple[int, ...], int] = msgspec.field(default_factory=dict)
    #: trace-relative first record of the report (host threads are Running from there)
    start_rel: int = 0
    #: (task, thread) of each CPU thread that gets host states -> time its states reach
    #: (``kinds.hoststates``)
    host_pending: dict[tuple[int, int], int] = msgspec.field(default_factory=dict)
    #: host threads whose pending time is a grid cut, not the end of a call: their next
    #: Running piece continues the previous one (flagged in its key, ``kinds.hoststates``)
    host_cut: set[tuple[int, int]] = msgspec.field(default_factory=set)
    #: (task, thread) -> sorted trace-relative spans where earlier reports give that thread
    #: host states: this report's host states there yield (``stream.claims``)
    host_claimed: dict[tuple[int, int], list[tuple[int, int]]] = msgspec.field(
        default_factory=dict)
    #: (kind, task, thread) -> end of the last state written there (states never overlap)
    _state_end: dict[tuple[str, int, int], int] = msgspec.field(default_factory=dict)
    #: the times trusted on the export's clock (``ExportMeta.bound_lo_ns/bound_hi_ns``)
    bound: tuple[int, int] = (-(2**63), 2**63 - 1)
    #: rows dropped or clamped, by ``"<kind> <what>"`` (``kinds.bounds``)
    hostile: Counter[str] = msgspec.field(default_factory=Counter)
    _cpu: dict[int, tuple[int, int]] = msgspec.field(default_factory=dict)
    _gpu: dict[tuple[int, int, int], tuple[int, int]] = msgspec.field(default_factory=dict)
    _task: dict[int, int] = msgspec.field(default_factory=dict)
    _labels: dict[tuple[str, int], str] = msgspec.field(default_factory=dict)
    _nvtx_stacks: dict[tuple[int, int], list[tuple[int, int]]] = msgspec.field(
        default_factory=dict)
    _phase_index: dict[str, int] = msgspec.field(default_factory=dict)
    _seq: dict[str, int] = msgspec.field(default_factory=dict)

    # -- objects ---------------------------------------------------------------------------
    def task_of(self, gpid: int) -> int:
        task = self._task.get(gpid)
        if task is None:
            task = self.ids.task(self.host, pid_of(gpid))
            self._task[gpid] = task
        return task

    def bind_task(self, gpid: int, task: int) -> None:
        self._task[gpid] = task

    def cpu_objects(self, gtids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(task, thread) arrays for globalTids, registering unseen threads."""
        uniq, inverse = unique_inverse(gtids)
        tasks = np.empty(len(uniq), dtype=np.int64)
        threads = np.empty(len(uniq), dtype=np.int64)
        for i, g in enumerate(uniq.tolist()):
            found = self._cpu.get(g)
            if found is None:
                task = self.task_of(process_of(g))
                tid = tid_of(g)
                name = self.thread_names.get(g, "thread")
                found = (task, self.ids.thread(task, cpu_key(tid), f"{name} {tid}"))
                self._cpu[g] = found
            tasks[i], threads[i] = found
        return tasks[inverse], threads[inverse]

    def gpu_objects(self, chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(task, thread) arrays for (globalPid, device, stream) columns."""
        uniq, inverse = factorize(chunk, ("gpid", "device", "stream"))
        tasks = np.empty(len(uniq), dtype=np.int64)
        threads = np.empty(len(uniq), dtype=np.int64)
        for i, (g, d, s) in enumerate(uniq):
            found = self._gpu.get((g, d, s))
            if found is None:
                task = self.task_of(g)
                found = (task, self.ids.thread(task, gpu_key(d, s), stream_name(d, s)))
                self._gpu[(g, d, s)] = found
            tasks[i], threads[i] = found
        return tasks[inverse], threads[inverse]

    def metrics_thread(self, task: int, gpu: int) -> int:
        """The thread carrying ``gpu``'s metric samples in ``task``."""
        return self.ids.thread(task, metrics_key(gpu), metrics_name(gpu))

    # -- values ----------------------------------------------------------------------------
    def label(self, group: str, sid: int) -> str:
        key = (group, sid)
        found = self._labels.get(key)
        if found is None:
            found = self.value_label(self.names, group, sid)
            self._labels[key] = found
        return found

    def know_labels(self, labels: Mapping[tuple[str, int], str]) -> None:
        """Labels made already, by (value group, id): the plan's, each what ``value_label``
        gives (``pipeline.value_labels_of``), so ``label`` does not make them again."""
        self._labels.update(labels)

    def value_id(self, group: str, label: str) -> int:
        """The event value of ``label`` in value group ``group`` (registered when new)."""
        return self.ids.value(group, label)

    def values(self, group: str, ids: np.ndarray) -> tuple[np.ndarray, list[str], np.ndarray]:
        """(value ids per row, labels of the unique ids, inverse index) for string ids."""
        uniq, inverse = unique_inverse(ids)
        found = uniq.tolist()
        known = self._labels
        todo = [u for u in found if u >= 0 and (group, u) not in known]
        if todo:  # their texts in one look-up
            self.names.strings(todo)
        get = known.get
        made = [get((group, u)) for u in found]
        labels = (cast(list[str], made) if None not in made else
                  [self.label(group, u) if lab is None else lab
                   for u, lab in zip(found, made, strict=True)])
        mapped = np.array(self.ids.values_of(group, labels), dtype=np.int64)
        return mapped[inverse], labels, inverse

    def next_seq(self, kind: str, n: int) -> np.ndarray:
        start = self._seq.get(kind, 0)
        self._seq[kind] = start + n
        return np.arange(start, start + n, dtype=np.int64)

    def phase_id(self, name: str) -> int:
        found = self._phase_index.get(name)
        if found is None:
            found = len(self.phase_names)
            self.phase_names.append(name)
            self._phase_index[name] = found
        return found

    # -- state across chunks -----------------------------------------------------------------
    def state_end(self, kind: str, task: int, thread: int) -> int:
        """End of the last state ``kind`` showed on (task, thread) (int64 min when none)."""
        return self._state_end.get((kind, task, thread), _NO_STATE)

    def set_state_end(self, kind: str, task: int, thread: int, end: int) -> None:
        self._state_end[(kind, task, thread)] = end

    def nvtx_stack(self, gtid: int, domain: int) -> list[tuple[int, int]]:
        """The open push/pop ranges (end, value) of a thread in a domain, innermost last; the
        caller pops and pushes (the stack lives as long as the report)."""
        return self._nvtx_stacks.setdefault((gtid, domain), [])
