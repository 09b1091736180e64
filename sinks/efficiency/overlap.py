"""How much of each phase occurrence a set of intervals covers (host calls, idle stretches).

The compiled ``_overlap`` loops over intervals and occurrences without the pieces x
occurrences matrix numpy needs; where it could not be built, the numpy reference gives the
same integers (the tests compare the two).
"""

from __future__ import annotations

import numpy as np

from prvstream.sinks.logger import get_logger
from prvstream.sinks.native import OptionalExtension

__all__ = ["OVERLAPS", "covered_by", "hits"]

log = get_logger(__name__)

#: the compiled loops (optional: built when a C compiler was there)
OVERLAPS = OptionalExtension("prvstream.sinks.efficiency._overlap", "overlaps",
                             "phase overlaps")


def _i64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def covered_by(lo: np.ndarray, hi: np.ndarray, starts: np.ndarray, ends: np.ndarray, *,
               pure: bool = False) -> np.ndarray:
    """Per occurrence [starts[j], ends[j]): the sum over intervals [lo, hi) of the time they
    share with it (a negative share counts as 0)."""
    c_overlaps = OVERLAPS.use(pure)
    if c_overlaps is not None:
        count, total = np.zeros(len(starts), np.int64), np.zeros(len(starts), np.int64)
        c_overlaps(_i64(lo), _i64(hi), _i64(starts), _i64(ends), count, total, True)
        return total
    out: np.ndarray = np.clip(np.minimum(hi[:, None], ends[None, :])
                              - np.maximum(lo[:, None], starts[None, :]), 0, None).sum(axis=0)
    return out


def hits(lo: np.ndarray, hi: np.ndarray, starts: np.ndarray, ends: np.ndarray, *,
         pure: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per occurrence: how many intervals [lo, hi) it meets (start < hi and end > lo), and
    the sum over those of min(hi, end) - max(lo, start)."""
    c_overlaps = OVERLAPS.use(pure)
    if c_overlaps is not None:
        count, total = np.zeros(len(starts), np.int64), np.zeros(len(starts), np.int64)
        c_overlaps(_i64(lo), _i64(hi), _i64(starts), _i64(ends), count, total, False)
        return count, total
    hit = (starts[None, :] < hi[:, None]) & (ends[None, :] > lo[:, None])
    inside = np.where(hit, np.minimum(hi[:, None], ends[None, :])
                      - np.maximum(lo[:, None], starts[None, :]), 0)
    return hit.sum(axis=0), inside.sum(axis=0)
