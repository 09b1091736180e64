"""Every host process's sample over an interval at once, as int64 columns: what
``HostTotals.metrics`` measures one process at a time (its captured time, its call sums, its
host threads' count and captured time) read from the model's logs with numpy, so that a record
of a job with thousands of host processes costs a few array passes, not a few Python calls a
process (issue 11). A process with more than one span of one tag is measured by
``metrics.covered`` as before; values ``metrics.exact_columns`` refuses leave the whole
record to the one-process-at-a-time path (the metrics' divisions must be Python's)."""

from __future__ import annotations

import msgspec
import numpy as np

from prvstream.sinks.efficiency.metrics import covered, exact_columns
from prvstream.sinks.logger import get_logger

__all__ = ["MPI_SPAN", "SPAN", "TIMES", "HostColumns", "measured", "parse_logs",
           "spans_of", "thread_sums", "union_lengths"]

log = get_logger(__name__)

#: ``HostTotals.log`` tags of a process's spans (a thread's tag is its OS tid, >= 0)
SPAN, MPI_SPAN = -1, -2
#: the largest magnitude of a span's times: a span clipped to [-2**62, 2**62) then has a
#: length int64 holds
TIMES = 1 << 61
#: most host threads of one process whose captured ns are summed in int64 (2**52 each)
_THREADS = 1 << 10


class HostColumns(msgspec.Struct, frozen=True):
    """The sampled processes' ids, in (host, pid) order, and their columns: captured ns,
    runtime and MPI ns as a process, the number of host threads captured there with their
    summed captured, runtime and MPI ns (``HostSample``'s fields after rank)."""

    ids: np.ndarray
    captured: np.ndarray
    runtime: np.ndarray
    mpi: np.ndarray
    threads: np.ndarray
    thread_captured: np.ndarray
    thread_runtime: np.ndarray
    thread_mpi: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def exact(self) -> bool:
        """Whether the columns' ratios are Python's divisions of its integers
        (``metrics.exact_columns``: every value in [0, 2**52), their sums inside int64)."""
        return exact_columns(0, self.captured, self.runtime, self.mpi, self.thread_captured,
                             self.thread_runtime, self.thread_mpi)

    def sample_rows(self, lo: int, hi: int) -> list[tuple[int, ...]]:
        """Rows ``lo``..``hi``: (id, captured, runtime, MPI, threads, thread captured, thread
        runtime, thread MPI)."""
        return list(zip(*(c[lo:hi].tolist() for c in (
            self.ids, self.captured, self.runtime, self.mpi, self.threads,
            self.thread_captured, self.thread_runtime, self.thread_mpi)), strict=True))


def parse_logs(data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, first: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The (owner, start, end, tag) of every tag of the logs' span groups: owner ``j``'s log
    is ``data[starts[j]:starts[j] + sizes[j]]``, ``first`` values of sums then groups of
    (start, end, k, k tags); owners are their indices in ``starts``. In owner order, then in
    the order of the groups and of their tags."""
    pos = starts + first
    stop = starts + sizes
    owners, lows, highs, tags = [], [], [], []
    live = np.flatnonzero(pos < stop)
    while len(live):
        p = pos[live]
        s, e, k = data[p], data[p + 1], data[p + 2]
        for j in range(int(k.max()) if len(k) else 0):
            has = k > j
            owners.append(live[has])
            lows.append(s[has])
            highs.append(e[has])
            tags.append(data[p[has] + 3 + j])
        pos[live] = p + 3 + k
        live = live[pos[live] < stop[live]]
    if not owners:
        empty = np.empty(0, np.int64)
        return empty, empty, empty, empty
    owner = np.concatenate(owners)
    order = np.argsort(owner, kind="stable")  # owner order; groups and tags kept in order
    return (owner[order], np.concatenate(lows)[order], np.concatenate(highs)[order],
            np.concatenate(tags)[order])


def union_lengths(group: np.ndarray, start: np.ndarray, end: np.ndarray, groups: int,
                  lo: int | np.ndarray, hi: int | np.ndarray) -> np.ndarray:
    """``metrics.covered`` of each group's spans inside [lo, hi): int64 by group id
    (0..groups-1); ``lo`` and ``hi`` are one interval, or each span's (the same for every
    span of a group). A group with one span inside is measured in numpy, one with several by
    ``covered``, its spans in the order given."""
    out = np.zeros(groups, np.int64)
    if not len(group):
        return out
    a, b = np.maximum(start, lo), np.minimum(end, hi)
    inside = b > a
    count = np.bincount(group[inside], minlength=groups)
    alone = inside & (count[group] == 1)
    out[group[alone]] = (b - a)[alone]
    several = np.flatnonzero(count > 1)
    if len(several):
        of = np.isin(group, several)
        g, s, e = group[of].tolist(), start[of].tolist(), end[of].tolist()
        bounds = list(zip(np.broadcast_to(lo, group.shape)[of].tolist(),
                          np.broadcast_to(hi, group.shape)[of].tolist(), strict=True))
        spans: dict[int, list[tuple[int, int]]] = {}
        within: dict[int, tuple[int, int]] = {}
        for key, x, y, bound in zip(g, s, e, bounds, strict=True):
            spans.setdefault(key, []).append((x, y))
            within[key] = bound
        for key, found in spans.items():
            out[key] = covered(found, *within[key])
    return out


def group_codes(owner: np.ndarray, tag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each (owner, tag) pair's group id (0..n-1, in owner then tag order) and each group's
    owner."""
    if not len(owner):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.lexsort((tag, owner))
    o, t = owner[order], tag[order]
    new = np.ones(len(o), bool)
    new[1:] = (o[1:] != o[:-1]) | (t[1:] != t[:-1])
    ids_sorted = np.cumsum(new) - 1
    ids = np.empty(len(o), np.int64)
    ids[order] = ids_sorted
    return ids, o[new]


def thread_sums(owner: np.ndarray, tag: np.ndarray, start: np.ndarray, end: np.ndarray,
                owners: int, lo: int | np.ndarray, hi: int | np.ndarray
                ) -> tuple[np.ndarray, np.ndarray] | None:
    """Per owner: how many of its threads (tags >= 0) are captured inside [lo, hi) (one
    interval, or each span's as ``union_lengths``), and the sum of their captured ns there;
    None where a sum could leave int64 (an owner with more than ``_THREADS`` threads)."""
    thread = tag >= 0
    ids, owner_of = group_codes(owner[thread], tag[thread])
    if len(owner_of) and int(np.bincount(owner_of).max()) > _THREADS:
        return None
    lengths = union_lengths(ids, start[thread], end[thread], len(owner_of), _part(lo, thread),
                            _part(hi, thread))
    count = np.zeros(owners, np.int64)
    np.add.at(count, owner_of[lengths > 0], 1)
    total = np.zeros(owners, np.int64)
    np.add.at(total, owner_of, lengths)
    return count, total


def spans_of(owner: np.ndarray, of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For items ``of`` (each an owner index), every (item, span) pair of the owner's spans
    (``owner``: each span's owner, sorted): each pair's item and span index, item by item,
    each item's spans in order."""
    count = np.bincount(owner, minlength=int(of.max()) + 1 if len(of) else 0)
    first = np.cumsum(count) - count
    n = count[of]
    item = np.repeat(np.arange(len(of)), n)
    span = np.repeat(first[of], n) + np.arange(len(item)) - np.repeat(np.cumsum(n) - n, n)
    return item, span


def measured(owner: np.ndarray, tag: np.ndarray, lo: np.ndarray, hi: np.ndarray, owners: int,
             start: int | np.ndarray, end: int | np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool] | None:
    """Per owner, from its tagged spans (``parse_logs``'s, or one of them a pair): its captured
    ns inside [start, end) (its ``SPAN`` spans' union), how many of its threads are captured
    there and their ns; and whether an owner captured there has an ``MPI_SPAN`` span reaching
    inside. ``start`` and ``end``: one interval, or each span's. None where the columns
    cannot hold them (span times past ``TIMES``, an owner of too many threads)."""
    if len(lo) and (int(np.abs(lo).max()) > TIMES or int(np.abs(hi).max()) > TIMES):
        return None
    own = tag == SPAN
    captured = union_lengths(owner[own], lo[own], hi[own], owners, _part(start, own),
                             _part(end, own))
    threads = thread_sums(owner, tag, lo, hi, owners, start, end)
    if threads is None:
        return None
    count, thread_captured = threads
    mpi = (tag == MPI_SPAN) & ((captured > 0) | (count > 0))[owner]
    any_mpi = bool(np.any(np.minimum(hi[mpi], _part(end, mpi))
                          > np.maximum(lo[mpi], _part(start, mpi))))
    return captured, count, thread_captured, any_mpi


def _part(bound: int | np.ndarray, sel: np.ndarray) -> int | np.ndarray:
    return bound if isinstance(bound, int) else bound[sel]
