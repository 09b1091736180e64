"""``prvstream finalize``: compact a job's live trace into its canonical form."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prvstream.daemon.config import Settings
from prvstream.daemon.live.finalize import finalize_job, find_journal
from prvstream.daemon.progress import TerminalProgress
from prvstream.sinks.errors import OutputLocked

__all__ = ["run"]


def run(args: argparse.Namespace, settings: Settings) -> int:
    """``prvstream finalize``."""
    progress = TerminalProgress("finalizing") if sys.stderr.isatty() else None
    try:
        trace = finalize_job(Path(args.target), settings, progress)
    except OutputLocked as exc:
        job = Path(find_journal(Path(args.target), settings.state_dir).state.job_dir)
        raise OutputLocked(
            f"the daemon (another prvstream process) is writing job {job}; it finalizes the "
            f"job itself when told: touch {job / 'prvstream.done'} (or stop the daemon, then "
            "run prvstream finalize again)") from exc
    finally:
        if progress is not None:
            progress.close()
    sys.stdout.write(f"prvstream: finalized {trace.prv} "
                     f"({len(trace.journal.reports)} report(s))\n")
    return 0
