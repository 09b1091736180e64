"""What a Dask worker runs: plan a report, convert it into a sorted run, merge a time range.

Every function takes and returns plain picklable values and reads exports by path (a shared
file system is assumed). Each is idempotent: a task that dies with its worker leaves only
``.part`` files behind, and its retry writes afresh.
"""

from __future__ import annotations

import os
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from prvstream.daemon.scale.runs import RunInfo, RunWriter, merge_range
from prvstream.daemon.stream.blockcodes import codes_of
from prvstream.daemon.stream.claims import Claim, host_claims
from prvstream.daemon.stream.numbering import Numbering, NumberingState, state_json
from prvstream.daemon.stream.pipeline import (
    PreparedReport,
    ReportObjects,
    objects_of,
    prepare,
    report_context,
    report_stream,
    value_labels_of,
)
from prvstream.daemon.stream.spool import ReportSpool
from prvstream.daemon.stream.trace import thread_spans, track_thread_last
from prvstream.sinks.base import ReportInfo
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger

__all__ = ["BlockDone", "BlockTask", "ConvertDone", "ConvertTask", "PlanFacts", "convert_block",
           "convert_report", "merge_range_task", "plan_report"]

log = get_logger(__name__)

#: plans kept on a worker between its plan and convert tasks (released connections)
_KEEP = 64
_PLANNED: OrderedDict[tuple[str, tuple[str, ...]], PreparedReport] = OrderedDict()
_PLANNED_LOCK = threading.Lock()


@dataclass
class PlanFacts:
    """What the coordinator needs of a planned report: order, ids and size."""

    path: str
    host: str
    wall_start: int
    wall_end: int
    objects: ReportObjects
    values: dict[str, set[str]]
    planned_rows: int
    #: why the report cannot be converted ("" when it can)
    failed: str = ""
    #: where it gives CPU threads host states (``stream.claims``)
    claims: list[Claim] = field(default_factory=list)

    @property
    def sort_key(self) -> tuple[int, str, str]:
        """Canonical report order (``PreparedReport.sort_key``)."""
        return (self.wall_start, self.host, Path(self.path).name)


@dataclass
class ConvertTask:
    """One report to convert on a worker."""

    path: str
    kinds: list[str]
    origin: int
    index: int
    chunk_rows: int
    phase_pattern: str
    #: ``Settings.rank_pattern`` (ranks from file names)
    rank_pattern: str
    run_base: str
    #: spool the GPU activity for the coordinator's efficiency model
    spool: bool = False
    #: return each (task, thread)'s last record time
    thread_last: bool = False
    #: the claims of earlier reports on its threads (``stream.claims``)
    earlier: list[Claim] = field(default_factory=list)


@dataclass
class ConvertDone:
    """A converted report: its run, counts, and what the coordinator merges."""

    run: RunInfo
    rows: Counter[str]
    #: the conversion registered ids the canonical numbering lacked (output would differ)
    numbering_grew: bool
    spool: tuple[str, ReportInfo] | None = None
    thread_last: dict[tuple[int, int], int] = field(default_factory=dict)
    #: rows dropped or clamped as hostile, by ``"<kind> <what>"`` (``kinds.bounds``)
    hostile: dict[str, int] = field(default_factory=dict)


def _key(path: str, kinds: list[str]) -> tuple[str, tuple[str, ...]]:
    return (path, tuple(kinds))


def plan_report(path: str, kinds: list[str]) -> PlanFacts:
    """Open and plan one export; a report that cannot be converted says why in ``failed``."""
    try:
        rep = prepare(Path(path), kinds or None)
    except PrvstreamError as exc:
        return PlanFacts(path, "", 0, 0, [], {}, 0, failed=str(exc))
    try:
        facts = PlanFacts(
            path=path, host=rep.host, wall_start=rep.wall_start, wall_end=rep.wall_end,
            objects=objects_of(rep), values=value_labels_of(rep),
            planned_rows=rep.planned_rows,
            claims=host_claims(rep))
        rep.close()  # keeps the plan; the convert task reopens it
    except BaseException:
        rep.close()
        raise
    with _PLANNED_LOCK:
        old = _PLANNED.pop(_key(path, kinds), None)
        _PLANNED[_key(path, kinds)] = rep
        while len(_PLANNED) > _KEEP:
            _PLANNED.popitem(last=False)[1].close()
    if old is not None:
        old.close()
    return facts


def _planned(path: str, kinds: list[str], chunk_rows: int) -> PreparedReport:
    """The plan this worker made of ``path`` (reopened), else a fresh one."""
    with _PLANNED_LOCK:
        rep = _PLANNED.pop(_key(path, kinds), None)
    if rep is None:
        rep = prepare(Path(path), kinds or None)
    rep.open(chunk_rows)
    return rep


def convert_report(task: ConvertTask, numbering_state: bytes) -> ConvertDone:
    """Convert one report with the job's numbering into the run ``task.run_base``."""
    rep = _planned(task.path, task.kinds, task.chunk_rows)
    writer = RunWriter(Path(task.run_base))
    spool = ReportSpool(directory=Path(task.run_base).parent) if task.spool else None
    rows: Counter[str] = Counter()
    last: dict[tuple[int, int], int] = {}
    try:
        numbering = Numbering(msgspec.json.decode(numbering_state, type=NumberingState))
        ctx, info = report_context(rep, numbering, task.origin, task.index, task.phase_pattern,
                                   task.rank_pattern, task.earlier)
        for batch, _ in report_stream(rep, ctx, info, task.chunk_rows, spool, rows):
            if not len(batch):
                continue
            writer.add(batch)
            if task.thread_last:
                track_thread_last(batch.keys, last)
        run = writer.close()
    except BaseException:
        writer.abort()
        if spool is not None:
            spool.discard()
        raise
    finally:
        rep.close()
    grew = state_json(numbering.state) != numbering_state
    return ConvertDone(run=run, rows=rows, numbering_grew=grew,
                       spool=spool.detach() if spool is not None else None, thread_last=last,
                       hostile=dict(ctx.hostile))


def merge_range_task(runs: list[tuple[str, int]], lo: int | None, hi: int | None,
                     out: str, offset: int | None = None) -> tuple[int, int]:
    """``runs.merge_range`` as a task."""
    return merge_range(runs, lo, hi, out, offset)


@dataclass
class BlockTask:
    """One report to convert into a live trace's next block."""

    path: str
    kinds: list[str]
    origin: int
    index: int
    chunk_rows: int
    phase_pattern: str
    #: ``Settings.rank_pattern`` (ranks from file names)
    rank_pattern: str
    block: str
    #: the claims of the reports committed before it that come first in canonical order, on
    #: its threads (``stream.claims``): where its host states yield, as a live append's do
    earlier: list[Claim] = field(default_factory=list)


@dataclass
class BlockDone:
    """A converted block: its file, what the journal records, and the numbering after it."""

    block: str
    records: int
    size: int
    end_time: int
    rows: Counter[str]
    #: (task, thread) -> (first, last) record time in the block
    spans: dict[tuple[int, int], tuple[int, int]]
    numbering_after: bytes
    spool: tuple[str, ReportInfo]
    wall_start: int
    wall_end: int
    #: rows dropped or clamped as hostile, by ``"<kind> <what>"`` (``kinds.bounds``)
    hostile: dict[str, int] = field(default_factory=dict)
    #: the block's record codes (``live.blockstore``), beside the block
    codes: str = ""


def convert_block(task: BlockTask, numbering_state: bytes) -> BlockDone:
    """Convert one report with a live job's numbering into the block file ``task.block``."""
    rep = _planned(task.path, task.kinds, task.chunk_rows)
    spool = ReportSpool(directory=Path(task.block).parent)
    rows: Counter[str] = Counter()
    spans: dict[tuple[int, int], tuple[int, int]] = {}
    records = end_time = 0
    part = Path(task.block + ".part")
    codes_part = Path(task.block + ".codes.part")
    try:
        numbering = Numbering(msgspec.json.decode(numbering_state, type=NumberingState))
        ctx, info = report_context(rep, numbering, task.origin, task.index, task.phase_pattern,
                                   task.rank_pattern, task.earlier)
        with part.open("wb") as fh, codes_part.open("wb") as codes_fh:
            for batch, _ in report_stream(rep, ctx, info, task.chunk_rows, spool, rows):
                if not len(batch):
                    continue
                fh.write(batch.text())
                codes_fh.write(codes_of(batch.keys, task.index).tobytes())
                records += len(batch)
                for obj, first, last in thread_spans(batch.keys):
                    old = spans.get(obj)
                    spans[obj] = (first, last) if old is None else (old[0], max(old[1], last))
                    end_time = max(end_time, last)
            fh.flush()
            os.fsync(fh.fileno())
            size = fh.tell()
            codes_fh.flush()
            os.fsync(codes_fh.fileno())
        os.replace(codes_part, task.block + ".codes")
        os.replace(part, task.block)
    except BaseException:
        part.unlink(missing_ok=True)
        codes_part.unlink(missing_ok=True)
        spool.discard()
        raise
    finally:
        rep.close()
    return BlockDone(block=task.block, records=records, size=size, end_time=end_time,
                     rows=rows, spans=spans, numbering_after=state_json(numbering.state),
                     spool=spool.detach(), wall_start=rep.wall_start, wall_end=rep.wall_end,
                     hostile=dict(ctx.hostile), codes=task.block + ".codes")
