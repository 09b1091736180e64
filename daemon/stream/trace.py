"""A trace written from planned reports: canonical (or a live job's) numbering, every report
streamed and merged with bounded fan-in, the text written by the Paraver writer. Batch
conversion, scale-out and the live trace's rewrites (compaction, finalize) share it.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import msgspec
import numpy as np

from prvstream.daemon import stages
from prvstream.daemon.config import Settings
from prvstream.daemon.kinds import registry
from prvstream.daemon.kinds.bounds import note_hostile
from prvstream.daemon.nsys.sources import retire_reader as retire_idle_reader
from prvstream.daemon.stream.claims import earlier_claims, host_claims
from prvstream.daemon.stream.dedupe import Repeats, drop_repeats, shares_processes
from prvstream.daemon.stream.merge import (
    KEY_TIME,
    RecordBatch,
    Stream,
    key_objects,
    merge_bounded,
    reduce_streams,
    write_run,
)
from prvstream.daemon.stream.numbering import Numbering
from prvstream.daemon.stream.pipeline import (
    PreparedReport,
    ReportObjects,
    objects_of,
    report_context,
    report_stream,
    value_labels_of,
)
from prvstream.daemon.stream.planned import HelperDiverged, RemoteReport
from prvstream.sinks.base import Sink
from prvstream.sinks.errors import NotAnExport, OutputConflict
from prvstream.sinks.files import atomic_write_all, exclusive_file, fsync_dir, output_mode
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.writer import PrvWriter, metadata, placeholder
from prvstream.sinks.paraver.writer import header_capacity as paraver_capacity

if TYPE_CHECKING:
    from prvstream.daemon.stream.helper import BatchHelper

__all__ = [
    "ConvertResult",
    "canonical_numbering",
    "event_types",
    "numbering_of",
    "report_chunk_rows",
    "thread_spans",
    "trace_metadata",
    "track_thread_last",
    "whole_rows",
    "write_trace",
]

log = get_logger(__name__)

#: smallest chunk a report gets when many reports share the chunk budget
_MIN_SHARED_CHUNK = 512
#: a report of at most this many rows (and ``chunk_rows``) is read whole and sorted once
#: (``pipeline.report_stream``): with ``fan_in`` reports open, at most fan-in x this many rows
#: are held whatever ``--chunk-rows`` says
_WHOLE_ROWS = 4096


class ConvertResult(msgspec.Struct):
    """What a conversion did."""

    reports: list[str] = msgspec.field(default_factory=list)
    failed: list[tuple[str, str]] = msgspec.field(default_factory=list)
    rows: Counter[str] = msgspec.field(default_factory=Counter)
    #: Paraver records written per kind (they add up to ``records``)
    kind_records: Counter[str] = msgspec.field(default_factory=Counter)
    records: int = 0
    #: records dropped as repeating an earlier report's (overlapping capture ranges of one
    #: process, ``stream.dedupe``): ``kind_records`` minus these add up to ``records``
    repeated: int = 0
    #: rows dropped or clamped as hostile (``kinds.bounds``), by report name then
    #: ``"<kind> <what>"``; reports with none are absent
    hostile: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)
    end_time: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    outputs: list[str] = msgspec.field(default_factory=list)
    #: the ids and origin the trace was written with
    numbering: Numbering | None = None
    origin: int = 0


def event_types(numbering: Numbering) -> list[pv.EventTypeSpec]:
    """The .pcf blocks of a trace, derived from its numbering only."""
    return registry.event_types(numbering.values)


def trace_metadata(numbering: Numbering) -> tuple[bytes, bytes]:
    """The .pcf and .row a numbering publishes."""
    return metadata(event_types(numbering), numbering.layout())


def _check_output(path: Path) -> None:
    if path.is_symlink():
        raise OutputConflict(f"{path} is a symlink; choose another output path")


def report_chunk_rows(settings: Settings, reports: int) -> int:
    """Rows a report's table streams fetch at a time when ``reports`` are converted together:
    every open report pools about one chunk per table, and up to ``fan_in`` reports are open
    at once, so they share ``settings.chunk_rows``."""
    return max(_MIN_SHARED_CHUNK, settings.chunk_rows // max(1, min(reports, settings.fan_in)))


def whole_rows(settings: Settings) -> int:
    """A report of at most this many rows is read whole and sorted once."""
    return min(settings.chunk_rows, _WHOLE_ROWS)


def _numbered(rep: PreparedReport | RemoteReport
              ) -> tuple[ReportObjects, dict[str, set[str]]]:
    """What numbering needs of a report, planned here or by the helper."""
    if isinstance(rep, RemoteReport):
        return rep.objects, rep.value_labels
    return objects_of(rep), value_labels_of(rep)


def canonical_numbering(ordered: Sequence[PreparedReport | RemoteReport]) -> Numbering:
    """The canonical ids of a set of reports (sorted by ``PreparedReport.sort_key``), planned
    here or by the helper."""
    return numbering_of(_numbered(rep) for rep in ordered)


def numbering_of(parts: Iterable[tuple[ReportObjects, dict[str, set[str]]]]) -> Numbering:
    """The canonical ids from every report's (objects, value labels), in report order."""
    values: dict[str, set[str]] = {}
    objects: ReportObjects = []
    for report_objects, report_values in parts:
        objects.extend(report_objects)
        for group, labels in report_values.items():
            values.setdefault(group, set()).update(labels)
    numbering = Numbering.canonical(objects, values)
    if len(numbering.tasks) > pv.MAX_PARAVER_OBJECTS:
        log.warning("paraver_object_limit", tasks=len(numbering.tasks),
                    limit=pv.MAX_PARAVER_OBJECTS)
    return numbering


def write_trace(
    reports: list[PreparedReport],
    out: Path,
    settings: Settings,
    sink: Sink | None = None,
    progress: Callable[[int, int], None] | None = None,
    *,
    numbering: Numbering | None = None,
    origin: int | None = None,
    sink_for: Callable[[PreparedReport], Sink | None] | None = None,
    header_capacity: int = 0,
    thread_last: dict[tuple[int, int], int] | None = None,
    on_batch: Callable[[RecordBatch], None] | None = None,
    helper: BatchHelper | None = None,
    sync_dir: bool = True,
    meanwhile: Callable[[], None] | None = None,
    retire_reader: bool = False,
) -> ConvertResult:
    """Convert planned reports into ``out``.prv/.pcf/.row (temporary files renamed in place;
    ``sync_dir=False``: the caller fsyncs their directory, with its own files renamed there).
    ``meanwhile`` is called once every record is written, while the three files are fsynced
    (the caller's summary records: a large trace's fsync is I/O it would wait for), before
    they are renamed; not called when the conversion fails first. With a helper it is called
    once every report is converted, while the helper makes the final merge.

    By default ids are canonical and the origin is the earliest report start, so ``reports``
    may come in any order; a live job passes its own ``numbering`` (appended to, never
    renumbered) and ``origin``. ``sink`` (one report at a time only) or ``sink_for`` (a sink
    per report) receive the GPU activity. ``thread_last``, when given, is filled with each
    (task, thread)'s last record time; ``on_batch`` sees every batch written. Memory: chunk x
    fan-in.

    ``helper`` (canonical numbering only) converts the reports it planned
    (``helper.remote``) in its own process; its records join the merge as a few runs. In a
    batch convert (no ``thread_last``, ``on_batch`` or repeated records) the helper also makes
    the final merge, of its runs and this process's, and writes the records, while this
    process runs ``meanwhile``.

    ``retire_reader`` (a process that converts nothing after): the reader process is let go
    once the last report has streamed, so that it ends while the outputs are written.
    """
    started = time.perf_counter()
    remote = [] if helper is None else helper.remote
    everything: list[PreparedReport | RemoteReport] = [*reports, *remote]
    result = ConvertResult(reports=[str(r.path) for r in everything])
    if not everything:
        raise NotAnExport("no convertible export among the inputs")
    ordered = sorted(everything, key=lambda r: r.sort_key)
    if origin is None:
        origin = min(r.wall_start for r in ordered)
    ids = canonical_numbering(ordered) if numbering is None else numbering
    planned_rows = sum(r.planned_rows for r in ordered)

    repeating = shares_processes({(h, p) for h, p, *_ in _numbered(r)[0]} for r in ordered)
    if len(reports) > 1:  # planned: free every connection until its report streams
        for rep in reports:
            rep.close()
    chunk_rows = report_chunk_rows(settings, len(ordered))

    earlier = earlier_claims([r.claims if isinstance(r, RemoteReport) else host_claims(r)
                              for r in ordered])
    mark = ids.mark() if helper is not None else None
    if helper is not None:
        helper.on_hostile = lambda name, counts: note_hostile(result.hostile, name, counts)
        helper.convert(ids, origin, [(r, i, earlier[i]) for i, r in enumerate(ordered)
                                     if isinstance(r, RemoteReport)], chunk_rows,
                       feed=sink_for is not None)

    def lazy(index: int, rep: PreparedReport) -> Stream:
        if helper is not None:
            helper.poll()  # the helper's feeds replayed as they come
        rep.open(chunk_rows)
        ctx, info = report_context(rep, ids, origin, index, settings.phase_pattern,
                                   settings.rank_pattern, earlier[index])
        target = sink_for(rep) if sink_for is not None else sink
        try:
            yield from report_stream(rep, ctx, info, chunk_rows, target, result.rows,
                                     result.kind_records,
                                     whole_rows=whole_rows(settings))
            note_hostile(result.hostile, rep.path.name, ctx.hostile)
        finally:
            rep.close()
            if retire_reader and index == last:
                retire_idle_reader()

    last = max((i for i, rep in enumerate(ordered) if isinstance(rep, PreparedReport)),
               default=-1)
    streams = [lazy(i, rep) for i, rep in enumerate(ordered) if isinstance(rep, PreparedReport)]
    weights = None
    # the helper, idle once its own reports are converted, makes the final merge and writes
    # the records while this process builds the summary (``meanwhile``): a batch convert's
    # last step on both cores instead of one
    handover = (helper is not None and bool(remote) and not repeating and thread_last is None
                and on_batch is None)
    if helper is not None and remote and not handover:  # its runs, merged last
        weights = [1] * len(streams)
        for stream, weight in helper.streams(settings.fan_in):
            streams.append(stream)
            weights.append(weight)
    out.parent.mkdir(parents=True, exist_ok=True)
    prv, pcf, row = (out.with_name(out.name + ext) for ext in (".prv", ".pcf", ".row"))
    for path in (prv, pcf, row):
        _check_output(path)
    capacity = paraver_capacity(ids.layout(), origin,
                                header_capacity or settings.header_capacity)
    fd, tmp_name = exclusive_file(prv.parent, f".{prv.name}.", ".tmp")
    tmp = Path(tmp_name)
    os.fchmod(fd, output_mode())  # mkstemp's 0600 would hide the trace from its readers
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(placeholder(capacity))
            repeats = Repeats()
            if handover:
                assert helper is not None
                records, end_time = _merged_by_helper(helper, streams, settings.fan_in, fh,
                                                      tmp, capacity, ids, mark, meanwhile)
                meanwhile = None  # it ran while the helper merged
            else:
                records, end_time = _write_records(
                    fh, streams, weights, settings.fan_in, repeats if repeating else None,
                    thread_last, on_batch,
                    None if progress is None else lambda: progress(
                        sum(n for k, n in result.rows.items() if not registry.get(k).derived),
                        planned_rows))
            stages.mark("written")
            # the header is written last: objects registered while streaming are included
            fh.seek(0)
            fh.write(pv.header_line(ids.layout(), end_time, origin, capacity))
            fh.flush()  # synced below, with the .pcf and .row
            if helper is not None:
                result.rows.update(helper.rows)
                result.kind_records.update(helper.kind_records)
                if mark is not None and ids.grown_since(mark):  # ids grew: not the helper's
                    raise HelperDiverged("a report registered ids the numbering lacked")
            if handover and progress is not None:
                progress(sum(n for k, n in result.rows.items()
                             if not registry.get(k).derived), planned_rows)
            pcf_bytes, row_bytes = trace_metadata(ids)
            # the three files fsynced at once (one journal commit), renamed .pcf, .row, .prv
            atomic_write_all([(pcf, pcf_bytes), (row, row_bytes)], also=[fh.fileno()],
                             sync_dir=False, meanwhile=meanwhile)
        os.replace(tmp, prv)
        if sync_dir:
            fsync_dir(prv.parent)  # the three renames made durable at once
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    result.records = records
    result.repeated = repeats.dropped
    result.end_time = end_time
    result.numbering = ids
    result.origin = origin
    result.bytes_written = prv.stat().st_size
    result.seconds = time.perf_counter() - started
    result.outputs = [str(prv), str(pcf), str(row)]
    return result


def _write_records(fh: BinaryIO, streams: list[Stream], weights: list[int] | None,
                   fan_in: int, repeats: Repeats | None,
                   thread_last: dict[tuple[int, int], int] | None,
                   on_batch: Callable[[RecordBatch], None] | None,
                   progress: Callable[[], None] | None) -> tuple[int, int]:
    """Merge ``streams`` (bounded fan-in) and write their records after the placeholder;
    (records, end time)."""
    writer = PrvWriter(fh, behind=True)  # text formatted and written by a thread
    # one report's stream is already merged; several are merged with bounded fan-in
    merged = streams[0] if len(streams) == 1 else merge_bounded(streams, fan_in,
                                                                weights=weights)
    if repeats is not None:  # overlapping capture ranges of one process hold records twice
        merged = drop_repeats(merged, repeats)
    try:
        for batch, _ in merged:
            if not len(batch):
                continue
            writer.write(batch)
            if thread_last is not None:
                track_thread_last(batch.keys, thread_last)
            if on_batch is not None:
                on_batch(batch)
            if progress is not None:
                progress()
        writer.flush()
    finally:
        writer.close()  # the thread stops before the file closes
    return writer.records, writer.end_time


def _merged_by_helper(helper: BatchHelper, streams: list[Stream], fan_in: int,
                      fh: BinaryIO, prv: Path, capacity: int, ids: Numbering,
                      mark: tuple[int, int, dict[str, int]] | None,
                      meanwhile: Callable[[], None] | None) -> tuple[int, int]:
    """Our reports merged into run files, then the helper's final merge of its runs and
    ours written into ``fh`` after the placeholder (by the helper, through the file's path),
    while ``meanwhile`` runs here; (records, end time)."""
    import shutil  # a batch's helper process only
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="prvstream-merge-"))
    try:
        keep = max(1, fan_in - helper.run_count(fan_in))
        runs = [path if path is not None else write_run(stream, scratch)
                for stream, _, path in reduce_streams(streams, fan_in, keep, scratch)]
        # every report of ours has streamed: no id may have been added since the plans
        if mark is not None and ids.grown_since(mark):
            raise HelperDiverged("a report registered ids the numbering lacked")
        fh.flush()
        helper.merge(runs, prv, fh.fileno(), capacity)
        if meanwhile is not None:
            meanwhile()
        return helper.merged()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def thread_spans(keys: np.ndarray) -> list[tuple[tuple[int, int], int, int]]:
    """((task, thread), first time, last time) of every object in a time-sorted batch."""
    task, thread = key_objects(keys)
    code = task << 32 | thread
    order = np.argsort(code, kind="stable")  # stable: time order kept within each object
    cuts = np.flatnonzero(np.diff(code[order])) + 1
    starts = np.concatenate(([0], cuts)) if len(order) else cuts
    ends = np.concatenate((cuts, [len(order)])) if len(order) else cuts
    times = keys[:, KEY_TIME]
    return [((c >> 32, c & 0xFFFFFFFF), f, t) for c, f, t in zip(
        code[order[starts]].tolist(), times[order[starts]].tolist(),
        times[order[ends - 1]].tolist(), strict=True)]


def track_thread_last(keys: np.ndarray, last: dict[tuple[int, int], int],
                      spans: list[tuple[tuple[int, int], int, int]] | None = None) -> None:
    """Fold a sorted batch's last time per (task, thread) into ``last``."""
    for obj, _, t in thread_spans(keys) if spans is None else spans:
        if t > last.get(obj, -1):
            last[obj] = t


