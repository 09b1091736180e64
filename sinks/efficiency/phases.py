"""Phase instances of the efficiency model: each occurrence of a phase name in a process,
numbered in start order, with the span it covers."""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable
from typing import TypeAlias

import numpy as np

from prvstream.sinks.efficiency.parts import Name, grow
from prvstream.sinks.logger import get_logger

__all__ = ["OccSpans", "PhaseInstances", "named_spans", "phase_label", "spans_of"]

log = get_logger(__name__)


#: a trailing step number that makes every occurrence's name distinct (PyTorch's profiler
#: marks steps ``ProfilerStep#0``, ``ProfilerStep#1``, ...)
_NUMBERED = re.compile(r"#\d+$")


#: a process's instances are a shared ``bytes`` up to this many instance ids
_SHORT_HAS = 64
#: distinct such ``bytes`` kept to be shared, at most this many
_HAS_KEPT = 4096

#: a process's occurrence spans (flattened start, end pairs) by phase name: one (name, spans)
#: pair while it has one name (most processes: no dict a process), a dict from its second
OccSpans: TypeAlias = "tuple[str, array[int]] | dict[str, array[int]]"


def spans_of(held: OccSpans | None, name: str) -> array[int] | None:
    """A process's occurrence spans of ``name`` (None: none)."""
    if held is None:
        return None
    if isinstance(held, tuple):
        return held[1] if held[0] == name else None
    return held.get(name)


def named_spans(held: OccSpans | None) -> Iterable[tuple[str, array[int]]]:
    """(phase name, occurrence spans) of a process, in the order its names came."""
    if held is None:
        return ()
    return (held,) if isinstance(held, tuple) else held.items()


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

    def _held_spans(self, proc: tuple[str, int]) -> OccSpans | None:
        """A process's occurrence spans by phase name (None: it has none)."""
        pid = self._process_ids.get(proc)
        return None if pid is None else self._occ_spans[pid]

    def _occurrence(self, proc: tuple[str, int], name: str, start: int, end: int) -> int:
        """Record the next occurrence of ``name`` in ``proc``; return its instance id."""
        nid = self._name_ids.get(name)
        if nid is not None:  # the name's one string, not the report's copy of it
            name = self._names[nid].name
        pid = self._process_ids.get(proc)
        if pid is None:
            spans = array("q")
            pid = self._process_ids[proc] = len(self._processes)
            self._processes.append(proc)
            self._has.append(b"")
            self._occ_spans.append((name, spans))
        else:
            held = self._occ_spans[pid]
            found = spans_of(held, name)
            if found is None:
                found = array("q")
                if isinstance(held, tuple):
                    self._occ_spans[pid] = {held[0]: held[1], name: found}
                else:
                    held[name] = found
            spans = found
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
        spans = spans_of(self._held_spans(proc), name)
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
