"""The BSC/POP GPU efficiency model: a ``Sink`` that keeps rolling device summaries of a job.

Public API (definitions in docs/efficiency.md)::

    model = EfficiencyModel(job="run42", window_ns=10_000_000_000, gap_threshold_ns=1_000_000,
                            flush_rows=65536)  # small batches are buffered up to flush_rows
    model.begin_report(info); model.add_activity(batch); model.add_phases(batch)
    model.add_interleaved(activity, phases)  # both sorted: the calls feed_interleaved makes
    model.end_report()                 # computes the views for the reports so far
    model.iter_updates() -> Iterator[SummaryRecord]  # new summary.jsonl lines, built lazily
    model.take_updates() -> list[SummaryRecord]   # the same as a list
    model.discard_updates()            # drop them unbuilt (batch convert without history)
    model.state() -> SummaryState                 # summary.json content (bounded)
    model.state_json() -> bytes                   # the same, encoded (spliced from disk)
    summarize(job, [(info, activity, phases), ...]) -> SummaryState  # batch convert, tests
    feed_report(model, info, activity, phases, chunk_rows=...)  # sort, chunk, interleave
    job_metrics(useful, comm, span_ns) -> Metrics

Mergeable partial state (scale-out workers, checkpoints)::

    part = model.partial() -> EfficiencyState   # msgspec Struct of whole reports (between them)
    merge(a, b) -> EfficiencyState              # associative, commutative: the state of a+b
    merge_all([a, b, c, ...])                   # the same over many
    encode_partial(st) -> bytes; decode_partial(b) -> EfficiencyState   # msgpack
    EfficiencyModel.from_partial(st, recent=..., published=None) -> EfficiencyModel
    EfficiencyModel.from_partial(st).state() -> SummaryState  # the job's summary.json

Each worker feeds its reports (in start order) into its own model and ships ``partial()``;
merging the parts in any grouping and order gives exactly the state of one model fed every
report in start order (the order batch conversion uses). Phase occurrences of a process are
numbered in start order across its slices; a device belongs to the process of its earliest
report. To resume a checkpoint, pass the last published ``summary.json`` as ``published`` so
that the bounded state continues byte-identically; without it the state is rebuilt.

Memory is O(chunk + open intervals) for the sweep, plus one packed row of 9 int64 per (device,
window) and per (device, phase instance) with time in it (``RowStore``; docs/efficiency.md gives
the cost); the published state is bounded by ``recent`` windows and instances per phase name,
and its records wait in a temporary file (``state_json()`` splices ``summary.json``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from prvstream.sinks.efficiency.feed import feed_report, summarize
from prvstream.sinks.efficiency.metrics import job_metrics
from prvstream.sinks.efficiency.model import EfficiencyModel

if TYPE_CHECKING:
    from prvstream.sinks.efficiency.partial import (
        EfficiencyState,
        decode_partial,
        encode_partial,
        merge,
        merge_all,
    )

__all__ = [
    "EfficiencyModel",
    "EfficiencyState",
    "decode_partial",
    "encode_partial",
    "feed_report",
    "job_metrics",
    "merge",
    "merge_all",
    "summarize",
]

#: the mergeable partial state's names, from ``partial`` loaded at the first use of one (a
#: conversion in one process never merges)
_PARTIAL = frozenset({"EfficiencyState", "decode_partial", "encode_partial", "merge",
                      "merge_all"})


def __getattr__(name: str) -> object:
    """The partial-state names, from ``prvstream.sinks.efficiency.partial``."""
    if name not in _PARTIAL:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.partial"), name)
    globals()[name] = value
    return value
