"""End to end: a real ``prvstream watch`` process, real files arriving over time, SIGKILL and
SIGTERM, and the finalized trace byte-compared with ``prvstream convert``.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from prvstream.daemon.synthetic.synth import SynthSpec, export_name, write_export
from tests.conftest import REAL_DATA, real_exports
from tests.daemon.daemon_proc import (
    DaemonProcess,
    job_status,
    load_journal,
    place_atomically,
    run_cli,
    wait_for,
)
from tests.prv_check import validate

SETTLE = 0.2
#: generous bound for one report to land (settle + debounce + conversion on a busy machine)
LAND = 30.0
KERNEL_TYPES = (63000006, 63000007)
OUTPUTS = (".prv", ".pcf", ".row")


# ------------------------------------------------------------------------------- fixtures


def kernel_rows(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
            if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
                total += con.execute(
                    "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        finally:
            con.close()
    return total


def outputs(job: Path) -> dict[str, bytes]:
    return {ext: (job / "prvstream" / f"{job.name}{ext}").read_bytes() for ext in OUTPUTS}


def convert_outputs(inputs: Path, out: Path) -> dict[str, bytes]:
    """``prvstream convert INPUTS -o OUT`` in a child process; its trace files."""
    out.parent.mkdir(parents=True, exist_ok=True)
    done = run_cli("convert", str(inputs), "-o", str(out), "--log-json", cwd=out.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    return {ext: out.with_name(out.name + ext).read_bytes() for ext in OUTPUTS}


def assert_same(got: dict[str, bytes], want: dict[str, bytes], what: str) -> None:
    for ext in OUTPUTS:
        assert got[ext] == want[ext], f"{what}: {ext} differs ({len(got[ext])} vs " \
                                      f"{len(want[ext])} bytes)"


def finalize_via_marker(daemon: DaemonProcess, job: Path, timeout: float = LAND) -> None:
    (job / "prvstream.done").touch()
    wait_for(lambda: bool(job_status(job).get("finalized")), timeout, "finalized", daemon)


def live_trace(job: Path) -> Path:
    return job / "prvstream" / f"{job.name}.prv"


# ------------------------------------------------------------------------------ arrivals


def _synth_arrivals(job: Path, tmp: Path) -> Iterator[Path]:
    spec = SynthSpec(ranks=4, steps=3, seed=5)
    for rank in range(spec.ranks):
        yield write_export(job / export_name(spec, rank), spec, rank)  # renamed into place


def _real_arrivals(job: Path, tmp: Path) -> Iterator[Path]:
    found = real_exports()
    if not found:
        pytest.skip(f"real exports not found at {REAL_DATA} (set PRVSTREAM_TEST_DATA)")
    for src in found:
        dest = job / src.name
        shutil.copyfile(src, dest)  # written in place: the daemon must wait for it
        yield dest


@pytest.mark.parametrize("arrivals", [pytest.param(_synth_arrivals, id="synth"),
                                      pytest.param(_real_arrivals, id="real")])
def test_ranks_arrive_one_by_one(arrivals: Callable[[Path, Path], Iterator[Path]], job: Path,
                                 tmp_path: Path,
                                 start_daemon: Callable[..., DaemonProcess]) -> None:
    daemon = start_daemon(job.parent)
    tasks = 0
    placed: list[Path] = []
    for k, path in enumerate(arrivals(job, tmp_path), start=1):
        placed.append(path)
        wait_for(lambda k=k: job_status(job).get("reports") == k, LAND, f"{k} reports", daemon)
        stats = validate(live_trace(job))
        assert len(stats.threads_per_task) > tasks, f"arrival {k} added no task"
        tasks = len(stats.threads_per_task)
        journal = load_journal(tmp_path / "state", job)
        assert journal is not None
        assert [r.name for r in journal.reports] == [p.name for p in placed]
    finalize_via_marker(daemon, job)
    final = validate(live_trace(job), globally_sorted=True)
    assert final.begins(*KERNEL_TYPES) == kernel_rows(placed)
    assert_same(outputs(job), convert_outputs(job, tmp_path / "conv" / "job"), "finalized")
    # time 0 of the finalized trace is the earliest session start, and status.json says so
    assert job_status(job)["origin_ns"] == min(_session_start(p) for p in placed)
    assert daemon.named("report_quarantined") == []
    assert daemon.terminate() == 0


def _session_start(path: Path) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    finally:
        con.close()
    return int(row[0])


def test_polling_mode(job: Path, tmp_path: Path, synth_sources: list[Path],
                      start_daemon: Callable[..., DaemonProcess]) -> None:
    daemon = start_daemon(job.parent, extra=("--poll", "0.2"))
    assert daemon.named("discovery_started", mode="poll")
    for k, src in enumerate(synth_sources[:2], start=1):
        place_atomically(src, job / src.name)
        wait_for(lambda k=k: job_status(job).get("reports") == k, LAND, f"{k} reports", daemon)
        validate(live_trace(job))
    finalize_via_marker(daemon, job)
    assert_same(outputs(job), convert_outputs(job, tmp_path / "conv" / "job"), "finalized")
    assert daemon.terminate() == 0


def test_renamed_into_place(job: Path, tmp_path: Path, synth_sources: list[Path],
                            start_daemon: Callable[..., DaemonProcess]) -> None:
    """A ``.tmp`` name in the job directory is ignored; the rename makes it an input. So is a
    file moved in from a staging folder outside the root."""
    daemon = start_daemon(job.parent)
    staged = job / (synth_sources[0].name + ".tmp")
    shutil.copyfile(synth_sources[0], staged)
    outside = tmp_path / "staging"
    outside.mkdir()
    shutil.copyfile(synth_sources[1], outside / synth_sources[1].name)
    time.sleep(4 * SETTLE + 0.4)
    assert job_status(job).get("reports", 0) == 0, "a .tmp file was taken"
    os.rename(staged, job / synth_sources[0].name)
    wait_for(lambda: job_status(job).get("reports") == 1, LAND, "the renamed report", daemon)
    os.rename(outside / synth_sources[1].name, job / synth_sources[1].name)
    wait_for(lambda: job_status(job).get("reports") == 2, LAND, "the moved-in report", daemon)
    assert daemon.terminate() == 0


@pytest.mark.parametrize("finish", ["in-place", "atomic"])
def test_half_written_export_is_not_taken_early(
        finish: str, job: Path, tmp_path: Path, synth_sources: list[Path],
        start_daemon: Callable[..., DaemonProcess]) -> None:
    found = real_exports()
    src = found[0] if found else synth_sources[0]
    data = src.read_bytes()
    dest = job / "rank0000.sqlite"
    with dest.open("wb") as fh:
        fh.write(data[: len(data) // 2])
    daemon = start_daemon(job.parent)
    time.sleep(4 * SETTLE + 1.0)
    assert job_status(job).get("reports", 0) == 0, "a half-written export was taken"
    journal = load_journal(tmp_path / "state", job)
    assert journal is None or not journal.reports
    if finish == "in-place":
        with dest.open("ab") as fh:
            fh.write(data[len(data) // 2:])
    else:
        place_atomically(src, dest)
    wait_for(lambda: job_status(job).get("reports") == 1, LAND, "the completed report", daemon)
    status = job_status(job)
    assert status["quarantined"] == [], "a report that landed is still listed as quarantined"
    validate(live_trace(job))
    assert daemon.terminate() == 0


def test_sigterm_exits_cleanly(job: Path, synth_sources: list[Path],
                               start_daemon: Callable[..., DaemonProcess]) -> None:
    daemon = start_daemon(job.parent)
    place_atomically(synth_sources[0], job / synth_sources[0].name)
    wait_for(lambda: job_status(job).get("reports") == 1, LAND, "1 report", daemon)
    assert daemon.terminate(timeout=10.0) == 0
    assert daemon.named("stopping", signal="SIGTERM")
    assert daemon.named("service_stopped")


def test_corrupt_file_and_escaping_symlink_are_refused(
        job: Path, tmp_path: Path, synth_sources: list[Path],
        start_daemon: Callable[..., DaemonProcess]) -> None:
    daemon = start_daemon(job.parent)
    bad = job / "rank0009.sqlite"
    bad.write_bytes(random.Random(3).randbytes(70_000))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copyfile(synth_sources[2], outside / "rank0002.sqlite")
    link = job / "rank0002.sqlite"
    link.symlink_to(outside / "rank0002.sqlite")
    for src in synth_sources[:2]:
        place_atomically(src, job / src.name)
    wait_for(lambda: job_status(job).get("reports") == 2, LAND, "the good reports", daemon)
    wait_for(lambda: bool(job_status(job).get("quarantined")), LAND, "the quarantine", daemon)
    quarantined = job_status(job)["quarantined"]
    assert [q["path"] for q in quarantined] == [str(bad.resolve())]
    assert quarantined[0]["reason"]
    assert daemon.named("report_quarantined", path=str(bad.resolve()))
    wait_for(lambda: bool(daemon.named("symlink_refused", path=str(link))), LAND,
             "symlink_refused", daemon)
    journal = load_journal(tmp_path / "state", job)
    assert journal is not None
    assert sorted(r.name for r in journal.reports) == [p.name for p in synth_sources[:2]]
    assert daemon.terminate() == 0


def test_once_processes_existing_files_and_exits(
        job: Path, tmp_path: Path, synth_sources: list[Path],
        start_daemon: Callable[..., DaemonProcess]) -> None:
    for src in synth_sources[:3]:
        place_atomically(src, job / src.name)
    daemon = start_daemon(job.parent, extra=("--once",))
    assert daemon.wait_exit(timeout=60) == 0, daemon.tail()
    status = job_status(job)
    assert status["reports"] == 3
    assert not status["finalized"]
    validate(live_trace(job))
    assert daemon.named("once_done")
    # with the job-end marker, --once finalizes too
    (job / "prvstream.done").touch()
    again = start_daemon(job.parent, extra=("--once",))
    assert again.wait_exit(timeout=60) == 0, again.tail()
    assert job_status(job)["finalized"]
    assert_same(outputs(job), convert_outputs(job, tmp_path / "conv" / "job"), "--once")


def test_exit_when_finalized_ends_a_one_job_instance(
        job: Path, synth_sources: list[Path],
        start_daemon: Callable[..., DaemonProcess]) -> None:
    daemon = start_daemon(job, extra=("--exit-when-finalized",))
    for src in synth_sources[:2]:
        place_atomically(src, job / src.name)
    wait_for(lambda: job_status(job).get("reports") == 2, 60, "both reports landed", daemon)
    assert daemon.alive()  # still serving: the job has not ended
    (job / "prvstream.done").touch()
    assert daemon.wait_exit(timeout=60) == 0, daemon.tail()
    assert job_status(job)["finalized"]
    assert daemon.named("all_jobs_finalized_exiting")


# ---------------------------------------------------------------------------- kill -9


@dataclass
class Reference:
    convert: dict[str, bytes]
    uninterrupted: dict[str, bytes]
    kernels: int


@pytest.fixture(scope="module")
def kill_reference(tmp_path_factory: pytest.TempPathFactory, synth_sources: list[Path]
                   ) -> Reference:
    """The outputs of ``prvstream convert`` and of an uninterrupted daemon run."""
    base = tmp_path_factory.mktemp("kill_reference")
    conv = convert_outputs(synth_sources[0].parent, base / "job")
    job = base / "root" / "job"
    job.mkdir(parents=True)
    with DaemonProcess([job.parent], base / "state", base / "logs", settle=SETTLE) as daemon:
        daemon.start()
        for src in synth_sources:
            place_atomically(src, job / src.name)
        wait_for(lambda: job_status(job).get("reports") == len(synth_sources), LAND,
                 "all reports", daemon)
        finalize_via_marker(daemon, job)
        assert daemon.terminate() == 0
    return Reference(convert=conv, uninterrupted=outputs(job),
                     kernels=kernel_rows(synth_sources))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return -1


def _wait_for_growth(path: Path, before: int, timeout: float = 3.0) -> None:
    """Return as soon as a block is being appended (the .prv grew), or after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _size(path) <= before:
        time.sleep(0.001)


def _kill_trial(seed: int, base: Path, sources: list[Path], ref: Reference) -> None:
    """Ranks arrive at random gaps; the daemon is SIGKILLed at random points (during
    arrivals, and sometimes during finalize) and restarted; the end result must not care."""
    rng = random.Random(seed)
    job = base / "root" / "job"
    job.mkdir(parents=True)
    state = base / "state"
    kills_after = set(rng.sample(range(len(sources)), rng.choice([1, 2])))
    kill_finalize = rng.random() < 0.3
    daemon = DaemonProcess([job.parent], state, base / "logs", settle=SETTLE)
    try:
        daemon.start()
        for i, src in enumerate(sources):
            time.sleep(rng.uniform(0.0, 0.3))
            before = _size(live_trace(job))
            place_atomically(src, job / src.name)
            if i in kills_after:
                if rng.random() < 0.5:
                    _wait_for_growth(live_trace(job), before)
                    time.sleep(rng.uniform(0.0, 0.03))  # inside the append's commit sequence
                else:
                    time.sleep(rng.uniform(0.1, 0.8))  # settle + debounce + append ~ 0.45 s
                daemon.kill()
                time.sleep(rng.uniform(0.0, 0.3))
                daemon.start()
                if rng.random() < 0.3:  # and again while it recovers
                    time.sleep(rng.uniform(0.0, 0.05))
                    daemon.kill()
                    daemon.start()
        n = len(sources)
        wait_for(lambda: job_status(job).get("reports") == n, LAND, f"{n} reports", daemon)
        validate(live_trace(job))
        if kill_finalize:
            (job / "prvstream.done").touch()
            daemon.wait_event("job_finalizing", run=daemon.starts, timeout=LAND)
            time.sleep(rng.uniform(0.0, 0.15))
            daemon.kill()
            (job / "prvstream.done").unlink()
            daemon.start()
            # the live trace after a crash mid-finalize must be whole again
            wait_for(lambda: bool(daemon.named("job_opened", run=daemon.starts)), LAND,
                     "job reopened", daemon)
            assert job_status(job).get("reports") == n
            validate(live_trace(job))
        finalize_via_marker(daemon, job)
        final = validate(live_trace(job), globally_sorted=True)
        assert final.begins(*KERNEL_TYPES) == ref.kernels, "kernel events lost or doubled"
        journal = load_journal(state, job)
        assert journal is not None
        names = [r.name for r in journal.reports]
        assert sorted(names) == sorted(p.name for p in sources), f"reports: {names}"
        assert job_status(job)["reports"] == n
        got = outputs(job)
        assert_same(got, ref.uninterrupted, f"seed {seed} vs uninterrupted run")
        assert_same(got, ref.convert, f"seed {seed} vs prvstream convert")
        assert daemon.terminate() == 0
    except AssertionError as exc:
        raise AssertionError(f"kill trial seed={seed} (kills after arrivals "
                             f"{sorted(kills_after)}, during finalize {kill_finalize}): "
                             f"{exc}\n{daemon.tail()}") from exc
    finally:
        daemon.close()


@pytest.mark.parametrize("seed", [101, 202, 303])
def test_kill9_and_restart_gives_the_uninterrupted_trace(
        seed: int, tmp_path: Path, synth_sources: list[Path], kill_reference: Reference) -> None:
    _kill_trial(seed, tmp_path, synth_sources, kill_reference)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1000, 1024))
def test_kill9_soak(seed: int, tmp_path: Path, synth_sources: list[Path],
                    kill_reference: Reference) -> None:
    _kill_trial(seed, tmp_path, synth_sources, kill_reference)
