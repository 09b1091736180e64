"""Shared pieces of the fault tests: two-job roots, mounts that may be refused, checks that a
job landed whole."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.daemon_proc import DaemonProcess, job_status, load_journal, wait_for
from tests.prv_check import validate

__all__ = ["LAND", "assert_landed", "live_trace", "mounted", "wait_reports"]

#: generous bound for one report to land (settle + debounce + conversion on a busy machine)
LAND = 30.0


def live_trace(job: Path) -> Path:
    return job / "prvstream" / f"{job.name}.prv"


def wait_reports(daemon: DaemonProcess, job: Path, n: int, timeout: float = LAND) -> None:
    wait_for(lambda: job_status(job).get("reports") == n, timeout, f"{n} report(s) in {job}",
             daemon)


def assert_landed(state: Path, job: Path, names: list[str]) -> None:
    """The job holds exactly ``names`` (nothing lost, nothing twice), nothing set aside, and
    its live trace is valid."""
    journal = load_journal(state, job)
    assert journal is not None, f"no journal for {job}"
    got = sorted(r.name for r in journal.reports)
    assert got == sorted(names), f"{job.name}: reports {got}, expected {sorted(names)}"
    assert journal.state.quarantined == [], journal.state.quarantined
    status = job_status(job)
    assert status["reports"] == len(names)
    assert status["state"] == "ok", status
    validate(live_trace(job))


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=False, timeout=30)


@contextlib.contextmanager
def mounted(target: Path, *options: str, fstype: str = "tmpfs") -> Iterator[Path]:
    """``mount -t FSTYPE -o OPTIONS`` on ``target`` (or a bind mount with fstype="bind");
    skips the test, saying why, where mounting is not permitted."""
    target.mkdir(parents=True, exist_ok=True)
    if fstype == "bind":
        done = _run("mount", "--bind", str(target), str(target))
    else:
        done = _run("mount", "-t", fstype, "-o", ",".join(options) or "defaults", fstype,
                    str(target))
    if done.returncode != 0:
        pytest.skip(f"mounting is not permitted here ({done.stderr.strip() or 'mount failed'})")
    try:
        yield target
    finally:
        _run("umount", "-l", str(target))


def remount(target: Path, *options: str) -> None:
    done = _run("mount", "-o", ",".join(("remount", *options)), str(target))
    assert done.returncode == 0, done.stderr
