"""Group commit: reports that become ready together are appended as one journal commit, with
one fsync of their blocks, one header rewrite, one ``.pcf``/``.row`` publish and one summary
update, so that the per-report cost does not grow with what the trace already holds.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from prvstream.daemon.live.blockstore import ReportMeta
from prvstream.daemon.live.inputs import ReportIdentity
from prvstream.daemon.live.livetrace import LiveTrace
from prvstream.daemon.live.outcomes import (
    AppendInterrupted,
    AppendResult,
    MemberFailed,
    _OrderBroken,
)
from prvstream.daemon.stream.pipeline import objects_of, ranked_tasks
from prvstream.daemon.stream.spool import ReportSpool
from prvstream.sinks.errors import StateDirUnusable
from prvstream.sinks.logger import get_logger

__all__ = ["GROUP_MAX_REPORTS", "GROUP_MAX_SECONDS", "MemberFailed", "append_group"]

log = get_logger(__name__)

#: a group stops taking reports once this many seconds went into it (what a kill -9 can cost,
#: and how late the first of them shows in the trace) or, when more, this many times what the
#: last group's commit took: the commit (the efficiency model's update and checkpoint, which
#: grow with the devices in the job) stays a small share of a report's cost however many
#: devices the job has
GROUP_MAX_SECONDS = 2.0
GROUP_COMMIT_FACTOR = 5.0
#: and at this many reports, the bound on what one commit lists (its journal entries and block
#: metas). It is rarely what ends a group: at 256, the cap before, a job of 10,000 tiny
#: reports ended every group by count, and each report's share of the commit grew with the
#: devices (13 -> 30 ms a report from the first to the 10,000th)
GROUP_MAX_REPORTS = 4096


class _Unfit(Exception):
    """The report needs a rewrite of the trace (before the origin, or thread order broken)."""


def append_group(trace: LiveTrace, items: Sequence[tuple[Path, ReportIdentity]], *,
                 max_seconds: float | None = None) -> list[AppendResult]:
    """Append the first of ``items`` and as many of the next as fit as one journal commit;
    their results (the rest are left for the next call).

    Any failure rolls back every report of the group exactly as crash recovery would
    (nothing of it is committed) and is raised. A report's own failure is raised as
    ``MemberFailed`` (the cause chained; ``StateDirUnusable`` as itself): the reports before
    it can go again as a group and it alone. Any other (the commit's) leaves the caller to
    append them one by one, each with its own reason. A report that needs a rewrite ends the
    group before it.
    """
    if len(items) == 1:
        return [trace.append(*items[0])]
    if max_seconds is None:
        max_seconds = max(GROUP_MAX_SECONDS, GROUP_COMMIT_FACTOR * trace.commit_seconds)
    state = trace.journal.state
    snapshot = trace.journal.snapshot()
    trace._model_fed = False
    started = time.perf_counter()
    results: list[AppendResult] = []
    trace.model.hold_updates()
    try:
        for path, identity in items:
            if results and time.perf_counter() - started > max_seconds:
                break
            t0 = time.perf_counter()
            try:
                records, rows = _append_member(trace, path, identity)
            except _Unfit:
                if results:
                    break
                trace.model.release_updates()
                return [trace.append(path, identity)]  # nothing of the group was written
            except (StateDirUnusable, AppendInterrupted):
                raise
            except Exception as exc:
                raise MemberFailed(len(results), path.name) from exc
            results.append(AppendResult(report=path.name, records=records, rows=rows,
                                        compacted=False, seconds=time.perf_counter() - t0,
                                        prv_length=state.prv_length))
        commit_started = time.perf_counter()
        with trace.out.open(trace.prv.name, "r+b") as fh:
            os.fsync(fh.fileno())
        trace.blocks.sync()  # the members' codes and metas, once
        trace._publish_header()
        trace._publish_metadata()
        trace.model.release_updates()
        trace._publish_summary()
        trace._remember_prv()
        for path, identity in items[:len(results)]:  # rewritten meanwhile: read again
            trace._same_file(path, identity)
        trace._commit()
    except BaseException:
        if not trace._model_fed:
            trace.model.release_updates()  # nothing held: builds nothing
        trace._roll_back(snapshot)
        raise
    trace.commit_seconds = time.perf_counter() - commit_started
    share = trace.commit_seconds / len(results)
    for result in results:
        result.seconds += share
        log.info("report_appended", job=state.job_dir, report=result.report,
                 records=result.records, compacted=False, seconds=round(result.seconds, 3),
                 tasks=len(trace.numbering.tasks), group=len(results))
    log.info("group_committed", job=state.job_dir, reports=len(results),
             seconds=round(time.perf_counter() - started, 3),
             commit_s=round(share * len(results), 3), prv_length=state.prv_length)
    return results


def _append_member(trace: LiveTrace, path: Path, identity: ReportIdentity
                   ) -> tuple[int, Counter[str]]:
    """Write one report's block (not yet fsynced or published), feed the model, record its
    journal entry (not yet committed)."""
    state = trace.journal.state
    trace._same_file(path, identity)
    rep = trace._prepare(path)
    spool = ReportSpool()
    try:
        trace._same_file(path, identity)  # SQLite opened it by name: still the checked file?
        fp = trace._fingerprint(path, rep.wall_start, objects_of(rep))
        origin = state.origin_wall_ns
        if origin is None:
            state.origin_wall_ns = rep.wall_start - state.skew_allowance_ns
        elif rep.wall_start < origin:
            raise _Unfit(path.name)
        try:
            rows, records = trace._append_block(rep, spool, publish=False)
        except _OrderBroken:
            state.origin_wall_ns = origin
            raise _Unfit(path.name) from None
        trace._same_file(path, identity)  # rewritten while read: read again, never half
        trace._model_fed = True
        spool.replay(trace.model)
        trace.blocks.add_meta(ReportMeta.of_report(path.name, rep), sync=False)
        trace._record_report(rep.path, rep.wall_start, rep.wall_end, identity, records, fp,
                             ranked_tasks(rep, trace.settings.rank_pattern),
                             hostile=trace._block_hostile)
    finally:
        spool.discard()
        rep.close()
    return records, rows
