"""Inline SVG charts for the HTML report: stacked device bars and metrics over time."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import DeviceRow
from prvstream.sinks.summary.timeline import Timeline

__all__ = ["COLORS", "device_bars", "metrics_chart"]

log = get_logger(__name__)

#: series colours (useful, communication, idle; PE, LB, CE, OE)
COLORS = {"useful": "#3a7d44", "comm": "#e0a030", "idle": "#c8c8c8",
          "parallel_efficiency": "#1f4e79", "load_balance": "#3a7d44",
          "communication_efficiency": "#e0a030", "orchestration_efficiency": "#b03a2e"}
_SHORT = {"parallel_efficiency": "PE", "load_balance": "LB",
          "communication_efficiency": "CE", "orchestration_efficiency": "OE"}


def _f(x: float) -> str:
    return f"{x:.1f}"


def device_bars(devices: Sequence[DeviceRow], span_ns: int, culprit: tuple[str, int] | None,
                width: int = 720) -> str:
    """One horizontal bar per device: useful, exposed communication and idle shares of its
    captured time; the culprit's label in bold."""
    row_h, label_w, pad = 22, 190, 4
    bar_w = width - label_w - 70
    h = row_h * len(devices) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
           f'role="img" aria-label="time per device">']
    for i, d in enumerate(devices):
        t = max(d.captured_ns or span_ns, 1)
        y = 4 + i * row_h
        rank = "-" if d.rank is None else str(d.rank)
        label = escape(f"{d.host} GPU {d.device} (rank {rank})")
        weight = ' font-weight="bold"' if culprit == (d.host, d.device) else ""
        out.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end" '
                   f'font-size="12"{weight}>{label}</text>')
        x = float(label_w)
        for key, ns in (("useful", d.useful_ns), ("comm", d.comm_ns), ("idle", d.idle_ns)):
            w = bar_w * ns / t
            if w > 0:
                out.append(f'<rect x="{_f(x)}" y="{y}" width="{_f(w)}" height="{row_h - pad}" '
                           f'fill="{COLORS[key]}"><title>{key} {100 * ns / t:.1f}%</title>'
                           f'</rect>')
            x += w
        out.append(f'<text x="{label_w + bar_w + 6}" y="{y + 14}" font-size="12">'
                   f'{100 * d.useful_ns / t:.1f}%</text>')
    y = 4 + len(devices) * row_h + 14
    x = label_w
    for key, name in (("useful", "useful"), ("comm", "exposed communication"),
                      ("idle", "idle")):
        out.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{COLORS[key]}"/>'
                   f'<text x="{x + 16}" y="{y}" font-size="12">{name}</text>')
        x += 30 + 8 * len(name)
    out.append("</svg>")
    return "".join(out)


def metrics_chart(tl: Timeline, width: int = 720, height: int = 260) -> str:
    """PE, LB, CE and OE (percent) over the timeline's segments, x over the whole span."""
    left, right, top, bottom = 44, 80, 10, 36
    pw, ph = width - left - right, height - top - bottom
    span = max(tl.span, max((b for _, b, _ in tl.segments), default=0.0), 1e-12)

    def sx(x: float) -> float:
        return left + pw * x / span

    def sy(v: float) -> float:
        return top + ph * (1.0 - v)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'role="img" aria-label="metrics over time">',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" '
           f'stroke="#999"/>']
    for v in (0.0, 0.25, 0.5, 0.75, 1.0):
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{_f(sy(v))}" y2="{_f(sy(v))}" '
                   f'stroke="#ddd"/><text x="{left - 4}" y="{_f(sy(v) + 4)}" font-size="11" '
                   f'text-anchor="end">{int(100 * v)}%</text>')
    for k in range(6):
        x = span * k / 5
        out.append(f'<text x="{_f(sx(x))}" y="{top + ph + 14}" font-size="11" '
                   f'text-anchor="middle">{x:.3g}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 4}" font-size="12" '
               f'text-anchor="middle">{escape(tl.unit)} since start ({escape(tl.label)})</text>')
    for i, (field, short) in enumerate(_SHORT.items()):
        pts: list[str] = []
        for a, b, m in tl.segments:
            v = float(getattr(m, field))
            pts += [f"{_f(sx(a))},{_f(sy(v))}", f"{_f(sx(b))},{_f(sy(v))}"]
        if len(pts) == 2 and pts[0] == pts[1]:  # a single point: draw a dot
            cx, cy = pts[0].split(",")
            out.append(f'<circle cx="{cx}" cy="{cy}" r="3" fill="{COLORS[field]}"/>')
        else:
            out.append(f'<polyline fill="none" stroke="{COLORS[field]}" stroke-width="2" '
                       f'points="{" ".join(pts)}"/>')
        ly = top + 14 + 18 * i
        out.append(f'<line x1="{left + pw + 10}" x2="{left + pw + 28}" y1="{ly - 4}" '
                   f'y2="{ly - 4}" stroke="{COLORS[field]}" stroke-width="3"/>'
                   f'<text x="{left + pw + 32}" y="{ly}" font-size="12">{short}</text>')
    out.append("</svg>")
    return "".join(out)
