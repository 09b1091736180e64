"""The model's internal parts: growing tables, per-report state, the sweep (its devices are
``devices``)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import msgspec
import numpy as np

from prvstream.sinks.base import ReportInfo
from prvstream.sinks.efficiency.devices import Device
from prvstream.sinks.logger import get_logger
from prvstream.sinks.native import OptionalExtension
from prvstream.sinks.summary.encoded import EncodedRecord

__all__ = [
    "CATEGORY",
    "CATEGORY_NCCL_USEFUL",
    "COMM",
    "FIRST_ROWS",
    "GAPS",
    "GAP_NS",
    "K1",
    "K2",
    "K3",
    "K4",
    "NOTE_NAMES",
    "N_MEASURES",
    "OVERLAP",
    "REPEATED",
    "SEGMENTS",
    "USEFUL",
    "WIDTH",
    "Device",
    "Name",
    "Pending",
    "Report",
    "Sweep",
    "grow",
    "note_lines",
    "segments",
]

log = get_logger(__name__)

# columns of a totals vector
USEFUL, COMM, OVERLAP, K1, K2, K3, K4 = range(7)
N_MEASURES = 7
GAPS, GAP_NS = 7, 8
WIDTH = 9
#: ActivityKind -> category: 0 compute kernel, 1 NCCL kernel, 2 memcpy/memset
CATEGORY = np.array([0, 1, 2, 2], dtype=np.int8)
#: the same with NCCL kernels counted as useful work (setting ``nccl_as = "useful"``, as TALP)
CATEGORY_NCCL_USEFUL = np.array([0, 0, 2, 2], dtype=np.int8)
#: first capacity of a growing table (rows)
FIRST_ROWS = 64
#: report ids named in a summary note (the rest are counted)
NOTE_NAMES = 3


def note_lines(notes: dict[str, tuple[int, list[str]]]) -> list[str]:
    """Summary notes: each distinct note once, with the reports it applies to."""
    out = []
    for note, (count, names) in sorted(notes.items()):
        more = f" and {count - len(names)} more" if count > len(names) else ""
        out.append(f"{note} ({', '.join(names)}{more})")
    return out


def grow(arr: np.ndarray, need: int, fill: int = 0, first: int = FIRST_ROWS) -> np.ndarray:
    """``arr`` with at least ``need`` rows, its capacity grown by a quarter (new rows hold
    ``fill``); at least ``first`` rows (per-device tables start at what they need: a job holds
    a table per device, and most stay small). A quarter, not double: the model's tables by
    device grow with a watched job's every report, and their spare room stays resident (np.full
    writes it); still amortized O(1) a row."""
    if len(arr) >= need:
        return arr
    new = np.full((max(need, len(arr) + (len(arr) >> 2), first), *arr.shape[1:]), fill, arr.dtype)
    new[:len(arr)] = arr
    return new


class Name(msgspec.Struct):
    """A phase name: where its occurrences live and the sums its ``phase_total`` row shows."""

    name: str
    #: occurrence -> instance id (-1: none yet)
    instances: np.ndarray = msgspec.field(default_factory=lambda: np.zeros(0, np.int64))
    count: int = 0
    start: int = 0
    end: int = 0
    span: int = 0
    #: the ids of the processes with an occurrence of it, in the order their first came
    #: (each once: no set and int objects a process)
    processes: array[int] = msgspec.field(default_factory=lambda: array("q"))


class Sweep(msgspec.Struct):
    """Per device of the current report: the finalized frontier and intervals still open."""

    lo: int
    idle_since: int | None
    carry_s: np.ndarray = msgspec.field(default_factory=lambda: np.empty(0, np.int64))
    carry_e: np.ndarray = msgspec.field(default_factory=lambda: np.empty(0, np.int64))
    carry_c: np.ndarray = msgspec.field(default_factory=lambda: np.empty(0, np.int8))


class Report(msgspec.Struct):
    info: ReportInfo
    origin: int
    devices: np.ndarray  # local device index -> global device index
    processes: list[tuple[str, int]]
    sweeps: dict[int, Sweep]
    frontier: int
    first: int
    last: int
    #: per process: phase instances that may still receive time, as (start, end, instance id)
    recent: dict[tuple[str, int], list[tuple[int, int, int]]] = msgspec.field(default_factory=dict)
    #: instance ids the report's phases touched (with repeats)
    touched: array[int] = msgspec.field(default_factory=lambda: array("q"))
    #: activity taken but not swept yet: (start, end, global device, category) arrays
    pending: list[tuple[np.ndarray, ...]] = msgspec.field(default_factory=list)
    pending_rows: int = 0
    #: phase names as the model groups them (``ProfilerStep#12`` -> ``ProfilerStep``)
    labels: list[str] = msgspec.field(default_factory=list)
    #: local device index -> pid of its process; (global device, pid, stream) -> the
    #: report's [first, last] activity start there
    pids: np.ndarray = msgspec.field(default_factory=lambda: np.zeros(0, np.int64))
    streams: dict[tuple[int, int, int], list[int]] = msgspec.field(default_factory=dict)
    #: global devices where the report repeats an earlier report's activity: its idle gaps
    #: there count only outside the earlier reports' spans
    repeats: set[int] = msgspec.field(default_factory=set)
    #: the first and last start of the earlier reports on its streams ((1, 0): none), once
    #: asked (``repeats``)
    hull: tuple[int, int] | None = None
    #: (host, pid) -> the report's [first, last] NVTX range start there (``repeats``)
    nvtx: dict[tuple[str, int], list[int]] = msgspec.field(default_factory=dict)


class Pending(msgspec.Struct):
    """What the last report changed; its records are built when ``iter_updates`` runs."""

    cumulative: EncodedRecord
    windows: Sequence[int]
    instances: np.ndarray  # instance ids in (start, name, occurrence) order
    names: list[int]  # phase name ids, by name
    built: dict[tuple[str, int], EncodedRecord]


#: added to a row's category when an earlier report holds it (``repeats``)
REPEATED = 3


#: ``segments`` in one pass (optional: built when a C compiler was there; rows an earlier
#: report holds are counted by the numpy code either way)
SEGMENTS = OptionalExtension("prvstream.sinks.efficiency._overlap", "segments",
                             "efficiency segments")


def segments(s: np.ndarray, e: np.ndarray, c: np.ndarray, lo: int,
             hi: int, *, pure: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                      np.ndarray]:
    """Split [lo, hi) at every interval boundary: edges and, per segment, the running count of
    compute kernels, NCCL kernels and of everything (intervals start at or after ``lo``; at
    least one interval).

    With rows an earlier report holds (categories ``REPEATED`` and up), the counts are rows of
    two: all rows (first), and those rows alone (second)."""
    n = len(s)
    compiled = SEGMENTS.use(pure)
    if compiled is not None and n:
        edges = np.empty(2 * n + 2, np.int64)
        comp, nccl, total = (np.empty(2 * n + 1, np.int64) for _ in range(3))
        m = compiled(np.ascontiguousarray(s, np.int64), np.ascontiguousarray(e, np.int64),
                     np.ascontiguousarray(c, np.int8), int(lo), int(hi), edges, comp, nccl,
                     total)
        if m >= 0:
            return edges[:m + 1], comp[:m], nccl[:m], total[:m]
    eo = np.argsort(e, kind="stable")
    t = np.concatenate((s, e[eo]))
    order = np.argsort(t, kind="stable")  # two sorted runs: a merge
    ts = np.clip(t[order], lo, hi)
    sign = np.where(order < n, 1, -1).astype(np.int64)
    cat = np.concatenate((c, c[eo]))[order]
    last = np.flatnonzero(np.append(ts[1:] != ts[:-1], True))
    edges = ts[last]
    total = np.cumsum(sign)[last]
    if int(c.max(initial=0)) >= REPEATED:
        rep = cat >= REPEATED
        base = cat % REPEATED
        total = np.stack((total, np.cumsum(np.where(rep, sign, 0))[last]))
        comp = np.stack((np.cumsum(np.where(base == 0, sign, 0))[last],
                         np.cumsum(np.where(cat == REPEATED, sign, 0))[last]))
        nccl = np.stack((np.cumsum(np.where(base == 1, sign, 0))[last],
                         np.cumsum(np.where(cat == REPEATED + 1, sign, 0))[last]))
    else:
        comp = np.cumsum(np.where(cat == 0, sign, 0))[last]
        nccl = np.cumsum(np.where(cat == 1, sign, 0))[last]
    if edges[-1] == hi:  # boundaries at hi close the last segment
        edges, total, comp, nccl = edges[:-1], total[..., :-1], comp[..., :-1], nccl[..., :-1]
    if not len(edges) or edges[0] > lo:  # nothing starts at lo: an empty first segment
        zero = np.zeros((*total.shape[:-1], 1), np.int64)
        edges = np.concatenate(([lo], edges))
        total, comp, nccl = (np.concatenate((zero, x), axis=-1) for x in (total, comp, nccl))
    return np.append(edges, hi), comp, nccl, total
