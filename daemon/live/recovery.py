"""A live trace brought back to exactly what its journal committed: the ``.prv`` truncated (or
rebuilt), ``.pcf``/``.row`` and summaries put back, the efficiency model restored.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import TYPE_CHECKING

import msgspec

from prvstream.daemon.live import blockfinal
from prvstream.daemon.live.checkpoint import restore_checkpoint
from prvstream.daemon.stream.numbering import Numbering, NumberingState, state_json
from prvstream.daemon.stream.pipeline import report_context, report_stream
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary import SummaryWriter

if TYPE_CHECKING:
    from prvstream.daemon.live.livetrace import LiveTrace

__all__ = ["prv_is_committed", "recover", "refeed_model", "remember_prv", "restore_model"]

log = get_logger(__name__)


def recover(trace: LiveTrace, *, refeed: bool = True) -> None:
    """Bring the outputs back to exactly what the journal committed.

    ``refeed=False`` keeps the efficiency model as it is (it was not fed since the last
    commit); otherwise it is rebuilt from the committed reports.
    """
    state = trace.journal.state
    reports = trace.journal.reports
    reports.drop_others()
    trace.journal.ids.drop_others()
    trace.blocks.recover()
    blockfinal.restore_committed(trace)
    if reports and (not trace.prv.exists() or
                          trace.prv.stat().st_size < state.prv_length):
        log.warning("trace_missing_rebuilding", job=state.job_dir, prv=str(trace.prv))
        trace._rebuild(None, state.origin_wall_ns or 0)
    elif reports and not trace._prv_is_committed():
        # a rewrite (compaction, header growth, finalize) was renamed into place but its
        # journal commit never happened: the bytes do not match the journal's offsets
        log.warning("trace_replaced_uncommitted_rebuilding", job=state.job_dir,
                    prv=str(trace.prv))
        trace._rebuild(None, state.origin_wall_ns or 0)
    elif trace.prv.exists():
        with trace.out.open(trace.prv.name, "r+b") as fh:
            if state.prv_length:
                fh.truncate(state.prv_length)
                fh.flush()
                os.fsync(fh.fileno())
        if state.prv_length:
            trace._publish_header()
        else:
            trace.prv.unlink()
    if reports:
        trace._publish_metadata(force=True)
    writer = SummaryWriter(trace.summary_jsonl)
    if writer.length > state.summary_length:
        writer.truncate_to(state.summary_length)
    if refeed:
        trace._restore_model()
    if reports:
        trace.out.replace(trace.summary_json.name, trace.model.state_json())
    trace._remember_prv()
    if reports or state.prv_length:  # a brand-new job has nothing to recover
        log.info("job_recovered", job=state.job_dir, reports=len(reports),
                 prv_length=state.prv_length)


def prv_is_committed(trace: LiveTrace) -> bool:
    """Is the ``.prv`` on disk the file the journal last described (same inode)?"""
    inode = trace.journal.state.prv_inode
    return inode is None or not trace.prv.exists() or trace.prv.stat().st_ino == inode


def remember_prv(trace: LiveTrace) -> None:
    """Record the ``.prv``'s inode for the next journal commit (rewrites change it)."""
    if trace.prv.exists():
        trace.journal.state.prv_inode = trace.prv.stat().st_ino
    else:
        trace.journal.state.prv_inode = None


def _copy_numbering(state: NumberingState) -> NumberingState:
    return msgspec.json.decode(state_json(state), type=NumberingState)


def restore_model(trace: LiveTrace) -> None:
    """The model as of the last commit: from its checkpoint (O(1) in the job's size),
    else rebuilt from the committed reports."""
    model = restore_checkpoint(trace.journal, trace.settings.summary_recent)
    if model is None:
        trace._refeed_model()
    else:
        trace.model = model


def refeed_model(trace: LiveTrace) -> None:
    """Rebuild the efficiency model from the committed reports (their sources)."""
    trace.model = trace._new_model()
    state = trace.journal.state
    if not trace.journal.reports or state.origin_wall_ns is None:
        return
    scratch = Numbering(_copy_numbering(state.numbering))
    for index, entry in enumerate(trace.journal.reports):
        try:
            rep = trace._prepare(trace._committed_source(entry))
        except (PrvstreamError, OSError) as exc:
            log.warning("summary_refeed_skipped", report=entry.path, error=str(exc))
            continue
        try:
            rep.arrived_as = entry.name
            ctx, info = report_context(rep, scratch, state.origin_wall_ns, index,
                                       trace.settings.phase_pattern,
                                       trace.settings.rank_pattern)
            for _ in report_stream(rep, ctx, info, trace.settings.chunk_rows, trace.model,
                                   Counter()):
                pass
            trace.model.discard_updates()  # already in summary.jsonl
        finally:
            rep.close()
    trace.model.discard_updates()
