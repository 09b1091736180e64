"""Expected ranks end to end: real ``prvstream watch --once`` processes, synthetic ranks
arriving with one missing, ``status.json``'s ``missing_ranks`` and the summary's warning."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from prvstream.daemon.stream.ranks import rank_from_name
from prvstream.daemon.synthetic.synth import SynthSpec, write_export
from tests.daemon.daemon_proc import (
    DaemonProcess,
    job_status,
    place_atomically,
    run_cli,
    wait_for,
)

#: generous bound for one report or a status rewrite (settle + conversion on a busy machine)
LAND = 30.0


def _once(start_daemon: Callable[..., DaemonProcess], job: Path, *extra: str
          ) -> dict[str, object]:
    daemon = start_daemon(job.parent, extra=("--once", *extra))
    assert daemon.wait_exit(timeout=90) == 0, daemon.tail()
    return job_status(job)


def test_flag_lists_the_missing_rank_and_summary_warns(
        job: Path, synth_sources: list[Path],
        start_daemon: Callable[..., DaemonProcess]) -> None:
    for src in (synth_sources[0], synth_sources[1], synth_sources[3]):
        place_atomically(src, job / src.name)
    status = _once(start_daemon, job, "--expect", "4")
    assert status["reports"] == 3
    assert status["expected_ranks"] == 4
    assert status["missing_ranks"] == [2]
    shown = run_cli("summary", str(job), cwd=job)
    assert shown.returncode == 0, shown.stderr
    warnings = [ln for ln in shown.stderr.splitlines() if "ranks missing" in ln]
    assert warnings == ["warning: 1 of 4 expected ranks missing (no report yet): 2"]
    # complete: no warning, nothing missing
    place_atomically(synth_sources[2], job / synth_sources[2].name)
    status = _once(start_daemon, job, "--expect", "4")
    assert (status["reports"], status["missing_ranks"]) == (4, [])
    assert "ranks missing" not in run_cli("summary", str(job), cwd=job).stderr


def test_expect_file_wins_over_the_flag_and_no_expectation_is_null(
        job: Path, synth_sources: list[Path],
        start_daemon: Callable[..., DaemonProcess]) -> None:
    place_atomically(synth_sources[1], job / synth_sources[1].name)
    status = _once(start_daemon, job)
    assert status["expected_ranks"] is None and status["missing_ranks"] == []
    (job / "prvstream.expect").write_text("12\n")
    place_atomically(synth_sources[0], job / synth_sources[0].name)
    status = _once(start_daemon, job, "--expect", "2")
    assert status["expected_ranks"] == 12
    assert status["missing_ranks"] == list(range(2, 12))
    shown = run_cli("summary", str(job), "--json", cwd=job)
    assert json.loads(shown.stdout)  # stdout stays JSON; the warning goes to stderr
    assert ("warning: 10 of 12 expected ranks missing (no report yet): "
            "2, 3, 4, 5, 6, 7, 8, 9, ...") in shown.stderr


def test_a_running_daemon_rereads_the_expect_file_when_it_changes(
        job: Path, tmp_path: Path, synth_sources: list[Path],
        start_daemon: Callable[..., DaemonProcess]) -> None:
    daemon = start_daemon(job.parent)
    for src in synth_sources[:2]:
        place_atomically(src, job / src.name)
    wait_for(lambda: job_status(job).get("reports") == 2, LAND, "2 reports", daemon)
    assert job_status(job)["expected_ranks"] is None
    staged = tmp_path / "expect"
    for count, missing in ((4, [2, 3]), (3, [2])):
        staged.write_text(f"{count}\n")
        place_atomically(staged, job / "prvstream.expect")
        wait_for(lambda m=missing: job_status(job).get("missing_ranks") == m, LAND,
                 f"missing_ranks {missing}", daemon)
        assert job_status(job)["expected_ranks"] == count
    assert job_status(job)["reports"] == 2
    assert daemon.terminate() == 0


@pytest.fixture(scope="module")
def no_mpi(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Four synthetic ranks without MPI tables (torchrun/NCCL-like), one host each."""
    src = tmp_path_factory.mktemp("no_mpi")
    spec = SynthSpec(ranks=4, steps=3, seed=5, mpi_ranks_table=False)
    return [write_export(src / f"r{r}.sqlite", spec, r) for r in range(spec.ranks)]


@pytest.mark.parametrize(("names", "missing"), [
    pytest.param(["rank0000.sqlite", "rank_1.sqlite", "rank-3.sqlite"], [2], id="rank%d"),
    pytest.param(["report.3.sqlite", "report.0.sqlite", "report.2.sqlite"], [1],
                 id="%q{RANK}"),
    pytest.param(["a.sqlite", "b.sqlite", "c.sqlite"], [3], id="host-pid-order"),
])
def test_ranks_from_file_names_without_mpi_tables(
        names: list[str], missing: list[int], job: Path, no_mpi: list[Path],
        start_daemon: Callable[..., DaemonProcess]) -> None:
    for src, name in zip(no_mpi, names, strict=False):
        place_atomically(src, job / name)
    status = _once(start_daemon, job, "--expect", "4")
    assert status["reports"] == 3
    assert status["missing_ranks"] == missing
    # the summary's device table shows the ranks the names carry ("-" where none)
    shown = run_cli("summary", str(job), "--json", cwd=job)
    devices = json.loads(shown.stdout)["devices"]
    want = sorted((rank_from_name(n) for n in names), key=lambda r: (r is None, r or 0))
    got = sorted((d["rank"] for d in devices), key=lambda r: (r is None, r or 0))
    assert got == want
