"""The times trusted on an export's clock: where its session starts (the clock anchor) and the
bound outside which rows are hostile (dropped and counted by ``kinds.bounds``).
"""

from __future__ import annotations

import sqlite3
from typing import Final

from prvstream.daemon.kinds import registry
from prvstream.daemon.kinds.base import KindSource
from prvstream.daemon.kinds.registry import TABLE_KINDS
from prvstream.daemon.kinds.sql import quote_identifier as _q
from prvstream.daemon.nsys.exportbase import memoized
from prvstream.daemon.nsys.exportmeta import I64_MAX, I64_MIN
from prvstream.daemon.nsys.exportnames import ExportNames
from prvstream.sinks.logger import get_logger

__all__ = ["BOUND_MARGIN_NS", "CLOCK_SLACK_NS", "ExportClock"]

log = get_logger(__name__)

#: events may precede the recorded session start by this much and still trust systemClockNs
CLOCK_SLACK_NS: Final = 1_000_000_000
#: rows sampled per table (evenly by rowid) to find where the bulk of an export's times lie
_SAMPLES: Final = 65
#: a row is trusted within this much of the sampled median time (see ``Export.time_bound``)
BOUND_MARGIN_NS: Final = 7 * 86_400 * 1_000_000_000


class ExportClock(ExportNames):
    """An export's session clock, anchor and trusted time bound (each computed once)."""

    def sources(self, kind: str) -> list[KindSource]:
        """The tables present in this export that feed ``kind`` (possibly empty ones)."""
        return registry.get(kind).sources(self)

    @memoized
    def _session_clock(self) -> tuple[int | None, int | None]:
        """(utcEpochNs, systemClockNs) of TARGET_INFO_SESSION_START_TIME, where present."""
        if not self.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
            return None, None
        cols = "utcEpochNs, " + ("systemClockNs" if self.has(
            "TARGET_INFO_SESSION_START_TIME", "systemClockNs") else "NULL")
        row = self._con.execute(
            f"SELECT {cols} FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
        if row is None:
            return None, None
        return (None if row[0] is None else int(row[0]), None if row[1] is None else int(row[1]))

    def _anchor(self) -> tuple[str, int]:
        """(clock anchor, session start on the export's clock): ``systemClockNs`` is on the
        events' clock unless it follows the bulk of them (the sampled median, plus the slack),
        so that one hostile early row cannot move the anchor."""
        utc, sysclk = self._session_clock()
        self.time_bound()
        mid = self._memo.get("median")
        if utc is not None and sysclk is not None and (
                mid is None or sysclk <= int(mid) + CLOCK_SLACK_NS):
            return "system_clock", sysclk
        return ("session_start", 0) if utc is not None else ("none", 0)

    def time_bound(self) -> tuple[int, int]:
        """The times trusted on the export's clock: within ``BOUND_MARGIN_NS`` of the median
        of rows sampled evenly (by rowid) from every data table.

        Nothing before the session start either (less 1 s of slack). Not min/max, which one
        hostile value widens (``end = INT64_MAX``); not
        ``ANALYSIS_DETAILS``, which is on another clock in some real exports. The median
        holds while fewer than half the sampled rows are hostile; a real session longer than
        the margin on either side of its median would lose its far rows (counted).
        """
        found = self._memo.get("time_bound")
        if found is None:
            samples: list[int] = []
            seen: set[str] = set()
            for kind in TABLE_KINDS:
                for src in self.sources(kind):
                    if src.table not in seen:
                        seen.add(src.table)
                        samples.extend(self._sample_starts(src))
            if not samples:
                found = (I64_MIN, I64_MAX)
            else:
                mid = self._memo["median"] = sorted(samples)[len(samples) // 2]
                found = (max(I64_MIN, mid - BOUND_MARGIN_NS),
                         min(I64_MAX, mid + BOUND_MARGIN_NS))
            self._memo["time_bound"] = found
            anchor, session = self._anchor()
            if anchor != "none":  # nothing before the session start, less the anchor's slack
                found = (max(found[0], session - CLOCK_SLACK_NS), found[1])
                self._memo["time_bound"] = found
        bound: tuple[int, int] = found
        return bound

    def _sample_starts(self, src: KindSource) -> list[int]:
        """Start times of up to ``_SAMPLES`` rows spread evenly over the table's rowids."""
        t = _q(src.table)
        steps = ",".join(f"({k})" for k in range(_SAMPLES))
        where = f" AND ({src.where})" if src.where else ""
        try:  # one statement: the rowid range, and the rows at evenly spaced rowids
            rows = self._con.execute(
                f"SELECT {_q(src.start)} FROM {t} WHERE rowid IN (SELECT lo + (hi - lo) * k / "
                f"{_SAMPLES - 1} FROM (SELECT MIN(rowid) AS lo, MAX(rowid) AS hi FROM {t}), "
                f"(SELECT column1 AS k FROM (VALUES {steps}))){where}").fetchall()
        except sqlite3.OperationalError:  # a table without rowid: not sampled
            return []
        return [int(v) for (v,) in rows if isinstance(v, int)]
