"""``prvstream bench``: measure a synthetic job's conversion, live lag and memory."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from prvstream.daemon.config import Settings
from prvstream.daemon.synthetic.bench import format_report, measure
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger

__all__ = ["run"]

log = get_logger(__name__)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """``prvstream bench``."""
    if args.out:
        work = Path(args.out)
        if work.exists() and any(work.iterdir()):
            raise PrvstreamError(f"bench: {work} is not empty; give an empty or new directory")
        work.mkdir(parents=True, exist_ok=True)
        report = measure(args.rows, args.ranks, work, settings, args.config)
    else:
        with tempfile.TemporaryDirectory(prefix="prvstream-bench-") as tmp:
            report = measure(args.rows, args.ranks, Path(tmp), settings, args.config)
    log.debug("bench_done", rows=report.rows, convert_s=round(report.convert.seconds, 3),
             peak_rss_mib=round(report.convert.peak_rss_mib, 1))
    sys.stdout.write(format_report(report, settings.settle))
    return 0
