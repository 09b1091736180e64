"""Prometheus textfile-collector gauges of a summary state."""

from __future__ import annotations

import math
import os

from prvstream.sinks.files import atomic_write
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import SummaryState

__all__ = ["prometheus_text", "write_prom_file"]

log = get_logger(__name__)

def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(state: SummaryState) -> str:
    """Prometheus text exposition of the cumulative state (gauges, seconds for times)."""
    job = _label(state.job)
    out: list[str] = []
    for field, help_text in (
        ("parallel_efficiency", "sum(useful) / (devices * span), fraction"),
        ("load_balance", "mean(useful) / max(useful), fraction"),
        ("communication_efficiency", "max(useful) / max(useful + comm), fraction"),
        ("orchestration_efficiency", "max(useful + comm) / span, fraction"),
    ):
        name = f"prvstream_{field}"
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge",
                f'{name}{{job="{job}"}} {_num(getattr(state.metrics, field))}']
    for name, help_text, value in (
        ("prvstream_span_seconds", "length of the job's span so far", state.span_ns / 1e9),
        ("prvstream_reports", "reports included", float(state.reports)),
        ("prvstream_devices", "devices seen", float(len(state.devices))),
    ):
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge",
                f'{name}{{job="{job}"}} {_num(value)}']
    for field, help_text in (("useful", "compute kernel time"),
                             ("comm", "communication time not hidden under compute"),
                             ("idle", "time with neither"),
                             ("overlap", "communication time hidden under compute")):
        name = f"prvstream_device_{field}_seconds"
        out += [f"# HELP {name} {help_text} per device", f"# TYPE {name} gauge"]
        for d in state.devices:
            out.append(f'{name}{{job="{job}",host="{_label(d.host)}",device="{d.device}"}} '
                       f"{_num(getattr(d, field + '_ns') / 1e9)}")
    if state.phase_totals:
        for field, help_text in (
            ("parallel_efficiency", "parallel efficiency over all instances of a phase name"),
            ("load_balance", "load balance over all instances of a phase name"),
            ("communication_efficiency", "communication efficiency over all instances"),
            ("orchestration_efficiency", "orchestration efficiency over all instances"),
        ):
            name = f"prvstream_phase_{field}"
            out += [f"# HELP {name} {help_text}, fraction", f"# TYPE {name} gauge"]
            out += [f'{name}{{job="{job}",phase="{_label(r.name)}"}} '
                    f"{_num(getattr(r.metrics, field))}" for r in state.phase_totals]
        for name, help_text, attr in (
            ("prvstream_phase_instances", "instances of a phase name so far", "index"),
            ("prvstream_phase_seconds", "sum of the spans of a phase name's instances",
             "span_ns"),
        ):
            scale = 1e9 if attr == "span_ns" else 1.0
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
            out += [f'{name}{{job="{job}",phase="{_label(r.name)}"}} '
                    f"{_num(getattr(r, attr) / scale)}" for r in state.phase_totals]
    return "\n".join(out) + "\n"


def _num(x: float) -> str:
    return repr(float(x)) if math.isfinite(x) else "NaN"


def write_prom_file(path: str | os.PathLike[str], state: SummaryState) -> None:
    """Write the textfile-collector file atomically (collectors never see half a file)."""
    atomic_write(path, prometheus_text(state).encode())
