"""``prvstream watch --once`` on a job that already holds its end marker: a real process
finalizes the job exactly once (the job's writer owns finalize; nothing finalizes beside it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.daemon.daemon_proc import DaemonProcess, job_status, run_cli
from tests.prv_check import validate

RANKS = 4
#: enough steps that finalizing takes longer than the service's 0.2 s finalize tick in
#: ``--once``, so a second finalize started beside the first (the reported race) shows
STEPS = 20


def test_once_with_end_marker_finalizes_exactly_once(
        tmp_path: Path, start_daemon: Callable[..., DaemonProcess]) -> None:
    job = tmp_path / "root" / "job"
    made = run_cli("synth", str(job), "--ranks", str(RANKS), "--steps", str(STEPS),
                   cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    (job / "prvstream.done").touch()

    daemon = start_daemon(job.parent, extra=("--once",))
    assert daemon.wait_exit(timeout=120) == 0, daemon.tail()

    finalizing = daemon.named("job_finalizing", job=str(job.resolve()))
    assert [e["reason"] for e in finalizing] == ["marker"], daemon.tail()
    assert len(daemon.named("job_finalized")) == 1, daemon.tail()
    assert [e for e in daemon.events() if e.get("level") == "error"] == [], daemon.tail()
    assert daemon.named("once_done", degraded=[]), daemon.tail()

    status = job_status(job)
    assert status["finalized"] and status["reports"] == RANKS, status
    stats = validate(job / "prvstream" / f"{job.name}.prv", globally_sorted=True)
    assert stats.records == sum(r["records"] for r in daemon.named("report_appended"))
