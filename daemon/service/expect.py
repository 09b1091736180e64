"""A job's expected ranks (``--expect N``, ``expect_ranks``, or its ``prvstream.expect`` file)
and which of them no committed report has yet (``status.json``'s ``missing_ranks``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from prvstream.daemon.config import Settings
from prvstream.daemon.live.journal import ReportEntry
from prvstream.daemon.nsys.locate import EXPECT_MARKER
from prvstream.daemon.stream.ranks import RankedTask, assign_ranks, missing_ranks, rank_from_name
from prvstream.sinks.logger import get_logger

__all__ = ["EXPECT_FILE", "RankTally", "expected_ranks", "rank_status"]

log = get_logger(__name__)

#: a file in the job directory holding the job's rank count (wins over ``expect_ranks``)
EXPECT_FILE = EXPECT_MARKER


def expected_ranks(job_dir: Path, settings: Settings) -> int:
    """The job's expected rank count: its ``prvstream.expect`` file when that holds a whole
    number, else ``settings.expect_ranks`` (0: no expectation)."""
    try:
        text = (job_dir / EXPECT_FILE).read_text(errors="replace").strip()
    except (FileNotFoundError, NotADirectoryError):
        return settings.expect_ranks
    except OSError as exc:
        log.warning("expect_file_unreadable", job=str(job_dir), error=str(exc))
        return settings.expect_ranks
    try:
        count = int(text.split()[0]) if text else -1
    except ValueError:
        count = -1
    if count < 0:
        log.warning("expect_file_invalid", job=str(job_dir), text=text[:40],
                    hint=f"write one whole number, the job's rank count, into {EXPECT_FILE}")
        return settings.expect_ranks
    return count


def _tasks(reports: Iterable[ReportEntry], rank_pattern: str) -> list[RankedTask]:
    """Every report's ranked GPU processes; a report journaled without them (an older
    journal, a Dask-converted block) counts as one process ranked by its name."""
    out: list[RankedTask] = []
    for entry in reports:
        if entry.ranks:
            out.extend(entry.ranks)
        else:
            out.append(RankedTask(f"report:{entry.name}", 0,
                                  rank_from_name(entry.name, rank_pattern)))
    return out


class RankTally:
    """The committed reports' ranked processes, each report read once (not at every status)."""

    def __init__(self) -> None:
        self.tasks: list[RankedTask] = []
        self._seen = 0
        self._last: ReportEntry | None = None

    def update(self, reports: Sequence[ReportEntry], rank_pattern: str) -> list[RankedTask]:
        """Every report's tasks; a log that lost reports (a rolled-back append) is read
        again."""
        if len(reports) < self._seen or (self._seen and reports[self._seen - 1] != self._last):
            self.tasks, self._seen = [], 0
        if len(reports) > self._seen:
            fresh: Iterable[ReportEntry] = reports if not self._seen else [
                reports[i] for i in range(self._seen, len(reports))]  # streamed when all
            self.tasks.extend(_tasks(fresh, rank_pattern))
            self._seen, self._last = len(reports), reports[-1]
        return self.tasks


def rank_status(job_dir: Path, reports: Sequence[ReportEntry], settings: Settings,
                tally: RankTally | None = None) -> tuple[int | None, list[int]]:
    """(expected rank count or None, the missing rank numbers in increasing order); the
    reports are read only when ranks are expected (through ``tally``, once each)."""
    expected = expected_ranks(job_dir, settings)
    if expected <= 0:
        return None, []
    tasks = (tally or RankTally()).update(reports, settings.rank_pattern)
    ranks = assign_ranks(tasks).values()
    return expected, missing_ranks(expected, ranks)
