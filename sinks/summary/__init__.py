"""Efficiency summary records: the JSON lines writer, readers, table view, Prometheus file, plot.

Public API (schema in docs/summary-schema.md), one module per job:

- ``records``: ``SummaryRecord`` one line of ``summary.jsonl`` (one view's interval:
  cumulative, a window, a phase instance or a phase name's total); ``SummaryState`` the latest,
  bounded state (``summary.json``, ``OUT.summary.json``). ``Metrics``, ``DeviceRow``,
  ``GroupRow`` are their parts. ``SCHEMA_VERSION`` is what this code writes; ``DEFAULT_RECENT``
  the default bound; ``encode_record``, ``decode_state``.
- ``writer``: ``SummaryWriter(path)``: ``append(record) -> committed length``,
  ``append_many(records)``, ``length``, ``truncate_to(length)`` (recovery), ``write_state``;
  ``read_records(path, offset) -> (records, new_offset)``, ``iter_records(path)``,
  ``load_summary(path) -> (SummaryState, history)``.
- ``fold``: ``fold(records, state, recent=)``, ``SummaryFolder`` (one record at a time).
- ``views``: ``verdict(metrics)``, ``render_table(state, view)``; ``prom``:
  ``prometheus_text(state)``, ``write_prom_file(path, state)``; ``plot``:
  ``plot_summary(state, history, png)``. Those two are loaded at their first use (a conversion
  writes summaries but neither plots nor writes Prometheus files).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from prvstream.sinks.files import atomic_write
from prvstream.sinks.summary.fold import SummaryFolder, fold
from prvstream.sinks.summary.records import (
    DEFAULT_RECENT,
    SCHEMA_VERSION,
    DeviceRow,
    GroupRow,
    Metrics,
    SummaryRecord,
    SummaryState,
    View,
    decode_state,
    encode_record,
)
from prvstream.sinks.summary.views import render_table, verdict
from prvstream.sinks.summary.writer import (
    SummaryWriter,
    iter_records,
    load_summary,
    read_records,
)

if TYPE_CHECKING:
    from prvstream.sinks.summary.plot import plot_summary
    from prvstream.sinks.summary.prom import prometheus_text, write_prom_file

__all__ = [
    "DEFAULT_RECENT",
    "SCHEMA_VERSION",
    "DeviceRow",
    "GroupRow",
    "Metrics",
    "SummaryFolder",
    "SummaryRecord",
    "SummaryState",
    "SummaryWriter",
    "View",
    "atomic_write",
    "decode_state",
    "encode_record",
    "fold",
    "iter_records",
    "load_summary",
    "plot_summary",
    "prometheus_text",
    "read_records",
    "render_table",
    "verdict",
    "write_prom_file",
]

#: names this package gives from modules loaded at the first use of one of them
_LAZY = {"plot_summary": "plot", "prometheus_text": "prom", "write_prom_file": "prom"}


def __getattr__(name: str) -> object:
    """``plot_summary``, ``prometheus_text`` and ``write_prom_file``, from their modules."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
