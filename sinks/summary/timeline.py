"""Metrics over time for plots and reports: the finest series a summary holds, in units that
fit the job's span."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import Metrics, SummaryRecord, SummaryState

__all__ = ["Timeline", "timeline"]

log = get_logger(__name__)

#: fewer points than this in a series and the next finer one is tried
_MIN_POINTS = 3


class Timeline(msgspec.Struct):
    """Segments [x0, x1) in ``unit`` since ``t0_ns`` with their metrics, and the x range."""

    label: str
    unit: str
    scale: float
    t0_ns: int
    span: float
    segments: list[tuple[float, float, Metrics]]


def _unit(span_ns: int) -> tuple[str, float]:
    if span_ns < 2 * 10**6:
        return "µs", 1e3
    if span_ns < 2 * 10**9:
        return "ms", 1e6
    if span_ns < 2 * 3600 * 10**9:
        return "s", 1e9
    return "min", 60e9


def timeline(state: SummaryState, history: Sequence[SummaryRecord] = ()) -> Timeline:
    """Windows when there are a few, else phase instances, else the cumulative history (one
    point per report), else the job as one segment; x in a unit sized to the span."""
    t0 = state.start_ns
    unit, scale = _unit(max(state.span_ns, 1))
    phases = sorted(state.phases, key=lambda r: (r.start_ns, r.name, r.index))
    if len(state.windows) >= _MIN_POINTS:
        label, rows = f"windows of {state.windows[0].window_ns / 1e9:g} s", state.windows
    elif len(phases) >= _MIN_POINTS:
        label, rows = "phase instances", phases
    elif len(history) >= _MIN_POINTS:
        label, rows = "cumulative, as reports arrived", list(history)
    else:
        label, rows = "whole job", [state]
    segments = []
    for r in rows:
        a = (r.start_ns - t0) / scale
        b = (r.end_ns - t0) / scale
        if label.startswith("cumulative"):
            a = b  # a point as each report arrived
        segments.append((a, max(a, b), r.metrics))
    return Timeline(label=label, unit=unit, scale=scale, t0_ns=t0,
                    span=state.span_ns / scale, segments=segments)
