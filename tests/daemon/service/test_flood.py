"""A flood of files dropped at once into a watched job (a real daemon process): every report
is committed once, a broken file is set aside once, one removed while waiting is dropped
quietly, and no more readiness checkers or tasks run than the bound however many files wait
(and no more files are checked or ready at once than ``readiness_ahead``, beside a group
being committed of at most as many).
A file that fails only when appended (SQLite, but no export) costs the reports around it
their group commit no more than once: they are not all appended one by one.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from prvstream.daemon.synthetic.synth import SynthSpec, export_name, write_export
from tests.daemon.daemon_proc import DaemonProcess, job_status, load_journal, wait_for

CHECKERS = 3
#: files of the job checked or ready at once: the rest of the flood is held back as path text
AHEAD = 100
#: tasks besides the checkers: signals, watchdog, finalizer, the pool, discovery, the writer
OTHER_TASKS = 16


def _foreign(path: Path) -> Path:
    """A SQLite database that is no Nsight Systems export: it passes the readiness checks and
    fails when appended."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE samples (t INTEGER)")
        conn.execute("INSERT INTO samples VALUES (1)")
    conn.close()
    return path


def _tiny_exports(directory: Path, n: int) -> list[Path]:
    spec = SynthSpec(ranks=n, hosts=max(1, n // 8), steps=1, layers=1)
    directory.mkdir()
    return [write_export(directory / export_name(spec, rank), spec, rank) for rank in range(n)]


@pytest.mark.parametrize("n", [pytest.param(400, id="400"),
                               pytest.param(2000, id="2000", marks=pytest.mark.slow)])
def test_flood_is_bounded_and_exactly_once(tmp_path: Path, n: int) -> None:
    sources = _tiny_exports(tmp_path / "src", n)
    job = tmp_path / "root" / "job"
    job.mkdir(parents=True)
    config = tmp_path / "prvstream.toml"
    config.write_text(f"readiness_checkers = {CHECKERS}\nreadiness_ahead = {AHEAD}\n")
    with DaemonProcess([job.parent], tmp_path / "state", tmp_path / "logs", settle=0.5,
                       extra=["--config", str(config)]) as daemon:
        daemon.start()
        for i, src in enumerate(sources):  # all at once: each is complete when it appears
            os.link(src, job / src.name)
            if i == n // 4:
                _foreign(tmp_path / "foreign.sqlite").rename(job / "foreign.sqlite")
        (job / "broken.sqlite").write_bytes(b"not a database" * 100)
        (job / "gone.sqlite").write_bytes(sources[0].read_bytes())
        (job / "gone.sqlite").unlink()  # removed while it waits (or before it was seen)
        wait_for(lambda: job_status(job).get("reports", 0) >= n
                 and len(job_status(job).get("quarantined", [])) >= 2,
                 120 + n / 10, f"{n} reports committed", daemon)
        drained = daemon.wait_event("readiness_drained", timeout=30)
        assert daemon.terminate(timeout=10) == 0
    status = job_status(job)
    assert status["reports"] == n
    assert sorted(q["path"] for q in status["quarantined"]) == [
        str(job / "broken.sqlite"), str(job / "foreign.sqlite")]
    assert status["duplicates"] == []
    assert status["checking"] == 0 and status["pending"] == 0
    journal = load_journal(tmp_path / "state", job)
    assert journal is not None and len(journal.reports) == n
    appended = daemon.named("report_appended")
    assert len(appended) == n == len({e["report"] for e in appended})
    assert sorted(e["path"] for e in daemon.named("report_quarantined")) == [
        str(job / "broken.sqlite"), str(job / "foreign.sqlite")]
    # the foreign file failed in a group at most once, and the reports before it went again
    # as a group: never the whole group one by one, each with a commit of its own
    failed = daemon.named("group_member_failed")
    assert [e["report"] for e in failed] in ([], ["foreign.sqlite"])
    assert not daemon.named("group_commit_failed_appending_one_by_one")
    # the queue really held the flood, and never more than the bound looked at it
    assert max(e["peak_pending"] for e in drained) >= n // 2
    assert max(e["peak_busy"] for e in drained) <= CHECKERS
    backlog = daemon.named("readiness_backlog")
    assert backlog and all(e["checkers"] == CHECKERS for e in backlog)
    assert max(e["tasks"] for e in backlog) <= CHECKERS + OTHER_TASKS
    assert max(e["peak_tasks"] for e in drained) <= CHECKERS + OTHER_TASKS
    # ready reports waiting for the writer: at most readiness_ahead beside the group being
    # committed, itself at most readiness_ahead (a group that took fewer than it was handed
    # once let each commit hand the next a larger backlog)
    flows = daemon.named("job_flow")
    assert flows and max(e["backlog"] for e in flows) <= 2 * AHEAD
