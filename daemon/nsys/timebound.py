"""The times trusted on an export's clock: where its session starts (the clock anchor) and the
bound outside which rows are hostile (dropped and counted by ``kinds.bounds``).
"""

from __future__ import annotations

import functools
import sqlite3
from typing import Final

from prvstream.daemon.kinds import registry
from prvstream.daemon.kinds.base import KindSource
from prvstream.daemon.kinds.registry import TABLE_KINDS
from prvstream.daemon.kinds.sql import quote_identifier as _q
from prvstream.daemon.nsys.exportbase import memoized
from prvstream.daemon.nsys.exportnames import ExportNames
from prvstream.sinks.logger import get_logger

__all__ = [
    "BOUND_MARGIN_NS",
    "CLOCK_SLACK_NS",
    "MAX_SESSION_NS",
    "SANE_NS",
    "SESSION_MARGIN_NS",
    "ExportClock",
    "session_margin",
]

log = get_logger(__name__)

#: events may precede the recorded session start by this much and still trust systemClockNs
CLOCK_SLACK_NS: Final = 1_000_000_000
#: after the session's recorded end, rows are trusted for this much plus a tenth of its length
SESSION_MARGIN_NS: Final = 60 * 1_000_000_000
#: a recorded session length beyond this (a year) is not believed: the sampled bound is used
MAX_SESSION_NS: Final = 366 * 86_400 * 1_000_000_000
#: no time beyond +-2^62 ns (146 years) on an export's clock is trusted, so that wall-clock
#: sums (``time + wall_offset_ns``) never leave int64
SANE_NS: Final = 2**62
#: rows sampled per table (evenly by rowid) to find where the bulk of an export's times lie
_SAMPLES: Final = 65
#: a table whose rowids span this many or more is sampled by a list of rowids (65 look-ups),
#: a narrower one by reading its rows in the range (a big export's kernel table read whole
#: for its samples cost 110 M instructions; a list costs about 75 k to compile)
_SCAN_ROWIDS: Final = 1024
#: without a recorded session length, a row is trusted within this much of the sampled median
BOUND_MARGIN_NS: Final = 7 * 86_400 * 1_000_000_000


#: (schema key, kind) -> the kind's tables in exports of that schema (``ExportClock.sources``)
_SOURCES: dict[tuple[int, str], tuple[KindSource, ...]] = {}
_SOURCES_KEPT = 512


def session_margin(duration_ns: int) -> int:
    """How long after the recorded end of a session of ``duration_ns`` rows are trusted."""
    return SESSION_MARGIN_NS + duration_ns // 10


class ExportClock(ExportNames):
    """An export's session clock, anchor and trusted time bound (each computed once)."""

    def sources(self, kind: str) -> list[KindSource]:
        """The tables present in this export that feed ``kind`` (possibly empty ones): found
        from the schema alone, so once per schema (planning asks about 45 times a report)."""
        key = (self.schema_key, kind)
        found = _SOURCES.get(key)
        if found is None:
            found = tuple(registry.get(kind).sources(self))
            if len(_SOURCES) >= _SOURCES_KEPT:
                _SOURCES.clear()
            _SOURCES[key] = found
        return list(found)

    @memoized
    def _session_clock(self) -> tuple[int | None, int | None]:
        """(utcEpochNs, systemClockNs) of TARGET_INFO_SESSION_START_TIME, where present and
        plausible (``_clock``)."""
        if not self.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
            return None, None
        cols = "utcEpochNs, " + ("systemClockNs" if self.has(
            "TARGET_INFO_SESSION_START_TIME", "systemClockNs") else "NULL")
        row = self._con.execute(
            f"SELECT {cols} FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
        if row is None:
            return None, None
        utc, sysclk = (None if v is None else int(v) for v in row)
        return _clock(utc, "utcEpochNs", self), _clock(sysclk, "systemClockNs", self)

    @memoized
    def session_duration(self) -> int | None:
        """The session's recorded length (``ANALYSIS_DETAILS.duration``, else ``stopTime -
        startTime``), or None where the export lacks it or it is not a length (<= 0, > a year).

        Only the length: ``startTime``/``stopTime`` themselves are on another clock in some
        real exports (the 2026.1 sample's events lie 515,395 s before its ``startTime``).
        """
        t = "ANALYSIS_DETAILS"
        if self.has(t, "duration"):
            length = f"COALESCE(duration, {_stop_minus_start(self, t)})"
        else:
            length = _stop_minus_start(self, t)
        if length == "NULL":
            return None
        try:
            found = [_int_or_none(v) for (v,) in self._con.execute(
                f"SELECT {length} FROM {t} LIMIT 16")]
        except sqlite3.Error:  # text or overflow in the table: not a length
            return None
        good = [v for v in found if v is not None and 0 < v <= MAX_SESSION_NS]
        return max(good) if good else None

    @memoized
    def _samples(self) -> list[int]:
        """Start times sampled evenly (by rowid) from every data table, sorted."""
        seen: dict[str, KindSource] = {}
        for kind in TABLE_KINDS:
            for src in self.sources(kind):
                seen.setdefault(src.table, src)
        return sorted(self._sample_all(list(seen.values())))

    @memoized
    def _anchor(self) -> tuple[str, int]:
        """(clock anchor, session start on the export's clock).

        ``systemClockNs`` is the events' clock unless the events count from the session start
        instead: with a recorded session length, whichever of the two sessions holds more of
        the sampled starts wins (a tie: ``systemClockNs``); rows outside both do not vote, so
        hostile values cannot move the anchor. Without one (or with no vote at all),
        ``systemClockNs`` is ignored when it follows the sampled median by more than the slack.
        """
        utc, sysclk = self._session_clock()
        if utc is None:
            return "none", 0
        if sysclk is None:
            return "session_start", 0
        samples = self._samples()
        duration = self.session_duration()
        if duration is not None:
            on_clock = sum(1 for s in samples if _inside(s, sysclk, duration))
            from_zero = sum(1 for s in samples if _inside(s, 0, duration))
            if on_clock or from_zero:
                return ("system_clock", sysclk) if on_clock >= from_zero else ("session_start", 0)
        if not samples or sysclk <= samples[len(samples) // 2] + CLOCK_SLACK_NS:
            return "system_clock", sysclk
        return "session_start", 0

    @memoized
    def time_bound(self) -> tuple[int, int]:
        """The times trusted on the export's clock.

        With a recorded session length (``session_duration``) and start (``_anchor``): from
        the session start less 1 s of slack to its end plus ``session_margin`` (60 s and a
        tenth of the length), unless no sampled row lies in it (then the length is not about
        these events). Otherwise within ``BOUND_MARGIN_NS`` (7 days) of the median of the
        sampled starts, and not before the session start less the slack: this holds while
        fewer than half the sampled rows are hostile, and loses the far rows (counted) of a
        session longer than 7 days on either side of its median. Never beyond +-``SANE_NS``.
        Not min/max, which one hostile value widens (``end = INT64_MAX``).
        """
        anchor, session = self._anchor()
        duration = self.session_duration()
        samples = self._samples()
        if duration is not None and anchor != "none" and (
                not samples or any(_inside(s, session, duration) for s in samples)):
            lo = session - CLOCK_SLACK_NS
            hi = session + duration + session_margin(duration)
        elif samples:
            mid = samples[len(samples) // 2]
            lo, hi = mid - BOUND_MARGIN_NS, mid + BOUND_MARGIN_NS
            if anchor != "none":  # nothing before the session start, less the anchor's slack
                lo = max(lo, session - CLOCK_SLACK_NS)
        else:
            lo, hi = -SANE_NS, SANE_NS
        return max(lo, -SANE_NS), min(hi, SANE_NS)

    def _sample_all(self, sources: list[KindSource]) -> list[int]:
        """``_sample_starts`` of every table in two statements: every table's rowid range,
        then the sampled rows by their rowids (a statement per table only when one of them
        cannot be sampled). The same rows as ``_sample_sql``, whose one statement for all
        tables costs SQLite more than both of these together."""
        if not sources:
            return []
        try:
            ends = self._con.execute("SELECT " + ", ".join(
                f"(SELECT MIN(rowid) FROM {_q(s.table)}), (SELECT MAX(rowid) FROM {_q(s.table)})"
                for s in sources)).fetchone()
            parts = []
            for i, src in enumerate(sources):
                lo, hi = ends[2 * i], ends[2 * i + 1]
                if lo is None:
                    continue  # an empty table
                parts.append(_sampled_rows_sql(src, lo, hi))
            if not parts:
                return []
            sql = " UNION ALL ".join(parts)
            found = self.int_column(sql)  # every start an integer: read in C
            if found is not None:
                return found
            rows = self._con.execute(sql).fetchall()
        except sqlite3.OperationalError:
            return [v for src in sources for v in self._sample_starts(src)]
        return [int(v) for (v,) in rows if isinstance(v, int)]

    def _sample_starts(self, src: KindSource) -> list[int]:
        """Start times of up to ``_SAMPLES`` rows spread evenly over the table's rowids."""
        try:
            rows = self._con.execute(_sample_sql(src)).fetchall()
        except sqlite3.OperationalError:  # a table without rowid: not sampled
            return []
        return [int(v) for (v,) in rows if isinstance(v, int)]


def _sample_sql(src: KindSource) -> str:
    """One statement: the rowid range, and the starts of the rows at evenly spaced rowids
    (MIN and MAX of rowid each in a subquery of its own: two b-tree descents; together in one
    SELECT they scan the whole table)."""
    t = _q(src.table)
    steps = ",".join(f"({k})" for k in range(_SAMPLES))
    where = f" AND ({src.where})" if src.where else ""
    return (f"SELECT {_q(src.start)} FROM {t} WHERE rowid IN (SELECT lo + (hi - lo) * k / "
            f"{_SAMPLES - 1} FROM (SELECT (SELECT MIN(rowid) FROM {t}) AS lo, "
            f"(SELECT MAX(rowid) FROM {t}) AS hi), "
            f"(SELECT column1 AS k FROM (VALUES {steps}))){where}")


def _sampled_rows_sql(src: KindSource, lo: object, hi: object) -> str:
    """``_sample_sql`` for a table whose rowids run from ``lo`` to ``hi``: its rowids
    computed here (SQLite's integer arithmetic; where that would overflow into a float, the
    statement computes them itself as ``_sample_sql`` does)."""
    if not (type(lo) is int and type(hi) is int and 0 <= (hi - lo) * (_SAMPLES - 1) < 2**63):
        return f"SELECT * FROM ({_sample_sql(src)})"
    where = f" AND ({src.where})" if src.where else ""
    return (f"SELECT {_q(src.start)} FROM {_q(src.table)} WHERE "
            f"{_sampled_rowids_sql(lo, hi)}{where}")


def _sampled_rowids_sql(lo: int, hi: int) -> str:
    """A condition on ``rowid`` true exactly for ``_sampled_ids(lo, hi)``, cheap for SQLite
    to compile (a list of 65 rowids costs it more than a small table's rows): a range of at
    most ``_SAMPLES`` rowids is sampled whole; a range of fewer than ``_SCAN_ROWIDS`` keeps
    the rowids ``lo + j`` for which the first step ``k = ceil(j (_SAMPLES - 1) / d)``
    reaching ``j`` lands on it (``d k // (_SAMPLES - 1) == j``, with ``d = hi - lo``: every
    row of the range read); a wider one is the list (65 look-ups, not every row)."""
    d, steps = hi - lo, _SAMPLES - 1
    if d < _SAMPLES:
        return f"rowid >= {lo} AND rowid <= {hi}"
    if d >= _SCAN_ROWIDS:
        return f"rowid IN ({_sampled_ids(lo, hi)})"
    return (f"rowid >= {lo} AND rowid <= {hi} AND "
            f"((rowid - {lo}) * {steps} + {d - 1}) / {d} * {d} / {steps} = rowid - {lo}")


@functools.lru_cache(maxsize=256)
def _sampled_ids(lo: int, hi: int) -> str:
    """The sampled rowids of a table whose rowids run from ``lo`` to ``hi``, as SQL (the
    exports of one job mostly share their tables' rowid ranges: built once for them)."""
    return ",".join(str(r) for r in sorted({lo + (hi - lo) * k // (_SAMPLES - 1)
                                           for k in range(_SAMPLES)}))


def _clock(value: int | None, name: str, export: ExportNames) -> int | None:
    """A session clock reading, or None where it cannot be one (negative, or 2^62 ns and
    beyond): ``utcEpochNs - systemClockNs`` and every time plus it then stay in int64."""
    if value is None or 0 <= value < SANE_NS:
        return value
    log.debug("session_clock_ignored", path=str(export.path), column=name, value=value)
    return None


def _inside(t: int, start: int, duration: int) -> bool:
    """Whether ``t`` lies in the session from ``start`` lasting ``duration``, with margins."""
    return start - CLOCK_SLACK_NS <= t <= start + duration + session_margin(duration)


def _stop_minus_start(export: ExportNames, table: str) -> str:
    if export.has(table, "stopTime") and export.has(table, "startTime"):
        return "stopTime - startTime"
    return "NULL"


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None
