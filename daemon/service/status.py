"""``status.json`` beside a job's outputs: what is in, what was set aside, its health; built
from the journal's running totals, never by reading every committed report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import msgspec

from prvstream.daemon.config import Settings
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.live.livetrace import LiveTrace
from prvstream.daemon.service.expect import RankTally, rank_status
from prvstream.daemon.service.faults import Health
from prvstream.sinks.logger import get_logger

__all__ = ["JobStatus", "StatusOf", "write_status"]

log = get_logger(__name__)


class JobStatus(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``status.json`` beside a job's outputs: what is in, what was set aside, its health."""

    job: str
    reports: int
    records: int
    finalized: bool
    prv: str
    quarantined: list[dict[str, str]] = msgspec.field(default_factory=list)
    updated_ns: int = 0
    #: ``ok``, or ``degraded`` (an output-side fault; retried at ``next_retry_ns``)
    state: str = "ok"
    reason: str = ""
    next_retry_ns: int = 0
    #: reports ready and waiting for the output side
    pending: int = 0
    #: files found and not yet ready (settling or being checked for readiness)
    checking: int = 0
    #: seconds the oldest waiting report has been ready; reports and records landed per
    #: minute / second over the last minute
    lag_s: float = 0.0
    reports_per_min: float = 0.0
    records_per_s: float = 0.0
    #: files holding a report already in the trace under another name (path, of)
    duplicates: list[dict[str, str]] = msgspec.field(default_factory=list)
    #: wall-clock ns of the trace's time 0: while live, the first report's session start minus
    #: the skew allowance (a report earlier than that moves it); once finalized, the earliest
    #: session start, as in Nsight Systems and nsys2prv (docs/mapping.md)
    origin_ns: int = 0
    #: ranks the job should have (``--expect``, ``expect_ranks``, ``prvstream.expect``; null:
    #: no expectation) and those no report has yet: MPI ranks, else from the file name
    #: (``rank_pattern``), else the free numbers in (host, pid) order
    expected_ranks: int | None = None
    missing_ranks: list[int] = msgspec.field(default_factory=list)
    #: rows dropped or clamped as hostile (outside the session, end before start, no end
    #: column), by report then ``"<kind> <what>"``; reports with none are absent
    hostile: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)


@dataclass(frozen=True)
class StatusOf:
    """What the job's writer knows beyond the journal: its health and flow."""

    health: Health
    #: ``JobFlow.snapshot()``: lag and rates
    flow: dict[str, float | int]
    #: reports ready and waiting for the output side
    pending: int
    #: files found and not yet ready
    checking: int = 0


def write_status(journal: JobJournal, trace: LiveTrace, job_dir: Path, settings: Settings,
                 now: StatusOf, ranks: RankTally) -> None:
    """Replace ``status.json`` (best effort: the next successful step writes it again)."""
    state = journal.state
    flow = now.flow
    expected, missing = rank_status(job_dir, journal.reports, settings, ranks)
    status = JobStatus(
        job=str(job_dir), reports=len(journal.reports), records=state.records_total,
        finalized=state.finalized, prv=str(trace.prv),
        quarantined=[{"path": q.path, "reason": q.reason} for q in state.quarantined],
        updated_ns=time.time_ns(), state=now.health.state, reason=now.health.reason,
        next_retry_ns=now.health.next_retry_ns, pending=now.pending,
        checking=now.checking,
        lag_s=float(flow["lag_s"]), reports_per_min=float(flow["reports_per_min"]),
        records_per_s=float(flow["records_per_s"]),
        duplicates=[{"path": d.path, "of": d.of} for d in state.duplicates],
        origin_ns=state.origin_wall_ns or 0, expected_ranks=expected,
        missing_ranks=missing, hostile=dict(state.hostile))
    try:
        trace.out.replace("status.json", msgspec.json.encode(status) + b"\n")
    except OSError as exc:
        log.debug("status_not_written", job=str(job_dir), error=str(exc))
