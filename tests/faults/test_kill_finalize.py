"""kill -9 while a job finalizes, and again while the restarted daemon recovers it: the final
trace is byte-identical to an uninterrupted run and to ``prvstream convert``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from prvstream.daemon.synthetic.synth import SynthSpec, export_name, write_export
from tests.daemon.daemon_proc import DaemonProcess, job_status, load_journal, place_atomically
from tests.daemon.service.test_service_e2e import (
    KERNEL_TYPES,
    SETTLE,
    Reference,
    assert_same,
    finalize_via_marker,
    kill_reference,
    outputs,
)
from tests.faults.helpers import LAND, live_trace, wait_reports
from tests.prv_check import validate

__all__ = ["kill_reference"]  # the module-scoped reference run, built from these sources


@pytest.fixture(scope="module")
def synth_sources(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Four synthetic ranks, big enough that finalize and recovery each take a few tenths of
    a second (so a kill at a fixed delay lands inside them)."""
    src = tmp_path_factory.mktemp("kill_finalize_sources")
    spec = SynthSpec(ranks=4, steps=10, seed=23)
    return [write_export(src / export_name(spec, r), spec, r) for r in range(spec.ranks)]


def _kill_inside(daemon: DaemonProcess, begin: str, end: str, delay: float) -> None:
    """SIGKILL ``delay`` s after the current run logs ``begin``; assert it did not reach
    ``end`` first (the kill landed inside the phase, not after it)."""
    run = daemon.starts
    daemon.wait_event(begin, run=run, timeout=LAND)
    time.sleep(delay)
    daemon.kill()
    assert not daemon.named(end, run=run), \
        f"the kill {delay} s after {begin} came after {end}: the phase was not interrupted"


def _assert_final(daemon: DaemonProcess, state: Path, job: Path, sources: list[Path],
                  ref: Reference, what: str) -> None:
    finalize_via_marker(daemon, job)
    final = validate(live_trace(job), globally_sorted=True)
    assert final.begins(*KERNEL_TYPES) == ref.kernels, f"{what}: kernel events lost or doubled"
    journal = load_journal(state, job)
    assert journal is not None
    assert sorted(r.name for r in journal.reports) == sorted(p.name for p in sources)
    assert journal.state.quarantined == []
    got = outputs(job)
    assert_same(got, ref.uninterrupted, f"{what} vs uninterrupted run")
    assert_same(got, ref.convert, f"{what} vs prvstream convert")
    assert daemon.terminate() == 0


def _landed_then_finalize_killed(tmp_path: Path, sources: list[Path], delay: float
                                 ) -> tuple[DaemonProcess, Path, Path]:
    """All reports land, the job-end marker appears, the daemon is killed ``delay`` s after it
    logs ``job_finalizing``."""
    job = tmp_path / "root" / "job"
    job.mkdir(parents=True)
    state = tmp_path / "state"
    daemon = DaemonProcess([job.parent], state, tmp_path / "logs", settle=SETTLE)
    daemon.start()
    for src in sources:
        place_atomically(src, job / src.name)
    wait_reports(daemon, job, len(sources))
    (job / "prvstream.done").touch()
    _kill_inside(daemon, "job_finalizing", "job_finalized", delay)
    return daemon, state, job


#: seconds after ``job_finalizing``: at once, early in the rewrite, late in it
FINALIZE_DELAYS = (0.0, 0.04, 0.1)


@pytest.mark.parametrize("delay", FINALIZE_DELAYS)
def test_kill9_during_finalize(delay: float, tmp_path: Path, synth_sources: list[Path],
                               kill_reference: Reference) -> None:
    daemon, state, job = _landed_then_finalize_killed(tmp_path, synth_sources, delay)
    try:
        daemon.start()  # the marker is still there: recovery, then finalize again
        _assert_final(daemon, state, job, synth_sources, kill_reference,
                      f"killed {delay} s into finalize")
        assert job_status(job)["reports"] == len(synth_sources)
    finally:
        daemon.close()


#: (seconds into finalize, seconds into the restart's recovery)
RECOVERY_KILLS = ((0.0, 0.0), (0.04, 0.05), (0.1, 0.1))


@pytest.mark.parametrize(("in_finalize", "in_recovery"), RECOVERY_KILLS)
def test_kill9_during_recovery(in_finalize: float, in_recovery: float, tmp_path: Path,
                               synth_sources: list[Path], kill_reference: Reference) -> None:
    daemon, state, job = _landed_then_finalize_killed(tmp_path, synth_sources, in_finalize)
    try:
        daemon.start()
        # the found job is opened (and recovered) after its marker is seen
        _kill_inside(daemon, "job_end_marker", "job_recovered", in_recovery)
        daemon.start()
        _assert_final(daemon, state, job, synth_sources, kill_reference,
                      f"killed {in_finalize} s into finalize and {in_recovery} s into "
                      f"recovery")
    finally:
        daemon.close()
