"""Push/pop ranges' restored values: at a range's end its thread shows again the value of the
innermost enclosing range still open. One call per thread and domain, whose stack of open
ranges lives across chunks; the pass is in C (``_nesting``, optional) where it was built."""

from __future__ import annotations

import numpy as np

from prvstream.sinks.logger import get_logger
from prvstream.sinks.native import OptionalExtension

__all__ = ["NESTING", "restore"]

log = get_logger(__name__)

#: the pass in C (optional)
NESTING = OptionalExtension("prvstream.daemon.kinds._nesting", "restore", "NVTX range nesting")


def restore(stack: list[tuple[int, int]], start: np.ndarray, end: np.ndarray,
            value: np.ndarray, *, pure: bool = False) -> np.ndarray:
    """For one thread's and domain's ranges in start order (int64): the value each one's end
    restores, 0 where none encloses it. ``stack`` (end, value) holds the ranges still open,
    innermost last, and is updated: a range first closes those that end at or before its
    start, then opens."""
    out = np.zeros(len(start), dtype=np.int64)
    compiled = NESTING.use(pure)
    if compiled is not None:
        compiled(stack, np.ascontiguousarray(start, np.int64), np.ascontiguousarray(end, np.int64),
                 np.ascontiguousarray(value, np.int64), out)
        return out
    for i, (s, e, v) in enumerate(zip(start.tolist(), end.tolist(), value.tolist(),
                                      strict=True)):
        while stack and stack[-1][0] <= s:
            stack.pop()
        for parent_end, parent_value in reversed(stack):
            if parent_end > e:
                out[i] = parent_value
                break
        stack.append((e, v))
    return out
