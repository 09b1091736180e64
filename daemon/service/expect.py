"""A job's expected ranks (``--expect N``, ``expect_ranks``, or its ``prvstream.expect`` file)
and which of them no committed report has yet (``status.json``'s ``missing_ranks``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from prvstream.daemon.config import Settings
from prvstream.daemon.live.journal import ReportEntry
from prvstream.daemon.nsys.locate import EXPECT_MARKER
from prvstream.daemon.stream.ranks import RankedTask, assign_ranks, missing_ranks, rank_from_name
from prvstream.sinks.logger import get_logger

__all__ = ["EXPECT_FILE", "expected_ranks", "rank_status"]

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


def rank_status(job_dir: Path, reports: list[ReportEntry], settings: Settings
                ) -> tuple[int | None, list[int]]:
    """(expected rank count or None, the missing rank numbers in increasing order)."""
    expected = expected_ranks(job_dir, settings)
    if expected <= 0:
        return None, []
    ranks = assign_ranks(_tasks(reports, settings.rank_pattern)).values()
    return expected, missing_ranks(expected, ranks)
