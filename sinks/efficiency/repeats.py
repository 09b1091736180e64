"""GPU activity a later report repeats: overlapping capture ranges of one process record the
same kernels and copies, which must not count twice.

Rows of one (process, device, stream) run in launch order, so the activity a capture range
holds there is a contiguous run: every row of a later report whose start lies between the first
and the last start of an earlier report on that stream is one the earlier report holds (the
trace drops the same rows as duplicates, ``stream.dedupe``). Reports count in the order fed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prvstream.sinks.arrays import unique_inverse
from prvstream.sinks.efficiency.host import outside
from prvstream.sinks.efficiency.parts import Device, Report
from prvstream.sinks.logger import get_logger

__all__ = ["close_streams", "outside_earlier", "repeated", "stream_spans"]

log = get_logger(__name__)


def repeated(devices: Sequence[Device], rep: Report, local: np.ndarray, stream: np.ndarray,
             start: np.ndarray) -> np.ndarray | None:
    """Which rows (local device index, stream, wall-clock start; in start order) an earlier
    report holds already (None: none); the report's own start spans follow them."""
    code = (local.astype(np.int64) << 32) | (stream.astype(np.int64) & 0xFFFFFFFF)
    uniq, inverse = unique_inverse(code)
    out: np.ndarray | None = None
    one = len(uniq) == 1
    for j, c in enumerate(uniq.tolist()):
        at = None if one else (inverse == j).nonzero()[0]
        s = start if at is None else start[at]
        i, st = c >> 32, c & 0xFFFFFFFF
        st -= (1 << 32) if st >= (1 << 31) else 0  # the stream id's int32 sign back
        gid, pid = int(rep.devices[i]), int(rep.pids[i])
        span = rep.streams.get((gid, pid, st))
        lo, hi = int(s[0]), int(s[-1])
        rep.streams[(gid, pid, st)] = [lo, hi] if span is None else [min(span[0], lo),
                                                                      max(span[1], hi)]
        earlier = stream_spans(devices[gid], pid, st)
        if not len(earlier):
            continue
        hit = np.zeros(len(s), bool)
        for a, b in earlier.tolist():
            hit |= (s >= a) & (s <= b)
        if hit.any():
            rep.repeats.add(gid)
            out = np.zeros(len(start), bool) if out is None else out
            out[hit if at is None else at[hit]] = True
    return out


def stream_spans(dev: Device, pid: int, stream: int) -> np.ndarray:
    """The (first, last) start spans of the earlier reports on one (pid, stream) of ``dev``
    (an (n, 2) copy)."""
    if not dev.streams:
        return np.zeros((0, 2), np.int64)
    recs = np.array(dev.streams, np.int64).reshape(-1, 4)  # a copy: the array may grow
    return recs[(recs[:, 0] == pid) & (recs[:, 1] == stream), 2:]


def close_streams(devices: Sequence[Device], rep: Report) -> None:
    """The report's start spans join its devices' (after every row of it was taken)."""
    for (gid, pid, st), (lo, hi) in rep.streams.items():
        devices[gid].streams.extend((pid, st, lo, hi))


def outside_earlier(dev: Device, rep: Report, gid: int, g0: np.ndarray, g1: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Idle stretches [g0, g1) of a device where the report repeats earlier activity: only
    their parts outside the earlier reports' spans (there the earlier report holds the
    device's time); unchanged elsewhere."""
    if gid not in rep.repeats:
        return g0, g1
    g0, g1 = outside(g0, g1, dev.spans)
    order = np.argsort(g0, kind="stable")
    return g0[order], g1[order]
