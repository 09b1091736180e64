"""The NCCL rule: NCCL kernels as communication (BasicAnalysis) or useful work (TALP)."""

from __future__ import annotations

import pytest

from prvstream.daemon.config import load_settings
from prvstream.sinks.efficiency import EfficiencyModel, feed_report, merge
from prvstream.sinks.errors import ConfigError
from tests.sinks.test_efficiency import C, N, acts, report


def _model(nccl_as: str) -> EfficiencyModel:
    # compute [0, 40), an NCCL kernel [40, 80), idle [80, 100)
    model = EfficiencyModel("j", window_ns=1000, nccl_as=nccl_as)
    feed_report(model, report("r", "h", 1, 0, [0], 0, 100),
                acts([(0, 40, 0, 0, C), (40, 80, 0, 1, N)]))
    return model


@pytest.mark.parametrize(("nccl_as", "useful", "comm", "ce"), [
    ("communication", 40, 40, 0.5), ("useful", 80, 0, 1.0)])
def test_nccl_counts_as_the_setting_says(nccl_as: str, useful: int, comm: int,
                                         ce: float) -> None:
    state = _model(nccl_as).state()
    (d,) = state.devices
    assert (d.useful_ns, d.comm_ns, d.idle_ns) == (useful, comm, 20)
    assert d.inflight_ns == [20, 80, 0, 0, 0]  # an NCCL kernel is a kernel either way
    assert state.metrics.communication_efficiency == ce
    assert state.nccl_as == nccl_as and all(w.nccl_as == nccl_as for w in state.windows)


def test_states_of_different_rules_do_not_merge_and_the_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="nccl_as"):
        merge(_model("useful").partial(), _model("communication").partial())
    assert load_settings(None, {"nccl_as": "useful"}, environ={}).nccl_as == "useful"
    with pytest.raises(ConfigError):
        load_settings(None, {"nccl_as": "both"}, environ={})
    with pytest.raises(ValueError, match="nccl_as"):
        EfficiencyModel("j", nccl_as="both")
