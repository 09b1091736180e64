"""Batch conversion (``prvstream convert``): a set of exports -> one globally sorted trace.

Reports are planned first (objects and first appearances, one aggregate scan per table), so
that ids are canonical and the output depends only on the set of reports, never on their order
on the command line. Then every report streams its tables in time order and a bounded-fan-in
k-way merge writes one globally sorted ``.prv``; ``.pcf`` and ``.row`` follow from the ids.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from prvstream.daemon.config import Settings, user_kind
from prvstream.daemon.kinds import registry
from prvstream.daemon.stream.merge import KEY_TIME, Stream, key_objects, merge_bounded
from prvstream.daemon.stream.numbering import Numbering
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
from prvstream.sinks.base import Sink
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.errors import NotAnExport, OutputConflict, PrvstreamError, UnsupportedSchema
from prvstream.sinks.files import atomic_write, fsync_dir, output_mode
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.summary import SummaryWriter

__all__ = [
    "ConvertResult",
    "canonical_numbering",
    "convert",
    "event_types",
    "expand_inputs",
    "numbering_of",
    "thread_spans",
    "track_thread_last",
    "write_trace",
]

log = get_logger(__name__)

#: smallest chunk a report gets when many reports share the chunk budget
_MIN_SHARED_CHUNK = 512
#: the header is sized for an end time of this many digits, so it never needs to grow
_END_DIGITS = 10**17


@dataclass
class ConvertResult:
    """What a conversion did."""

    reports: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    rows: Counter[str] = field(default_factory=Counter)
    #: Paraver records written per kind (they add up to ``records``)
    kind_records: Counter[str] = field(default_factory=Counter)
    records: int = 0
    end_time: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    outputs: list[str] = field(default_factory=list)
    #: the ids and origin the trace was written with
    numbering: Numbering | None = None
    origin: int = 0


def _exported(rep: Path) -> Path:
    """The ``.sqlite`` of a ``.nsys-rep``: beside it already, or exported with nsys."""
    target = rep.with_suffix(".sqlite")
    if target.exists():
        return target
    # the readiness module brings anyio (and asyncio) along: only for .nsys-rep inputs
    from prvstream.daemon.service.readiness import export_with_nsys

    return export_with_nsys(rep, target)


def expand_inputs(inputs: Iterable[str]) -> tuple[list[Path], list[tuple[str, str]]]:
    """Files, directories (every export inside, by the daemon's discovery rules: outputs,
    hidden and temporary files excluded) and .nsys-rep files."""
    found: list[Path] = []
    failed: list[tuple[str, str]] = []
    for raw in inputs:
        path = Path(raw)
        if path.is_dir():
            hits = []
            from prvstream.daemon.service.discover import scan_once  # the watcher's stack: lazily

            for cand in scan_once([path]):
                if cand.kind == "done":  # a job-end marker, not an export
                    continue
                try:
                    hits.append(_exported(cand.path) if cand.kind == "nsys-rep" else cand.path)
                except PrvstreamError as exc:
                    failed.append((str(cand.path), str(exc)))
            if not hits:
                failed.append((raw, "directory holds no .sqlite export"))
            found.extend(hits)
        elif not path.exists():
            failed.append((raw, "no such file"))
        elif not path.is_file():  # a FIFO would block the open, a device never end
            failed.append((raw, "not a regular file (a FIFO, device or socket); pass the "
                                ".sqlite export itself"))
        elif path.suffix == ".nsys-rep":
            try:
                found.append(_exported(path))
            except PrvstreamError as exc:
                failed.append((raw, str(exc)))
        else:
            found.append(path)
    unique = sorted({p.resolve(): p for p in found}.values(), key=lambda p: str(p.resolve()))
    return unique, failed


def event_types(numbering: Numbering) -> list[pv.EventTypeSpec]:
    """The .pcf blocks of a trace, derived from its numbering only."""
    return registry.event_types(numbering.values)


def _check_output(path: Path) -> None:
    if path.is_symlink():
        raise OutputConflict(f"{path} is a symlink; choose another output path")


def canonical_numbering(ordered: list[PreparedReport]) -> Numbering:
    """The canonical ids of a set of reports (sorted by ``PreparedReport.sort_key``)."""
    return numbering_of((objects_of(rep), value_labels_of(rep)) for rep in ordered)


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
) -> ConvertResult:
    """Convert planned reports into ``out``.prv/.pcf/.row (temporary files renamed in place).

    By default ids are canonical and the origin is the earliest report start, so ``reports``
    may come in any order; a live job passes its own ``numbering`` (appended to, never
    renumbered) and ``origin``. ``sink`` (one report at a time only) or ``sink_for`` (a sink
    per report) receive the GPU activity. ``thread_last``, when given, is filled with each
    (task, thread)'s last record time. Memory: chunk x fan-in.
    """
    started = time.perf_counter()
    result = ConvertResult(reports=[str(r.path) for r in reports])
    if not reports:
        raise NotAnExport("no convertible export among the inputs")
    ordered = sorted(reports, key=lambda r: r.sort_key)
    if origin is None:
        origin = min(r.wall_start for r in ordered)
    if numbering is None:
        numbering = canonical_numbering(ordered)
    live_numbering = numbering
    planned_rows = sum(sum(r.plan.counts.get(k, 0) for k in r.kinds) for r in ordered)

    if len(ordered) > 1:  # planned: free every connection until its report streams
        for rep in ordered:
            rep.close()
    # memory budget: every open report pools about one chunk per table, and up to fan_in
    # reports are open at once, so share settings.chunk_rows among them
    open_reports = min(len(ordered), settings.fan_in)
    chunk_rows = max(_MIN_SHARED_CHUNK, settings.chunk_rows // open_reports)

    def lazy(index: int, rep: PreparedReport) -> Stream:
        rep.open(chunk_rows)
        ctx, info = report_context(rep, live_numbering, origin, index, settings.phase_pattern)
        target = sink_for(rep) if sink_for is not None else sink
        try:
            yield from report_stream(rep, ctx, info, chunk_rows, target, result.rows,
                                     result.kind_records)
        finally:
            rep.close()

    streams = [lazy(i, rep) for i, rep in enumerate(ordered)]
    out.parent.mkdir(parents=True, exist_ok=True)
    prv, pcf, row = (out.with_name(out.name + ext) for ext in (".prv", ".pcf", ".row"))
    for path in (prv, pcf, row):
        _check_output(path)
    capacity = max(header_capacity or settings.header_capacity,
                   len(pv.header_line(numbering.layout(), _END_DIGITS, origin)) + 16)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{prv.name}.", suffix=".tmp", dir=prv.parent)
    tmp = Path(tmp_name)
    os.fchmod(fd, output_mode())  # mkstemp's 0600 would hide the trace from its readers
    end_time = 0
    records = 0
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(b" " * (capacity - 1) + b"\n")
            # one report's stream is already merged; several are merged with bounded fan-in
            merged = streams[0] if len(streams) == 1 else merge_bounded(streams, settings.fan_in)
            for batch, _ in merged:
                if not len(batch):
                    continue
                fh.write(batch.text())
                records += len(batch)
                end_time = max(end_time, int(batch.keys[:, KEY_TIME].max()))
                if thread_last is not None:
                    track_thread_last(batch.keys, thread_last)
                if progress is not None:
                    progress(sum(n for k, n in result.rows.items() if not registry.get(k).derived),
                             planned_rows)
            fh.flush()
            fh.seek(0)
            # the header is written last: objects registered while streaming are included
            fh.write(pv.header_line(numbering.layout(), end_time, origin, capacity))
            fh.flush()
            os.fsync(fh.fileno())
        atomic_write(pcf, pv.pcf_text(event_types(numbering)))
        atomic_write(row, pv.row_text(numbering.layout()))
        os.replace(tmp, prv)
        fsync_dir(prv.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    result.records = records
    result.end_time = end_time
    result.numbering = numbering
    result.origin = origin
    result.bytes_written = prv.stat().st_size
    result.seconds = time.perf_counter() - started
    result.outputs = [str(prv), str(pcf), str(row)]
    return result


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


def _check_requested(reports: list[PreparedReport], wanted: list[str]) -> None:
    """Raise when no input holds any kind ``--trace`` asked for; warn for each asked-for
    kind no input holds (the trace is still useful without it)."""
    found = {k for rep in reports for k in rep.kinds}
    held = {k for rep in reports for k, n in rep.plan.counts.items() if n}
    if held & {"kernel", "memcpy"} and "runtime" in held:
        held.add("comm")  # links join API calls to the GPU work they started
    names = ", ".join(user_kind(k) for k in sorted(held)) or "nothing prvstream converts"
    absent = [user_kind(k) for k in wanted if k not in found]
    if not found:
        raise UnsupportedSchema(
            f"no input holds {' or '.join(absent)} data (asked for with --trace); the inputs "
            f"hold {names}: choose from those, or profile with nsys --trace including it")
    for kind in absent:
        log.warning("kind_absent", kind=kind,
                    message=f"no input holds {kind} data (asked for with --trace); converted "
                            f"the rest")


def convert(inputs: Iterable[str], out: Path, settings: Settings,
            model: EfficiencyModel | None = None,
            progress: Callable[[int, int], None] | None = None,
            summary_jsonl: Path | None = None) -> ConvertResult:
    """Expand, plan and convert; bad inputs are reported and skipped, the rest converted.

    With ``model``, every report's GPU activity is spooled during the one pass over its
    tables and replayed into the efficiency model in canonical report order afterwards; its
    records stream into ``summary_jsonl`` as each report ends (else they are dropped).
    """
    paths, failed = expand_inputs(inputs)
    reports: list[PreparedReport] = []
    for path in paths:
        try:
            rep = prepare(path, settings.kinds or None,  # one report: its reads start now
                          prefetch_rows=settings.chunk_rows if len(paths) == 1 else None)
        except PrvstreamError as exc:
            failed.append((str(path), str(exc)))
        else:
            objects_of(rep)  # what numbering needs, read while the connection is open
            value_labels_of(rep)
            if len(paths) > 1:
                rep.close()  # connections reopen one fan-in group at a time
            reports.append(rep)
    for path_text, reason in failed:
        log.error("input_rejected", path=path_text, reason=reason,
                  message=f"skipped {path_text}: {reason}")
    if not reports:
        raise NotAnExport(f"none of the {len(failed)} input(s) could be converted "
                          "(each reason is given above)")
    if settings.kinds:
        _check_requested(reports, settings.kinds)
    spools: dict[Path, ReportSpool] = {}

    def spool_for(rep: PreparedReport) -> Sink | None:
        if model is None or len(reports) == 1:
            return model  # one report streams alone: feed the model directly
        spools[rep.path] = ReportSpool()
        return spools[rep.path]

    history = None
    if model is not None and summary_jsonl is not None:
        part = summary_jsonl.with_name(f".{summary_jsonl.name}.part")
        part.unlink(missing_ok=True)
        history = SummaryWriter(part)

    def publish_updates(m: EfficiencyModel) -> None:
        if history is None:
            m.discard_updates()
        else:  # records are built and written one slice at a time
            history.append_many(m.iter_updates())

    try:
        result = write_trace(reports, out, settings, progress=progress, sink_for=spool_for)
        if model is not None and spools:
            for rep in sorted(reports, key=lambda r: r.sort_key):
                spools[rep.path].replay(model)
                publish_updates(model)
        elif model is not None:
            publish_updates(model)
        if history is not None and summary_jsonl is not None:
            history.publish(summary_jsonl)
            history = None
    finally:
        if history is not None:
            history.path.unlink(missing_ok=True)
        for rep in reports:
            rep.close()
        for spool in spools.values():
            spool.discard()
    result.failed = failed
    return result
