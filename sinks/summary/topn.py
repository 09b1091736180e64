"""The top-N tables of a summary as rows (``--view kernels|nccl|memcpy|nvtx``) and text."""

from __future__ import annotations

from typing import Any

from prvstream.sinks.errors import ConfigError
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import SummaryState, TableRow

__all__ = ["TABLE_VIEWS", "phase_tables", "render_top", "top_json", "top_rows"]

log = get_logger(__name__)

TABLE_VIEWS = ("kernels", "nccl", "memcpy", "nvtx")
_TITLES = {"kernels": "kernel", "nccl": "NCCL collective", "memcpy": "copy kind",
           "nvtx": "NVTX range"}


def _fold(rows: list[TableRow]) -> TableRow:
    count = sum(r.count for r in rows)
    total = sum(r.total_ns for r in rows)
    nbytes = sum(r.bytes for r in rows)
    gbps = nbytes / total if rows[0].gbps is not None and total else rows[0].gbps
    return TableRow(name="other", count=count, total_ns=total,
                    mean_ns=total / count if count else 0.0,
                    min_ns=min(r.min_ns for r in rows), max_ns=max(r.max_ns for r in rows),
                    share=sum(r.share for r in rows), bytes=nbytes, gbps=gbps)


def phase_tables(state: SummaryState, phase: str | None) -> dict[str, list[TableRow]]:
    """The cumulative tables, or those of phase name ``phase`` (its ``phase_total`` record).

    Raises ``ConfigError`` naming the phases the summary has when ``phase`` is not one."""
    if phase is None:
        return state.tables
    for rec in state.phase_totals:
        if rec.name == phase:
            return rec.tables
    have = ", ".join(sorted(r.name for r in state.phase_totals)) or "none"
    raise ConfigError(f"no phase named {phase!r} in this summary (phases: {have}); pass "
                      "--phase with one of those names, without the trailing #N")


def top_rows(state: SummaryState, view: str, top: int | None = None,
             phase: str | None = None) -> list[TableRow]:
    """The table's rows sorted by total, at most ``top`` names and then ``other`` (of the
    whole job, or of phase name ``phase``)."""
    rows = sorted(phase_tables(state, phase).get(view, []),
                  key=lambda r: (r.name == "other", -r.total_ns))
    named = [r for r in rows if r.name != "other"]
    if top is None or top >= len(named):
        return rows
    rest = named[top:] + [r for r in rows if r.name == "other"]
    return [*named[:top], _fold(rest)]


def top_json(rows: list[TableRow], view: str) -> list[dict[str, Any]]:
    """Rows as JSON objects: name, count, total_ns, mean_ns, min_ns, max_ns, share, plus
    bytes and gbps for memcpy."""
    out = []
    for r in rows:
        d: dict[str, Any] = {"name": r.name, "count": r.count, "total_ns": r.total_ns,
                             "mean_ns": r.mean_ns, "min_ns": r.min_ns, "max_ns": r.max_ns,
                             "share": r.share}
        if view == "memcpy":
            d["bytes"], d["gbps"] = r.bytes, r.gbps
        out.append(d)
    return out


def _ns(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    return f"{ns / 1e3:.1f} µs"


def render_top(state: SummaryState, view: str, top: int | None = None,
               phase: str | None = None) -> str:
    """The table as text, largest total first (of phase name ``phase`` when given)."""
    rows = top_rows(state, view, top, phase)
    head = f"job {state.job or '?'}: {view} by total time" + (
        f" in phase {phase}" if phase is not None else "")
    if not rows:
        return f"{head}\nno {view} rows in this summary\n"
    extra = view == "memcpy"
    lines = [head, f"  {_TITLES[view]:<40} {'count':>8} {'total':>11} {'share':>6} "
             f"{'mean':>11} {'min':>11} {'max':>11}" + (f" {'bytes':>12} {'GB/s':>7}"
                                                        if extra else "")]
    for r in rows:
        line = (f"  {r.name[:40]:<40} {r.count:>8} {_ns(r.total_ns):>11} "
                f"{100 * r.share:>5.1f}% {_ns(r.mean_ns):>11} {_ns(r.min_ns):>11} "
                f"{_ns(r.max_ns):>11}")
        if extra:
            line += f" {r.bytes:>12} {r.gbps or 0.0:>7.2f}"
        lines.append(line)
    return "\n".join(lines) + "\n"
