"""One synthetic run cut into overlapping capture ranges (hypothesis over the cut points)
summarizes as the run converted whole: the top-N tables of the job and of each phase count an
operation or NVTX range that two ranges hold once (``efficiency.repeats``), and the device
measures (useful, communication, hidden, idle, kernels in flight) are the whole run's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prvstream.daemon.cli.main import cli
from prvstream.daemon.synthetic.spec import SynthSpec
from prvstream.daemon.synthetic.synth import write_export
from tests.daemon.overlap import cut_parts, keep_range

__all__: list[str] = []

#: the device measures a cut run must give exactly
_MEASURES = ("useful_ns", "captured_ns", "comm_ns", "overlap_ns", "idle_ns", "inflight_ns")


def _summary(tmp: Path, name: str, inputs: list[Path]) -> dict[str, Any]:
    assert cli("convert", *map(str, inputs), "-o", str(tmp / name), "--no-progress") == 0
    out: dict[str, Any] = json.loads((tmp / f"{name}.summary.json").read_text())
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole run (its rows that start within its calls' start range, as every cut's)."""
    tmp = tmp_path_factory.mktemp("run")
    whole = write_export(tmp / "rank0.sqlite", SynthSpec(ranks=1, steps=6), 0)
    keep_range(whole, 0.0, 1.0)
    _summary(tmp, "whole", [whole])
    return whole


@st.composite
def _cuts(draw: st.DrawFn) -> list[tuple[float, float]]:
    """2 or 3 ranges covering the run, each overlapping the next: (0, h0), (l1, h1), ..."""
    k = draw(st.integers(2, 3))
    v = sorted(draw(st.lists(st.integers(1, 19), min_size=2 * k - 2, max_size=2 * k - 2,
                             unique=True)))
    lo = [0.0] + [v[2 * i] / 20 for i in range(k - 1)]
    hi = [v[2 * i + 1] / 20 for i in range(k - 1)] + [1.0]
    return list(zip(lo, hi, strict=True))


def _phase_tables(summary: dict[str, Any]) -> dict[str, Any]:
    return {r["name"]: r["tables"] for r in summary["phase_totals"]}


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=_cuts())
def test_overlapping_ranges_summarize_as_the_whole_run(
        tmp_path_factory: pytest.TempPathFactory, run: Path,
        cuts: list[tuple[float, float]]) -> None:
    whole = run
    expected = json.loads((whole.parent / "whole.summary.json").read_text())
    tmp = tmp_path_factory.mktemp("cut")
    parts = cut_parts(whole, tmp, cuts[:3])
    got = _summary(tmp, "parts", parts)
    assert got["tables"] == expected["tables"]
    assert _phase_tables(got) == _phase_tables(expected)
    for g, w in zip(got["devices"], expected["devices"], strict=True):
        assert {k: g[k] for k in _MEASURES} == {k: w[k] for k in _MEASURES}
    assert got["metrics"] == expected["metrics"]
