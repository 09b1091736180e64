"""``prvstream finalize``: compact a job's live trace into its canonical form."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prvstream.daemon.config import Settings
from prvstream.daemon.live.finalize import finalize_job

__all__ = ["run"]


def run(args: argparse.Namespace, settings: Settings) -> int:
    """``prvstream finalize``."""
    trace = finalize_job(Path(args.target), settings)
    sys.stdout.write(f"prvstream: finalized {trace.prv} "
                     f"({len(trace.journal.state.reports)} report(s))\n")
    return 0
