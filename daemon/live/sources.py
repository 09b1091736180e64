"""The reports a live trace reads: opened with the job's settings, checked to be the file that
was made ready, fingerprinted against duplicates, and a committed report's export found again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from prvstream.daemon.live.inputs import InputChanged, ReportIdentity, fingerprint, stat_input
from prvstream.daemon.live.journal import ReportEntry
from prvstream.daemon.live.outcomes import DuplicateReport
from prvstream.daemon.stream.pipeline import PreparedReport, ReportObjects, objects_of, prepare
from prvstream.sinks.errors import NotAnExport
from prvstream.sinks.logger import get_logger

if TYPE_CHECKING:
    from prvstream.daemon.live.livetrace import LiveTrace

__all__ = ["committed_source", "fingerprint_new", "prepare_report", "same_file"]

log = get_logger(__name__)


def same_file(trace: LiveTrace, path: Path, identity: ReportIdentity) -> None:
    """Raise ``InputChanged`` unless ``path`` (opened safely, inside the job's root) is
    still the file readiness checked; ``InputRefused`` for a FIFO, device, link out..."""
    found = stat_input(path, trace.journal.state.root or None)
    if found != (identity.device, identity.inode, identity.size, identity.mtime_ns):
        raise InputChanged(f"{path} changed after it was checked; it will be checked again")


def fingerprint_new(trace: LiveTrace, path: Path, wall_start: int, objects: ReportObjects
                    ) -> str:
    """The report's content fingerprint; ``DuplicateReport`` when the trace holds it."""
    fp = fingerprint(path, wall_start, ((host, pid) for host, pid, *_ in objects),
                     trace.journal.state.root or None)
    same = trace.journal.report_with(fp)
    if same is not None:
        raise DuplicateReport(
            f"{path} holds the same report as {same.name}, already in the trace; it "
            "is not appended twice (remove one of the two copies)", of=same.name)
    return fp


def prepare_report(trace: LiveTrace, path: Path) -> PreparedReport:
    """Open and plan one report with the settings' kinds and reading switches."""
    return prepare(path, trace.settings.kinds or None, use_reader=trace.settings.reader,
                   presort=trace.settings.presort)


def committed_source(trace: LiveTrace, entry: ReportEntry) -> Path:
    """The export of a committed report, read only where its blocks cannot be (a job
    committed before codes were kept, a deleted ``.prv``): a copy kept by an older
    prvstream, else the original if it is still the same content (a different file at
    that path is a new report, never a silent replacement)."""
    if entry.kept and os.path.isfile(entry.kept):
        return Path(entry.kept)
    source = Path(entry.path)
    if not entry.fingerprint:
        return source
    rep = trace._prepare(source)
    try:
        found = fingerprint(source, rep.wall_start,
                            ((h, p) for h, p, *_ in objects_of(rep)),
                            trace.journal.state.root or None)
    finally:
        rep.close()
    if found != entry.fingerprint:
        raise NotAnExport(
            f"committed report {entry.path} was replaced by another file and its blocks "
            "cannot be read back; restore it (the new file is taken as a new report)")
    return source
