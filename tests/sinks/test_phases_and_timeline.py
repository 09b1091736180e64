"""PyTorch's numbered profiler steps are one phase name; plots span the job in fitting units."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prvstream.daemon.cli.main import cli
from prvstream.daemon.config import Settings
from prvstream.sinks.efficiency import EfficiencyModel, feed_report
from prvstream.sinks.summary import SummaryWriter
from prvstream.sinks.summary.timeline import timeline
from tests.sinks.test_efficiency import C, acts, phases, report


def _steps(n: int) -> EfficiencyModel:
    """One rank, ``n`` steps of 1 ms named ProfilerStep#k, compute in the first 0.6 ms."""
    model = EfficiencyModel("torch", window_ns=10_000_000_000, gap_threshold_ns=10**5)
    ms = 10**6
    info = report("r0", "h", 1, 0, [0], 0, n * ms,
                  phase_names=[f"ProfilerStep#{k}" for k in range(n)])
    feed_report(model, info, acts([(k * ms, k * ms + 600_000, 0, 0, C) for k in range(n)]),
                phases([(k * ms, (k + 1) * ms, 0, k) for k in range(n)]))
    return model


def test_default_pattern_matches_pytorch_profiler_steps() -> None:
    pattern = re.compile(Settings().phase_pattern)
    assert all(pattern.search(s) for s in ("ProfilerStep#0", "ProfilerStep#129", "train_step",
                                             "Step 3", "iteration"))
    assert not any(pattern.search(s) for s in ("ProfilerStepX", "aten::mm", "stepper"))


def test_numbered_steps_are_instances_of_one_phase_name() -> None:
    state = _steps(5).state()
    assert [(p.name, p.index) for p in state.phase_totals] == [("ProfilerStep", 5)]
    assert [p.index for p in state.phases] == [0, 1, 2, 3, 4]
    assert all(p.metrics.orchestration_efficiency == pytest.approx(0.6) for p in state.phases)


def test_timeline_of_a_job_shorter_than_a_window_uses_phases_in_ms() -> None:
    state = _steps(5).state()
    assert len(state.windows) == 1
    tl = timeline(state)
    assert (tl.label, tl.unit, tl.span) == ("phase instances", "ms", 5.0)
    assert [(a, b) for a, b, _ in tl.segments] == [(k, k + 1.0) for k in range(5)]


def test_plot_says_where_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    model = _steps(4)
    SummaryWriter.write_state(model.state(), tmp_path / "summary.json")
    png = tmp_path / "plot.png"
    assert cli("summary", str(tmp_path / "summary.json"), "--plot", str(png)) == 0
    err = capsys.readouterr().err
    assert f"plot written to {png.resolve()} (metrics over phase instances, x in ms)" in err
    assert png.read_bytes().startswith(b"\x89PNG")
