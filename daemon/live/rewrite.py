"""A live trace written anew, globally sorted (compaction, finalize from the exports, on Dask
when asked), renamed into place with the journal's offsets following it.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from prvstream.daemon.live import blockfinal
from prvstream.daemon.live.reportlog import ReportEntry
from prvstream.daemon.stream.numbering import Numbering
from prvstream.daemon.stream.pipeline import PreparedReport
from prvstream.daemon.stream.spool import ReportSpool
from prvstream.daemon.stream.threadlast import ThreadLast
from prvstream.daemon.stream.trace import ConvertResult, write_trace
from prvstream.sinks.errors import NotAnExport, PrvstreamError
from prvstream.sinks.files import fsync_dir
from prvstream.sinks.logger import get_logger

if TYPE_CHECKING:
    from prvstream.daemon.live.livetrace import LiveTrace

__all__ = ["adopt_rewrite", "rebuild", "rewrite", "rewrite_on_dask"]

log = get_logger(__name__)


def _header_length(prv: Path) -> int:
    """Bytes of a trace's header line, newline included (its capacity)."""
    with prv.open("rb") as fh:
        return len(fh.readline())


def rewrite(trace: LiveTrace, numbering: Numbering | None, origin: int | None,
            extra: PreparedReport | None = None, spool: ReportSpool | None = None,
            ) -> ConvertResult:
    """Write the whole trace anew, globally sorted, from the committed reports' sources
    (plus ``extra``) and rename it into place; the journal's offsets follow, its commit
    is the caller's. ``numbering=None`` renumbers canonically (finalize)."""
    state = trace.journal.state
    if extra is not None and numbering is not None and origin is not None and \
            trace.blocks.complete and trace.journal.reports:  # compaction: no export re-read
        return blockfinal.compact_from_blocks(trace, extra, spool, origin)
    reports: list[PreparedReport] = []
    thread_last: dict[tuple[int, int], int] = {}
    tmp_out = trace.prv.with_name(f".{trace.name}.rewrite")
    if numbering is None and extra is None and trace.settings.dask:
        from prvstream.daemon.scale.convert import NumberingDiverged

        try:
            result = trace._rewrite_on_dask(tmp_out, thread_last)
        except NumberingDiverged:
            log.warning("dask_numbering_diverged_rewriting_here", job=state.job_dir)
            thread_last.clear()
        else:
            return trace._adopt_rewrite(tmp_out, numbering, result, thread_last)
    try:
        for entry in trace.journal.reports:
            try:
                reports.append(trace._prepare(trace._committed_source(entry)))
                reports[-1].arrived_as = entry.name
            except (PrvstreamError, OSError) as exc:
                raise NotAnExport(
                    f"cannot rewrite {trace.prv}: committed report {entry.path} is no "
                    f"longer readable ({exc}); restore it, or finalize without it by "
                    "moving the job's journal aside") from exc
        if extra is not None:
            reports.append(extra)
        spools = {extra.path: spool} if extra is not None and spool is not None else {}
        codes = blockfinal.RewriteCodes(trace, reports)
        try:
            result = write_trace(
                reports, tmp_out, trace.settings, numbering=numbering, origin=origin,
                sink_for=lambda r: spools.get(r.path),
                header_capacity=state.header_capacity if numbering is not None else 0,
                thread_last=thread_last,
                progress=trace.progress if numbering is None else None,
                on_batch=codes.write,
            )
        except BaseException:
            codes.abort()
            raise
        codes.adopt()
    finally:
        for rep in reports:
            if rep is not extra:
                rep.close()
    return trace._adopt_rewrite(tmp_out, numbering, result, thread_last)


def rewrite_on_dask(trace: LiveTrace, tmp_out: Path, thread_last: dict[tuple[int, int], int]
                    ) -> ConvertResult:
    """The canonical rewrite with the reports converted and merged on the Dask cluster."""
    from prvstream.daemon.scale.cluster import get_client
    from prvstream.daemon.scale.convert import write_canonical

    paths = [trace._committed_source(entry) for entry in trace.journal.reports]
    result, failed = write_canonical(get_client(trace.settings.dask), paths, tmp_out,
                                     trace.settings, thread_last=thread_last,
                                     progress=trace.progress)
    if failed:
        path, why = failed[0]
        raise NotAnExport(
            f"cannot rewrite {trace.prv}: committed report {path} is no longer readable "
            f"({why}); restore it, or finalize without it by moving the job's journal "
            "aside")
    return result


def adopt_rewrite(trace: LiveTrace, tmp_out: Path, numbering: Numbering | None,
                  result: ConvertResult, thread_last: dict[tuple[int, int], int]
                  ) -> ConvertResult:
    """Rename a rewritten trace into place; the journal's offsets follow."""
    state = trace.journal.state
    tmp_prv = Path(str(tmp_out) + ".prv")
    header_len = _header_length(tmp_prv)
    if numbering is None:  # canonical ids: its .pcf/.row replace the live ones
        os.replace(Path(str(tmp_out) + ".pcf"), trace.pcf)
        os.replace(Path(str(tmp_out) + ".row"), trace.row)
    else:  # live ids: .pcf/.row follow from the numbering
        for ext in (".pcf", ".row"):
            with contextlib.suppress(FileNotFoundError):
                Path(str(tmp_out) + ext).unlink()
    blockfinal.keep_committed(trace)
    os.replace(tmp_prv, trace.prv)
    fsync_dir(trace.prv.parent)
    state.origin_wall_ns = result.origin
    state.header_capacity = header_len
    state.prv_length = trace.prv.stat().st_size
    state.end_time = result.end_time
    length = state.prv_length
    entries = trace.journal.reports
    # a canonical rewrite may clip host states and drop repeated records (overlapping capture
    # ranges): the last entry takes the difference, so the entries add up to the one block
    short = result.records - sum(e.records for e in entries) if numbering is None else 0
    state.records_total += short
    left = [len(entries)]

    def whole(entry: ReportEntry) -> None:
        entry.block_start, entry.block_end = header_len, length
        left[0] -= 1
        if not left[0]:
            entry.records += short

    trace.journal.reports.replace_all(whole)
    trace.thread_last = ThreadLast(thread_last.items())
    trace._block_threads = dict(thread_last)
    trace._last_block = (header_len, state.prv_length)
    return result


def rebuild(trace: LiveTrace, extra: PreparedReport | None, origin: int,
            spool: ReportSpool | None = None) -> tuple[Counter[str], int]:
    """Rewrite the live trace keeping every published id; the origin may move earlier."""
    before = trace.journal.state.records_total
    result = trace._rewrite(trace.numbering, origin, extra, spool)
    trace._block_hostile = result.hostile.get(extra.path.name, {}) if extra else {}
    trace._publish_metadata()
    # the rewrite wrote every committed report again: this report's own are the rest
    return result.rows, result.records - before
