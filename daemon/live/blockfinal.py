"""A live trace's steps around its committed blocks: finalize by merging them, the codes of a
rewrite, and the committed ``.prv`` kept (a hard link) until the journal names its
replacement, so that recovery after a crash never has to rebuild it from the exports.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from prvstream.daemon.kinds.bounds import note_hostile
from prvstream.daemon.live.blockmerge import ExtraReport, merge_blocks
from prvstream.daemon.live.blockstore import BLOCK_FORMAT, CodesWriter, ReportMeta
from prvstream.daemon.live.reportlog import ReportEntry
from prvstream.daemon.stream.blockcodes import codes_of
from prvstream.daemon.stream.merge import Stream
from prvstream.daemon.stream.numbering import Numbering
from prvstream.daemon.stream.pipeline import (
    PreparedReport,
    report_context,
    report_stream,
)
from prvstream.daemon.stream.spool import ReportSpool
from prvstream.daemon.stream.trace import ConvertResult
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver.records import RecordBatch

if TYPE_CHECKING:
    from prvstream.daemon.live.livetrace import LiveTrace

__all__ = ["RewriteCodes", "committed", "compact_from_blocks", "finalize_from_blocks",
           "keep_committed", "restore_committed"]

log = get_logger(__name__)


def _backup(trace: LiveTrace) -> Path:
    return trace.prv.with_name(f".{trace.prv.name}.committed")


def keep_committed(trace: LiveTrace) -> None:
    """Hard-link the committed ``.prv`` before a rewrite is renamed over it."""
    backup = _backup(trace)
    backup.unlink(missing_ok=True)
    if trace.journal.reports and trace.prv.exists():
        try:
            os.link(trace.prv, backup, follow_symlinks=False)
        except OSError as exc:  # then a crash before the commit rebuilds from the exports
            log.warning("committed_trace_not_linked", prv=str(trace.prv), error=str(exc))


def committed(trace: LiveTrace) -> None:
    """After a journal commit: the kept ``.prv`` and older codes files are no longer needed."""
    _backup(trace).unlink(missing_ok=True)
    store = trace.blocks
    keep = trace.journal.state.codes_name
    for path in store.folder.glob(f"{store.stem}.codes.*"):
        if path.name != keep:
            path.unlink(missing_ok=True)


def restore_committed(trace: LiveTrace) -> None:
    """At recovery: a rewrite renamed into place whose commit never happened gives way to the
    committed ``.prv`` kept beside it."""
    backup = _backup(trace)
    inode = trace.journal.state.prv_inode
    with contextlib.suppress(FileNotFoundError):
        kept = backup.stat().st_ino
        current = trace.prv.stat().st_ino if trace.prv.exists() else None
        if inode is not None and kept == inode and current != inode:
            os.replace(backup, trace.prv)
            log.warning("uncommitted_rewrite_undone", prv=str(trace.prv))
        else:
            backup.unlink()


class RewriteCodes:
    """The codes of a rewrite of ``reports`` (journal order, a new report last), written to a
    new codes file that the rewrite's journal commit adopts."""

    def __init__(self, trace: LiveTrace, reports: list[PreparedReport]) -> None:
        self.trace = trace
        self.reports = reports
        order = sorted(range(len(reports)), key=lambda i: reports[i].sort_key)
        self.journal_of = np.array(order, np.int64)
        self.name = trace.blocks.new_codes_name()
        self.writer: CodesWriter = trace.blocks.rewrite_codes(self.name)

    def write(self, batch: RecordBatch) -> None:
        self.writer.write(codes_of(batch.keys, self.journal_of))

    def abort(self) -> None:
        self.writer.abort()
        self.trace.blocks.codes_path(self.name).unlink(missing_ok=True)

    def adopt(self) -> None:
        """Close the codes; a job committed without them gets the metas of its reports too."""
        self.writer.close()
        store = self.trace.blocks
        state = self.trace.journal.state
        if state.block_format != BLOCK_FORMAT or not store.claims_known():
            state.block_format = BLOCK_FORMAT
            state.metas_length = 0
            for entry, rep in zip(self.trace.journal.reports, self.reports, strict=False):
                store.add_meta(ReportMeta.of_report(entry.name, rep))
            log.info("block_codes_migrated", job=state.job_dir,
                     reports=len(self.trace.journal.reports))
        store.adopt(self.name, self.writer.records)


def finalize_from_blocks(trace: LiveTrace) -> ConvertResult:
    """The canonical trace from the committed blocks alone, renamed into place (the journal's
    offsets follow; the commit is the caller's)."""
    result = _merge(trace, None, None, trace.settings.header_capacity, trace.progress)
    # copies an older prvstream kept of the exports are not needed any more
    shutil.rmtree(trace.out.path / ".prvstream-kept", ignore_errors=True)
    if any(entry.kept for entry in trace.journal.reports):
        trace.journal.reports.replace_all(_not_kept)
    return result


def _not_kept(entry: ReportEntry) -> None:
    entry.kept = ""


def compact_from_blocks(trace: LiveTrace, rep: PreparedReport, spool: ReportSpool | None,
                        origin: int) -> ConvertResult:
    """The live trace rewritten at ``origin`` from its committed blocks with ``rep`` merged
    in (live ids kept, ``rep``'s appended); ``spool`` gets ``rep``'s GPU activity."""
    settings = trace.settings
    result = ConvertResult()
    meta = ReportMeta.of_report(rep.path.name, rep)
    earlier = trace.blocks.earlier(meta.sort_key, meta.claims or [])

    def stream(numbering: Numbering, index: int) -> Stream:
        ctx, info = report_context(rep, numbering, origin, index, settings.phase_pattern,
                                   settings.rank_pattern, earlier)
        yield from report_stream(rep, ctx, info, settings.chunk_rows, spool, result.rows,
                                 result.kind_records)
        note_hostile(result.hostile, rep.path.name, ctx.hostile)

    merged = _merge(trace, ExtraReport(meta, stream), origin,
                    trace.journal.state.header_capacity, None, result)
    return merged


def _merge(trace: LiveTrace, extra: ExtraReport | None, origin: int | None, capacity: int,
           progress: Callable[[int, int], None] | None,
           result: ConvertResult | None = None) -> ConvertResult:
    state = trace.journal.state
    store = trace.blocks
    tmp_out = trace.prv.with_name(f".{trace.name}.rewrite")
    name = store.new_codes_name()
    codes = store.rewrite_codes(name)
    try:
        if extra is None and trace.settings.dask:  # finalize: ranges merged on the workers
            from prvstream.daemon.live.rangefinal import merge_blocks_on_dask

            merged = merge_blocks_on_dask(
                trace.settings.dask, store, trace.prv, Path(str(tmp_out) + ".prv"),
                live=trace.numbering, live_origin=state.origin_wall_ns or 0,
                fan_in=trace.settings.fan_in, chunk_rows=trace.settings.chunk_rows,
                header_capacity=capacity, codes_out=codes, progress=progress)
        else:
            merged = merge_blocks(
                store, trace.prv, Path(str(tmp_out) + ".prv"), live=trace.numbering,
                live_origin=state.origin_wall_ns or 0, fan_in=trace.settings.fan_in,
                chunk_rows=trace.settings.chunk_rows, header_capacity=capacity,
                codes_out=codes, progress=progress, extra=extra, origin=origin)
    except BaseException:
        codes.abort()
        store.codes_path(name).unlink(missing_ok=True)
        raise
    codes.close()
    result = result if result is not None else ConvertResult()
    result.records, result.end_time = merged.records, merged.end_time
    result.numbering, result.origin = merged.numbering, merged.origin
    trace._adopt_rewrite(tmp_out, None if extra is None else trace.numbering, result,
                         merged.thread_last)
    store.adopt(name, codes.records)
    return result
