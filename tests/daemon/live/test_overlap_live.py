"""Overlapping capture ranges of one process arriving live, in any order: the committed
blocks keep what clipping needs (``live.blockclip``), so finalize equals ``prvstream convert``
byte for byte, in process and through a real daemon."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from prvstream.daemon.live.blockstore import ReportMeta
from prvstream.daemon.service.readiness import report_identity
from prvstream.daemon.stream.batch import convert
from prvstream.daemon.stream.pipeline import prepare
from prvstream.daemon.synthetic.synth import SynthSpec
from tests.daemon.daemon_proc import DaemonProcess, place_atomically, run_cli
from tests.daemon.live.test_blockmerge import _live
from tests.daemon.overlap import (
    early_kernel_parts,
    host_states,
    one_state_at_a_time,
    overlapping_parts,
)
from tests.prv_check import validate

__all__: list[str] = []

OUTPUTS = (".prv", ".pcf", ".row")
#: three capture ranges of rank 0 (each overlaps the next), two of rank 1
CUTS = {0: ((0.0, 0.55), (0.3, 0.8), (0.6, 1.0)), 1: ((0.0, 0.7), (0.2, 1.0))}


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    src = tmp_path_factory.mktemp("parts")
    spec = SynthSpec(ranks=2, steps=6, seed=3)
    return [p for rank, cuts in CUTS.items()
            for p in overlapping_parts(src, cuts, spec, rank)]


@settings(max_examples=8, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.permutations(range(5)), skew=st.sampled_from([0.0, 0.37, 60.0]))
def test_overlapping_capture_ranges_finalize_as_convert_in_any_arrival_order(
        tmp_path_factory: pytest.TempPathFactory, parts: list[Path], order: list[int],
        skew: float) -> None:
    tmp = tmp_path_factory.mktemp("case")
    job, trace = _live(tmp, skew)
    for n, i in enumerate(order):
        target = job / parts[i].name
        shutil.copyfile(parts[i], target)
        trace.append(target, report_identity(target))
        if n == len(order) - 2:  # a finalized trace is a committed block like any other
            trace.finalize()
    model = trace._new_model()
    convert([str(job)], tmp / "batch", trace.settings, model=model)
    # the live summary (reports in arrival order) counts repeated GPU activity once too
    live = json.loads((job / "prvstream" / "summary.json").read_text())
    assert [(d["host"], d["device"], d["useful_ns"], d["captured_ns"])
            for d in live["devices"]] == [(d.host, d.device, d.useful_ns, d.captured_ns)
                                          for d in model.state().devices]
    for part in parts:  # finalize reads the committed blocks alone
        (job / part.name).unlink()
    trace.finalize()
    trace.close()
    validate(trace.prv, globally_sorted=True)
    for ext in OUTPUTS:
        assert trace.prv.with_suffix(ext).read_bytes() == (tmp / f"batch{ext}").read_bytes()


def test_a_real_daemon_finalizes_overlapping_capture_ranges_as_convert(
        tmp_path: Path, parts: list[Path], job: Path,
        start_daemon: Callable[..., DaemonProcess]) -> None:
    """Through ``prvstream watch``: the parts arrive latest first (each one's host states
    overlap those already committed), the end marker finalizes, and the trace is
    ``prvstream convert``'s of the same files, byte for byte."""
    daemon = start_daemon(job.parent)
    for n, src in enumerate(sorted(parts, key=lambda p: p.name, reverse=True), 1):
        place_atomically(src, job / src.name)
        daemon.wait_event("report_appended", count=n, timeout=60)
    (job / "prvstream.done").touch()
    daemon.wait_event("job_finalized", timeout=60)
    assert daemon.terminate() == 0, daemon.tail()
    assert [e for e in daemon.events() if e.get("level") == "error"] == [], daemon.tail()
    made = run_cli("convert", *map(str, parts), "-o", str(tmp_path / "batch"),
                   "--no-progress", cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    prv = job / "prvstream" / f"{job.name}.prv"
    validate(prv, globally_sorted=True)
    for ext in OUTPUTS:
        assert prv.with_suffix(ext).read_bytes() == (tmp_path / f"batch{ext}").read_bytes()


def test_in_time_order_the_live_trace_itself_has_no_overlapping_host_states(
        tmp_path: Path, parts: list[Path]) -> None:
    """Reports arriving in canonical order yield at append time already: the live trace shows
    each host thread one state at a time (later-arriving earlier reports can only be
    clipped at finalize, ``live.blockclip``)."""
    job, trace = _live(tmp_path, 0.37)
    for src in sorted(parts, key=lambda p: ReportMeta.of_report(p.name, prepare(p)).sort_key):
        target = job / src.name
        shutil.copyfile(src, target)
        trace.append(target, report_identity(target))
    trace.close()
    states = host_states(trace.prv)
    one_state_at_a_time(states)


def test_metas_of_an_older_prvstream_without_claims_finalize_from_the_exports(
        tmp_path: Path, parts: list[Path]) -> None:
    """Metas kept before claims were: finalize cannot clip from the blocks alone, so it reads
    the exports once (as for a job without codes), and keeps claims from then on."""
    job, trace = _live(tmp_path, 60.0)
    for src in parts[:3]:
        target = job / src.name
        shutil.copyfile(src, target)
        trace.append(target, report_identity(target))
    store = trace.blocks
    metas = store.metas()
    trace.journal.state.metas_length = 0
    for meta in metas:
        store.add_meta(msgspec.structs.replace(meta, claims=None))
    trace.journal.commit()
    assert not store.claims_known()
    convert([str(job)], tmp_path / "batch", trace.settings)
    with capture_logs() as logs:
        trace.finalize()
    assert [e for e in logs if e["event"] == "finalize_reading_exports"]
    assert store.claims_known()
    trace.close()
    for ext in OUTPUTS:
        assert trace.prv.with_suffix(ext).read_bytes() == (tmp_path / f"batch{ext}").read_bytes()


def test_a_later_report_yields_to_the_committed_ones_when_appended(tmp_path: Path) -> None:
    """A later capture range whose span (not its calls) overlaps the committed one: its block
    is appended, not compacted, because its host states yield at once; the live trace has
    one state at a time on the host thread, and finalize equals convert."""
    a, b = early_kernel_parts(tmp_path)
    job, trace = _live(tmp_path, 0.37)
    results = []
    for part in (a, b):
        target = job / part.name
        shutil.copyfile(part, target)
        results.append(trace.append(target, report_identity(target)))
    assert not results[1].compacted
    states = host_states(trace.prv)
    one_state_at_a_time(states)
    convert([str(job)], tmp_path / "batch", trace.settings)
    trace.finalize()
    trace.close()
    for ext in OUTPUTS:
        assert trace.prv.with_suffix(ext).read_bytes() == (tmp_path / f"batch{ext}").read_bytes()
