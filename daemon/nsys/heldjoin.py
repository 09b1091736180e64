"""A small export's comm arrows joined from its held rows (``heldrows``) instead of by SQLite.

The comm kind is the join of the CUDA API calls with the kernels, copies and memsets they
started (``kinds.comm``): for an export read whole while planned, both sides are already in
memory, and SQLite's join (automatic indexes, a sort per part, its longest statement to
compile) is the costliest statement of a small export. ``comm_chunks`` gives the very rows
SQLite's ordered SELECT gives, in its order, wherever that order is certain: every value the
join reads is known exactly from the held rows (no NULL read as -1, no negative id), and no
two arrows share a send time (SQLite's order among ties is left to it). Anywhere else it
answers None and SQLite joins as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from prvstream.daemon.kinds import registry
from prvstream.daemon.kinds.comm import DRIVER
from prvstream.daemon.kinds.sql import wrap_i4
from prvstream.daemon.nsys.export import Export
from prvstream.sinks.logger import get_logger

__all__ = ["comm_chunks"]

log = get_logger(__name__)

#: the joined tables in the ordered SELECT's order (``kinds.comm``): kind, table, whether its
#: arrows carry the size (API -> memcpy/memset) or not (launch -> kernel)
_PARTS = (("kernel", "CUPTI_ACTIVITY_KIND_KERNEL", False),
          ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY", True),
          ("memset", "CUPTI_ACTIVITY_KIND_MEMSET", True))
#: the held fields the join reads and the expressions they must have been read with
_GPU_FIELDS = {"start": '"start"', "gpid": 'COALESCE("globalPid", -1)',
               "device": wrap_i4('COALESCE("deviceId", -1)'),
               "stream": wrap_i4('COALESCE("streamId", -1)'),
               "corr": 'COALESCE("correlationId", -1)'}
_GPU_SIZED_FIELDS = {**_GPU_FIELDS, "bytes": 'COALESCE("bytes", -1)'}
_API_FIELDS = {"start": '"start"', "gtid": 'COALESCE("globalTid", -1)',
               "corr": 'COALESCE("correlationId", -1)'}
_GPU_COLUMNS = ("start", "globalPid", "deviceId", "streamId", "correlationId")
_API_COLUMNS = ("start", "globalTid", "correlationId")
#: a size at or past this would overflow the arrow's ``bytes << 1`` differently
_SIZE_LIMIT = 1 << 62
#: (schema key, kind, table, whether sized) -> whether the kind's one source is ``table``
#: whole, read with the join's expressions: from the schema alone, so once per nsys version
_READ_ALIKE: dict[tuple[int, str, str, bool], bool] = {}
_READ_ALIKE_KEPT = 256


def comm_chunks(export: Export, held: Mapping[str, Sequence[np.ndarray]], chunk_rows: int
                ) -> list[np.ndarray] | None:
    """The comm kind's chunks (of ``chunk_rows``) as ``tables.stream`` reads them from the
    export, computed from the ``held`` rows of the API calls and the GPU kinds; None where
    they might differ (SQLite is to join)."""
    if not export.has(DRIVER, "correlationId"):
        return []  # no statement: no arrows
    parts = [(kind, table, sized) for kind, table, sized in _PARTS
             if export.has(table, "correlationId")]
    if not parts:
        return []
    api = _rows(export, held, "runtime", DRIVER, _API_FIELDS, _API_COLUMNS)
    if api is None:
        return None
    if len(api) and (api["corr"].min() < 0 or api["gtid"].min() < 0):
        return None  # a NULL (read as -1) never joins; a negative id may
    order = api["corr"].argsort(kind="stable")
    keys = api["corr"][order]
    found: list[np.ndarray] = []
    for kind, table, sized in parts:
        columns = (*_GPU_COLUMNS, "bytes") if sized else _GPU_COLUMNS
        fields = _GPU_SIZED_FIELDS if sized else _GPU_FIELDS
        gpu = _rows(export, held, kind, table, fields, columns)
        if gpu is None:
            return None
        if not len(gpu) or not len(api):
            continue
        if gpu["corr"].min() < 0 or gpu["gpid"].min() < 0:
            return None
        lo = keys.searchsorted(gpu["corr"], "left")
        many = keys.searchsorted(gpu["corr"], "right") - lo
        total = int(many.sum())
        if not total:
            continue
        g = np.repeat(np.arange(len(gpu)), many)
        ends = np.cumsum(many)
        r = order[np.repeat(lo - (ends - many), many) + np.arange(total)]
        same = (gpu["gpid"][g] >> 24) == (api["gtid"][r] >> 24)
        g, r = g[same], r[same]
        out = np.empty(len(g), registry.get("comm").dtype)
        out["start"], out["gtid"] = api["start"][r], api["gtid"][r]
        out["recv"], out["gpid"] = gpu["start"][g], gpu["gpid"][g]
        out["device"], out["stream"] = gpu["device"][g], gpu["stream"][g]
        if sized:
            size = gpu["bytes"][g]
            if len(size) and (size.min() < 0 or size.max() >= _SIZE_LIMIT):
                return None  # a NULL size (read as -1) is 0 in the arrow
            out["size_kind"] = (size << 1) | 1
        else:
            out["size_kind"] = 0
        found.append(out)
    if not found:
        return []
    joined = np.concatenate(found) if len(found) > 1 else found[0]
    by_start = joined["start"].argsort(kind="stable")
    joined = joined[by_start]
    if len(joined) > 1 and bool((joined["start"][1:] == joined["start"][:-1]).any()):
        return None  # arrows sent at one instant: their order is SQLite's to give
    return [joined[i:i + chunk_rows] for i in range(0, len(joined), chunk_rows)]


def _rows(export: Export, held: Mapping[str, Sequence[np.ndarray]], kind: str, table: str,
          fields: Mapping[str, str], columns: Sequence[str]) -> np.ndarray | None:
    """Every row of ``table`` as ``kind`` read it, when the held rows are exactly that table's
    rows and the join's columns are in it, read with ``fields``' expressions; else None."""
    if not all(export.has(table, c) for c in columns):
        return None  # the join's statement names a column the table lacks
    chunks = held.get(kind)
    spec = registry.get(kind)
    if chunks is None:
        return np.zeros(0, spec.dtype) if export.known_rows(table) == 0 else None
    key = (export.schema_key, kind, table, "bytes" in fields)
    alike = _READ_ALIKE.get(key)
    if alike is None:
        sources = export.sources(kind)
        alike = len(sources) == 1 and sources[0].table == table and not sources[0].where
        if alike:
            by_field = spec.field_sql(export, sources[0])
            alike = all(by_field.get(f) == expr for f, expr in fields.items())
        if len(_READ_ALIKE) >= _READ_ALIKE_KEPT:
            _READ_ALIKE.clear()
        _READ_ALIKE[key] = alike
    if not alike:
        return None
    if not chunks:
        return np.zeros(0, spec.dtype)
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
