"""Batch conversion on a Dask cluster: workers plan, convert and merge; the coordinator numbers,
concatenates and publishes.

1. every report is planned on a worker (``tasks.plan_report``); the coordinator builds the
   canonical numbering and origin from the plans, exactly as ``batch.write_trace`` does;
2. every report becomes a sorted, formatted run on the shared file system
   (``tasks.convert_report``), its GPU activity spooled beside it;
3. the time axis is cut into ranges of about equal size, each merged by a worker
   (``runs.merge_range``); the coordinator appends the ranges in order behind the header, then
   replays the spools into the efficiency model in canonical report order.
The trace is byte-identical to the single-process conversion; when a worker had to register
an id the plans did not predict, the conversion is redone in-process rather than differ.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from prvstream.daemon.config import Settings
from prvstream.daemon.kinds.bounds import note_hostile
from prvstream.daemon.scale.runs import RunInfo, range_extents, remove_run, split_times
from prvstream.daemon.scale.tasks import (
    ConvertDone,
    ConvertTask,
    PlanFacts,
    convert_report,
    merge_range_task,
    plan_report,
)
from prvstream.daemon.stream.batch import expand_inputs
from prvstream.daemon.stream.claims import earlier_claims, overlapping
from prvstream.daemon.stream.numbering import Numbering, state_json
from prvstream.daemon.stream.trace import ConvertResult, numbering_of, trace_metadata
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.errors import NotAnExport, OutputConflict
from prvstream.sinks.files import atomic_write, fsync_dir, output_mode
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.writer import header_capacity

__all__ = ["NumberingDiverged", "convert_dask", "write_canonical"]

log = get_logger(__name__)

#: records a range merge aims at (memory of one merge: about 100 bytes a record)
_RANGE_RECORDS = 1_000_000
#: times Dask reruns a task whose worker died
_RETRIES = 3

Progress = Callable[[int, int], None]


def _as_completed(client: Any, futures: list[Any]) -> Iterable[Any]:
    as_completed: Any = importlib.import_module("distributed").as_completed  # only with --dask
    return as_completed(futures, loop=client.loop)  # type: ignore[no-any-return]


def _plan_all(client: Any, paths: list[Path], settings: Settings
              ) -> tuple[list[PlanFacts], list[tuple[str, str]]]:
    futures = client.map(plan_report, [str(p) for p in paths], kinds=list(settings.kinds),
                         pure=False, retries=_RETRIES, key=[f"plan-{i}-{p.name}"
                                                            for i, p in enumerate(paths)])
    facts: list[PlanFacts] = client.gather(futures)
    failed = [(f.path, f.failed) for f in facts if f.failed]
    return [f for f in facts if not f.failed], failed


def write_canonical(client: Any, paths: list[Path], out: Path, settings: Settings, *,
                    model: EfficiencyModel | None = None,
                    on_model: Callable[[EfficiencyModel], None] | None = None,
                    progress: Progress | None = None,
                    thread_last: dict[tuple[int, int], int] | None = None,
                    ) -> tuple[ConvertResult, list[tuple[str, str]]]:
    """Convert ``paths`` into ``out``.prv/.pcf/.row on the cluster, canonically numbered.

    ``model`` gets every report's GPU activity in canonical report order, as one group
    (``on_model`` runs after it); ``thread_last`` is filled as ``batch.write_trace`` fills
    it. Returns the result and the inputs that could not be planned, with why.
    """
    started = time.perf_counter()
    facts, failed = _plan_all(client, paths, settings)
    if not facts:
        raise NotAnExport(f"none of the {len(failed)} input(s) could be converted "
                          "(each reason is logged as input_rejected)")
    ordered = sorted(facts, key=lambda f: f.sort_key)
    if overlapping([f.claims for f in ordered]):
        # the ranges are merged apart, sized before the merge: records two reports both
        # hold are dropped by one merge of every report (stream.dedupe) only
        log.warning("dask_overlapping_capture_ranges_converting_here", out=str(out))
        raise NumberingDiverged
    origin = min(f.wall_start for f in ordered)
    numbering = numbering_of((f.objects, f.values) for f in ordered)
    planned = sum(f.planned_rows for f in ordered)
    out.parent.mkdir(parents=True, exist_ok=True)
    prv, pcf, row = (out.with_name(out.name + ext) for ext in (".prv", ".pcf", ".row"))
    for path in (prv, pcf, row):
        if path.is_symlink():
            raise OutputConflict(f"{path} is a symlink; choose another output path")
    # runs and ranges go beside the output: a file system every worker shares
    scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}.dask-", dir=out.parent))
    result = ConvertResult(reports=[f.path for f in ordered])
    try:
        done = _convert_all(client, ordered, numbering, origin, settings, scratch,
                            spool=model is not None, thread_last=thread_last is not None,
                            progress=progress, planned=planned)
        if any(d.numbering_grew for d in done):
            raise NumberingDiverged
        for f, d in zip(ordered, done, strict=True):
            result.rows.update(d.rows)
            note_hostile(result.hostile, Path(f.path).name, Counter(d.hostile))
            if thread_last is not None:
                for obj, t in d.thread_last.items():
                    thread_last[obj] = max(thread_last.get(obj, -1), t)
        runs = [d.run for d in done]
        result.records = sum(r.records for r in runs)
        result.end_time = max((r.end_time for r in runs), default=0)
        capacity = header_capacity(numbering.layout(), origin, settings.header_capacity)
        header = pv.header_line(numbering.layout(), result.end_time, origin, capacity)
        # the model is fed while the workers merge the ranges (the coordinator only waits)
        _write_ranges(client, runs, scratch, prv, header, progress,
                      meanwhile=None if model is None else lambda: _replay(done, model,
                                                                            on_model))
        pcf_bytes, row_bytes = trace_metadata(numbering)
        atomic_write(pcf, pcf_bytes, sync_dir=False)
        atomic_write(row, row_bytes, sync_dir=False)
        fsync_dir(prv.parent)  # the three renames made durable at once
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result.numbering = numbering
    result.origin = origin
    result.bytes_written = prv.stat().st_size
    result.seconds = time.perf_counter() - started
    result.outputs = [str(prv), str(pcf), str(row)]
    return result, failed


class NumberingDiverged(Exception):
    """A worker registered ids the canonical numbering did not hold, or capture ranges of
    one process overlap (their repeated records are dropped by one merge): convert
    in-process."""


def _convert_all(client: Any, ordered: list[PlanFacts], numbering: Numbering, origin: int,
                 settings: Settings, scratch: Path, *, spool: bool, thread_last: bool,
                 progress: Progress | None, planned: int) -> list[ConvertDone]:
    state = client.scatter(state_json(numbering.state), broadcast=True)
    earlier = earlier_claims([f.claims for f in ordered])
    tasks = [ConvertTask(path=f.path, kinds=list(settings.kinds), origin=origin, index=i,
                         chunk_rows=settings.chunk_rows, phase_pattern=settings.phase_pattern,
                         rank_pattern=settings.rank_pattern,
                         run_base=str(scratch / f"run-{i:07d}"), spool=spool,
                         thread_last=thread_last, earlier=earlier[i])
             for i, f in enumerate(ordered)]
    futures = [client.submit(convert_report, t, state, pure=False, retries=_RETRIES,
                             key=f"convert-{t.index}-{Path(t.path).name}-{id(tasks)}")
               for t in tasks]
    index = {f.key: i for i, f in enumerate(futures)}
    rows = 0
    try:
        for future in _as_completed(client, futures):
            rows += ordered[index[future.key]].planned_rows
            if progress is not None:
                progress(rows, planned)
        out: list[ConvertDone] = client.gather(futures)
    except BaseException:
        client.cancel(futures)
        raise
    return out


def _write_ranges(client: Any, runs: list[RunInfo], scratch: Path, prv: Path, header: bytes,
                  progress: Progress | None, meanwhile: Callable[[], None] | None = None
                  ) -> None:
    """Merge the runs' ranges into ``prv`` on the workers; ``meanwhile`` runs here once
    every range is submitted."""
    total = sum(r.records for r in runs)
    ranges = max(1, -(-total // _RANGE_RECORDS))
    if len(runs) > 1:
        ranges = max(ranges, 2 * _workers(client))
    cuts = split_times(runs, ranges)
    bounds = list(zip([None, *cuts], [*cuts, None], strict=True))
    extents = range_extents(runs, cuts)
    refs = [(r.base, r.records) for r in runs]
    fd, tmp_name = tempfile.mkstemp(prefix=f".{prv.name}.", suffix=".tmp", dir=prv.parent)
    tmp = Path(tmp_name)
    os.fchmod(fd, output_mode())  # mkstemp's 0600 would hide the trace from its readers
    futures: list[Any] = []
    began = time.perf_counter()
    written = size = 0
    try:
        # the trace sized first: every range worker writes its bytes in place at its offset
        with os.fdopen(fd, "wb") as fh:
            fh.write(header)
            fh.truncate(len(header) + sum(n for _, n in extents))
        at = len(header)
        for k, ((lo, hi), (_, nbytes)) in enumerate(zip(bounds, extents, strict=True)):
            futures.append(client.submit(merge_range_task, refs, lo, hi, str(tmp), at,
                                         pure=False, retries=_RETRIES,
                                         key=f"range-{k}-{id(bounds)}"))
            at += nbytes
        if meanwhile is not None:
            meanwhile()
        for future, (_, nbytes) in zip(futures, extents, strict=True):  # in time order
            records, got = future.result()
            if got != nbytes:
                raise RuntimeError(f"a range merge wrote {got} bytes, its runs hold {nbytes}")
            written += records
            size += got
            if progress is not None:
                progress(written, total)
        waited = time.perf_counter() - began
        with tmp.open("rb+") as fh:  # the workers synced their ranges; the header and size
            os.fsync(fh.fileno())
        log.info("dask_ranges_written", ranges=len(futures), records=written, mb=size / 1e6,
                 seconds=round(waited, 3), mb_per_s=round(size / 1e6 / max(waited, 1e-9), 1),
                 coordinator_copied_mb=0)
        if written != total:
            raise RuntimeError(f"range merges wrote {written} of {total} records")
        os.replace(tmp, prv)
    except BaseException:
        client.cancel(futures)
        tmp.unlink(missing_ok=True)
        raise
    finally:
        for r in runs:
            remove_run(r.base)


def _workers(client: Any) -> int:
    from prvstream.daemon.scale.cluster import worker_count

    return worker_count(client)


def _replay(done: list[ConvertDone], model: EfficiencyModel,
            on_model: Callable[[EfficiencyModel], None] | None) -> None:
    from prvstream.daemon.stream.spool import ReportSpool

    began, began_cpu = time.perf_counter(), time.thread_time()
    model.hold_updates()  # converted together: one summary update, as ``batch.convert``
    for d in done:  # canonical report order
        if d.spool is None:
            continue
        spool = ReportSpool.attach(*d.spool)
        try:
            spool.replay(model)
        finally:
            spool.discard()
    model.release_updates()
    log.info("dask_model_replayed", reports=len(done), rows=sum(sum(d.rows.values())
                                                                for d in done),
             seconds=round(time.perf_counter() - began, 3),
             cpu_s=round(time.thread_time() - began_cpu, 3))
    if on_model is not None:
        on_model(model)


def convert_dask(client: Any, inputs: Iterable[str], out: Path, settings: Settings,
                 model: EfficiencyModel | None = None, progress: Progress | None = None,
                 summary_jsonl: Path | None = None) -> ConvertResult:
    """``batch.convert`` on a cluster: same inputs, same outputs, byte for byte."""
    from prvstream.daemon.stream.batch import SummaryHistory, convert

    paths, failed = expand_inputs(inputs)
    history = SummaryHistory(summary_jsonl if model is not None else None)
    try:
        try:
            result, unplanned = write_canonical(client, paths, out, settings, model=model,
                                                on_model=history.publish_updates,
                                                progress=progress)
        except NumberingDiverged:
            log.warning("dask_numbering_diverged_converting_here", out=str(out))
            history.abandon()
            return convert(inputs, out, settings, model=model, progress=progress,
                           summary_jsonl=summary_jsonl)
        history.commit()
    finally:
        history.abandon()
    failed += unplanned
    for path_text, reason in failed:
        log.error("input_rejected", path=path_text, reason=reason)
    result.failed = failed
    return result

