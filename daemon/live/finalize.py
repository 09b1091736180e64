"""``prvstream finalize JOB|TRACE``: compact a job's live trace into its canonical form.

Finds the job's journal (by job directory, or by a trace path the journal lists among its
outputs), takes the job's lock (so it refuses while a daemon is writing the job: touch
``JOB/prvstream.done`` then, and the daemon finalizes), and rewrites the trace canonically.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from prvstream.daemon.config import Settings
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.live.livetrace import LiveTrace
from prvstream.sinks.errors import JournalCorrupt, PrvstreamError
from prvstream.sinks.logger import get_logger

__all__ = ["finalize_job", "find_journal"]

log = get_logger(__name__)


def find_journal(target: Path, state_dir: str) -> JobJournal:
    """The journal of the job ``target`` names (a job directory or one of its outputs)."""
    real = Path(os.path.realpath(target))
    directory = Path(state_dir)
    if directory.is_dir():
        for path in sorted(directory.glob("*.json")):
            try:
                journal = JobJournal.load(path)
            except JournalCorrupt:
                continue
            if journal is None:
                continue
            state = journal.state
            if Path(os.path.realpath(state.job_dir)) == real or str(real) in {
                os.path.realpath(p) for p in state.outputs
            }:
                return journal
    raise PrvstreamError(
        f"no prvstream journal for {target} under {state_dir}; pass the job directory the "
        "daemon watched (or its .prv) and the same --state the daemon used"
    )


def finalize_job(target: Path, settings: Settings,
                 progress: Callable[[int, int], None] | None = None) -> LiveTrace:
    journal = find_journal(target, settings.state_dir)
    journal.lock()
    try:
        state = journal.state
        trace = LiveTrace(journal, Path(state.out_dir), Path(state.job_dir).name or "trace",
                          settings)
        trace.progress = progress
        try:
            trace.recover()
            trace.finalize()
        finally:
            trace.close()
        return trace
    finally:
        journal.unlock()
