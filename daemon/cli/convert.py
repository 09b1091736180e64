"""``prvstream convert``: batch conversion of exports into one trace, its summaries and a closing
line.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from prvstream.daemon.config import Settings
from prvstream.daemon.stream.batch import convert
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.files import atomic_write
from prvstream.sinks.summary import encode_record

__all__ = ["run"]


class _Progress:
    """A progress bar on a TTY: rows converted out of the rows the plan counted."""

    def __init__(self) -> None:
        self.last = 0.0
        self.started = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < 0.2:
            return
        self.last = now
        frac = min(done / total, 1.0) if total else 0.0
        width = 30
        bar = "#" * int(frac * width)
        rate = done / max(now - self.started, 1e-9)
        sys.stderr.write(f"\rconverting [{bar:<{width}}] {100 * frac:5.1f}%  "
                         f"{done:,}/{total:,} rows  {rate:,.0f} rows/s")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()


def run(args: argparse.Namespace, settings: Settings) -> int:
    """``prvstream convert``."""
    out = Path(args.output)
    for suffix in (".prv", ".pcf", ".row"):
        if out.name.endswith(suffix):
            out = out.with_name(out.name[: -len(suffix)])
    progress = None
    if sys.stderr.isatty() and not args.no_progress:
        progress = _Progress()
    model = EfficiencyModel(out.name, window_ns=int(settings.window * 1e9), flush_rows=8192,
                            gap_threshold_ns=settings.gap_threshold_ns,
                            recent=settings.summary_recent)
    history = out.with_name(out.name + ".summary.jsonl")
    try:
        result = convert(args.inputs, out, settings, model=model, progress=progress,
                         summary_jsonl=history)
    finally:
        if progress is not None:
            progress.close()
    summary_path = out.with_name(out.name + ".summary.json")
    atomic_write(summary_path, encode_record(model.state()))
    result.outputs += [str(summary_path), str(history)]
    rows = ", ".join(f"{k}={v}" for k, v in sorted(result.rows.items()))
    sys.stdout.write(
        f"prvstream: {len(result.reports)} report(s) -> {out}.prv "
        f"({result.records:,} records; {rows}); span {result.end_time / 1e9:.3f} s; "
        f"{result.seconds:.2f} s wall\n"
    )
    for path_text, reason in result.failed:
        sys.stdout.write(f"prvstream: skipped {path_text}: {reason}\n")
    return 1 if result.failed else 0
