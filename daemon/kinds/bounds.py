"""Hostile timestamps: rows outside the export's trusted times are dropped, ends before their
start are clamped to it, and each is counted per kind (never silently).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from prvstream.sinks.logger import get_logger

__all__ = ["CLAMPED", "DROPPED", "NO_END", "hostile_text", "note_hostile", "screen"]

log = get_logger(__name__)

#: count keys: ``"<kind> <what>"``
DROPPED, CLAMPED, NO_END = "dropped", "clamped", "no end column"


def screen(chunk: np.ndarray, kind: str, bound: tuple[int, int], counts: Counter[str], *,
           open_end: bool = False, other_times: tuple[str, ...] = ()) -> np.ndarray:
    """``chunk`` without rows whose start, end or ``other_times`` lie outside ``bound`` (raw
    export clock, an end only beyond it), and with ends before their start set to the start.
    ``open_end``: a negative end means a range still open (kept as is)."""
    names = chunk.dtype.names or ()
    if "start" not in names:
        return chunk
    lo, hi = bound
    start = chunk["start"]
    bad = (start < lo) | (start > hi)
    has_end = "end" in names
    if has_end:
        bad |= chunk["end"] > hi
    for name in other_times:
        bad |= (chunk[name] < lo) | (chunk[name] > hi)
    n_bad = int(np.count_nonzero(bad))
    if n_bad:
        counts[f"{kind} {DROPPED}"] += n_bad
        chunk = chunk[~bad]
    if has_end and len(chunk):
        end = chunk["end"]
        back = end < chunk["start"]
        if open_end:
            back &= end >= 0
        n_back = int(np.count_nonzero(back))
        if n_back:
            counts[f"{kind} {CLAMPED}"] += n_back
            chunk = chunk.copy()
            chunk["end"][back] = chunk["start"][back]
    return chunk


def note_hostile(into: dict[str, dict[str, int]], report: str, counts: Counter[str]) -> None:
    """Keep a report's counts (logged once, as a warning: the trace lacks those rows)."""
    found = {k: n for k, n in sorted(counts.items()) if n}
    if found:
        into[report] = found
        log.warning("hostile_rows", report=report, **{k.replace(" ", "_"): n
                                                        for k, n in found.items()})


def hostile_text(hostile: dict[str, dict[str, int]]) -> str:
    """One line: ``report: 3 kernel dropped, 1 runtime clamped; ...``."""
    return "; ".join(f"{rep}: " + ", ".join(f"{n} {k}" for k, n in counts.items())
                     for rep, counts in sorted(hostile.items()))
