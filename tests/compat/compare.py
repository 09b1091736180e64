"""Compare a prvstream trace with nsys2prv's of the same export, type by type.

A type agrees when both traces give it the same number of non-zero records, the same non-zero
time and the same duration-weighted value sum, or, for types whose values name something
(kernels, API calls, memory operations, NVTX ranges), the same non-zero time per label; value
ids may differ (each converter numbers its own). Communications agree per tag on count, bytes
and the sum of send-to-receive latencies. Time origins may differ; ``shift`` is added to our
times before first-record times are compared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.compat.traces import TraceMeasures, TypeMeasure, measure

__all__ = ["LABELLED", "Difference", "compare_traces", "nvtx_label"]

#: types whose values are ids of labels in the .pcf
LABELLED = {63000000, 63000001, 63000006, 63000007, 9004, 9500,
            *range(9600, 9600 + 100 * 64, 100)}
_NVTX_DOMAIN_PREFIX = re.compile(r"^[^:]*:")


@dataclass(frozen=True)
class Difference:
    """One thing that does not agree: ``what`` is an event type, ``comm <tag>`` or ``origin``."""

    what: str
    detail: str


def nvtx_label(label: str) -> str:
    """nsys2prv labels NVTX values ``<domain>:<text>`` (``:<text>`` in the default domain)."""
    return _NVTX_DOMAIN_PREFIX.sub("", label, count=1)


def _labels(etype: int, m: TypeMeasure, nsys2prv: bool) -> dict[str, int]:
    if nsys2prv and (etype == 9004 or 9600 <= etype < 9600 + 100 * 64):
        out: dict[str, int] = {}
        for k, v in m.by_label.items():
            out[nvtx_label(k)] = out.get(nvtx_label(k), 0) + v
        return out
    return m.by_label


def _describe(a: TypeMeasure, b: TypeMeasure) -> str:
    return (f"records {a.events} vs {b.events}, non-zero ns {a.nonzero_ns} vs {b.nonzero_ns}, "
            f"weighted {a.weighted} vs {b.weighted}")


def compare_traces(ours: Path, theirs: Path, shift: int = 0
                   ) -> tuple[list[Difference], set[int], TraceMeasures, TraceMeasures]:
    """(differences, types only prvstream writes, our measures, nsys2prv's measures)."""
    mine = measure(ours, LABELLED)
    other = measure(theirs, LABELLED)
    diffs: list[Difference] = []
    for etype in sorted(other.types):
        b = other.types[etype]
        a = mine.types.get(etype)
        if a is None:
            if b.events:
                diffs.append(Difference(str(etype), "nsys2prv writes it, prvstream does not"))
            continue
        if etype in LABELLED:
            la, lb = _labels(etype, a, False), _labels(etype, b, True)
            if (a.events, la) != (b.events, lb):
                only = sorted(set(la) ^ set(lb))[:3]
                unequal = sum(1 for k in set(la) & set(lb) if la[k] != lb[k])
                diffs.append(Difference(str(etype), f"{_describe(a, b)}; labels in one trace "
                                        f"only {only}, {unequal} with unequal time"))
        elif (a.events, a.nonzero_ns, a.weighted) != (b.events, b.nonzero_ns, b.weighted):
            diffs.append(Difference(str(etype), _describe(a, b)))
    for tag in sorted(set(mine.comms) | set(other.comms)):
        ca, cb = mine.comms.get(tag), other.comms.get(tag)
        if ca != cb:
            diffs.append(Difference(f"comm {tag}", f"{ca} vs {cb}"))
    first_a = mine.types.get(63000000, TypeMeasure()).first_ns
    first_b = other.types.get(63000000, TypeMeasure()).first_ns
    if first_a is not None and first_b is not None and first_a + shift != first_b:
        diffs.append(Difference("origin", f"first CUDA API call at {first_a} (+{shift}) vs "
                                f"{first_b}"))
    extra = {t for t, m in mine.types.items() if m.events and t not in other.types}
    return diffs, extra, mine, other
