"""A job's reports converted on Dask workers, committed by the job's single writer in order.

As soon as a report is ready, a worker plans it. Walking the queue in arrival order, the
coordinator reserves each planned report's ids (``pipeline.register_report``: they follow from
the numbering and the plan alone) and a worker converts the report into a block file with
exactly the numbering, origin and report index the single-process path would use. The writer
commits blocks in order: it appends the block's bytes, publishes header, ``.pcf``/``.row`` and
summary, and commits the journal. A block made from anything other than the committed state
(an earlier report failed, grew the numbering, or needed a rewrite) is converted again, so the
trace is byte-identical to the single-process daemon's. Reports before the origin, or that
would break a thread's time order, are appended in-process (``LiveTrace.append``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from prvstream.daemon.kinds.bounds import note_hostile
from prvstream.daemon.live.appendblock import is_fresh, seek_block_start
from prvstream.daemon.live.blockstore import BLOCK_FORMAT, ReportMeta
from prvstream.daemon.live.inputs import ReportIdentity
from prvstream.daemon.live.livetrace import LiveTrace
from prvstream.daemon.live.outcomes import AppendInterrupted, AppendResult
from prvstream.daemon.scale.tasks import BlockDone, BlockTask, PlanFacts, convert_block, plan_report
from prvstream.daemon.stream.claims import Claim
from prvstream.daemon.stream.numbering import Numbering, NumberingState, state_json
from prvstream.daemon.stream.pipeline import register_report
from prvstream.daemon.stream.spool import ReportSpool
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger

__all__ = ["RemoteAppender"]

log = get_logger(__name__)

#: times Dask reruns a task whose worker died
_RETRIES = 3


@dataclass
class _Entry:
    """A report between ready and committed."""

    path: Path
    plan: Any
    facts: PlanFacts | None = None
    #: (numbering digest, report index, origin, earlier claims) the conversion in flight
    #: was given
    given: tuple[bytes, int, int, tuple[Claim, ...]] | None = None
    convert: Any = None
    #: append in-process (before the origin): nothing after it is speculated
    local: bool = False


def _digest(state: bytes) -> bytes:
    return hashlib.blake2b(state, digest_size=16).digest()


class RemoteAppender:
    """Speculative conversion of one job's queued reports on a Dask cluster."""

    def __init__(self, trace: LiveTrace, client: Any) -> None:
        self.trace = trace
        self.client = client
        self._lock = threading.RLock()
        self._pending: OrderedDict[Path, _Entry] = OrderedDict()
        self._blocks = Path(tempfile.mkdtemp(prefix=f".{trace.name}.blocks-",
                                             dir=trace.prv.parent))
        self._wake = threading.Event()
        self._closed = False
        self._seq = 0
        self._thread = threading.Thread(target=self._dispatcher, daemon=True,
                                        name=f"prvstream-dask-{trace.name}")
        self._thread.start()

    # -- queue side (event loop) ------------------------------------------------------------
    def submit(self, path: Path) -> None:
        """A report is ready: plan it on a worker now (commit order = submit order)."""
        with self._lock:
            if path in self._pending or self._closed:
                return
            future = self.client.submit(plan_report, str(path), list(self.trace.settings.kinds),
                                        pure=False, retries=_RETRIES)
            self._pending[path] = _Entry(path, future)
            future.add_done_callback(lambda _: self._wake.set())
        self._wake.set()

    def forget(self, path: Path) -> None:
        """The report will not be committed (already in, or the service stops)."""
        with self._lock:
            entry = self._pending.pop(path, None)
            if entry is not None:
                self._drop(entry)
        self._wake.set()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for entry in self._pending.values():
                self._drop(entry)
            self._pending.clear()
        self._wake.set()
        self._thread.join(timeout=10)
        shutil.rmtree(self._blocks, ignore_errors=True)

    # -- speculation ------------------------------------------------------------------------
    def _dispatcher(self) -> None:
        while not self._closed:
            self._wake.wait(timeout=1.0)
            self._wake.clear()
            try:
                self._speculate()
            except Exception:  # the writer falls back to in-process appends
                log.exception("dask_dispatch_failed", job=self.trace.journal.state.job_dir)

    def _speculate(self) -> None:
        """Give every planned report, in order, the state it will be committed on."""
        with self._lock:
            state = self.trace.journal.state
            base = state_json(state.numbering)
            index = len(self.trace.journal.reports)
            origin = state.origin_wall_ns
            ahead: list[PlanFacts] = []  # committed before the entry, if all goes well
            for entry in self._pending.values():
                if entry.facts is None:
                    if not entry.plan.done():
                        return
                    if entry.plan.status != "finished":
                        return  # the writer reports the failure
                    entry.facts = entry.plan.result()
                facts = entry.facts
                assert facts is not None
                if facts.failed:
                    continue  # quarantined by the writer; takes no index
                if origin is None:
                    origin = facts.wall_start - state.skew_allowance_ns
                if facts.wall_start < origin:
                    entry.local = True
                    return
                earlier = self._earlier(facts, ahead)
                given = (_digest(base), index, origin, earlier)
                if entry.given != given:
                    if entry.convert is not None:
                        entry.convert.cancel()
                    self._seq += 1
                    task = BlockTask(
                        path=str(entry.path), kinds=list(self.trace.settings.kinds),
                        origin=origin, index=index, chunk_rows=self.trace.settings.chunk_rows,
                        phase_pattern=self.trace.settings.phase_pattern,
                        rank_pattern=self.trace.settings.rank_pattern,
                        block=str(self._blocks / f"block-{self._seq:08d}"),
                        earlier=list(earlier))
                    entry.convert = self.client.submit(convert_block, task, base, pure=False,
                                                       retries=_RETRIES)
                    entry.given = given
                numbering = Numbering(msgspec.json.decode(base, type=NumberingState))
                register_report(numbering, facts.objects, facts.values)
                base = state_json(numbering.state)
                index += 1
                ahead.append(facts)

    def _earlier(self, facts: PlanFacts, ahead: list[PlanFacts]) -> tuple[Claim, ...]:
        """Where the report's host states yield when it is committed after the committed
        reports and ``ahead`` (``BlockStore.earlier``: the claims on its threads of those
        that come first in canonical order), in a canonical order."""
        claims = self.trace.blocks.earlier(facts.sort_key, facts.claims)
        if self.trace.journal.state.block_format != BLOCK_FORMAT:
            return tuple(claims)  # the committed reports' claims are unknown: none yields
        threads = {c[:3] for c in facts.claims}
        claims += [c for f in ahead if f.sort_key < facts.sort_key
                   for c in f.claims if c[:3] in threads]
        return tuple(sorted(claims))

    # -- writer side (a worker thread) -------------------------------------------------------
    def commit(self, path: Path, identity: ReportIdentity) -> AppendResult:
        """Append ``path`` (submitted earlier) to the trace, exactly as ``LiveTrace.append``."""
        try:
            return self._commit(path, identity)
        finally:
            self.forget(path)

    def _commit(self, path: Path, identity: ReportIdentity) -> AppendResult:
        with self._lock:
            entry = self._pending.get(path)
        if entry is None:
            return self.trace.append(path, identity)
        facts: PlanFacts = entry.plan.result()  # a worker's error is raised here
        if facts.failed:
            raise PrvstreamError(facts.failed)
        while True:
            self._speculate()
            with self._lock:
                if entry.local or entry.convert is None:
                    break
                future, given = entry.convert, entry.given
            done: BlockDone = future.result()
            if self.trace.abort.is_set():
                self._discard(done)
                raise AppendInterrupted(path.name)
            state = self.trace.journal.state
            now = (_digest(state_json(state.numbering)), len(self.trace.journal.reports),
                   state.origin_wall_ns if state.origin_wall_ns is not None else
                   facts.wall_start - state.skew_allowance_ns, self._earlier(facts, []))
            if given != now:  # made from a state that did not come to be: convert again
                self._discard(done)
                with self._lock:
                    entry.given = None
                continue
            if any(first < self.trace.thread_last.get(obj, -1)
                   for obj, (first, _) in done.spans.items()):
                self._discard(done)
                break  # thread order broken: the in-process path compacts
            return self._append_block(path, identity, done, now[2], facts)
        log.info("dask_append_in_process", report=path.name)
        return self.trace.append(path, identity)

    def _discard(self, done: BlockDone) -> None:
        Path(done.block).unlink(missing_ok=True)
        if done.codes:
            Path(done.codes).unlink(missing_ok=True)
        Path(done.spool[0]).unlink(missing_ok=True)

    def _append_block(self, path: Path, identity: ReportIdentity, done: BlockDone,
                      origin: int, facts: PlanFacts) -> AppendResult:
        """Commit a converted block: the steps of ``LiveTrace._append`` after conversion."""
        trace = self.trace
        state = trace.journal.state
        started = time.perf_counter()
        snapshot = trace.journal.snapshot()
        trace._model_fed = False
        spool = ReportSpool.attach(*done.spool)
        try:
            trace._same_file(path, identity)  # the file the worker read is the one checked
            fp = trace._fingerprint(path, facts.wall_start, facts.objects)
            if state.origin_wall_ns is None:
                state.origin_wall_ns = origin
            fresh = is_fresh(trace)
            trace.blocks.append_block_codes(done.codes, done.records)
            copying = time.perf_counter()
            with trace.out.open(trace.prv.name, "r+b") as fh, open(done.block, "rb") as src:
                start = seek_block_start(trace, fh, fresh)
                shutil.copyfileobj(src, fh, 1 << 20)
                fh.flush()
                os.fsync(fh.fileno())
                length = fh.tell()
            copied = time.perf_counter() - copying
            state.prv_length = length
            state.end_time = max(trace.end_time, done.end_time)
            state.numbering = msgspec.json.decode(done.numbering_after, type=NumberingState)
            trace.numbering = Numbering(state.numbering)
            block_threads = {obj: last for obj, (_, last) in done.spans.items()}
            for obj, t in block_threads.items():
                trace.thread_last.raise_to(obj, t)
            trace._block_threads = block_threads
            trace._last_block = (start, length)
            trace._publish_header()
            trace._publish_metadata()
            trace._model_fed = True
            replaying, replaying_cpu = time.perf_counter(), time.thread_time()
            spool.replay(trace.model)
            replayed = time.perf_counter() - replaying
            replayed_cpu = time.thread_time() - replaying_cpu
            trace._publish_summary()
            trace.blocks.add_meta(ReportMeta.of(path.name, facts.host, facts.wall_start,
                                                facts.objects, facts.values, facts.claims))
            note_hostile({}, path.name, Counter(done.hostile))
            trace._record_report(path, done.wall_start, done.wall_end, identity, done.records,
                                 fp, hostile=done.hostile)
            trace._remember_prv()
            trace._commit()  # model checkpoint, then the journal
        except BaseException:
            trace._roll_back(snapshot)
            raise
        finally:
            spool.discard()
            Path(done.block).unlink(missing_ok=True)
            if done.codes:
                Path(done.codes).unlink(missing_ok=True)
        result = AppendResult(report=path.name, records=done.records, rows=done.rows,
                              compacted=False, seconds=time.perf_counter() - started,
                              prv_length=state.prv_length)
        log.info("report_appended", job=state.job_dir, report=path.name, records=done.records,
                 compacted=False, seconds=round(result.seconds, 3),
                 tasks=len(trace.numbering.tasks), dask=True, block_mb=round(done.size / 1e6, 3),
                 copy_s=round(copied, 3), replay_s=round(replayed, 3),
                 replay_cpu_s=round(replayed_cpu, 3))
        return result

    def _drop(self, entry: _Entry) -> None:
        if entry.convert is not None and entry.convert.status == "finished":
            self._discard(entry.convert.result())
        for future in (entry.plan, entry.convert):
            if future is not None:
                future.cancel()
