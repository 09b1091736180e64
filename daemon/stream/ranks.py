"""A report's rank when MPI does not say: from its file name (``rank_pattern``), else from the
order of (host, pid); and which of a job's expected ranks have not arrived.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

import msgspec

from prvstream.sinks.logger import get_logger

__all__ = ["DEFAULT_RANK_PATTERN", "RankedTask", "assign_ranks", "missing_ranks",
           "rank_from_name"]

log = get_logger(__name__)

#: ``rank`` then an optional ``_`` or ``-`` then digits, not preceded by a letter, anywhere in
#: the name, any case (``rank0007``, ``rank_7``, ``job-RANK-7.sqlite``, ``x_rank3_a100``); or a
#: name of exactly two dot-separated parts before the extension whose second part is all
#: digits, as ``nsys profile -o report.%q{SLURM_PROCID}`` (``%q{RANK}``,
#: ``%q{OMPI_COMM_WORLD_RANK}``) makes them: ``report.7.sqlite``, ``report.7.nsys-rep``
DEFAULT_RANK_PATTERN = r"(?i)(?<![a-z])rank[_-]?(\d+)|^[^.]+\.(\d+)\.(?:sqlite|nsys-rep)$"


class RankedTask(msgspec.Struct, frozen=True, array_like=True):
    """A process with GPU work in a report and its rank (MPI, else file name, else None)."""

    host: str
    pid: int
    rank: int | None = None


@lru_cache(maxsize=8)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def rank_from_name(name: str, pattern: str = DEFAULT_RANK_PATTERN) -> int | None:
    """The rank a report's file name carries: the first group of ``pattern`` that matched
    (searched anywhere in the base name), or None."""
    if not pattern:
        return None
    found = _compiled(pattern).search(name.rsplit("/", 1)[-1])
    if found is None:
        return None
    for group in found.groups():
        if group is not None:
            try:
                return int(group)
            except ValueError:
                log.debug("rank_group_not_a_number", name=name, group=group)
                return None
    return None


def assign_ranks(tasks: Iterable[RankedTask]) -> dict[tuple[str, int], int]:
    """Every task's rank: its own when known; the others, in (host, pid) order, take the
    lowest numbers no known rank uses. The same (host, pid) seen twice (capture slices) is
    one task, ranked if either sighting was."""
    known: dict[tuple[str, int], int | None] = {}
    for t in tasks:
        key = (t.host, t.pid)
        if known.get(key) is None:
            known[key] = t.rank
    taken = {r for r in known.values() if r is not None}
    out = {k: r for k, r in known.items() if r is not None}
    free = 0
    for key in sorted(k for k, r in known.items() if r is None):
        while free in taken:
            free += 1
        out[key] = free
        taken.add(free)
    return out


def missing_ranks(expected: int, ranks: Iterable[int]) -> list[int]:
    """The numbers in ``0 .. expected-1`` that no report has."""
    have = set(ranks)
    return [r for r in range(expected) if r not in have]
