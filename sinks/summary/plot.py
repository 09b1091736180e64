"""A PNG of a summary: per-device bars and the metrics over time (matplotlib, optional)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import SummaryRecord, SummaryState
from prvstream.sinks.summary.timeline import timeline

__all__ = ["plot_summary"]

log = get_logger(__name__)

def plot_summary(state: SummaryState, history: Sequence[SummaryRecord],
                 png: str | os.PathLike[str]) -> None:
    """Per-device stacked useful/comm/idle bars and the metrics over time, into a PNG.

    Needs matplotlib (the ``plot`` extra: ``pip install '.[plot]'`` in the checkout);
    imported only here.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PrvstreamError("--plot needs matplotlib: pip install matplotlib in prvstream's "
                             "environment (or pip install '.[plot]' in the prvstream "
                             "checkout)") from exc
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    devs = sorted(state.devices, key=lambda d: (d.host, d.device))
    labels = [f"{d.host}:{d.device}" for d in devs]
    xs = list(range(len(devs)))
    useful = [d.useful_ns / 1e9 for d in devs]
    comm = [d.comm_ns / 1e9 for d in devs]
    idle = [d.idle_ns / 1e9 for d in devs]
    ax1.bar(xs, useful, label="useful", color="#3a7d44")
    ax1.bar(xs, comm, bottom=useful, label="communication", color="#e0a030")
    ax1.bar(xs, idle, bottom=[u + c for u, c in zip(useful, comm, strict=True)], label="idle",
            color="#bbbbbb")
    ax1.set_xticks(xs, labels, rotation=60, ha="right", fontsize=7)
    ax1.set_ylabel("seconds")
    ax1.set_ylim(0, 1.18 * max([u + c + i for u, c, i in zip(useful, comm, idle, strict=True)],
                               default=1.0) or 1.0)
    ax1.set_title(f"job {state.job}: devices")
    ax1.legend(fontsize=8, ncol=3, loc="upper center")
    tl = timeline(state, history)
    for field, short in (("parallel_efficiency", "PE"), ("load_balance", "LB"),
                         ("communication_efficiency", "CE"),
                         ("orchestration_efficiency", "OE")):
        px: list[float] = []
        py: list[float] = []
        for x0, x1, m in tl.segments:
            px += [x0, x1]
            py += [100 * getattr(m, field)] * 2
        ax2.plot(px, py, marker=".", markevery=2, label=short)
    ax2.set_xlim(0, max(tl.span, 1e-9))
    ax2.set_ylim(0, 105)
    ax2.set_xlabel(f"{tl.unit} since start ({tl.label})")
    ax2.set_ylabel("%")
    ax2.set_title("metrics over time")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    log.info("plot_written", path=str(png), series=tl.label, unit=tl.unit)
