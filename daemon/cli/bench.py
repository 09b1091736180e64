"""``prvstream bench``: measure a synthetic job's conversion, live lag and memory, or (with
``--scale``) a scale-out benchmark."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from prvstream.daemon.config import Settings
from prvstream.daemon.synthetic.bench import format_report, measure
from prvstream.daemon.synthetic.scalebench import ScaleArgs, run_scale
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger

__all__ = ["run"]

log = get_logger(__name__)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """``prvstream bench``."""
    if args.scale:
        return _scale(args, settings)
    rows, ranks = args.rows or 1_000_000, args.ranks or 1
    if args.out:
        work = Path(args.out)
        if work.exists() and any(work.iterdir()):
            raise PrvstreamError(f"bench: {work} is not empty; give an empty or new directory")
        work.mkdir(parents=True, exist_ok=True)
        report = measure(rows, ranks, work, settings, args.config)
    else:
        with tempfile.TemporaryDirectory(prefix="prvstream-bench-") as tmp:
            report = measure(rows, ranks, Path(tmp), settings, args.config)
    log.debug("bench_done", rows=report.rows, convert_s=round(report.convert.seconds, 3),
             peak_rss_mib=round(report.convert.peak_rss_mib, 1))
    sys.stdout.write(format_report(report, settings.settle))
    return 0


def _scale(args: argparse.Namespace, settings: Settings) -> int:
    """``prvstream bench --scale MODE``: the numbers as JSON (``--out`` keeps the inputs, and
    a rerun in it reuses them)."""
    scale = ScaleArgs(mode=args.scale, reports=args.reports, ranks=args.ranks or 16,
                      rows=args.rows or 3_200_000, spec=settings.dask, reps=args.reps,
                      fan_in=args.fan_in or 0,
                      batch=not args.no_batch, timeout=args.timeout)
    if args.out:
        work = Path(args.out)
        work.mkdir(parents=True, exist_ok=True)
        result = run_scale(scale, work)
    else:
        with tempfile.TemporaryDirectory(prefix="prvstream-scale-") as tmp:
            result = run_scale(scale, Path(tmp))
    text = json.dumps(result, indent=1)
    sys.stdout.write(text + "\n")
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0
