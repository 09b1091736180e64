"""An export written in place in chunks, with pauses around the settle time, while the daemon
checks and reads it: never committed half-read, it lands exactly once when complete."""

from __future__ import annotations

import random
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.daemon.daemon_proc import (
    DaemonProcess,
    job_status,
    load_journal,
    place_atomically,
    wait_for,
)
from tests.daemon.service.test_service_e2e import assert_same, convert_outputs, outputs
from tests.faults.helpers import LAND, assert_landed, live_trace, wait_reports
from tests.prv_check import validate

SETTLE = 0.2


def _write_in_chunks(src: Path, dest: Path, seed: int, done: threading.Event) -> None:
    """Write ``src``'s bytes to ``dest`` in place, in uneven chunks, pausing for less than,
    about and more than the settle time (so readiness sees, checks and reads partial files)."""
    rng = random.Random(seed)
    data = src.read_bytes()
    cuts = sorted(rng.sample(range(1, len(data)), 5))
    try:
        with dest.open("wb") as fh:
            for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
                fh.write(data[a:b])
                fh.flush()
                if b < len(data):
                    time.sleep(rng.choice([0.05, SETTLE, 1.5 * SETTLE, 3 * SETTLE]))
    finally:
        done.set()


def _rewrite_in_place(src: Path, dest: Path, seed: int, done: threading.Event) -> None:
    """Write ``src`` whole in place, then, about when the daemon checks or reads it, write the
    same bytes again in place (truncate, then two halves a moment apart)."""
    rng = random.Random(seed)
    data = src.read_bytes()
    try:
        dest.write_bytes(data)
        time.sleep(SETTLE + rng.uniform(0.0, 0.3))
        with dest.open("wb") as fh:
            fh.write(data[: len(data) // 2])
            fh.flush()
            time.sleep(rng.uniform(0.0, 0.1))
            fh.write(data[len(data) // 2:])
    finally:
        done.set()


@pytest.mark.parametrize(("writer", "seed"), [
    pytest.param(_write_in_chunks, 1, id="grow-1"),
    pytest.param(_write_in_chunks, 2, id="grow-2"),
    pytest.param(_write_in_chunks, 3, id="grow-3"),
    pytest.param(_rewrite_in_place, 4, id="rewrite-4"),
    pytest.param(_rewrite_in_place, 5, id="rewrite-5"),
    pytest.param(_rewrite_in_place, 6, id="rewrite-6"),
])
def test_export_growing_while_read_lands_once_when_complete(
        writer: Callable[[Path, Path, int, threading.Event], None], seed: int, job: Path,
        tmp_path: Path, synth_sources: list[Path],
        start_daemon: Callable[..., DaemonProcess]) -> None:
    daemon = start_daemon(job.parent, settle=SETTLE)
    first, growing = synth_sources[0], synth_sources[1]
    place_atomically(first, job / first.name)
    wait_reports(daemon, job, 1)
    done = threading.Event()
    thread = threading.Thread(target=writer, args=(growing, job / growing.name, seed, done))
    thread.start()
    try:
        while not done.wait(0.02):  # while it grows: never taken half-written
            if writer is _write_in_chunks:
                assert job_status(job).get("reports") == 1, "a partial export was committed"
    finally:
        thread.join(timeout=30)
    wait_reports(daemon, job, 2)
    # set aside while partial (if it was) is forgotten once it landed
    wait_for(lambda: job_status(job).get("quarantined") == [], LAND, "no quarantine", daemon)
    assert_landed(tmp_path / "state", job, [first.name, growing.name])
    journal = load_journal(tmp_path / "state", job)
    assert journal is not None
    entry = next(r for r in journal.reports if r.name == growing.name)
    assert entry.identity.size == growing.stat().st_size, "committed before it was whole"
    assert len(daemon.named("report_appended", report=growing.name)) == 1
    (job / "prvstream.done").touch()
    wait_for(lambda: bool(job_status(job).get("finalized")), LAND, "finalized", daemon)
    validate(live_trace(job), globally_sorted=True)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for src in (first, growing):
        shutil.copyfile(src, inputs / src.name)
    assert_same(outputs(job), convert_outputs(inputs, tmp_path / "conv" / "job"),
                f"seed {seed} vs convert of the complete exports")
    assert daemon.terminate() == 0
