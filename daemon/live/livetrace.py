"""One job's growing trace and summaries: append a block per report, recover, compact, finalize.

The single writer of a job. Each report is streamed (bounded memory) and appended to the
``.prv`` as one time-sorted block behind the last committed byte; then the fixed-capacity header
is rewritten in place, ``.pcf``/``.row`` are replaced atomically, the summary lines appended, and
only then is the journal committed. Recovery truncates everything back to the journal. Ids are
published in arrival order and never change until ``finalize`` renumbers canonically. The steps
live beside it: ``recovery``, ``publishing``, ``appendblock``, ``rewrite``, ``sources``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from prvstream.daemon.config import Settings
from prvstream.daemon.live import (
    appendblock,
    blockfinal,
    publishing,
    recovery,
    rewrite,
    sources,
)
from prvstream.daemon.live.blockstore import BlockStore, ReportMeta
from prvstream.daemon.live.checkpoint import commit_with_checkpoint
from prvstream.daemon.live.inputs import InputChanged, ReportIdentity
from prvstream.daemon.live.journal import JobJournal, ReportEntry
from prvstream.daemon.live.outcomes import AppendResult, _OrderBroken
from prvstream.daemon.live.outputdir import OutputDir
from prvstream.daemon.live.published import Published
from prvstream.daemon.stream.numbering import Numbering
from prvstream.daemon.stream.pipeline import (
    PreparedReport,
    ReportObjects,
    objects_of,
    ranked_tasks,
)
from prvstream.daemon.stream.ranks import RankedTask
from prvstream.daemon.stream.spool import ReportSpool
from prvstream.daemon.stream.threadlast import ThreadLast
from prvstream.daemon.stream.trace import ConvertResult
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.errors import ExportChanged
from prvstream.sinks.logger import get_logger

__all__ = ["LiveTrace", "output_dir_for"]

log = get_logger(__name__)

_NS = 1_000_000_000


def output_dir_for(job_dir: Path, root: Path, settings: Settings) -> Path:
    """``J/prvstream/`` or ``--out``/<J relative to its root>/."""
    if settings.out_dir:
        rel = os.path.relpath(job_dir, root)
        return Path(settings.out_dir) / ("" if rel == "." else rel)
    return job_dir / "prvstream"


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
        self._published = Published(Numbering(state.numbering), journal.path.parent)
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
        self.thread_last = ThreadLast()
        #: the last block written and its threads' last times (for the journal entry)
        self._last_block: tuple[int, int] = (0, 0)
        self._block_threads: dict[tuple[int, int], int] = {}
        #: the hostile rows of the report last written (``kinds.bounds``)
        self._block_hostile: dict[str, int] = {}
        for entry in journal.reports:
            for tt in entry.thread_last:
                self.thread_last.raise_to((tt.task, tt.thread), tt.time)

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

    # -- recovery (``recovery``) ------------------------------------------------------------
    def recover(self, *, refeed: bool = True) -> None:
        """Bring the outputs back to exactly what the journal committed.

        ``refeed=False`` keeps the efficiency model as it is (it was not fed since the last
        commit); otherwise it is rebuilt from the committed reports.
        """
        recovery.recover(self, refeed=refeed)

    def _prv_is_committed(self) -> bool:
        return recovery.prv_is_committed(self)

    def _remember_prv(self) -> None:
        recovery.remember_prv(self)

    # -- the model's checkpoint ------------------------------------------------------------
    def _commit(self) -> None:
        commit_with_checkpoint(self.journal, self.model)
        blockfinal.committed(self)

    def _restore_model(self) -> None:
        recovery.restore_model(self)

    def _refeed_model(self) -> None:
        recovery.refeed_model(self)

    # -- publishing (``publishing``) --------------------------------------------------------
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
        return publishing.header(self)

    def _publish_header(self) -> None:
        publishing.publish_header(self)

    def _grow_header(self) -> None:
        publishing.grow(self)

    def _publish_metadata(self, *, force: bool = False) -> None:
        publishing.publish_metadata(self, force=force)

    def _publish_summary(self) -> None:
        publishing.publish_summary(self)

    def _publish_report(self) -> None:
        publishing.publish_report(self)

    # -- appending -------------------------------------------------------------------------
    def append(self, path: Path, identity: ReportIdentity) -> AppendResult:
        """Convert one complete report and commit it to the job (or raise, changing nothing).

        On any failure the journal state of before is restored and the outputs are brought
        back to it exactly as crash recovery would, so a quarantined report leaves no trace.
        """
        snapshot = self.journal.snapshot()
        self._model_fed = False
        try:
            return self._append(path, identity)
        except BaseException:
            self._roll_back(snapshot)
            raise

    def _roll_back(self, snapshot: bytes) -> None:
        self.journal.restore(snapshot)
        self.numbering = Numbering(self.journal.state.numbering)
        self.thread_last = ThreadLast()
        for entry in self.journal.reports:
            for tt in entry.thread_last:
                self.thread_last.raise_to((tt.task, tt.thread), tt.time)
        self.recover(refeed=self._model_fed)
        log.info("append_rolled_back_to_journal", job=self.journal.state.job_dir,
                 reports=len(self.journal.reports))

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
            self.blocks.add_meta(ReportMeta.of_report(path.name, rep))
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

    # -- the reports read (``sources``) -----------------------------------------------------
    def _same_file(self, path: Path, identity: ReportIdentity) -> None:
        sources.same_file(self, path, identity)

    def _fingerprint(self, path: Path, wall_start: int, objects: ReportObjects) -> str:
        return sources.fingerprint_new(self, path, wall_start, objects)

    def _prepare(self, path: Path) -> PreparedReport:
        return sources.prepare_report(self, path)

    def _committed_source(self, entry: ReportEntry) -> Path:
        return sources.committed_source(self, entry)

    # -- a block (``appendblock``) ----------------------------------------------------------
    def _record_report(self, path: Path, wall_start: int, wall_end: int,
                       identity: ReportIdentity, records: int, fp: str,
                       ranks: list[RankedTask] | None = None, *,
                       hostile: dict[str, int] | None = None) -> None:
        appendblock.record_report(self, path, wall_start, wall_end, identity, records, fp,
                                  ranks, hostile=hostile)

    def _append_block(self, rep: PreparedReport, spool: ReportSpool, *, publish: bool = True
                      ) -> tuple[Counter[str], int]:
        try:
            return appendblock.append_block(self, rep, spool, publish=publish)
        except ExportChanged as exc:  # changed while read: readiness looks at it again
            if isinstance(exc, InputChanged):
                raise
            raise InputChanged(str(exc)) from exc

    def _check_order(self, spans: list[tuple[tuple[int, int], int, int]],
                     checked: set[tuple[int, int]]) -> None:
        appendblock.check_order(self, spans, checked)

    # -- rewrites (``rewrite``) -------------------------------------------------------------
    def _rewrite(self, numbering: Numbering | None, origin: int | None,
                 extra: PreparedReport | None = None, spool: ReportSpool | None = None,
                 ) -> ConvertResult:
        return rewrite.rewrite(self, numbering, origin, extra, spool)

    def _rewrite_on_dask(self, tmp_out: Path, thread_last: dict[tuple[int, int], int]
                         ) -> ConvertResult:
        return rewrite.rewrite_on_dask(self, tmp_out, thread_last)

    def _adopt_rewrite(self, tmp_out: Path, numbering: Numbering | None,
                       result: ConvertResult, thread_last: dict[tuple[int, int], int]
                       ) -> ConvertResult:
        return rewrite.adopt_rewrite(self, tmp_out, numbering, result, thread_last)

    def _rebuild(self, extra: PreparedReport | None, origin: int,
                 spool: ReportSpool | None = None) -> tuple[Counter[str], int]:
        return rewrite.rebuild(self, extra, origin, spool)

    # -- finalize ---------------------------------------------------------------------------
    def finalize(self) -> None:
        """Canonical rewrite: byte-identical to ``prvstream convert`` of the same reports."""
        state = self.journal.state
        if not self.journal.reports:
            log.info("finalize_nothing", job=state.job_dir)
            return
        if self.blocks.complete and self.blocks.claims_known():
            result = blockfinal.finalize_from_blocks(self)
        else:
            log.info("finalize_reading_exports", job=state.job_dir,
                     reason="committed before prvstream kept block codes (or the spans "
                     "where reports give host states)")
            result = self._rewrite(None, None)
        assert result.numbering is not None
        state.numbering = result.numbering.state
        self.numbering = result.numbering
        state.finalized = True
        self._remember_prv()
        self._commit()
        self._publish_report()
        log.info("job_finalized", job=state.job_dir, reports=len(self.journal.reports),
                 records=result.records, prv=str(self.prv))
