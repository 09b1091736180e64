"""A live trace's outputs besides its blocks written out: the header rewritten in place (or
the file grown), ``.pcf``/``.row`` replaced, the summaries and ``report.html`` updated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prvstream.daemon.live import blockfinal
from prvstream.daemon.live.reportlog import ReportEntry
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.writer import grow_header, header_capacity
from prvstream.sinks.summary import SummaryWriter

if TYPE_CHECKING:
    from prvstream.daemon.live.livetrace import LiveTrace

__all__ = ["grow", "header", "publish_header", "publish_metadata", "publish_report",
           "publish_summary"]

log = get_logger(__name__)


def header(trace: LiveTrace) -> bytes:
    """The header line for the trace's end time, origin and header capacity."""
    return trace._published.header(trace.end_time, trace.journal.state.origin_wall_ns or 0,
                                   trace.journal.state.header_capacity)


def publish_header(trace: LiveTrace) -> None:
    """Rewrite the header in place, or the whole file when it outgrew its capacity."""
    try:
        line = trace._header()
    except ValueError:
        trace._grow_header()
        return
    pv.rewrite_header(trace.prv, line)


def grow(trace: LiveTrace) -> None:
    """Rewrite the file with a header of (at least) twice the capacity; offsets follow."""
    state = trace.journal.state
    need = header_capacity(trace.numbering.layout(), state.origin_wall_ns or 0, slack=1024)
    new_capacity = max(2 * state.header_capacity, need)
    old_capacity = state.header_capacity
    state.header_capacity = new_capacity
    blockfinal.keep_committed(trace)  # a crash before the commit puts it back
    grow_header(trace.prv, old_capacity, trace._header())
    shift = new_capacity - old_capacity
    state.prv_length += shift

    def move(entry: ReportEntry) -> None:
        entry.block_start += shift
        entry.block_end += shift

    trace.journal.reports.replace_all(move)
    # the block being appended is not in the journal yet: it moves too
    trace._last_block = (trace._last_block[0] + shift, trace._last_block[1] + shift)


def publish_metadata(trace: LiveTrace, *, force: bool = False) -> None:
    """Replace ``.row`` and, when its labels grew (or ``force``), ``.pcf``."""
    pcf = trace._published.pcf()
    if force or pcf is not trace._pcf_written:
        trace.out.replace(trace.pcf.name, pcf)
        trace._pcf_written = pcf
    trace.out.replace(trace.row.name, trace._published.row_pieces())


def publish_summary(trace: LiveTrace) -> None:
    """Append the model's updates to ``summary.jsonl`` and replace ``summary.json``."""
    writer = SummaryWriter(trace.summary_jsonl)
    before = writer.length
    length = writer.append_bytes(trace.model.iter_update_bytes())  # streamed, never all held
    if length != before:
        trace.journal.state.summary_length = length
    trace.out.replace(trace.summary_json.name, trace.model.state_pieces())
    if trace.settings.report_html:
        trace._publish_report()


def publish_report(trace: LiveTrace) -> None:
    """``report.html`` beside the summaries (setting ``report_html``; always on finalize)."""
    from prvstream.sinks.report import render_html

    trace.out.replace("report.html", render_html(trace.model.state()).encode())
