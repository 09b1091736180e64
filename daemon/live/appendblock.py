"""One report written as a block behind a live trace's last committed byte (thread order
checked, codes kept, rolled back on any failure) and its journal entry recorded.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import IO, TYPE_CHECKING

from prvstream.daemon.kinds.bounds import note_hostile
from prvstream.daemon.live.inputs import ReportIdentity
from prvstream.daemon.live.journal import ReportEntry, ThreadTime
from prvstream.daemon.live.outcomes import AppendInterrupted, _OrderBroken
from prvstream.daemon.stream.blockcodes import codes_of
from prvstream.daemon.stream.claims import host_claims
from prvstream.daemon.stream.pipeline import PreparedReport, report_context, report_stream
from prvstream.daemon.stream.ranks import RankedTask
from prvstream.daemon.stream.spool import ReportSpool
from prvstream.daemon.stream.trace import thread_spans, track_thread_last
from prvstream.sinks.errors import OutputConflict
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver.writer import PrvWriter

if TYPE_CHECKING:
    from prvstream.daemon.live.livetrace import LiveTrace

__all__ = ["append_block", "check_order", "is_fresh", "record_report",
           "seek_block_start"]

log = get_logger(__name__)


def record_report(trace: LiveTrace, path: Path, wall_start: int, wall_end: int,
                  identity: ReportIdentity, records: int, fp: str,
                  ranks: list[RankedTask] | None = None, *,
                  hostile: dict[str, int] | None = None) -> None:
    """Add the report last written to the journal (its commit is the caller's)."""
    state = trace.journal.state
    start, end = trace._last_block
    entry = ReportEntry(
        identity=identity, name=path.name, path=str(path), block_start=start,
        block_end=end, records=records,
        thread_last=[ThreadTime(task=k[0], thread=k[1], time=t)
                     for k, t in sorted(trace._block_threads.items())],
        wall_start_ns=wall_start, wall_end_ns=wall_end, fingerprint=fp,
        ranks=ranks or [], hostile=dict(hostile or {}),
    )
    trace.journal.add_report(entry)
    # a file set aside earlier (e.g. seen half-written) that now landed is no longer aside
    trace.journal.unquarantine(path)
    state.finalized = False


def is_fresh(trace: LiveTrace) -> bool:
    """Whether the next block starts a new ``.prv`` (nothing committed yet): asked before the
    file is opened, since opening it creates it. A ``.prv`` gone while the journal has
    committed bytes of it is an output fault (``OutputConflict``: the job degrades and its
    retry's recovery rebuilds the trace from the committed blocks); writing on would put the
    block past the end of a new file, behind a run of zero bytes."""
    if trace.journal.state.prv_length == 0:
        return True
    if not trace.prv.exists():
        raise OutputConflict(f"the live trace {trace.prv} is gone though the journal committed "
                             f"{trace.journal.state.prv_length} bytes of it; it is rebuilt "
                             "from the committed blocks when the job is retried")
    return False


def seek_block_start(trace: LiveTrace, fh: IO[bytes], fresh: bool) -> int:
    """Cut the live ``.prv`` back to its last committed byte (a ``fresh`` one gets a blank
    header of the journal's capacity) and seek there: where the next block goes. Returns the
    offset."""
    state = trace.journal.state
    start = state.prv_length or state.header_capacity
    if fresh:
        fh.truncate(0)
        fh.write(b" " * (state.header_capacity - 1) + b"\n")
    else:
        fh.truncate(start)
    fh.seek(start)
    return start


def append_block(trace: LiveTrace, rep: PreparedReport, spool: ReportSpool, *,
                 publish: bool = True) -> tuple[Counter[str], int]:
    """Write the report's block behind the last one; ``publish=False`` (a group) leaves
    the fsync, header and ``.pcf``/``.row`` to the group's end."""
    state = trace.journal.state
    assert state.origin_wall_ns is not None
    mark = trace.numbering.mark()
    rows: Counter[str] = Counter()
    block_threads: dict[tuple[int, int], int] = {}
    checked: set[tuple[int, int]] = set()
    start = state.prv_length or state.header_capacity
    fresh = is_fresh(trace)
    codes = trace.blocks.append_codes()
    with trace.out.open(trace.prv.name, "r+b") as fh:
        try:
            seek_block_start(trace, fh, fresh)
            writer = PrvWriter(fh, end_time=trace.end_time)
            # overlapping capture ranges: yield to the committed reports that come first
            earlier = trace.blocks.earlier(rep.sort_key, host_claims(rep))
            ctx, info = report_context(rep, trace.numbering, state.origin_wall_ns,
                                       len(trace.journal.reports),
                                       trace.settings.phase_pattern,
                                       trace.settings.rank_pattern, earlier)
            trace._block_hostile = {}
            for batch, _ in report_stream(rep, ctx, info, trace.settings.chunk_rows,
                                          spool, rows):
                if trace.abort.is_set():
                    raise AppendInterrupted(rep.path.name)
                if not len(batch):
                    continue
                spans = thread_spans(batch.keys)
                trace._check_order(spans, checked)
                writer.write(batch)
                if codes is not None:
                    codes.write(codes_of(batch.keys, len(trace.journal.reports)))
                track_thread_last(batch.keys, block_threads, spans)
            hostile: dict[str, dict[str, int]] = {}
            note_hostile(hostile, rep.path.name, ctx.hostile)
            trace._block_hostile = hostile.get(rep.path.name, {})
            fh.flush()
            if publish:
                os.fsync(fh.fileno())
            length = fh.tell()
            records, end_time = writer.records, writer.end_time
            if codes is not None:
                codes.close(sync=publish)
                state.codes_records = codes.records
        except BaseException:
            if codes is not None:
                codes.abort()
            fh.truncate(start if not fresh else 0)
            fh.flush()
            trace.numbering.undo(mark)
            trace._published.reset(trace.numbering)
            raise
    state.prv_length = length
    state.end_time = end_time
    for key, t in block_threads.items():
        trace.thread_last.raise_to(key, t)
    trace._block_threads = block_threads
    trace._last_block = (start, length)
    if publish:
        trace._publish_header()
        trace._publish_metadata()
    return rows, records


def check_order(trace: LiveTrace, spans: list[tuple[tuple[int, int], int, int]],
                checked: set[tuple[int, int]]) -> None:
    """The first record of each thread in this block must not precede its earlier ones."""
    for obj, first, _ in spans:
        if obj in checked:
            continue
        checked.add(obj)
        if first < trace.thread_last.get(obj, -1):
            raise _OrderBroken(obj)
