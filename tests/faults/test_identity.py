"""Identity of a committed report: a copy under a second name is a duplicate, a different file
at a committed path is a new report, and a committed report survives its export being deleted
or renamed over (real daemons; the finalized trace is compared with ``prvstream convert``)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from tests.daemon.daemon_proc import DaemonProcess, job_status, place_atomically, run_cli, wait_for
from tests.faults.helpers import LAND, live_trace, wait_reports
from tests.prv_check import validate

Start = Callable[..., DaemonProcess]
OUTPUTS = (".prv", ".pcf", ".row")


def _convert(sources: list[Path], out: Path) -> dict[str, bytes]:
    folder = out.parent / "inputs"
    folder.mkdir(parents=True)
    for i, src in enumerate(sources):
        shutil.copyfile(src, folder / f"in{i}.sqlite")
    done = run_cli("convert", str(folder), "-o", str(out), cwd=out.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    return {ext: out.with_name(out.name + ext).read_bytes() for ext in OUTPUTS}


def _finalize(daemon: DaemonProcess, job: Path) -> dict[str, bytes]:
    (job / "prvstream.done").touch()
    wait_for(lambda: bool(job_status(job).get("finalized")), LAND, "finalized", daemon)
    validate(live_trace(job), globally_sorted=True)
    return {ext: live_trace(job).with_suffix(ext).read_bytes() for ext in OUTPUTS}


def test_same_content_under_a_second_name_is_a_duplicate(
        tmp_path: Path, synth_sources: list[Path], start_daemon: Start) -> None:
    job = tmp_path / "root" / "job"
    job.mkdir(parents=True)
    daemon = start_daemon(job.parent)
    place_atomically(synth_sources[0], job / "first.sqlite")
    wait_reports(daemon, job, 1)
    place_atomically(synth_sources[0], job / "second.sqlite")
    wait_for(lambda: bool(job_status(job).get("duplicates")), LAND, "the duplicate", daemon)
    assert job_status(job)["duplicates"] == [
        {"path": str((job / "second.sqlite").resolve()), "of": "first.sqlite"}]
    place_atomically(synth_sources[1], job / "third.sqlite")
    wait_reports(daemon, job, 2)
    got = _finalize(daemon, job)
    assert got == _convert(synth_sources[:2], tmp_path / "conv" / "job")
    assert job_status(job)["reports"] == 2
    assert daemon.terminate() == 0


def test_committed_export_deleted_or_renamed_over_is_still_in_the_final_trace(
        tmp_path: Path, synth_sources: list[Path], start_daemon: Start) -> None:
    job = tmp_path / "root" / "job"
    job.mkdir(parents=True)
    daemon = start_daemon(job.parent)
    for src in synth_sources[:2]:
        place_atomically(src, job / src.name)
    wait_reports(daemon, job, 2)
    (job / synth_sources[0].name).unlink()  # deleted after commit
    place_atomically(synth_sources[2], job / synth_sources[1].name)  # renamed over
    wait_reports(daemon, job, 3)  # the new file at a committed path is a new report
    got = _finalize(daemon, job)
    assert got == _convert(synth_sources[:3], tmp_path / "conv" / "job")
    assert not daemon.named("report_quarantined")
    assert daemon.terminate() == 0
