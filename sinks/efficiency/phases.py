"""Phase instances of the efficiency model: each occurrence of a phase name in a process,
numbered in start order, with the span it covers."""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable
from typing import TypeAlias

import numpy as np

from prvstream.sinks.efficiency.parts import Name, grow
from prvstream.sinks.efficiency.ragged import Ragged
from prvstream.sinks.logger import get_logger

__all__ = ["OccSpans", "PhaseInstances", "phase_label"]

log = get_logger(__name__)


#: a trailing step number that makes every occurrence's name distinct (PyTorch's profiler
#: marks steps ``ProfilerStep#0``, ``ProfilerStep#1``, ...)
_NUMBERED = re.compile(r"#\d+$")


#: a process's instances are a shared ``bytes`` up to this many instance ids
_SHORT_HAS = 64
#: distinct such ``bytes`` kept to be shared, at most this many
_HAS_KEPT = 4096

#: a process's occurrence spans (flattened start, end pairs) by phase name: while it has one
#: name (most processes), the name, its spans the process's list of ``_occ_log`` (no dict,
#: tuple or array a process); a dict of arrays from its second name
OccSpans: TypeAlias = "str | dict[str, array[int]]"


def phase_label(name: str) -> str:
    """The phase name occurrences are grouped under: without a trailing ``#N``."""
    return _NUMBERED.sub("", name) or name


class PhaseInstances:
    """Numbers phase occurrences and keeps their instance table (mixed into ``EfficiencyModel``)."""

    _n_instances: int
    _i_name: np.ndarray
    _i_occ: np.ndarray
    _i_start: np.ndarray
    _i_end: np.ndarray
    _names: list[Name]
    _name_ids: dict[str, int]
    _process_ids: dict[tuple[str, int], int]
    _processes: list[tuple[str, int]]
    _has: list[bytes | bytearray]
    _has_kept: dict[bytes, bytes]
    #: by process id (``_process_ids``): its occurrence spans by phase name
    _occ_spans: list[OccSpans]
    #: by process id: the occurrence spans of a process's one phase name
    _occ_log: Ragged

    def _spans_of(self, pid: int, name: str) -> array[int] | None:
        """Process ``pid``'s occurrence spans of ``name`` (None: none; a copy while it has
        one name)."""
        held = self._occ_spans[pid]
        if isinstance(held, str):
            return self._occ_log.get(pid) if held == name else None
        return held.get(name)

    def _occ_count(self, pid: int, name: str) -> int:
        """How many occurrences of ``name`` process ``pid`` has (-1: the name is not its)."""
        held = self._occ_spans[pid]
        if isinstance(held, str):
            return self._occ_log.size(pid) // 2 if held == name else -1
        spans = held.get(name)
        return -1 if spans is None else len(spans) // 2

    def _occ_span(self, pid: int, name: str, occ: int) -> tuple[int, int]:
        """(start, end) of occurrence ``occ`` of ``name`` in process ``pid`` (it has it): no
        copy of the process's spans."""
        held = self._occ_spans[pid]
        if isinstance(held, str):
            return self._occ_log.item(pid, 2 * occ), self._occ_log.item(pid, 2 * occ + 1)
        spans = held[name]
        return spans[2 * occ], spans[2 * occ + 1]

    def _named_spans(self, pid: int) -> Iterable[tuple[str, array[int]]]:
        """(phase name, occurrence spans) of process ``pid``, in the order its names came."""
        held = self._occ_spans[pid]
        if isinstance(held, str):
            return ((held, self._occ_log.get(pid)),)
        return held.items()

    def _held_spans(self, proc: tuple[str, int]) -> Iterable[tuple[str, array[int]]]:
        """(phase name, occurrence spans) of a process (none: it has none)."""
        pid = self._process_ids.get(proc)
        return () if pid is None else self._named_spans(pid)

    def _occurrence(self, proc: tuple[str, int], name: str, start: int, end: int) -> int:
        """Record the next occurrence of ``name`` in ``proc``; return its instance id."""
        nid = self._name_ids.get(name)
        if nid is not None:  # the name's one string, not the report's copy of it
            name = self._names[nid].name
        pid = self._process_ids.get(proc)
        if pid is None:
            pid = self._process_ids[proc] = len(self._processes)
            self._processes.append(proc)
            self._has.append(b"")
            self._occ_spans.append(name)
            self._occ_log.add_owner()  # the process's list: its id
        held = self._occ_spans[pid]
        if isinstance(held, str) and held == name:
            occ = self._occ_log.size(pid) // 2
            self._occ_log.extend(pid, (start, end))
        else:  # a second name: a dict of arrays (its list in the log is left as it is)
            if isinstance(held, str):
                held = self._occ_spans[pid] = {held: self._occ_log.get(pid)}
            spans = held.get(name)
            if spans is None:
                spans = held[name] = array("q")
            occ = len(spans) // 2
            spans += array("q", (start, end))
        i = self._instance(name, occ, start, end)
        if not occ:  # the process's first occurrence of the name
            self._names[int(self._i_name[i])].processes.append(pid)
        has = self._has[pid]
        if len(has) <= i or not has[i]:
            self._has[pid] = self._with_instance(has, i)
        return i

    def _with_instance(self, has: bytes | bytearray, i: int) -> bytes | bytearray:
        """``has`` with instance ``i`` set (a byte an instance id, doubling). Up to
        ``_SHORT_HAS`` bytes it is a ``bytes`` kept once for every process with the same
        instances (most processes of a job of small reports have the same few); longer, a
        ``bytearray`` of its own, set in place."""
        grown = has if isinstance(has, bytearray) else bytearray(has)
        if len(grown) <= i:
            grown.extend(bytes(max(i + 1, 2 * len(grown), 8) - len(grown)))
        grown[i] = 1
        if len(grown) > _SHORT_HAS:
            return grown
        frozen = bytes(grown)
        kept = self._has_kept.get(frozen)
        if kept is None:
            kept = frozen
            if len(self._has_kept) < _HAS_KEPT:
                self._has_kept[frozen] = frozen
        return kept

    def _held_occurrence(self, proc: tuple[str, int], name: str, start: int, end: int,
                         held: bytes | None) -> int | None:
        """The instance of an occurrence of ``name`` in ``proc`` an earlier report holds
        already, with the same start and end, when ``start`` lies in one of ``held``, the
        earlier reports' spans of NVTX range starts (``repeats.NvtxSpans``: flattened pairs
        of int64 as bytes; overlapping capture ranges); else None."""
        if not held:
            return None
        earlier = memoryview(held).cast("q")
        if not any(earlier[j] <= start <= earlier[j + 1] for j in range(0, len(earlier), 2)):
            return None
        pid = self._process_ids.get(proc)
        spans = None if pid is None else self._spans_of(pid, name)
        if not spans:
            return None
        flat = np.frombuffer(spans, dtype=np.int64)
        found = np.flatnonzero((flat[0::2] == start) & (flat[1::2] == end))
        del flat  # no view of ``spans`` outlives the call (it grows)
        if not len(found):
            return None
        return int(self._names[self._name_ids[name]].instances[int(found[0])])

    def _instance(self, name: str, occ: int, start: int, end: int) -> int:
        """The id of phase instance (name, occ), created or widened to cover [start, end)."""
        nid = self._name_ids.get(name)
        if nid is None:
            nid = self._name_ids[name] = len(self._names)
            self._names.append(Name(name))
        nm = self._names[nid]
        nm.instances = grow(nm.instances, occ + 1, fill=-1)
        i = int(nm.instances[occ])
        if i < 0:
            i = nm.instances[occ] = self._n_instances
            self._n_instances += 1
            need = self._n_instances
            self._i_name = grow(self._i_name, need)
            self._i_occ = grow(self._i_occ, need)
            self._i_start = grow(self._i_start, need)
            self._i_end = grow(self._i_end, need)
            self._i_name[i], self._i_occ[i] = nid, occ
            self._i_start[i], self._i_end[i] = start, end
            nm.start = start if not nm.count else min(nm.start, start)
            nm.end = end if not nm.count else max(nm.end, end)
            nm.count += 1
            nm.span += end - start
            return i
        old_s, old_e = int(self._i_start[i]), int(self._i_end[i])
        new_s, new_e = min(old_s, start), max(old_e, end)
        if (new_s, new_e) != (old_s, old_e):
            self._i_start[i], self._i_end[i] = new_s, new_e
            nm.span += (new_e - new_s) - (old_e - old_s)
            nm.start, nm.end = min(nm.start, new_s), max(nm.end, new_e)
        return i
