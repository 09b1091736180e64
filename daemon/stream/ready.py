"""Held rows split at the merge horizon: the rows that start before it, in start order, and
the rest (the activity router's step before it feeds a sink)."""

from __future__ import annotations

import numpy as np

from prvstream.sinks.logger import get_logger
from prvstream.sinks.native import OptionalExtension

__all__ = ["SPLITTER", "split_ready"]

log = get_logger(__name__)

#: the split in C: one pass over the held rows, without the GIL (optional; its rows' start is
#: read as a little-endian int64)
SPLITTER = OptionalExtension("prvstream.daemon.stream._merge", "ready_rows", "horizon split",
                             little_endian=True)


def split_ready(parts: list[np.ndarray], dtype: np.dtype, horizon: int | None, *,
                pure: bool = False) -> tuple[np.ndarray, list[np.ndarray]]:
    """The rows of ``parts`` (arrays of ``dtype``, whose first field is an int64 ``start``)
    that start before ``horizon`` (all when None), stably sorted by start, and the other
    rows in their order (as a list of at most one array, or ``parts`` when none is ready)."""
    if not parts:
        return np.empty(0, dtype=dtype), []
    compiled = SPLITTER.use(pure)
    if compiled is not None and dtype.names and dtype.names[0] == "start" \
            and dtype.fields is not None and dtype.fields["start"][:2] == (np.dtype("<i8"), 0):
        out = np.empty(sum(len(p) for p in parts), dtype=dtype)
        ready = compiled([np.ascontiguousarray(p, dtype=dtype) for p in parts],
                         dtype.itemsize, horizon, out)
        if not ready:
            return out[:0], parts
        return out[:ready], ([out[ready:]] if ready < len(out) else [])
    if horizon is not None and all(int(p["start"].min()) >= horizon for p in parts):
        return np.empty(0, dtype=dtype), parts  # nothing ready: no copy
    allp = np.concatenate(parts) if len(parts) > 1 else parts[0]
    if horizon is None:
        ready_rows, rest = allp, []
    else:
        mask = allp["start"] < horizon
        ready_rows, rest = allp[mask], ([allp[~mask]] if not mask.all() else [])
    starts = ready_rows["start"]
    if len(starts) > 1 and not bool((starts[1:] < starts[:-1]).any()):
        return ready_rows, rest  # in order already (a stable sort would not move a row)
    order = np.argsort(starts, kind="stable")
    return ready_rows[order], rest
