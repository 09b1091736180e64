"""An input set aside because it cannot be read is retried when it changes, a ``chmod``
included, and lands once (a real daemon running as an unprivileged user: root reads
everything)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.daemon_proc import DaemonProcess, job_status, place_atomically, wait_for
from tests.faults.helpers import LAND, live_trace, wait_reports
from tests.prv_check import validate

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory an unprivileged daemon can use (pytest's own are private to root)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the daemon as another user")
    probe = subprocess.run([*AS_NOBODY, sys.executable, "-c", "import prvstream.daemon"],
                           capture_output=True, text=True, check=False, timeout=60)
    if probe.returncode != 0:  # e.g. the checkout or its venv lies in a directory private to root
        pytest.skip("an unprivileged user cannot import prvstream from this checkout: "
                    + (probe.stderr.strip().splitlines() or ["no reason given"])[-1])
    made = Path(tempfile.mkdtemp(prefix="prvstream-faults-"))
    made.chmod(0o777)
    yield made
    shutil.rmtree(made, ignore_errors=True)


def test_unreadable_export_is_retried_after_a_chmod(
        shared_dir: Path, synth_sources: list[Path]) -> None:
    root = shared_dir / "root"
    a, b, state = root / "a", root / "b", shared_dir / "state"
    for d in (root, a, b, state):
        d.mkdir()
        d.chmod(0o777)
    locked = a / synth_sources[0].name
    place_atomically(synth_sources[0], locked)
    locked.chmod(0o600)  # root's, unreadable to the daemon
    with DaemonProcess([root], state, shared_dir / "logs",
                       prefix=AS_NOBODY) as daemon:
        daemon.start()
        wait_for(lambda: bool(job_status(a).get("quarantined")), LAND, "set aside", daemon)
        reason = job_status(a)["quarantined"][0]["reason"]
        assert "Permission denied" in reason, reason
        place_atomically(synth_sources[1], b / synth_sources[1].name)
        wait_reports(daemon, b, 1)  # the other job goes on
        locked.chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
        wait_reports(daemon, a, 1)
        status = job_status(a)
        assert status["quarantined"] == [] and status["state"] == "ok", status
        for job in (a, b):
            validate(live_trace(job))
        assert daemon.alive()
        assert daemon.terminate() == 0
    assert job_status(a)["reports"] == 1 and job_status(b)["reports"] == 1
