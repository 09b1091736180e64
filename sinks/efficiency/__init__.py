"""The BSC/POP GPU efficiency model: a ``Sink`` that keeps rolling device summaries of a job.

Public API (definitions in docs/efficiency.md)::

    model = EfficiencyModel(job="run42", window_ns=10_000_000_000, gap_threshold_ns=1_000_000,
                            flush_rows=65536)  # small batches are buffered up to flush_rows
    model.begin_report(info); model.add_activity(batch); model.add_phases(batch)
    model.end_report()                 # computes the views for the reports so far
    model.iter_updates() -> Iterator[SummaryRecord]  # new summary.jsonl lines, built lazily
    model.take_updates() -> list[SummaryRecord]   # the same as a list
    model.discard_updates()            # drop them unbuilt (batch convert without history)
    model.state() -> SummaryState                 # summary.json content (bounded)
    summarize(job, [(info, activity, phases), ...]) -> SummaryState  # batch convert, tests
    feed_report(model, info, activity, phases, chunk_rows=...)  # sort, chunk, interleave
    job_metrics(useful, comm, span_ns) -> Metrics

Memory is O(chunk + open intervals) for the sweep, plus one row of 9 int64 per (device, window)
and per (device, phase instance) in tables grown by doubling (docs/efficiency.md gives the
cost); the published state is bounded by ``recent`` windows and instances per phase name.
"""

from __future__ import annotations

from prvstream.sinks.efficiency.feed import feed_report, summarize
from prvstream.sinks.efficiency.metrics import job_metrics
from prvstream.sinks.efficiency.model import EfficiencyModel

__all__ = ["EfficiencyModel", "feed_report", "job_metrics", "summarize"]
