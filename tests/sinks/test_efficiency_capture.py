"""Captured time: a job profiled in capture ranges gives the metrics of the job captured whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from prvstream.daemon.config import load_settings
from prvstream.daemon.stream.batch import convert
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.summary import SummaryState

_FIELDS = ("load_balance", "communication_efficiency", "orchestration_efficiency",
           "parallel_efficiency")


def _summary(tmp: Path, name: str, spec: SynthSpec) -> SummaryState:
    write_job(tmp / name, spec)
    model = EfficiencyModel(name)
    convert([str(tmp / name)], tmp / f"{name}.out", load_settings(None, {}, environ={}),
            model=model)
    return model.state()


def test_sliced_job_has_the_metrics_of_the_unsliced_one(tmp_path: Path) -> None:
    base = dict(ranks=8, hosts=2, layers=2, seed=3)
    whole = _summary(tmp_path, "whole", SynthSpec(steps=40, **base))  # type: ignore[arg-type]
    sliced = _summary(tmp_path, "sliced", SynthSpec(steps=20, slices=2, **base))  # type: ignore[arg-type]
    assert sliced.reports == 16 and whole.reports == 8
    # before captured time: the uncaptured third of the span counted as idle
    busiest = max(d.useful_ns + d.comm_ns for d in sliced.devices)
    assert busiest / sliced.span_ns < sliced.metrics.orchestration_efficiency - 0.25
    # about a third of the sliced job's span lies between its two capture ranges
    assert 0.4 < sliced.captured_ns / sliced.span_ns < 0.8
    assert whole.captured_ns / whole.span_ns > 0.99
    for f in _FIELDS:
        assert getattr(sliced.metrics, f) == pytest.approx(getattr(whole.metrics, f), abs=0.01)
    for d in sliced.devices:
        assert d.useful_ns + d.comm_ns + d.idle_ns == d.captured_ns < sliced.span_ns
