"""kill -9 while a group commit is under way (many reports ready at once, their blocks written
but not yet committed): after restarts the trace holds every report exactly once, and the
final trace is byte-identical to an uninterrupted run and to ``prvstream convert``."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from prvstream.daemon.synthetic.synth import SynthSpec, export_name, write_export
from tests.daemon.daemon_proc import DaemonProcess, job_status, load_journal, wait_for
from tests.daemon.service.test_service_e2e import (
    KERNEL_TYPES,
    SETTLE,
    Reference,
    assert_same,
    finalize_via_marker,
    kill_reference,
    outputs,
)
from tests.faults.helpers import LAND, live_trace
from tests.prv_check import validate

__all__ = ["kill_reference"]  # the module-scoped reference run, built from these sources


@pytest.fixture(scope="module")
def synth_sources(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Ten small ranks: ready together, they are appended as groups."""
    src = tmp_path_factory.mktemp("kill_group_sources")
    spec = SynthSpec(ranks=10, steps=2, hosts=3, seed=31)
    return [write_export(src / export_name(spec, r), spec, r) for r in range(spec.ranks)]


def _committed(state: Path, job: Path) -> tuple[int, int]:
    """(reports, .prv length) the job's journal has committed."""
    journal = load_journal(state, job)
    if journal is None:
        return 0, 0
    return len(journal.reports), journal.state.prv_length


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _kill_mid_group(daemon: DaemonProcess, state: Path, job: Path, n: int,
                    rng: random.Random) -> bool:
    """SIGKILL soon after a block beyond the committed length appears (a group in progress);
    whether the kill found uncommitted blocks (False: everything was in already)."""
    deadline = time.monotonic() + LAND
    while time.monotonic() < deadline:
        reports, length = _committed(state, job)
        if reports == n:
            return False
        if _size(live_trace(job)) > length > 0 or (length == 0 and _size(live_trace(job))):
            break
        time.sleep(0.002)
    time.sleep(rng.uniform(0.0, 0.25))  # within the blocks, or in the commit sequence
    daemon.kill()
    reports, length = _committed(state, job)
    return reports < n and _size(live_trace(job)) >= length


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_kill9_during_group_commit(seed: int, tmp_path: Path, synth_sources: list[Path],
                                   kill_reference: Reference) -> None:
    rng = random.Random(seed)
    job = tmp_path / "root" / "job"
    job.mkdir(parents=True)
    state = tmp_path / "state"
    n = len(synth_sources)
    daemon = DaemonProcess([job.parent], state, tmp_path / "logs", settle=SETTLE)
    try:
        daemon.start()
        for src in synth_sources:  # all at once: hard links, whole the moment they appear
            os.link(src, job / src.name)
        mid_group = [_kill_mid_group(daemon, state, job, n, rng)]
        daemon.start()
        if rng.random() < 0.7:  # and again in the restarted daemon's next group
            mid_group.append(_kill_mid_group(daemon, state, job, n, rng))
            daemon.start()
        assert mid_group[0], "the first kill found nothing in flight"
        wait_for(lambda: job_status(job).get("reports") == n, LAND, f"{n} reports", daemon)
        validate(live_trace(job))
        groups = daemon.named("group_committed")
        assert any(g["reports"] > 1 for g in groups), "no group commit happened"
        finalize_via_marker(daemon, job)
        final = validate(live_trace(job), globally_sorted=True)
        assert final.begins(*KERNEL_TYPES) == kill_reference.kernels, \
            "kernel events lost or doubled"
        journal = load_journal(state, job)
        assert journal is not None
        names = [r.name for r in journal.reports]
        assert sorted(names) == sorted(p.name for p in synth_sources), names
        assert journal.state.quarantined == []
        got = outputs(job)
        assert_same(got, kill_reference.uninterrupted, f"seed {seed} vs uninterrupted run")
        assert_same(got, kill_reference.convert, f"seed {seed} vs prvstream convert")
        assert daemon.terminate() == 0
    except AssertionError as exc:
        raise AssertionError(f"group kill trial seed={seed}: {exc}\n{daemon.tail()}") from exc
    finally:
        daemon.close()
