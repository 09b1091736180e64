"""Finalize on Dask: the committed blocks merged by time range on the workers give the bytes of
the single-process finalize (trace, ``.pcf``/``.row``, the new codes, the journal's offsets),
on a real LocalCluster in this process and with two worker processes, including many small
ranges, host-state recuts at a new origin, and a worker killed mid-task."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from structlog.testing import capture_logs

from prvstream.daemon.config import load_settings
from prvstream.daemon.live import blockrange, rangefinal
from prvstream.daemon.live.journal import JobJournal
from prvstream.daemon.live.livetrace import LiveTrace
from prvstream.daemon.service.readiness import report_identity
from prvstream.daemon.stream.batch import convert
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from tests.conftest import real_exports
from tests.daemon.overlap import overlapping_parts
from tests.daemon.scale.nodask import assert_runs_without_dask


def _finalized(tmp: Path, name: str, sources: list[Path], *, dask: str = "",
               progress: Callable[[int, int], None] | None = None,
               **extra: Any) -> dict[str, Any]:
    """Append ``sources`` in order to a new live job, finalize it; digests of what it wrote."""
    job = tmp / name
    job.mkdir(parents=True)
    settings = load_settings(None, {"state_dir": str(tmp / f"{name}-state"), "dask": dask,
                                    **extra}, environ={})
    journal = JobJournal.open(settings.state_dir, job)
    journal.lock()
    trace = LiveTrace(journal, job / "prvstream", "job", settings)
    try:
        for source in sources:
            target = job / source.name
            shutil.copyfile(source, target)
            trace.append(target, report_identity(target))
        trace.progress = progress
        with capture_logs() as logs:
            trace.finalize()
        state = trace.journal.state
        out = {ext: hashlib.sha256((job / "prvstream" / f"job{ext}").read_bytes()).hexdigest()
               for ext in (".prv", ".pcf", ".row")}
        out["codes"] = hashlib.sha256(trace.blocks.codes_path().read_bytes()).hexdigest()
        out["journal"] = repr((state.finalized, state.prv_length, state.codes_records,
                               state.header_capacity, state.end_time,
                               [(r.block_start, r.block_end) for r in trace.journal.reports],
                               sorted(trace.thread_last.items())))
        ranges = [e for e in logs if e["event"] == "dask_finalize_ranges"]
        assert len(ranges) == (1 if dask else 0)
        if ranges:
            out["ranges"] = ranges[0]["ranges"]
            out["recut"] = ranges[0]["recut"]
            out["clipped"] = ranges[0]["clipped"]
    finally:
        trace.close()
        journal.unlock()
    assert not list((job / "prvstream").glob(".*dask-*")), "scratch left behind"
    return out


def _both(tmp: Path, sources: list[Path], dask: str, **extra: Any
          ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(one process, on Dask); the latter's range count and whether it recut host states
    are popped off it, into the third."""
    one = _finalized(tmp, "one", sources, **extra)
    dask_out = _finalized(tmp, "dask", sources, dask=dask, **extra)
    facts = {k: dask_out.pop(k) for k in ("ranges", "recut", "clipped")}
    return one, dask_out, facts


@pytest.mark.skipif(not real_exports(), reason="real exports not found (PRVSTREAM_TEST_DATA)")
def test_real_exports_finalize_in_process_cluster_byte_identical(inproc: Any,
                                                                 tmp_path: Path) -> None:
    one, dask, facts = _both(tmp_path, real_exports(), "inproc:2")
    assert one == dask
    assert facts["ranges"] >= 2


@pytest.mark.parametrize("skew", [pytest.param(0.0, id="same-grid"),
                                  pytest.param(0.37, id="recut")])
def test_many_small_ranges_byte_identical(inproc: Any, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, skew: float) -> None:
    """Dozens of ranges, blocks indexed in 4 KiB pieces, a sampled line every 7th, fan-in 2
    (multi-pass inside each range): every boundary lands inside every block."""
    monkeypatch.setattr(blockrange, "SAMPLE", 7)
    monkeypatch.setattr(rangefinal, "SAMPLE", 7)
    monkeypatch.setattr(rangefinal, "_PIECE", 4096)
    monkeypatch.setattr(rangefinal, "_RANGE_RECORDS", 300)
    monkeypatch.setattr(rangefinal, "_RECUT_SPAN", 0)
    sources = write_job(tmp_path / "src", SynthSpec(ranks=3, slices=2, steps=2, seed=3))
    # the later slices first: the live origin is not the canonical one
    order = sorted(sources, key=lambda p: ("slice0" in p.name, p.name))
    one, dask, facts = _both(tmp_path, order, "inproc:2", skew_allowance=skew, fan_in=2)
    assert one == dask
    assert facts["recut"] == (skew != 0.0)
    assert facts["ranges"] >= 10
    convert([str(s) for s in sources], tmp_path / "batch", load_settings(
        None, {"state_dir": str(tmp_path / "s")}, environ={}))
    assert hashlib.sha256((tmp_path / "batch.prv").read_bytes()).hexdigest() == one[".prv"]


def test_sixteen_ranks_finalize_on_two_worker_processes(processes: Any, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rangefinal, "_RECUT_SPAN", 0)
    sources = write_job(tmp_path / "src", SynthSpec(ranks=16, steps=2, hosts=4))
    one, dask, facts = _both(tmp_path, sources, "local:2", skew_allowance=0.37)
    assert one == dask
    assert facts["ranges"] >= 4 and facts["recut"]


def test_worker_killed_mid_finalize_completes_once(processes: Any, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rangefinal, "_RECUT_SPAN", 0)
    sources = write_job(tmp_path / "src", SynthSpec(ranks=16, steps=2))
    killed: list[int] = []
    calls: list[int] = []

    def kill_one(done: int, total: int) -> None:
        calls.append(done)
        if not killed:  # the first range is in: the others are queued or running
            pids = processes.run(os.getpid)
            killed.append(sorted(pids.values())[0])
            os.kill(killed[0], signal.SIGKILL)

    one = _finalized(tmp_path, "one", sources)
    # the plan takes two ranges a worker it sees: under load the scheduler can lose sight of
    # one for a while (a missed heartbeat), which would plan two ranges, not four
    processes.wait_for_workers(2, timeout=120)
    dask = _finalized(tmp_path, "dask", sources, dask="local:2", progress=kill_one)
    assert killed
    assert dask.pop("ranges") >= 4
    dask.pop("recut")
    dask.pop("clipped")
    assert one == dask
    assert calls == sorted(calls) and len(calls) == len(set(calls)) >= 2  # each range once


def test_plan_ranges_slices_cover_each_range() -> None:
    """Every record of a range lies in its block's slice (times sampled every ``SAMPLE``)."""
    rng = np.random.default_rng(7)
    times = np.sort(rng.integers(0, 10_000, 5_000))
    step = blockrange.SAMPLE
    sampled = np.arange(step, len(times), step)
    index = [(sampled * 10, sampled, times[sampled])]  # 10 bytes a line
    block = (0, len(times) * 10, 0, len(times))
    for reach in (0, 500):
        plan = rangefinal.plan_ranges([block], index, 6, reach)
        assert len(plan) > 1
        for lo, hi, slices in plan:
            (s,) = slices
            inside = np.flatnonzero((times >= (lo if lo is not None else -1) - reach)
                                    & (times < (hi if hi is not None else 1 << 40) + reach))
            assert s.seq0 <= inside[0] and inside[-1] < s.seq0 + s.records
            assert (s.start, s.end) == (s.seq0 * 10, (s.seq0 + s.records) * 10)


def test_overlapping_capture_ranges_finalize_on_dask(inproc: Any, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Host states clipped where an earlier overlapping capture of the process gives the
    thread states: a clipped state may begin ranges after its committed start."""
    monkeypatch.setattr(blockrange, "SAMPLE", 5)
    monkeypatch.setattr(rangefinal, "SAMPLE", 5)
    monkeypatch.setattr(rangefinal, "_RANGE_RECORDS", 200)
    monkeypatch.setattr(rangefinal, "_RECUT_SPAN", 0)
    parts = [p for rank, cuts in {0: ((0.0, 0.55), (0.3, 0.8), (0.6, 1.0)),
                                  1: ((0.0, 0.7), (0.2, 1.0))}.items()
             for p in overlapping_parts(tmp_path / "src", cuts, SynthSpec(ranks=2, steps=6,
                                                                          seed=3), rank)]
    latest_first = sorted(parts, key=lambda p: p.name, reverse=True)
    one, dask, facts = _both(tmp_path, latest_first, "inproc:2", skew_allowance=0.37,
                             fan_in=2)
    assert one == dask
    assert facts["clipped"] and facts["ranges"] >= 10


def test_recut_ranges_are_at_least_a_few_grid_cells_long() -> None:
    """Each range also reads one grid cell before it when host states are cut again: a
    short job gets fewer, longer ranges then (and as many as the records ask otherwise)."""
    grid = rangefinal.hoststates.GRID
    index = [(np.zeros(3, np.int64), np.zeros(3, np.int64),
              np.array([0, 7 * grid, 15 * grid], np.int64))]
    assert rangefinal._range_count(12_000_000, 2, index, recut=False) == 12
    assert rangefinal._range_count(13_000_000, 2, index, recut=False) == 12  # whole rounds
    assert rangefinal._range_count(12_000_000, 2, index, recut=True) == 4  # 15 // 3, rounded
    assert rangefinal._range_count(12_000_000, 3, index, recut=True) == 3
    assert rangefinal._range_count(100, 2, index, recut=True) == 1


def test_without_dask_watch_and_finalize_never_import_distributed(tmp_path: Path) -> None:
    """The daemon's appends and finalize (blocks merged in this process) without ``--dask``:
    neither ``distributed`` nor ``dask`` is imported."""
    job = tmp_path / "root" / "job"
    write_job(job, SynthSpec(ranks=2, steps=1))
    (job / "prvstream.done").touch()
    assert_runs_without_dask('watch', str(job.parent), '--once', '--settle', '0',
                             '--state', str(tmp_path / 'state'), '--log-level', 'error')
    convert([str(job)], tmp_path / "batch", load_settings(
        None, {"state_dir": str(tmp_path / "s")}, environ={}))
    # finalized: the canonical trace, which the live one (its origin skewed) is not
    assert (job / "prvstream" / "job.prv").read_bytes() == (tmp_path / "batch.prv").read_bytes()
