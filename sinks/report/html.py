"""One self-contained HTML page of a job's efficiency summary (inline CSS and SVG, no network)."""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Sequence
from html import escape

from prvstream.sinks.files import atomic_write
from prvstream.sinks.logger import get_logger
from prvstream.sinks.report.svg import COLORS, device_bars, metrics_chart
from prvstream.sinks.summary.records import Metrics, SummaryRecord, SummaryState
from prvstream.sinks.summary.timeline import timeline
from prvstream.sinks.summary.topn import top_rows
from prvstream.sinks.summary.verdict import blame_order

__all__ = ["render_html", "write_report"]

log = get_logger(__name__)

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;
max-width:960px;color:#222;line-height:1.4}
h1{font-size:22px;margin:0 0 4px}h3{font-size:15px;margin:16px 0 4px}
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:14px}
.verdict{border-left:6px solid #b03a2e;background:#fbeeee;padding:10px 14px;margin:16px 0;
font-size:15px}
.verdict.ok{border-color:#3a7d44;background:#eef7ef}
.tree{list-style:none;padding-left:0;margin:0}.tree ul{list-style:none;padding-left:28px;margin:0}
.tree li{margin:4px 0}.m{display:inline-block;width:320px}.tree ul .m{width:292px}
.v{display:inline-block;width:64px;text-align:right;font-variant-numeric:tabular-nums;font-weight:600}
.bar{display:inline-block;height:10px;background:#e6e6e6;width:240px;margin-left:10px;
vertical-align:middle}.bar span{display:block;height:10px}
.worst .m{font-weight:700;color:#b03a2e}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f4f4f4}
td.num{font-variant-numeric:tabular-nums}
.note{color:#666;font-size:12px}
"""

_NAMES = (("load_balance", "Load balance", "LB"),
          ("communication_efficiency", "Communication efficiency", "CE"),
          ("orchestration_efficiency", "Orchestration efficiency", "OE"))


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _secs(ns: int) -> str:
    if ns >= 10**7:
        return f"{ns / 1e9:.3f} s"
    return f"{ns / 1e6:.3f} ms" if ns >= 10**4 else f"{ns / 1e3:.2f} µs"


def _when(ns: int) -> str:
    return _dt.datetime.fromtimestamp(ns / 1e9, tz=_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _bar(x: float, color: str) -> str:
    return (f'<span class="bar"><span style="width:{max(0.0, min(x, 1.0)) * 100:.1f}%;'
            f'background:{color}"></span></span>')


def _tree(m: Metrics, worst: str) -> str:
    rows = [f'<li><span class="m">Parallel efficiency</span><span class="v" id="pe">'
            f'{_pct(m.parallel_efficiency)}</span>'
            f'{_bar(m.parallel_efficiency, COLORS["parallel_efficiency"])}<ul>']
    for field, name, short in _NAMES:
        v = float(getattr(m, field))
        cls = ' class="worst"' if field == worst else ""
        rows.append(f'<li{cls}><span class="m">{name} ({short})</span><span class="v" '
                    f'id="{short.lower()}">{_pct(v)}</span>{_bar(v, COLORS[field])}</li>')
    rows.append("</ul></li>")
    return '<ul class="tree">' + "".join(rows) + "</ul>"


def _metric_cells(m: Metrics) -> str:
    return "".join(f'<td class="num">{_pct(float(getattr(m, f)))}</td>' for f in
                   ("parallel_efficiency", "load_balance", "communication_efficiency",
                    "orchestration_efficiency"))


def _groups(state: SummaryState) -> str:
    head = ("<tr><th>{}</th><th>devices</th><th>PE</th><th>LB</th><th>CE</th><th>OE</th>"
            "</tr>")
    parts = []
    for title, rows in (("host", state.hosts), ("rank", state.ranks)):
        if len(rows) < 2:
            continue
        body = "".join(f"<tr><td>{escape(g.name)}</td><td class='num'>{g.devices}</td>"
                       f"{_metric_cells(g.metrics)}</tr>" for g in rows)
        parts.append(f"<table>{head.format(title)}{body}</table>")
    return "".join(parts)


def _opt(x: float | None) -> str:
    return "n/a" if x is None else _pct(x)


def _host(state: SummaryState) -> str:
    """The host metrics (BasicAnalysis / TALP), apart from the device metrics."""
    hm = state.host_metrics
    if hm is None:
        return ""
    tree = [("Host parallel efficiency", "host-pe", hm.parallel_efficiency, 0),
            ("MPI parallel efficiency", "host-mpi-pe", hm.mpi_parallel_efficiency, 1),
            ("MPI load balance", "host-lb", hm.load_balance, 2),
            ("MPI communication efficiency", "host-ce", hm.communication_efficiency, 2),
            ("Device offload efficiency (per host thread)", "host-doe",
             hm.device_offload_efficiency, 1),
            ("Offload efficiency per process (not in host PE)", "host-pdoe",
             hm.process_offload_efficiency, 1)]
    items = "".join(
        f'<li style="margin-left:{18 * depth}px"><span class="m">{name}</span>'
        f'<span class="v" id="{ident}">{_opt(v)}</span>'
        f'{_bar(v, COLORS["parallel_efficiency"]) if v is not None else ""}</li>'
        for name, ident, v, depth in tree)
    body = "".join(
        f"<tr><td>{escape(r.host)}</td><td class='num'>{r.pid}</td>"
        f"<td class='num'>{'-' if r.rank is None else r.rank}</td>"
        f"<td class='num'>{_secs(r.captured_ns)}</td><td class='num'>{_secs(r.useful_ns)}</td>"
        f"<td class='num'>{_secs(r.runtime_ns)}</td><td class='num'>{_secs(r.mpi_ns)}</td>"
        f"<td class='num'>{r.threads}</td>"
        f"<td class='num'>{_opt(r.device_offload_efficiency)}</td>"
        f"<td class='num'>{_opt(r.process_offload_efficiency)}</td></tr>" for r in hm.hosts)
    return ("<h2>Host metrics</h2><p class='note'>host processes (BasicAnalysis / TALP): "
            "useful = captured time outside CUDA runtime and MPI calls (DOE: per host thread, as "
            "BasicAnalysis; process DOE: a process in the runtime while any thread is); kept "
            "apart from the "
            "device metrics, never multiplied with them; n/a = not computable (MPI: no MPI "
            "calls)</p>"
            f'<ul class="tree" id="host-metrics">{items}</ul>'
            "<table id='host-processes'><tr><th>host</th><th>pid</th><th>rank</th>"
            "<th>captured</th><th>useful</th><th>CUDA runtime</th><th>MPI</th><th>threads</th>"
            "<th>DOE</th><th>process DOE</th>"
            f"</tr>{body}</table>")


def _intervals(rows: Sequence[SummaryRecord], count: str) -> str:
    body = "".join(
        f"<tr><td>{escape(r.name)}</td><td class='num'>{r.index}</td>"
        f"<td class='num'>{_secs(r.span_ns)}</td>{_metric_cells(r.metrics)}</tr>" for r in rows)
    return (f"<table><tr><th>phase</th><th>{count}</th><th>span</th><th>PE</th><th>LB</th>"
            f"<th>CE</th><th>OE</th></tr>{body}</table>")


_TITLES = {"kernels": "Kernels", "nccl": "NCCL collectives", "memcpy": "Memory copies by kind",
           "nvtx": "NVTX ranges"}


def _tables(state: SummaryState, top: int = 15) -> str:
    parts = []
    for view, title in _TITLES.items():
        rows = top_rows(state, view, top)
        if not rows:
            continue
        extra = view == "memcpy"
        head = ("<tr><th>name</th><th>count</th><th>total</th><th>share</th><th>mean</th>"
                "<th>min</th><th>max</th>" + ("<th>bytes</th><th>GB/s</th>" if extra else "")
                + "</tr>")
        body = "".join(
            f"<tr><td>{escape(r.name[:80])}</td><td class='num'>{r.count}</td>"
            f"<td class='num'>{_secs(r.total_ns)}</td><td class='num'>{_pct(r.share)}</td>"
            f"<td class='num'>{_secs(int(r.mean_ns))}</td><td class='num'>{_secs(r.min_ns)}</td>"
            f"<td class='num'>{_secs(r.max_ns)}</td>"
            + (f"<td class='num'>{r.bytes}</td><td class='num'>{r.gbps or 0.0:.2f}</td>"
               if extra else "") + "</tr>" for r in rows)
        parts.append(f"<h3>{title}</h3><table id='table-{view}'>{head}{body}</table>")
    if not parts:
        return ""
    return ("<h2>Top tables</h2><p class='note'>the largest names by total time, then "
            "'other'</p>" + "".join(parts))


def render_html(state: SummaryState, history: Sequence[SummaryRecord] = (), *,
                limit: int = 64) -> str:
    """The report page of ``state`` (and the cumulative ``history`` for the time chart)."""
    v = state.verdict
    job = escape(state.job or "?")
    captured = ""
    if state.captured_ns and state.captured_ns < state.span_ns:
        captured = (f", captured {_pct(state.captured_ns / state.span_ns)} of it "
                    f"(time outside capture ranges excluded)")
    meta = (f"{state.reports} report(s), {len(state.devices)} device(s), span "
            f"{_secs(state.span_ns)}{captured}"
            + (f"; data up to {_when(state.wall_ns)}" if state.wall_ns else ""))
    if v is None or v.loss == "none":
        text = v.text if v is not None else "no verdict in this summary (written before schema 3)"
        verdict = f'<div class="verdict ok" id="verdict">{escape(text)}</div>'
    else:
        culprit = ""
        if v.culprit is not None:
            c = v.culprit
            rank = "-" if c.rank is None else str(c.rank)
            culprit = (f'<br><span class="meta">culprit: host <b>{escape(c.host)}</b>, GPU '
                       f'<b>{c.device}</b>, rank <b>{rank}</b>, pid {c.pid}</span>')
        verdict = f'<div class="verdict" id="verdict">{escape(v.text)}{culprit}</div>'
    worst = v.metric if v is not None else ""
    devices = list(state.devices)
    if v is not None:
        key = blame_order(v.loss, state.span_ns)
        devices.sort(key=lambda d: (key(d), d.host))
    culprit_key = (v.culprit.host, v.culprit.device) if v is not None and v.culprit else None
    shown = devices[:limit]
    more = (f'<p class="note">{len(devices) - limit} more devices not shown</p>'
            if len(devices) > limit else "")
    tl = timeline(state, history)
    phases = ""
    if state.phase_totals:
        latest = sorted(state.phases, key=lambda r: (r.start_ns, r.name, r.index))[-20:]
        phases = ("<h2>Phases</h2><p class='note'>per phase name, over all its instances "
                  "(span = sum of the instance spans)</p>"
                  + _intervals(state.phase_totals, "instances")
                  + "<p class='note'>latest instances</p>" + _intervals(latest, "#"))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>prvstream report: {job}</title><style>{_CSS}</style></head>
<body>
<h1>GPU efficiency: {job}</h1>
<div class="meta" id="meta">{escape(meta)}</div>
{verdict}
<h2>Metrics</h2>
{_tree(state.metrics, worst)}
{_groups(state)}
{_host(state)}
<h2>Devices</h2>
<p class="note">share of each device's captured time; largest contribution to the loss first</p>
{device_bars(shown, state.span_ns, culprit_key)}{more}
<h2>Metrics over time</h2>
{metrics_chart(tl)}
{phases}
{_tables(state)}
<p class="note">Definitions: BSC/POP device model (docs/efficiency.md). LB = mean/max useful,
CE = max useful / max(useful + exposed communication), OE = max(useful + communication) /
captured time, PE = LB &times; CE &times; OE. Written by prvstream.</p>
</body></html>
"""


def write_report(path: str | os.PathLike[str], state: SummaryState,
                 history: Sequence[SummaryRecord] = ()) -> None:
    """Write the report page atomically."""
    atomic_write(path, render_html(state, history).encode())
    log.info("report_written", path=str(path), job=state.job)
