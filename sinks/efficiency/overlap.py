"""How much of each phase occurrence a set of intervals covers (host calls, idle stretches).

The compiled ``_overlap`` loops over intervals and occurrences without the pieces x
occurrences matrix numpy needs; where it could not be built, the numpy reference gives the
same integers (the tests compare the two).
"""

from __future__ import annotations

import numpy as np

from prvstream.sinks.logger import get_logger

__all__ = ["built", "compiled", "covered_by", "hits", "prefer_python"]

log = get_logger(__name__)

try:  # the compiled loops (optional: built when a C compiler was there)
    from prvstream.sinks.efficiency._overlap import overlaps as _c_overlaps
except ImportError:  # pragma: no cover - depends on the build
    _c_overlaps = None

#: use numpy even where the C loops were built (``Settings.pure_python``)
_prefer_python = False


def built() -> bool:
    """True when the C loops were built and load."""
    return _c_overlaps is not None


def prefer_python(flag: bool) -> None:
    """Use numpy even where C is available (comparisons); set from the settings."""
    global _prefer_python
    _prefer_python = flag


def compiled() -> bool:
    """True when the C loops are in use."""
    return _c_overlaps is not None and not _prefer_python


def _i64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def covered_by(lo: np.ndarray, hi: np.ndarray, starts: np.ndarray, ends: np.ndarray, *,
               pure: bool = False) -> np.ndarray:
    """Per occurrence [starts[j], ends[j]): the sum over intervals [lo, hi) of the time they
    share with it (a negative share counts as 0)."""
    if _c_overlaps is not None and not pure and not _prefer_python:
        count, total = np.zeros(len(starts), np.int64), np.zeros(len(starts), np.int64)
        _c_overlaps(_i64(lo), _i64(hi), _i64(starts), _i64(ends), count, total, True)
        return total
    out: np.ndarray = np.clip(np.minimum(hi[:, None], ends[None, :])
                              - np.maximum(lo[:, None], starts[None, :]), 0, None).sum(axis=0)
    return out


def hits(lo: np.ndarray, hi: np.ndarray, starts: np.ndarray, ends: np.ndarray, *,
         pure: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per occurrence: how many intervals [lo, hi) it meets (start < hi and end > lo), and
    the sum over those of min(hi, end) - max(lo, start)."""
    if _c_overlaps is not None and not pure and not _prefer_python:
        count, total = np.zeros(len(starts), np.int64), np.zeros(len(starts), np.int64)
        _c_overlaps(_i64(lo), _i64(hi), _i64(starts), _i64(ends), count, total, False)
        return count, total
    hit = (starts[None, :] < hi[:, None]) & (ends[None, :] > lo[:, None])
    inside = np.where(hit, np.minimum(hi[:, None], ends[None, :])
                      - np.maximum(lo[:, None], starts[None, :]), 0)
    return hit.sum(axis=0), inside.sum(axis=0)
