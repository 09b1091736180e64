"""Per-type measures of a Paraver trace that compare across converters, layouts and origins.

For each event type: how many records give it a non-zero value, the time it holds a non-zero
value (Paraver's "last event value" on each thread), the duration-weighted value sum, the
non-zero time per value label (for types whose values name something: kernels, API calls) and
the first time a non-zero value appears. Each thread's records are sorted by time (Paraver's
loader does the same; ties keep file order), so a converter that writes records by category is
read the way Paraver reads it. Communications: count, bytes and latency sum per tag.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CommMeasure", "TraceMeasures", "TypeMeasure", "measure", "pcf_labels"]


@dataclass
class TypeMeasure:
    """What one event type shows over a trace."""

    events: int = 0
    nonzero_ns: int = 0
    weighted: int = 0
    by_label: dict[str, int] = field(default_factory=dict)
    first_ns: int | None = None


@dataclass
class CommMeasure:
    count: int = 0
    size: int = 0
    latency_ns: int = 0


@dataclass
class TraceMeasures:
    types: dict[int, TypeMeasure]
    comms: dict[int, CommMeasure]
    labels: dict[int, str]
    states: dict[int, int]


def pcf_labels(pcf: Path) -> tuple[dict[int, str], dict[int, dict[int, str]]]:
    """(type -> label, type -> value -> label) from a .pcf (one VALUES list per block)."""
    type_labels: dict[int, str] = {}
    values: dict[int, dict[int, str]] = {}
    block: list[int] = []
    table: dict[int, str] = {}
    mode = ""
    for raw in pcf.read_text(errors="replace").splitlines():
        line = raw.strip()
        if line == "EVENT_TYPE":
            block, table, mode = [], {}, "types"
            continue
        if line == "VALUES":
            mode = "values"
            for t in block:
                values[t] = table
            continue
        if not line or line.isupper():
            mode = "" if line else mode
            continue
        parts = line.split(None, 2)
        if mode == "types" and len(parts) >= 2 and parts[1].isdigit():
            block.append(int(parts[1]))
            type_labels[int(parts[1])] = parts[2] if len(parts) > 2 else ""
        elif mode == "values" and parts and parts[0].isdigit():
            table[int(parts[0])] = line.split(None, 1)[1] if len(parts) > 1 else ""
    return type_labels, values


def measure(prv: Path, labelled: set[int]) -> TraceMeasures:
    """Measures of every event type in ``prv``; ``labelled`` types also by value label."""
    type_labels, value_labels = pcf_labels(prv.with_suffix(".pcf"))
    per_thread: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
    states: dict[int, int] = defaultdict(int)
    comms: dict[int, CommMeasure] = defaultdict(CommMeasure)
    last = 0
    with prv.open() as fh:
        next(fh)
        for line in fh:
            parts = line.rstrip().split(":")
            if parts[0] == "2":
                key = (int(parts[3]), int(parts[4]))
                t = int(parts[5])
                last = max(last, t)
                rows = per_thread[key]
                for i in range(6, len(parts) - 1, 2):
                    rows.append((t, int(parts[i]), int(parts[i + 1])))
            elif parts[0] == "1":
                begin, end = int(parts[5]), int(parts[6])
                states[int(parts[7])] += end - begin
                last = max(last, end)
            elif parts[0] == "3":
                c = comms[int(parts[14])]
                c.count += 1
                c.size += int(parts[13])
                c.latency_ns += int(parts[11]) - int(parts[5])
                last = max(last, int(parts[11]))
    types: dict[int, TypeMeasure] = defaultdict(TypeMeasure)
    for rows in per_thread.values():
        rows.sort(key=lambda r: r[0])  # stable: ties keep file order
        held: dict[int, tuple[int, int]] = {}
        closing = [(last, e, 0, False) for e in sorted({r[1] for r in rows})]
        for t, etype, value, real in [*((*r, True) for r in rows), *closing]:
            m = types[etype]
            prev = held.get(etype)
            if prev is not None and prev[1] != 0:
                dur = t - prev[0]
                m.nonzero_ns += dur
                m.weighted += dur * prev[1]
                if etype in labelled:
                    name = value_labels.get(etype, {}).get(prev[1], f"value {prev[1]}")
                    m.by_label[name] = m.by_label.get(name, 0) + dur
            held[etype] = (t, value)
            if real and value != 0:
                m.events += 1
                m.first_ns = t if m.first_ns is None else min(m.first_ns, t)
    return TraceMeasures(dict(types), dict(comms), type_labels, dict(states))
