"""Text views of a summary: the verdict line and the tables ``prvstream summary`` prints."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence

from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import (
    HostMetrics,
    Metrics,
    RecordHead,
    SummaryRecord,
    SummaryState,
)
from prvstream.sinks.summary.verdict import blame_order

__all__ = ["host_lines", "opt_pct", "pct", "render_table", "secs", "verdict"]

log = get_logger(__name__)

_LOSSES = (("load_balance", "load imbalance", "LB"),
           ("communication_efficiency", "communication", "CE"),
           ("orchestration_efficiency", "orchestration", "OE"))


def verdict(metrics: Metrics, span_ns: int = 1,
            record: SummaryRecord | RecordHead | None = None) -> str:
    """One line naming the dominant loss (the smallest of LB, CE and OE) and, from a record's
    verdict (schema 3), the device that causes it."""
    if record is not None and record.verdict is not None and record.span_ns > 0:
        return f"verdict: {record.verdict.text}"
    if span_ns <= 0:
        return "verdict: no data yet"
    field, label, short = min(_LOSSES, key=lambda x: getattr(metrics, x[0]))
    value = getattr(metrics, field)
    if value >= 0.995:
        return "verdict: no significant loss (LB, CE, OE all above 99.5%)"
    return f"verdict: dominant loss is {label} ({short} {pct(value)})"


def pct(x: float) -> str:
    return f"{100.0 * x:5.1f}%"


def opt_pct(x: float | None) -> str:
    """A percentage, or "n/a" where the metric is not computable (null)."""
    return "   n/a" if x is None else pct(x)


def host_lines(hm: HostMetrics | None, limit: int = 40) -> list[str]:
    """The host metrics (kept apart from the device metrics) and one line per host process."""
    if hm is None:
        return []
    lines = [
        "host (BasicAnalysis/TALP; not multiplied with the device metrics):",
        f"  host parallel efficiency   {opt_pct(hm.parallel_efficiency)}",
        f"    MPI parallel efficiency  {opt_pct(hm.mpi_parallel_efficiency)}",
        f"      MPI load balance       {opt_pct(hm.load_balance)}",
        f"      MPI communication eff. {opt_pct(hm.communication_efficiency)}",
        f"    device offload eff.      {opt_pct(hm.device_offload_efficiency)}"
        "  (per host thread)",
        f"    process offload eff.     {opt_pct(hm.process_offload_efficiency)}"
        "  (per process; not in host PE)",
        f"  {'host':<20} {'pid':>8} {'rank':>5} {'thr':>3} {'useful':>7} {'CUDA rt':>7} "
        f"{'MPI':>7} {'DOE':>7} {'procDOE':>7}",
    ]
    for r in hm.hosts[:limit]:
        t = max(r.captured_ns, 1)
        rank = "-" if r.rank is None else str(r.rank)
        lines.append(f"  {r.host[:20]:<20} {r.pid:>8} {rank:>5} {r.threads:>3} "
                     f"{pct(r.useful_ns / t):>7} {pct(r.runtime_ns / t):>7} "
                     f"{pct(r.mpi_ns / t):>7} {opt_pct(r.device_offload_efficiency):>7} "
                     f"{opt_pct(r.process_offload_efficiency):>7}")
    if len(hm.hosts) > limit:
        lines.append(f"  ... {len(hm.hosts) - limit} more host processes")
    return lines


def secs(ns: int) -> str:
    return f"{ns / 1e9:.3f} s"


def _metric_lines(m: Metrics) -> list[str]:
    return [
        f"  parallel efficiency        {pct(m.parallel_efficiency)}",
        f"    load balance             {pct(m.load_balance)}",
        f"    communication eff.       {pct(m.communication_efficiency)}",
        f"    orchestration eff.       {pct(m.orchestration_efficiency)}",
    ]


def _device_table(record: SummaryRecord, limit: int) -> list[str]:
    if record.verdict is not None:
        key = blame_order(record.verdict.loss, record.span_ns)
        rows = sorted(record.devices, key=lambda d: (key(d), d.host))
    else:
        rows = sorted(record.devices, key=lambda d: (d.useful_ns, d.host, d.device))
    lines = [f"  {'host':<20} {'gpu':>3} {'rank':>5} {'useful':>7} {'comm':>7} {'idle':>7} "
             f"{'hidden':>7} {'gaps':>5} {'gap time':>10}"]
    for d in rows[:limit]:
        rank = "-" if d.rank is None else str(d.rank)
        t = max(d.captured_ns or record.span_ns, 1)
        lines.append(f"  {d.host[:20]:<20} {d.device:>3} {rank:>5} {pct(d.useful_ns / t):>7} "
                     f"{pct(d.comm_ns / t):>7} {pct(d.idle_ns / t):>7} "
                     f"{pct(d.overlap_share):>7} {d.gaps:>5} {secs(d.gap_ns):>10}")
    if len(rows) > limit:
        lines.append(f"  ... {len(rows) - limit} more devices")
    return lines


def _interval_table(rows: Sequence[SummaryRecord], phase: bool, limit: int,
                    count: str = "#") -> list[str]:
    head = f"  {'phase':<16} {count:>5}" if phase else f"  {'window start (UTC)':<22}"
    lines = [f"{head} {'span':>10} {'PE':>7} {'LB':>7} {'CE':>7} {'OE':>7} {'devices':>7}"
             f" {'host PE':>7} {'DOE':>7}"]

    for r in rows[-limit:]:
        if phase:
            label = f"  {r.name[:16]:<16} {r.index:>5}"
        else:
            when = _dt.datetime.fromtimestamp(r.start_ns / 1e9, tz=_dt.UTC)
            label = f"  {when.strftime('%Y-%m-%d %H:%M:%S'):<22}"
        m = r.metrics
        lines.append(f"{label} {secs(r.span_ns):>10} {pct(m.parallel_efficiency):>7} "
                     f"{pct(m.load_balance):>7} {pct(m.communication_efficiency):>7} "
                     f"{pct(m.orchestration_efficiency):>7} {len(r.devices):>7}"
                     + _host_cells(r.host_metrics))
    if len(rows) > limit:
        lines.insert(1, f"  ... {len(rows) - limit} earlier rows not shown")
    return lines


def _host_cells(hm: HostMetrics | None) -> str:
    if hm is None:
        return f" {'n/a':>7} {'n/a':>7}"
    return (f" {opt_pct(hm.parallel_efficiency):>7} "
            f"{opt_pct(hm.device_offload_efficiency):>7}")


def _captured(record: SummaryRecord) -> str:
    """", captured 66.0% (capture ranges excluded)" when part of the span was not captured."""
    if not record.captured_ns or record.captured_ns >= record.span_ns:
        return ""
    return (f", captured {pct(record.captured_ns / record.span_ns).strip()} "
            f"(time outside capture ranges excluded)")


def render_table(state: SummaryState, view: str = "cumulative", limit: int = 40) -> str:
    """A readable table: metrics as percentages, devices worst first, and a verdict line."""
    lines = [f"job {state.job or '?'}: {state.reports} report(s), {len(state.devices)} "
             f"device(s), span {secs(state.span_ns)}{_captured(state)}"]
    if view == "cumulative":
        lines.append("cumulative:")
        lines += _metric_lines(state.metrics)
        lines.append(verdict(state.metrics, state.span_ns, state))
        if state.devices:
            lines.append("devices (largest contribution to the loss first; % of captured "
                         "time; hidden = comm under compute):")
            lines += _device_table(state, limit)
        lines += host_lines(state.host_metrics, limit)
        lines += [f"note: {n}" for n in state.notes]
        return "\n".join(lines) + "\n"
    rows = state.windows if view == "window" else state.phases
    if view == "phase" and state.phase_totals:
        lines.append("per phase name, all instances (span = sum of instance spans):")
        lines += _interval_table(state.phase_totals, True, limit, count="count")
    if not rows:
        lines.append(f"no {view} rows yet")
        return "\n".join(lines) + "\n"
    bound = f" the latest {state.recent}{' per name' if view == 'phase' else ''} are kept" \
        if state.recent else ""
    lines.append(f"per {view}:{bound}")
    lines += _interval_table(rows, view == "phase", limit)
    latest = rows[-1]
    lines.append(f"latest {view}: " + verdict(latest.metrics, latest.span_ns, latest))
    return "\n".join(lines) + "\n"

