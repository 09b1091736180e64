"""One job's output-side faults never end the service or condemn an input: a blocked, read-only,
full or vanished output, a second daemon, and SIGTERM while events churn (real daemons)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.daemon.daemon_proc import DaemonProcess, job_status, place_atomically, run_cli
from tests.faults.helpers import (
    LAND,
    assert_landed,
    live_trace,
    mounted,
    remount,
    wait_reports,
)
from tests.prv_check import validate

Start = Callable[..., DaemonProcess]


def _two_jobs(tmp_path: Path) -> tuple[Path, Path, Path]:
    root = tmp_path / "root"
    a, b = root / "a", root / "b"
    a.mkdir(parents=True)
    b.mkdir()
    return root, a, b


def test_blocked_output_dir_degrades_one_job_and_resumes(
        tmp_path: Path, synth_sources: list[Path], start_daemon: Start) -> None:
    root, a, b = _two_jobs(tmp_path)
    (a / "prvstream").write_text("a file where the outputs should go\n")
    daemon = start_daemon(root)
    place_atomically(synth_sources[0], a / synth_sources[0].name)
    place_atomically(synth_sources[1], b / synth_sources[1].name)
    wait_reports(daemon, b, 1)
    daemon.wait_event("job_degraded", job=str(a.resolve()))
    assert daemon.alive()
    (a / "prvstream").unlink()  # the output side works again: nothing else is needed
    wait_reports(daemon, a, 1, timeout=LAND + 60)
    assert_landed(tmp_path / "state", a, [synth_sources[0].name])
    assert_landed(tmp_path / "state", b, [synth_sources[1].name])
    assert len(daemon.named("job_degraded", job=str(a.resolve()))) == 1, "logged per retry"
    assert daemon.named("job_resumed", job=str(a.resolve()))
    assert daemon.terminate() == 0


def test_read_only_job_dir_keeps_its_report_pending(
        tmp_path: Path, synth_sources: list[Path], start_daemon: Start) -> None:
    root, a, b = _two_jobs(tmp_path)
    with mounted(a, fstype="bind"):
        place_atomically(synth_sources[0], a / synth_sources[0].name)
        remount(a, "ro", "bind")
        daemon = start_daemon(root)
        place_atomically(synth_sources[1], b / synth_sources[1].name)
        wait_reports(daemon, b, 1)
        degraded = daemon.wait_event("job_degraded", job=str(a.resolve()))
        assert "Read-only" in degraded[0]["reason"], degraded
        assert daemon.alive()
        assert_landed(tmp_path / "state", b, [synth_sources[1].name])
        remount(a, "rw", "bind")
        wait_reports(daemon, a, 1, timeout=LAND + 60)
        assert_landed(tmp_path / "state", a, [synth_sources[0].name])
        assert not daemon.named("report_quarantined")
        assert daemon.terminate() == 0


def test_full_tmpfs_job_dir_resumes_once_space_is_freed(
        tmp_path: Path, synth_sources: list[Path], start_daemon: Start) -> None:
    root, a, b = _two_jobs(tmp_path)
    with mounted(a, "size=2m"):
        place_atomically(synth_sources[0], a / synth_sources[0].name)
        filler = a / ".filler"
        with filler.open("wb") as fh:  # fill the file system to the last block
            try:
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
            except OSError:
                pass
        daemon = start_daemon(root)
        place_atomically(synth_sources[1], b / synth_sources[1].name)
        wait_reports(daemon, b, 1)
        degraded = daemon.wait_event("job_degraded", job=str(a.resolve()))
        assert "space" in degraded[0]["reason"].lower(), degraded
        assert daemon.alive()
        assert_landed(tmp_path / "state", b, [synth_sources[1].name])
        filler.unlink()
        wait_reports(daemon, a, 1, timeout=LAND + 60)
        assert_landed(tmp_path / "state", a, [synth_sources[0].name])
        assert not daemon.named("report_quarantined")
        assert daemon.terminate() == 0


def test_job_dir_removed_or_renamed_mid_flight(
        tmp_path: Path, synth_sources: list[Path], start_daemon: Start) -> None:
    root, a, b = _two_jobs(tmp_path)
    c = root / "c"
    c.mkdir()
    daemon = start_daemon(root)
    for src in synth_sources[:2]:
        place_atomically(src, a / src.name)
        place_atomically(src, c / src.name)
    deadline = time.monotonic() + LAND
    while not live_trace(a).exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    shutil.rmtree(a, ignore_errors=True)  # during (or just after) an append
    os.rename(c, root / "moved")
    place_atomically(synth_sources[2], b / synth_sources[2].name)
    wait_reports(daemon, b, 1)
    moved = root / "moved"
    wait_reports(daemon, moved, 2)
    assert daemon.alive()
    assert_landed(tmp_path / "state", b, [synth_sources[2].name])
    assert_landed(tmp_path / "state", moved, [s.name for s in synth_sources[:2]])
    assert daemon.terminate() == 0


def test_second_daemon_on_the_same_outputs_is_refused_in_one_line(
        tmp_path: Path, synth_sources: list[Path], start_daemon: Start) -> None:
    root, a, _ = _two_jobs(tmp_path)
    other_root = tmp_path / "other"
    d = other_root / "d"
    d.mkdir(parents=True)
    first = start_daemon(root)
    place_atomically(synth_sources[0], a / synth_sources[0].name)
    wait_reports(first, a, 1)
    second = start_daemon(root, other_root, state=tmp_path / "state2")
    place_atomically(synth_sources[1], d / synth_sources[1].name)
    wait_reports(second, d, 1)  # its other jobs go on
    refused = second.wait_event("job_refused", job=str(a.resolve()))
    assert "another prvstream process" in refused[0]["reason"]
    place_atomically(synth_sources[2], a / synth_sources[2].name)
    wait_reports(first, a, 2)
    assert second.alive() and first.alive()
    done = run_cli("finalize", str(a), "--state", str(tmp_path / "state"), "--log-json",
                   cwd=tmp_path)
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    assert "another prvstream process" in done.stdout + done.stderr
    assert "prvstream.done" in done.stdout + done.stderr
    assert_landed(tmp_path / "state", a, [s.name for s in synth_sources[:3:2]])
    assert first.terminate() == 0 and second.terminate() == 0


def test_sigterm_while_events_churn_exits_within_ten_seconds(
        tmp_path: Path, synth_sources: list[Path], start_daemon: Start) -> None:
    root, a, _ = _two_jobs(tmp_path)
    place_atomically(synth_sources[0], a / synth_sources[0].name)
    stop = threading.Event()

    def churn() -> None:
        n = 0
        while not stop.is_set():
            src, dst = a / f"churn{n % 7}.bin", a / f"churn{(n + 1) % 7}.bin"
            try:
                src.write_bytes(b"x")
                os.rename(src, dst)
            except OSError:
                pass
            n += 1

    for round_ in range(3):
        daemon = start_daemon(root)
        if round_ == 0:
            wait_reports(daemon, a, 1)
        worker = threading.Thread(target=churn, daemon=True)
        stop.clear()
        worker.start()
        time.sleep(0.5)
        started = time.monotonic()
        assert daemon.terminate(timeout=10.0) == 0
        assert time.monotonic() - started < 10.0
        stop.set()
        worker.join(5)
    assert_landed(tmp_path / "state", a, [synth_sources[0].name])


def test_unusable_state_dir_is_one_line_and_a_non_zero_exit(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    state = tmp_path / "state-is-a-file"
    state.write_text("")
    done = run_cli("watch", str(tmp_path / "root"), "--state", str(state), "--once",
                   cwd=tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr
    text = (done.stdout + done.stderr).strip()
    assert "Traceback" not in text and "state directory" in text
    assert len(text.splitlines()) == 1, text


def test_live_trace_swapped_for_a_fifo_degrades_its_job_and_never_blocks(
        tmp_path: Path, synth_sources: list[Path], start_daemon: Start) -> None:
    """Something else put in place of a job's live trace (here a FIFO, which blocks a plain
    open or read for ever) is an output fault: that job is degraded, its report pending and
    never set aside (it was: "internal error"), the other jobs land, the job resumes once the
    FIFO is gone, and SIGTERM still ends the service within 10 s."""
    root, a, b = _two_jobs(tmp_path)
    daemon = start_daemon(root)
    place_atomically(synth_sources[0], a / synth_sources[0].name)
    wait_reports(daemon, a, 1)
    live_trace(a).unlink()
    os.mkfifo(live_trace(a))
    place_atomically(synth_sources[1], a / synth_sources[1].name)
    degraded = daemon.wait_event("job_degraded", job=str(a.resolve()))
    assert "not a regular file" in degraded[0]["reason"], degraded
    place_atomically(synth_sources[2], b / synth_sources[2].name)
    wait_reports(daemon, b, 1)
    assert_landed(tmp_path / "state", b, [synth_sources[2].name])
    status = job_status(a)
    assert status["state"] == "degraded" and status["reports"] == 1, status
    assert "not a regular file" in status["reason"] and status["next_retry_ns"] > 0, status
    assert not status.get("quarantined"), status
    assert daemon.alive()
    live_trace(a).unlink()  # the output side works again: the job resumes by itself
    wait_reports(daemon, a, 2, timeout=LAND + 60)
    assert_landed(tmp_path / "state", a, [s.name for s in synth_sources[:2]])
    started = time.monotonic()
    assert daemon.terminate(timeout=10.0) == 0
    assert time.monotonic() - started < 10.0


def test_sigterm_right_after_a_finalize_exits_within_ten_seconds(
        tmp_path: Path, synth_sources: list[Path], start_daemon: Start) -> None:
    """The finalize's renames keep the observer dispatching when SIGTERM comes (the deadlock
    of stopping it on the loop); the other job's report stays committed."""
    root, a, b = _two_jobs(tmp_path)
    daemon = start_daemon(root)
    place_atomically(synth_sources[0], a / synth_sources[0].name)
    place_atomically(synth_sources[1], b / synth_sources[1].name)
    wait_reports(daemon, a, 1)
    wait_reports(daemon, b, 1)
    (a / "prvstream.done").touch()
    daemon.wait_event("job_finalized", job=str(a.resolve()), timeout=LAND)
    started = time.monotonic()
    assert daemon.terminate(timeout=10.0) == 0
    assert time.monotonic() - started < 10.0
    assert job_status(a)["finalized"]
    assert_landed(tmp_path / "state", b, [synth_sources[1].name])


def test_state_dir_lost_while_running_is_one_line_and_a_non_zero_exit(
        tmp_path: Path, synth_sources: list[Path], start_daemon: Start) -> None:
    """The service's own state directory replaced by a file while it runs: not a job's fault
    to retry for ever (each job was refused, "move the journal aside"), but one line and a
    non-zero exit, with the committed trace intact."""
    root, a, b = _two_jobs(tmp_path)
    daemon = start_daemon(root)
    place_atomically(synth_sources[0], a / synth_sources[0].name)
    wait_reports(daemon, a, 1)
    state = tmp_path / "state"
    shutil.rmtree(state)
    state.write_text("")
    place_atomically(synth_sources[1], b / synth_sources[1].name)
    place_atomically(synth_sources[2], a / synth_sources[2].name)
    assert daemon.wait_exit(timeout=LAND) == 3
    fatal = daemon.named("state_dir_unusable")
    assert len(fatal) == 1 and "state directory" in fatal[0]["error"], daemon.tail()
    assert "Traceback" not in daemon.tail(400)
    validate(live_trace(a))


def test_a_watched_root_removed_and_made_again_is_watched_again(
        tmp_path: Path, synth_sources: list[Path], start_daemon: Start) -> None:
    gone, other = tmp_path / "gone", tmp_path / "other"
    (gone / "a").mkdir(parents=True)
    (other / "b").mkdir(parents=True)
    daemon = start_daemon(gone, other)
    place_atomically(synth_sources[0], gone / "a" / synth_sources[0].name)
    wait_reports(daemon, gone / "a", 1)
    # renamed away and made again, then removed outright and made again: each time a job
    # dropped into the new directory lands, found by native events (no --poll)
    os.rename(gone, tmp_path / "gone.old")
    for n, src in enumerate(synth_sources[1:3], start=1):
        (gone / f"c{n}").mkdir(parents=True)
        place_atomically(src, gone / f"c{n}" / src.name)
        wait_reports(daemon, gone / f"c{n}", 1)
        assert len(daemon.named("root_rewatched", root=str(gone))) == n
        if n == 1:
            shutil.rmtree(gone)
            place_atomically(synth_sources[0], other / "b" / synth_sources[0].name)
            wait_reports(daemon, other / "b", 1)  # the other root goes on meanwhile
            daemon.wait_event("root_missing", root=str(gone))
    assert daemon.alive()
    state = tmp_path / "state"
    assert_landed(state, gone / "c2", [synth_sources[2].name])
    assert_landed(state, other / "b", [synth_sources[0].name])
    assert daemon.terminate() == 0
