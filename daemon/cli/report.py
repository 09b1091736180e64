"""``prvstream report``: one self-contained HTML page of a job's efficiency summary.

SRC is a job directory or summary file (the report shows what the summary holds), or Nsight
Systems exports (files or a directory of them): those are converted in a temporary directory
with a window sized to the job's span (about 40 windows), so that short jobs get a time axis.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from prvstream.daemon.config import Settings
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger
from prvstream.sinks.report import write_report
from prvstream.sinks.summary import SummaryRecord, SummaryState, load_summary

__all__ = ["auto_window_ns", "run"]

log = get_logger(__name__)

_SUMMARIES = ("prvstream/summary.jsonl", "summary.jsonl", "prvstream/summary.json",
              "summary.json")
#: windows the automatic window length aims at over the span
_WINDOWS = 40


def auto_window_ns(span_ns: int) -> int:
    """A 1-2-5 window length giving at most about 40 windows over ``span_ns`` (>= 1 µs)."""
    target = max(span_ns // _WINDOWS, 1_000)
    scale = 1_000
    while True:
        for step in (1, 2, 5):
            if step * scale >= target:
                return step * scale
        scale *= 10


def _summary_of(src: Path) -> Path | None:
    if src.is_file() and src.suffix in (".json", ".jsonl"):
        return src
    if src.is_dir():
        for rel in _SUMMARIES:
            if (src / rel).is_file():
                return src / rel
    return None


def _convert(inputs: list[str], settings: Settings) -> SummaryState:
    """Convert exports twice in a scratch directory: once for the span, once with windows
    sized to it."""
    from prvstream.daemon.stream.batch import convert
    from prvstream.sinks.efficiency import EfficiencyModel

    name = Path(inputs[0]).stem if len(inputs) == 1 else Path(inputs[0]).parent.name
    with tempfile.TemporaryDirectory(prefix="prvstream-report-") as tmp:
        first = EfficiencyModel(name, gap_threshold_ns=settings.gap_threshold_ns,
                                nccl_as=settings.nccl_as)
        convert(inputs, Path(tmp) / "pass1", settings, model=first)
        span = first.state().span_ns
        if span <= 0:
            raise PrvstreamError(f"{', '.join(inputs)}: no GPU activity to report on")
        model = EfficiencyModel(name, window_ns=auto_window_ns(span),
                                gap_threshold_ns=settings.gap_threshold_ns,
                                recent=max(settings.summary_recent, 2 * _WINDOWS),
                                nccl_as=settings.nccl_as, top=settings.summary_top)
        convert(inputs, Path(tmp) / "pass2", settings, model=model)
        return model.state()


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Write the report and say where."""
    sources = [Path(s) for s in args.sources]
    summary = _summary_of(sources[0]) if len(sources) == 1 else None
    history: list[SummaryRecord] = []
    if summary is not None:
        state, history = load_summary(summary, recent=settings.summary_recent)
    else:
        missing = [str(s) for s in sources if not s.exists()]
        if missing:
            raise PrvstreamError(f"{', '.join(missing)} does not exist; pass a job directory, "
                                 "a summary.json(l) or Nsight Systems exports")
        state = _convert([str(s) for s in sources], settings)
    out = Path(args.output)
    write_report(out, state, history)
    sys.stderr.write(f"report written to {out.resolve()}\n")
    return 0
