"""Host-state claims: the span over which each report gives a CPU thread host states, so a
later report of the same process yields where capture ranges overlap (``kinds.hoststates``).

A claim is (host, pid, tid, wall start, wall end). Reports are ordered canonically (batch,
Dask) or by arrival (live); a report's host states on a thread stay outside the spans of the
earlier reports that claim that thread, so two reports never write overlapping states on one
row. The efficiency model does the same for the host time it counts (``efficiency.host``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from prvstream.daemon.kinds.context import pid_of, tid_of
from prvstream.sinks.logger import get_logger

if TYPE_CHECKING:
    from prvstream.daemon.stream.pipeline import PreparedReport

__all__ = ["Claim", "ClaimBook", "earlier_claims", "host_claims", "overlapping",
           "relative_spans"]

log = get_logger(__name__)

#: (host, pid, tid, wall-clock start, wall-clock end)
Claim = tuple[str, int, int, int, int]


def host_claims(rep: PreparedReport) -> list[Claim]:
    """The threads ``rep`` gives host states (every CPU thread of a report with CUDA runtime
    calls) and the report's span, first to last record, on the wall clock."""
    if "runtime" not in rep.kinds:
        return []
    meta = rep.export.meta
    lo, hi = meta.first_ns + meta.wall_offset_ns, meta.last_ns + meta.wall_offset_ns
    return [(rep.host, int(pid_of(gpid)), int(tid_of(g)), lo, hi)
            for gpid in rep.plan.processes for g in rep.plan.threads_by_process.get(gpid, [])]


class ClaimBook:
    """The claims of the reports seen so far, by thread."""

    def __init__(self) -> None:
        self._by: dict[tuple[str, int, int], list[Claim]] = {}

    def earlier(self, claims: Iterable[Claim]) -> list[Claim]:
        """The claims seen so far on the threads of ``claims``."""
        keys = dict.fromkeys((h, p, t) for h, p, t, _, _ in claims)
        return [c for k in keys for c in self._by.get(k, [])]

    def add(self, claims: Iterable[Claim]) -> None:
        for c in claims:
            self._by.setdefault(c[:3], []).append(c)


def earlier_claims(per_report: Sequence[list[Claim]]) -> list[list[Claim]]:
    """For reports in order, each one's earlier claims on its threads."""
    book = ClaimBook()
    out = []
    for claims in per_report:
        out.append(book.earlier(claims))
        book.add(claims)
    return out


def relative_spans(claims: Iterable[Claim], origin_wall: int
                   ) -> dict[tuple[str, int, int], list[tuple[int, int]]]:
    """Claims as sorted trace-relative spans per (host, pid, tid)."""
    out: dict[tuple[str, int, int], list[tuple[int, int]]] = {}
    for host, pid, tid, lo, hi in claims:
        if hi > lo:
            out.setdefault((host, pid, tid), []).append((lo - origin_wall, hi - origin_wall))
    for spans in out.values():
        spans.sort()
    return out


def overlapping(per_report: Sequence[list[Claim]]) -> bool:
    """Whether two reports claim one process over overlapping spans (overlapping capture
    ranges of one process, whose records the merge writes once: ``stream.dedupe``)."""
    spans: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for claims in per_report:
        mine: dict[tuple[str, int], tuple[int, int]] = {}
        for host, pid, _, lo, hi in claims:
            a, b = mine.get((host, pid), (lo, hi))
            mine[(host, pid)] = (min(a, lo), max(b, hi))
        for key, (lo, hi) in mine.items():
            if any(lo < b and a < hi for a, b in spans.get(key, [])):
                return True
            spans.setdefault(key, []).append((lo, hi))
    return False
