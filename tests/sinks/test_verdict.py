"""The verdict names the dominant loss and the device that causes it."""

from __future__ import annotations

from pathlib import Path

from prvstream.sinks.efficiency import EfficiencyModel, feed_report
from prvstream.sinks.summary import SummaryState, render_table
from tests.sinks.test_efficiency import C, M, acts, report
from tests.sinks.test_efficiency_capture import _summary


def _job(work: dict[int, list[tuple[int, int, int]]]) -> SummaryState:
    """Rank r on host n{r // 2} GPU r % 2, over [0, 100): (start, end, kind) intervals."""
    model = EfficiencyModel("j", window_ns=1000, gap_threshold_ns=5)
    for r, rows in sorted(work.items()):
        info = report(f"r{r}", f"n{r // 2}", 100 + r, r, [r % 2], 0, 100)
        feed_report(model, info, acts(sorted((s, e, 0, 0, k) for s, e, k in rows)))
    return model.state()


def test_straggler_is_named_for_load_imbalance(tmp_path: Path) -> None:
    from prvstream.daemon.synthetic.synth import SynthSpec

    state = _summary(tmp_path, "straggler",
                     SynthSpec(ranks=4, hosts=2, steps=10, layers=2, imbalance=1.6, slow_rank=1))
    v = state.verdict
    assert v is not None and v.loss == "load imbalance" and v.metric == "load_balance"
    assert v.culprit is not None and v.culprit.rank == 1
    assert v.text.startswith("load imbalance: rank 1 (node00 GPU 1) computes ")
    # the device table lists the straggler first
    table = render_table(state)
    first = table.split("hidden = comm under compute):\n")[1].splitlines()[1].split()
    assert (first[0], first[1], first[2]) == ("node00", "1", "1")


def test_slow_communicator_is_named_for_communication() -> None:
    # everyone computes 80 of 100; rank 2 copies 15 ns in the open, the others 2 ns
    state = _job({r: [(0, 80, C), (80, 80 + (15 if r == 2 else 2), M)] for r in range(4)})
    v = state.verdict
    assert v is not None and v.loss == "communication" and v.value == 80 / 95
    assert v.culprit is not None and (v.culprit.rank, v.culprit.host, v.culprit.device) == \
        (2, "n1", 0)
    assert "rank 2 (n1 GPU 0) spends 15.0% of its time in exposed communication" in v.text
    assert "(mean 5.2%)" in v.text  # (15 + 3 * 2) / 4 = 5.25


def test_idle_rank_is_named_for_orchestration() -> None:
    # ranks 0, 1, 3 compute [0, 90); rank 2 stalls for 40 ns in the middle
    work = {r: [(0, 90, C)] for r in (0, 1, 3)}
    work[2] = [(0, 30, C), (70, 100, C)]
    state = _job(work)
    m = state.metrics
    assert (m.load_balance, m.orchestration_efficiency) == (82.5 / 90, 0.9)
    v = state.verdict
    assert v is not None and v.loss == "orchestration"
    assert v.culprit is not None and v.culprit.rank == 2
    assert "rank 2 (n1 GPU 0) is idle 40.0% of its time, 40.0% in gaps" in v.text


def test_no_loss_names_no_culprit() -> None:
    state = _job({r: [(0, 100, C)] for r in range(2)})
    assert state.verdict is not None and state.verdict.loss == "none"
    assert state.verdict.culprit is None
