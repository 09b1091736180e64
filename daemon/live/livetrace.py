"""One job's growing trace and summaries: append a block per report, recover, compact, finalize.

The single writer of a job. Each report is streamed (bounded memory) and appended to the
``.prv`` as one time-sorted block behind the last committed byte; then the fixed-capacity header
is rewritten in place, ``.pcf``/``.row`` are replaced atomically, the summary lines appended, and
only then is the journal committed. Recovery truncates everything back to the journal. Ids are
published in arrival order and never change until ``finalize`` renumbers canonically.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from prvstream.daemon.config import Settings
from prvstream.daemon.kinds.bounds import note_hostile
from prvstream.daemon.live import blockfinal
from prvstream.daemon.live.blockstore import BlockStore, ReportMeta
from prvstream.daemon.live.checkpoint import commit_with_checkpoint, restore_checkpoint
from prvstream.daemon.live.inputs import InputChanged, ReportIdentity, fingerprint, stat_input
from prvstream.daemon.live.journal import (
    JobJournal,
    JournalState,
    OutputDir,
    ReportEntry,
    ThreadTime,
)
from prvstream.daemon.live.published import Published
from prvstream.daemon.stream.blockcodes import codes_of
from prvstream.daemon.stream.numbering import Numbering, NumberingState
from prvstream.daemon.stream.pipeline import (
    PreparedReport,
    ReportObjects,
    objects_of,
    prepare,
    ranked_tasks,
    report_context,
    report_stream,
    value_labels_of,
)
from prvstream.daemon.stream.ranks import RankedTask
from prvstream.daemon.stream.spool import ReportSpool
from prvstream.daemon.stream.trace import (
    ConvertResult,
    thread_spans,
    track_thread_last,
    write_trace,
)
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.errors import NotAnExport, PrvstreamError
from prvstream.sinks.files import fsync_dir
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.writer import PrvWriter, grow_header, header_capacity
from prvstream.sinks.summary import SummaryWriter, encode_record

__all__ = ["AppendInterrupted", "AppendResult", "DuplicateReport", "LiveTrace",
           "output_dir_for"]

log = get_logger(__name__)

_NS = 1_000_000_000


def output_dir_for(job_dir: Path, root: Path, settings: Settings) -> Path:
    """``J/prvstream/`` or ``--out``/<J relative to its root>/."""
    if settings.out_dir:
        rel = os.path.relpath(job_dir, root)
        return Path(settings.out_dir) / ("" if rel == "." else rel)
    return job_dir / "prvstream"


@dataclass
class AppendResult:
    """What appending one report did."""

    report: str
    records: int
    rows: Counter[str]
    compacted: bool
    seconds: float
    prv_length: int


class DuplicateReport(PrvstreamError):
    """The report's content is already in the trace under another name."""

    def __init__(self, message: str, *, of: str) -> None:
        super().__init__(message)
        self.of = of


class AppendInterrupted(Exception):
    """The service is stopping: the block in progress was rolled back."""


class _OrderBroken(Exception):
    """A block would put a thread's records before its earlier ones: compaction needed."""


def _header_length(prv: Path) -> int:
    """Bytes of a trace's header line, newline included (its capacity)."""
    with prv.open("rb") as fh:
        return len(fh.readline())


def _copy_numbering(state: NumberingState) -> NumberingState:
    return msgspec.json.decode(msgspec.json.encode(state), type=NumberingState)


class LiveTrace:
    """The growing ``<job>.prv/.pcf/.row`` and ``summary.jsonl/.json`` of one job."""

    def __init__(self, journal: JobJournal, out_dir: Path, name: str, settings: Settings
                 ) -> None:
        self.journal = journal
        self.settings = settings
        self.name = name
        state = journal.state
        state.out_dir = str(out_dir)
        self.out = OutputDir(out_dir, owned=[Path(p).name for p in state.outputs]).prepare()
        self.out.lock(state.job_dir)
        try:
            self.prv = self.out.path_for(f"{name}.prv")
            self.pcf = self.out.path_for(f"{name}.pcf")
            self.row = self.out.path_for(f"{name}.row")
            self.summary_jsonl = self.out.path_for("summary.jsonl")
            self.summary_json = self.out.path_for("summary.json")
        except BaseException:
            self.out.unlock()
            raise
        for path in (self.prv, self.pcf, self.row, self.summary_jsonl, self.summary_json):
            if str(path) not in state.outputs:
                state.outputs.append(str(path))
        if not state.header_capacity:
            state.header_capacity = settings.header_capacity
        if not state.skew_allowance_ns:
            state.skew_allowance_ns = int(settings.skew_allowance * _NS)
        self._published = Published(Numbering(state.numbering))
        self._pcf_written = b""
        self.numbering = Numbering(state.numbering)
        #: the committed blocks' codes and report metas (finalize reads no export)
        self.blocks = BlockStore(journal)
        self.blocks.start()
        self.model = self._new_model()
        #: set from another thread to roll back the block in progress and stop
        self.abort = threading.Event()
        #: ``progress(records or rows done, total)`` during a finalize (a terminal's line)
        self.progress: Callable[[int, int], None] | None = None
        #: whether the append in progress already fed the efficiency model
        self._model_fed = False
        #: seconds the last group commit's publishing and commit took (``live.group``)
        self.commit_seconds = 0.0
        self.thread_last: dict[tuple[int, int], int] = {}
        #: the last block written and its threads' last times (for the journal entry)
        self._last_block: tuple[int, int] = (0, 0)
        self._block_threads: dict[tuple[int, int], int] = {}
        #: the hostile rows of the report last written (``kinds.bounds``)
        self._block_hostile: dict[str, int] = {}
        for entry in state.reports:
            for tt in entry.thread_last:
                key = (tt.task, tt.thread)
                self.thread_last[key] = max(self.thread_last.get(key, -1), tt.time)

    def close(self) -> None:
        """Give up the output directory's lock (the journal's lock is its owner's)."""
        self.out.unlock()

    def _new_model(self) -> EfficiencyModel:
        return EfficiencyModel(self.name, window_ns=int(self.settings.window * _NS),
                               gap_threshold_ns=self.settings.gap_threshold_ns,
                               recent=self.settings.summary_recent,
                               nccl_as=self.settings.nccl_as, top=self.settings.summary_top)

    @property
    def end_time(self) -> int:
        return self.journal.state.end_time

    # -- recovery ------------------------------------------------------------------------
    def recover(self, *, refeed: bool = True) -> None:
        """Bring the outputs back to exactly what the journal committed.

        ``refeed=False`` keeps the efficiency model as it is (it was not fed since the last
        commit); otherwise it is rebuilt from the committed reports.
        """
        state = self.journal.state
        self.blocks.recover()
        blockfinal.restore_committed(self)
        if state.reports and (not self.prv.exists() or
                              self.prv.stat().st_size < state.prv_length):
            log.warning("trace_missing_rebuilding", job=state.job_dir, prv=str(self.prv))
            self._rebuild(None, state.origin_wall_ns or 0)
        elif state.reports and not self._prv_is_committed():
            # a rewrite (compaction, header growth, finalize) was renamed into place but its
            # journal commit never happened: the bytes do not match the journal's offsets
            log.warning("trace_replaced_uncommitted_rebuilding", job=state.job_dir,
                        prv=str(self.prv))
            self._rebuild(None, state.origin_wall_ns or 0)
        elif self.prv.exists():
            with self.out.open(self.prv.name, "r+b") as fh:
                if state.prv_length:
                    fh.truncate(state.prv_length)
                    fh.flush()
                    os.fsync(fh.fileno())
            if state.prv_length:
                self._publish_header()
            else:
                self.prv.unlink()
        if state.reports:
            self._publish_metadata(force=True)
        writer = SummaryWriter(self.summary_jsonl)
        if writer.length > state.summary_length:
            writer.truncate_to(state.summary_length)
        if refeed:
            self._restore_model()
        if state.reports:
            self.out.replace(self.summary_json.name, encode_record(self.model.state()))
        self._remember_prv()
        if state.reports or state.prv_length:  # a brand-new job has nothing to recover
            log.info("job_recovered", job=state.job_dir, reports=len(state.reports),
                     prv_length=state.prv_length)

    def _prv_is_committed(self) -> bool:
        """Is the ``.prv`` on disk the file the journal last described (same inode)?"""
        inode = self.journal.state.prv_inode
        return inode is None or not self.prv.exists() or self.prv.stat().st_ino == inode

    def _remember_prv(self) -> None:
        """Record the ``.prv``'s inode for the next journal commit (rewrites change it)."""
        if self.prv.exists():
            self.journal.state.prv_inode = self.prv.stat().st_ino
        else:
            self.journal.state.prv_inode = None

    # -- the model's checkpoint ------------------------------------------------------------
    def _commit(self) -> None:
        commit_with_checkpoint(self.journal, self.model)
        blockfinal.committed(self)

    def _restore_model(self) -> None:
        """The model as of the last commit: from its checkpoint (O(1) in the job's size),
        else rebuilt from the committed reports."""
        model = restore_checkpoint(self.journal, self.settings.summary_recent)
        if model is None:
            self._refeed_model()
        else:
            self.model = model

    def _refeed_model(self) -> None:
        """Rebuild the efficiency model from the committed reports (their sources)."""
        self.model = self._new_model()
        state = self.journal.state
        if not state.reports or state.origin_wall_ns is None:
            return
        scratch = Numbering(_copy_numbering(state.numbering))
        for index, entry in enumerate(state.reports):
            try:
                rep = self._prepare(self._committed_source(entry))
            except (PrvstreamError, OSError) as exc:
                log.warning("summary_refeed_skipped", report=entry.path, error=str(exc))
                continue
            try:
                rep.arrived_as = entry.name
                ctx, info = report_context(rep, scratch, state.origin_wall_ns, index,
                                           self.settings.phase_pattern,
                                           self.settings.rank_pattern)
                for _ in report_stream(rep, ctx, info, self.settings.chunk_rows, self.model,
                                       Counter()):
                    pass
                self.model.discard_updates()  # already in summary.jsonl
            finally:
                rep.close()
        self.model.discard_updates()

    # -- publishing ------------------------------------------------------------------------
    @property
    def numbering(self) -> Numbering:
        """The live ids (replacing them resets what is kept formatted for publishing)."""
        return self._numbering

    @numbering.setter
    def numbering(self, numbering: Numbering) -> None:
        self._numbering = numbering
        self._published.reset(numbering)
        self._pcf_written = b""

    def _header(self) -> bytes:
        return self._published.header(self.end_time, self.journal.state.origin_wall_ns or 0,
                                      self.journal.state.header_capacity)

    def _publish_header(self) -> None:
        """Rewrite the header in place, or the whole file when it outgrew its capacity."""
        try:
            header = self._header()
        except ValueError:
            self._grow_header()
            return
        pv.rewrite_header(self.prv, header)

    def _grow_header(self) -> None:
        state = self.journal.state
        need = header_capacity(self.numbering.layout(), state.origin_wall_ns or 0, slack=1024)
        new_capacity = max(2 * state.header_capacity, need)
        old_capacity = state.header_capacity
        state.header_capacity = new_capacity
        blockfinal.keep_committed(self)  # a crash before the commit puts it back
        grow_header(self.prv, old_capacity, self._header())
        shift = new_capacity - old_capacity
        state.prv_length += shift
        for entry in state.reports:
            entry.block_start += shift
            entry.block_end += shift
        # the block being appended is not in the journal yet: it moves too
        self._last_block = (self._last_block[0] + shift, self._last_block[1] + shift)

    def _publish_metadata(self, *, force: bool = False) -> None:
        """Replace ``.row`` and, when its labels grew (or ``force``), ``.pcf``."""
        pcf = self._published.pcf()
        if force or pcf is not self._pcf_written:
            self.out.replace(self.pcf.name, pcf)
            self._pcf_written = pcf
        self.out.replace(self.row.name, self._published.row())

    def _publish_summary(self) -> None:
        writer = SummaryWriter(self.summary_jsonl)
        before = writer.length
        length = writer.append_many(self.model.iter_updates())  # streamed, never all held
        if length != before:
            self.journal.state.summary_length = length
        self.out.replace(self.summary_json.name, encode_record(self.model.state()))
        if self.settings.report_html:
            self._publish_report()

    def _publish_report(self) -> None:
        """``report.html`` beside the summaries (setting ``report_html``; always on finalize)."""
        from prvstream.sinks.report import render_html

        self.out.replace("report.html", render_html(self.model.state()).encode())

    # -- appending -------------------------------------------------------------------------
    def append(self, path: Path, identity: ReportIdentity) -> AppendResult:
        """Convert one complete report and commit it to the job (or raise, changing nothing).

        On any failure the journal state of before is restored and the outputs are brought
        back to it exactly as crash recovery would, so a quarantined report leaves no trace.
        """
        snapshot = msgspec.json.encode(self.journal.state)
        self._model_fed = False
        try:
            return self._append(path, identity)
        except BaseException:
            self._roll_back(snapshot)
            raise

    def _roll_back(self, snapshot: bytes) -> None:
        self.journal.restore(msgspec.json.decode(snapshot, type=JournalState))
        self.numbering = Numbering(self.journal.state.numbering)
        self.thread_last = {}
        for entry in self.journal.state.reports:
            for tt in entry.thread_last:
                key = (tt.task, tt.thread)
                self.thread_last[key] = max(self.thread_last.get(key, -1), tt.time)
        self.recover(refeed=self._model_fed)
        log.info("append_rolled_back_to_journal", job=self.journal.state.job_dir,
                 reports=len(self.journal.state.reports))

    def _append(self, path: Path, identity: ReportIdentity) -> AppendResult:
        started = time.perf_counter()
        state = self.journal.state
        self._same_file(path, identity)
        rep = self._prepare(path)
        try:  # SQLite opened it by name: is that name still the file that was checked?
            self._same_file(path, identity)
            fp = self._fingerprint(path, rep.wall_start, objects_of(rep))
        except BaseException:
            rep.close()
            raise
        spool = ReportSpool()
        compacted = False
        try:
            if state.origin_wall_ns is None:
                state.origin_wall_ns = rep.wall_start - state.skew_allowance_ns
            if rep.wall_start < state.origin_wall_ns:
                log.info("report_before_origin", report=path.name,
                         origin=state.origin_wall_ns, start=rep.wall_start)
                compacted = True
                rows, records = self._rebuild(rep, rep.wall_start - state.skew_allowance_ns,
                                              spool)
            else:
                try:
                    rows, records = self._append_block(rep, spool)
                except _OrderBroken:
                    log.info("thread_order_broken_compacting", report=path.name)
                    compacted = True
                    spool.discard()
                    spool = ReportSpool()
                    rows, records = self._rebuild(rep, state.origin_wall_ns, spool)
            self._model_fed = True
            spool.replay(self.model)
            self._publish_summary()
            self.blocks.add_meta(ReportMeta.of(path.name, rep.host, rep.wall_start,
                                               objects_of(rep), value_labels_of(rep)))
            self._record_report(rep.path, rep.wall_start, rep.wall_end, identity, records, fp,
                                ranked_tasks(rep, self.settings.rank_pattern),
                                hostile=self._block_hostile)
            self._remember_prv()
            # rewritten while it was read: never committed half-read, read again instead
            self._same_file(path, identity)
            self._commit()
        finally:
            spool.discard()
            rep.close()
        result = AppendResult(report=path.name, records=records, rows=rows,
                              compacted=compacted, seconds=time.perf_counter() - started,
                              prv_length=state.prv_length)
        log.info("report_appended", job=state.job_dir, report=path.name, records=records,
                 compacted=compacted, seconds=round(result.seconds, 3),
                 tasks=len(self.numbering.tasks))
        return result

    def _same_file(self, path: Path, identity: ReportIdentity) -> None:
        """Raise ``InputChanged`` unless ``path`` (opened safely, inside the job's root) is
        still the file readiness checked; ``InputRefused`` for a FIFO, device, link out..."""
        found = stat_input(path, self.journal.state.root or None)
        if found != (identity.device, identity.inode, identity.size, identity.mtime_ns):
            raise InputChanged(f"{path} changed after it was checked; it will be checked again")

    def _fingerprint(self, path: Path, wall_start: int, objects: ReportObjects) -> str:
        """The report's content fingerprint; ``DuplicateReport`` when the trace holds it."""
        fp = fingerprint(path, wall_start, ((host, pid) for host, pid, *_ in objects),
                         self.journal.state.root or None)
        same = self.journal.report_with(fp)
        if same is not None:
            raise DuplicateReport(
                f"{path} holds the same report as {same.name}, already in the trace; it "
                "is not appended twice (remove one of the two copies)", of=same.name)
        return fp

    def _prepare(self, path: Path) -> PreparedReport:
        """Open and plan one report with the settings' kinds and reading switches."""
        return prepare(path, self.settings.kinds or None, use_reader=self.settings.reader,
                       presort=self.settings.presort)

    def _committed_source(self, entry: ReportEntry) -> Path:
        """The export of a committed report, read only where its blocks cannot be (a job
        committed before codes were kept, a deleted ``.prv``): a copy kept by an older
        prvstream, else the original if it is still the same content (a different file at
        that path is a new report, never a silent replacement)."""
        if entry.kept and os.path.isfile(entry.kept):
            return Path(entry.kept)
        source = Path(entry.path)
        if not entry.fingerprint:
            return source
        rep = self._prepare(source)
        try:
            found = fingerprint(source, rep.wall_start,
                                ((h, p) for h, p, *_ in objects_of(rep)),
                                self.journal.state.root or None)
        finally:
            rep.close()
        if found != entry.fingerprint:
            raise NotAnExport(
                f"committed report {entry.path} was replaced by another file and its blocks "
                "cannot be read back; restore it (the new file is taken as a new report)")
        return source

    def _record_report(self, path: Path, wall_start: int, wall_end: int,
                       identity: ReportIdentity, records: int, fp: str,
                       ranks: list[RankedTask] | None = None, *,
                       hostile: dict[str, int] | None = None) -> None:
        state = self.journal.state
        start, end = self._last_block
        entry = ReportEntry(
            identity=identity, name=path.name, path=str(path), block_start=start,
            block_end=end, records=records,
            thread_last=[ThreadTime(task=k[0], thread=k[1], time=t)
                         for k, t in sorted(self._block_threads.items())],
            wall_start_ns=wall_start, wall_end_ns=wall_end, fingerprint=fp,
            ranks=ranks or [], hostile=dict(hostile or {}),
        )
        self.journal.add_report(entry)
        # a file set aside earlier (e.g. seen half-written) that now landed is no longer aside
        self.journal.unquarantine(path)
        state.finalized = False

    def _append_block(self, rep: PreparedReport, spool: ReportSpool, *, publish: bool = True
                      ) -> tuple[Counter[str], int]:
        """Write the report's block behind the last one; ``publish=False`` (a group) leaves
        the fsync, header and ``.pcf``/``.row`` to the group's end."""
        state = self.journal.state
        assert state.origin_wall_ns is not None
        mark = self.numbering.mark()
        rows: Counter[str] = Counter()
        block_threads: dict[tuple[int, int], int] = {}
        checked: set[tuple[int, int]] = set()
        start = state.prv_length or state.header_capacity
        fresh = not self.prv.exists() or state.prv_length == 0
        codes = self.blocks.append_codes()
        with self.out.open(self.prv.name, "r+b") as fh:
            try:
                if fresh:
                    fh.truncate(0)
                    fh.write(b" " * (state.header_capacity - 1) + b"\n")
                else:
                    fh.truncate(start)
                fh.seek(start)
                writer = PrvWriter(fh, end_time=self.end_time)
                ctx, info = report_context(rep, self.numbering, state.origin_wall_ns,
                                           len(state.reports), self.settings.phase_pattern,
                                           self.settings.rank_pattern)
                self._block_hostile = {}
                for batch, _ in report_stream(rep, ctx, info, self.settings.chunk_rows,
                                              spool, rows):
                    if self.abort.is_set():
                        raise AppendInterrupted(rep.path.name)
                    if not len(batch):
                        continue
                    spans = thread_spans(batch.keys)
                    self._check_order(spans, checked)
                    writer.write(batch)
                    if codes is not None:
                        codes.write(codes_of(batch.keys, len(state.reports)))
                    track_thread_last(batch.keys, block_threads, spans)
                hostile: dict[str, dict[str, int]] = {}
                note_hostile(hostile, rep.path.name, ctx.hostile)
                self._block_hostile = hostile.get(rep.path.name, {})
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
                self.numbering.undo(mark)
                self._published.reset(self.numbering)
                raise
        state.prv_length = length
        state.end_time = end_time
        for key, t in block_threads.items():
            self.thread_last[key] = max(self.thread_last.get(key, -1), t)
        self._block_threads = block_threads
        self._last_block = (start, length)
        if publish:
            self._publish_header()
            self._publish_metadata()
        return rows, records

    def _check_order(self, spans: list[tuple[tuple[int, int], int, int]],
                     checked: set[tuple[int, int]]) -> None:
        """The first record of each thread in this block must not precede its earlier ones."""
        for obj, first, _ in spans:
            if obj in checked:
                continue
            checked.add(obj)
            if first < self.thread_last.get(obj, -1):
                raise _OrderBroken(obj)

    def _rewrite(self, numbering: Numbering | None, origin: int | None,
                 extra: PreparedReport | None = None, spool: ReportSpool | None = None,
                 ) -> ConvertResult:
        """Write the whole trace anew, globally sorted, from the committed reports' sources
        (plus ``extra``) and rename it into place; the journal's offsets follow, its commit
        is the caller's. ``numbering=None`` renumbers canonically (finalize)."""
        state = self.journal.state
        if extra is not None and numbering is not None and origin is not None and \
                self.blocks.complete and state.reports:  # compaction: no export re-read
            return blockfinal.compact_from_blocks(self, extra, spool, origin)
        reports: list[PreparedReport] = []
        thread_last: dict[tuple[int, int], int] = {}
        tmp_out = self.prv.with_name(f".{self.name}.rewrite")
        if numbering is None and extra is None and self.settings.dask:
            from prvstream.daemon.scale.convert import NumberingDiverged

            try:
                result = self._rewrite_on_dask(tmp_out, thread_last)
            except NumberingDiverged:
                log.warning("dask_numbering_diverged_rewriting_here", job=state.job_dir)
                thread_last.clear()
            else:
                return self._adopt_rewrite(tmp_out, numbering, result, thread_last)
        try:
            for entry in state.reports:
                try:
                    reports.append(self._prepare(self._committed_source(entry)))
                    reports[-1].arrived_as = entry.name
                except (PrvstreamError, OSError) as exc:
                    raise NotAnExport(
                        f"cannot rewrite {self.prv}: committed report {entry.path} is no "
                        f"longer readable ({exc}); restore it, or finalize without it by "
                        "moving the job's journal aside") from exc
            if extra is not None:
                reports.append(extra)
            spools = {extra.path: spool} if extra is not None and spool is not None else {}
            codes = blockfinal.RewriteCodes(self, reports)
            try:
                result = write_trace(
                    reports, tmp_out, self.settings, numbering=numbering, origin=origin,
                    sink_for=lambda r: spools.get(r.path),
                    header_capacity=state.header_capacity if numbering is not None else 0,
                    thread_last=thread_last,
                    progress=self.progress if numbering is None else None,
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
        return self._adopt_rewrite(tmp_out, numbering, result, thread_last)

    def _rewrite_on_dask(self, tmp_out: Path, thread_last: dict[tuple[int, int], int]
                         ) -> ConvertResult:
        """The canonical rewrite with the reports converted and merged on the Dask cluster."""
        from prvstream.daemon.scale.cluster import get_client
        from prvstream.daemon.scale.convert import write_canonical

        paths = [self._committed_source(entry) for entry in self.journal.state.reports]
        result, failed = write_canonical(get_client(self.settings.dask), paths, tmp_out,
                                         self.settings, thread_last=thread_last,
                                         progress=self.progress)
        if failed:
            path, why = failed[0]
            raise NotAnExport(
                f"cannot rewrite {self.prv}: committed report {path} is no longer readable "
                f"({why}); restore it, or finalize without it by moving the job's journal "
                "aside")
        return result

    def _adopt_rewrite(self, tmp_out: Path, numbering: Numbering | None,
                       result: ConvertResult, thread_last: dict[tuple[int, int], int]
                       ) -> ConvertResult:
        """Rename a rewritten trace into place; the journal's offsets follow."""
        state = self.journal.state
        tmp_prv = Path(str(tmp_out) + ".prv")
        header_len = _header_length(tmp_prv)
        if numbering is None:  # canonical ids: its .pcf/.row replace the live ones
            os.replace(Path(str(tmp_out) + ".pcf"), self.pcf)
            os.replace(Path(str(tmp_out) + ".row"), self.row)
        else:  # live ids: .pcf/.row follow from the numbering
            for ext in (".pcf", ".row"):
                with contextlib.suppress(FileNotFoundError):
                    Path(str(tmp_out) + ext).unlink()
        blockfinal.keep_committed(self)
        os.replace(tmp_prv, self.prv)
        fsync_dir(self.prv.parent)
        state.origin_wall_ns = result.origin
        state.header_capacity = header_len
        state.prv_length = self.prv.stat().st_size
        state.end_time = result.end_time
        for entry in state.reports:
            entry.block_start, entry.block_end = header_len, state.prv_length
        self.thread_last = dict(thread_last)
        self._block_threads = dict(thread_last)
        self._last_block = (header_len, state.prv_length)
        return result

    def _rebuild(self, extra: PreparedReport | None, origin: int,
                 spool: ReportSpool | None = None) -> tuple[Counter[str], int]:
        """Rewrite the live trace keeping every published id; the origin may move earlier."""
        before = sum(r.records for r in self.journal.state.reports)
        result = self._rewrite(self.numbering, origin, extra, spool)
        self._block_hostile = result.hostile.get(extra.path.name, {}) if extra else {}
        self._publish_metadata()
        # the rewrite wrote every committed report again: this report's own are the rest
        return result.rows, result.records - before

    # -- finalize ---------------------------------------------------------------------------
    def finalize(self) -> None:
        """Canonical rewrite: byte-identical to ``prvstream convert`` of the same reports."""
        state = self.journal.state
        if not state.reports:
            log.info("finalize_nothing", job=state.job_dir)
            return
        if self.blocks.complete:
            result = blockfinal.finalize_from_blocks(self)
        else:
            log.info("finalize_reading_exports", job=state.job_dir,
                     reason="committed before prvstream kept block codes")
            result = self._rewrite(None, None)
        assert result.numbering is not None
        state.numbering = result.numbering.state
        self.numbering = result.numbering
        state.finalized = True
        self._remember_prv()
        self._commit()
        self._publish_report()
        log.info("job_finalized", job=state.job_dir, reports=len(state.reports),
                 records=result.records, prv=str(self.prv))
