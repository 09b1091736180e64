"""A batch's reports as planned: here (``plan_one``) or by the helper process
(``RemoteReport``), and whether a batch takes a helper at all; apart from ``stream.helper`` so
that a one-report conversion never loads the helper's process machinery.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import msgspec

from prvstream.daemon.config import Settings
from prvstream.daemon.nsys.heldrows import RowSpill
from prvstream.daemon.stream.claims import Claim
from prvstream.daemon.stream.pipeline import (
    PreparedReport,
    ReportObjects,
    objects_of,
    prepare,
    value_labels_of,
)

__all__ = ["MIN_REPORTS", "HelperDiverged", "RemoteReport", "plan_one", "use_helper"]

#: a batch of fewer reports converts in one process (the fork and the hand-over cost more)
MIN_REPORTS = 32


class HelperDiverged(Exception):
    """The helper could not finish as one process would have (it failed, or a conversion
    registered ids the canonical numbering lacked): the batch is converted in one process."""


class RemoteReport(msgspec.Struct):
    """What the converter knows of a report the helper planned: order, ids, size, claims."""

    path: Path
    host: str
    wall_start: int
    kinds: list[str]
    counts: dict[str, int]
    objects: ReportObjects
    value_labels: dict[str, set[str]]
    claims: list[Claim]

    @property
    def sort_key(self) -> tuple[int, str, str]:
        """Canonical report order (``PreparedReport.sort_key``)."""
        return (self.wall_start, self.host, self.path.name)

    @property
    def planned_rows(self) -> int:
        """Rows planned for the kinds converted."""
        return sum(self.counts.get(k, 0) for k in self.kinds)


def use_helper(paths: Sequence[Path], settings: Settings) -> bool:
    """Whether a batch is converted with a helper process: many reports, a second core, a
    second process allowed (``Settings.reader``), and no thread that a fork would copy
    half-way."""
    return (len(paths) >= MIN_REPORTS and settings.reader and hasattr(os, "fork")
            and len(os.sched_getaffinity(0)) >= 2 and threading.active_count() == 1)


def plan_one(path: Path, settings: Settings, spill: RowSpill | None, reports: int
             ) -> PreparedReport:
    """Plan one report of a batch of ``reports`` (what numbering needs read, the
    connection closed when there are several)."""
    from prvstream.daemon.stream.trace import report_chunk_rows, whole_rows

    rep = prepare(path, settings.kinds or None,  # one report: its reads start now
                  prefetch_rows=settings.chunk_rows if reports == 1 else None,
                  use_reader=settings.reader, presort=settings.presort, hold=spill,
                  hold_rows=whole_rows(settings),
                  chunk_rows=report_chunk_rows(settings, reports))
    objects_of(rep)  # what numbering needs, read while the connection is open
    value_labels_of(rep)
    if reports > 1:
        rep.close()  # connections reopen one fan-in group at a time
    return rep
