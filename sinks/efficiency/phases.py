"""Phase instances of the efficiency model: each occurrence of a phase name in a process,
numbered in start order, with the span it covers."""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable, Sequence

import numpy as np

from prvstream.sinks.efficiency.parts import Name, grow
from prvstream.sinks.efficiency.processes import ProcessTable
from prvstream.sinks.efficiency.ragged import Ragged
from prvstream.sinks.logger import get_logger
from prvstream.sinks.narrowcols import extended, set_item

__all__ = ["PhaseInstances", "phase_label"]

log = get_logger(__name__)


#: a trailing step number that makes every occurrence's name distinct (PyTorch's profiler
#: marks steps ``ProfilerStep#0``, ``ProfilerStep#1``, ...)
_NUMBERED = re.compile(r"#\d+$")


#: a process's instances are a shared ``bytes`` up to this many instance ids
_SHORT_HAS = 64
#: distinct such ``bytes`` kept to be shared, at most this many
_HAS_KEPT = 4096

#: ``_occ_name`` of a process without phase occurrences, and of one with several names
_NO_NAME, _NAMES = -1, -2


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
    #: the model's processes (``ProcessTable``): a process's columns here are by its id
    _procs: ProcessTable
    #: by process id: a byte per instance id, 1 where it has that instance (ids past the
    #: list's end: none)
    _has: list[bytes | bytearray]
    _has_kept: dict[bytes, bytes]
    #: by process id: the name id of its one phase name, ``_NO_NAME`` or ``_NAMES``
    _occ_name: array[int]
    #: by process id with ``_NAMES``: its occurrence spans by phase name
    _occ_names: dict[int, dict[str, array[int]]]
    #: by process id: the occurrence spans (start, end pairs) of a process's one phase name
    _occ_log: Ragged
    #: processes with phase occurrences
    _phase_procs: int

    def _name_of(self, pid: int) -> int:
        return self._occ_name[pid] if pid < len(self._occ_name) else _NO_NAME

    def _spans_of(self, pid: int, name: str) -> array[int] | None:
        """Process ``pid``'s occurrence spans of ``name`` (None: none; a copy while it has
        one name)."""
        nid = self._name_of(pid)
        if nid == _NAMES:
            return self._occ_names[pid].get(name)
        return self._occ_log.get(pid) if nid >= 0 and self._names[nid].name == name else None

    def _occ_count(self, pid: int, name: str) -> int:
        """How many occurrences of ``name`` process ``pid`` has (-1: the name is not its)."""
        nid = self._name_of(pid)
        if nid == _NAMES:
            spans = self._occ_names[pid].get(name)
            return -1 if spans is None else len(spans) // 2
        return self._occ_log.size(pid) // 2 if nid >= 0 and self._names[nid].name == name \
            else -1

    def _occ_span(self, pid: int, name: str, occ: int) -> tuple[int, int]:
        """(start, end) of occurrence ``occ`` of ``name`` in process ``pid`` (it has it): no
        copy of the process's spans."""
        if self._name_of(pid) != _NAMES:
            return self._occ_log.item(pid, 2 * occ), self._occ_log.item(pid, 2 * occ + 1)
        spans = self._occ_names[pid][name]
        return spans[2 * occ], spans[2 * occ + 1]

    def _named_spans(self, pid: int) -> Iterable[tuple[str, array[int]]]:
        """(phase name, occurrence spans) of process ``pid``, in the order its names came."""
        nid = self._name_of(pid)
        if nid == _NAMES:
            return self._occ_names[pid].items()
        return () if nid < 0 else ((self._names[nid].name, self._occ_log.get(pid)),)

    def _phase_processes(self) -> array[int]:
        """The ids of the processes with phase occurrences, in (host, pid) order."""
        return self._procs.in_key_order(
            p for p, nid in enumerate(self._occ_name) if nid != _NO_NAME)

    def _has_phases(self, proc: tuple[str, int]) -> bool:
        pid = self._procs.find(proc[0], proc[1])
        return pid is not None and self._name_of(pid) != _NO_NAME

    def _held_spans(self, proc: tuple[str, int]) -> Iterable[tuple[str, array[int]]]:
        """(phase name, occurrence spans) of a process (none: it has none)."""
        pid = self._procs.find(proc[0], proc[1])
        return () if pid is None else self._named_spans(pid)

    def _occurrence(self, proc: tuple[str, int], name: str, start: int, end: int) -> int:
        """Record the next occurrence of ``name`` in ``proc``; return its instance id."""
        nid = self._name_id(name)
        name = self._names[nid].name  # the name's one string, not the report's copy of it
        pid = self._procs.add(proc[0], proc[1])
        if pid >= len(self._occ_name):
            self._occ_name = extended(self._occ_name,
                                      (_NO_NAME,) * (pid + 1 - len(self._occ_name)))
        while len(self._occ_log) <= pid:
            self._occ_log.add_owner()  # the process's list: its id
        held = self._occ_name[pid]
        if held == _NO_NAME:
            held = nid
            self._occ_name = set_item(self._occ_name, pid, nid)
            self._phase_procs += 1
        if held == nid:
            occ = self._occ_log.size(pid) // 2
            self._occ_log.extend(pid, (start, end))
        else:  # a second name: a dict of arrays (its list in the log is left as it is)
            if held >= 0:
                self._occ_name[pid] = _NAMES
                self._occ_names[pid] = {self._names[held].name: self._occ_log.get(pid)}
            named = self._occ_names[pid]
            spans = named.get(name)
            if spans is None:
                spans = named[name] = array("q")
            occ = len(spans) // 2
            spans += array("q", (start, end))
        i = self._instance(name, occ, start, end)
        if not occ:  # the process's first occurrence of the name
            self._names[int(self._i_name[i])].processes.append(pid)
        if len(self._has) <= pid:
            self._has.extend([b""] * (pid + 1 - len(self._has)))
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
                         held: Sequence[int] | None) -> int | None:
        """The instance of an occurrence of ``name`` in ``proc`` an earlier report holds
        already, with the same start and end, when ``start`` lies in one of ``held``, the
        earlier reports' spans of NVTX range starts (``repeats.NvtxSpans``: flattened pairs;
        overlapping capture ranges); else None."""
        if not held:
            return None
        if not any(held[j] <= start <= held[j + 1] for j in range(0, len(held), 2)):
            return None
        pid = self._procs.find(proc[0], proc[1])
        spans = None if pid is None else self._spans_of(pid, name)
        if not spans:
            return None
        flat = np.frombuffer(spans, dtype=np.int64)
        found = np.flatnonzero((flat[0::2] == start) & (flat[1::2] == end))
        del flat  # no view of ``spans`` outlives the call (it grows)
        if not len(found):
            return None
        return int(self._names[self._name_ids[name]].instances[int(found[0])])

    def _name_id(self, name: str) -> int:
        """The id of phase name ``name`` (added when new)."""
        nid = self._name_ids.get(name)
        if nid is None:
            nid = self._name_ids[name] = len(self._names)
            self._names.append(Name(name))
        return nid

    def _instance(self, name: str, occ: int, start: int, end: int) -> int:
        """The id of phase instance (name, occ), created or widened to cover [start, end)."""
        nid = self._name_id(name)
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
