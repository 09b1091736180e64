"""The public Python API: convert a set of exports, run a live job report by report, read a
summary. The command line and the daemon do the same work through the same rooms; see
docs/api.md (its examples run as tests).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from prvstream.daemon import runtime
from prvstream.daemon.config import Settings, load_settings
from prvstream.daemon.live.inputs import report_identity
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.live.livetrace import LiveTrace, output_dir_for
from prvstream.daemon.live.outcomes import AppendResult
from prvstream.daemon.stream.batch import FLUSH_ROWS
from prvstream.daemon.stream.batch import convert as _convert
from prvstream.daemon.stream.trace import ConvertResult
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.files import atomic_write
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary import SummaryState, decode_state, encode_record

__all__ = ["ConvertResult", "LiveJob", "convert", "open_job", "read_summary", "settings"]

log = get_logger(__name__)

_NS = 1_000_000_000


def settings(**overrides: Any) -> Settings:
    """Validated settings: defaults, ``PRVSTREAM_*`` variables, then ``overrides``; the
    process-wide switches (pure Python) are applied. ``ConfigError`` names a bad key."""
    found = load_settings(None, overrides)
    runtime.apply(found)
    return found


def convert(inputs: Iterable[str | os.PathLike[str]], out: str | os.PathLike[str],
            **overrides: Any) -> ConvertResult:
    """Convert exports (files, directories, .nsys-rep) into ``OUT.prv/.pcf/.row`` and the
    summaries ``OUT.summary.json`` and ``OUT.summary.jsonl``; what ``prvstream convert``
    writes. Inputs that cannot be converted are listed in ``result.failed``."""
    chosen = settings(**overrides)
    target = Path(out)
    model = EfficiencyModel(target.name, window_ns=int(chosen.window * _NS),
                            flush_rows=FLUSH_ROWS, gap_threshold_ns=chosen.gap_threshold_ns,
                            recent=chosen.summary_recent, nccl_as=chosen.nccl_as,
                            top=chosen.summary_top)
    history = target.with_name(target.name + ".summary.jsonl")
    result = _convert([str(p) for p in inputs], target, chosen, model=model,
                      summary_jsonl=history)
    summary = target.with_name(target.name + ".summary.json")
    atomic_write(summary, encode_record(model.state()))
    result.outputs += [str(summary), str(history)]
    return result


class LiveJob:
    """One job's live trace, opened from Python as the daemon opens it: its journal (locked),
    the growing ``.prv/.pcf/.row`` and summaries. Append reports, finalize, close."""

    def __init__(self, job_dir: str | os.PathLike[str], chosen: Settings,
                 root: str | os.PathLike[str] | None = None) -> None:
        self.job_dir = Path(job_dir).resolve()
        self.root = Path(root).resolve() if root is not None else self.job_dir.parent
        self.settings = chosen
        self.journal = JobJournal.open(chosen.state_dir, self.job_dir, root=self.root)
        self.journal.lock()
        try:
            out_dir = output_dir_for(self.job_dir, self.root, chosen)
            self.trace = LiveTrace(self.journal, out_dir, self.job_dir.name or "trace", chosen)
            self.trace.recover()
            self.journal.commit()
        except BaseException:
            self.journal.unlock()
            raise

    @property
    def prv(self) -> Path:
        """The job's trace (``.pcf`` and ``.row`` beside it)."""
        return self.trace.prv

    def append(self, report: str | os.PathLike[str]) -> AppendResult:
        """Convert one complete export and commit it to the job (or raise, changing nothing)."""
        path = Path(report).resolve()
        return self.trace.append(path, report_identity(path, self.root))

    def finalize(self) -> None:
        """Renumber canonically: the bytes ``convert`` writes for the same reports."""
        self.trace.finalize()

    def close(self) -> None:
        try:
            self.trace.close()
        finally:
            self.journal.unlock()

    def __enter__(self) -> LiveJob:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


@contextmanager
def open_job(job_dir: str | os.PathLike[str], **overrides: Any) -> Iterator[LiveJob]:
    """A ``LiveJob`` for ``job_dir`` (outputs in ``job_dir/prvstream/`` unless ``out_dir``;
    journal under ``state_dir``), closed when the block ends."""
    job = LiveJob(job_dir, settings(**overrides))
    try:
        yield job
    finally:
        job.close()


def read_summary(path: str | os.PathLike[str]) -> SummaryState:
    """The summary state in ``path``: a ``summary.json``, or a job directory or output
    directory holding one (``prvstream/summary.json``, ``summary.json``)."""
    target = Path(path)
    if target.is_dir():
        found = [c for c in (target / "prvstream" / "summary.json", target / "summary.json")
                 if c.is_file()]
        if not found:
            raise PrvstreamError(f"{target} holds no summary.json yet; convert or append a "
                                 "report first")
        target = found[0]
    return decode_state(target.read_bytes())
