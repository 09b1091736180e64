"""Whole reports into a model: sort, chunk, interleave phases (batch conversion and tests)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from prvstream.sinks.base import ReportInfo, feed_interleaved
from prvstream.sinks.efficiency.model import EfficiencyModel
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import SummaryState

__all__ = ["feed_report", "summarize"]

log = get_logger(__name__)

def summarize(job: str, reports: Iterable[tuple[ReportInfo, np.ndarray, np.ndarray | None]],
              *, window_ns: int = 10_000_000_000, gap_threshold_ns: int = 1_000_000,
              chunk_rows: int = 65536) -> SummaryState:
    """Feed whole reports (info, ACTIVITY_DTYPE rows, PHASE_DTYPE rows or None) in order.

    Rows need not be sorted; each report is sorted by start and fed in chunks of
    ``chunk_rows`` (also the model's ``flush_rows``) with phases interleaved as the Sink
    protocol requires. Returns the state.
    """
    model = EfficiencyModel(job, window_ns=window_ns, gap_threshold_ns=gap_threshold_ns,
                            flush_rows=chunk_rows)
    for info, activity, phases in reports:
        feed_report(model, info, activity, phases, chunk_rows=chunk_rows)
    return model.state()


def feed_report(model: EfficiencyModel, info: ReportInfo, activity: np.ndarray,
                phases: np.ndarray | None = None, *, chunk_rows: int = 65536) -> None:
    """Drive one report through ``model``: sort, chunk, interleave phases, end the report."""
    act = activity[np.argsort(activity["start"], kind="stable")]
    ph = phases[np.argsort(phases["start"], kind="stable")] if phases is not None else None
    model.begin_report(info)
    feed_interleaved(model, act, ph, chunk_rows)
    model.end_report()
