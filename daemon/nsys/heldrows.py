"""A small export's rows read once, while it is planned: kept in a batch's spill file and
streamed from there (``HeldSource``), so the export is never opened a second time.

A batch plans every report before any streams (canonical ids need them all), so the rows of a
report read at planning cannot stay in memory: they go to one anonymous file per batch, as
the chunks the stream would have read, and come back as the same chunks in the same order.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from prvstream.daemon.kinds import registry
from prvstream.daemon.kinds.registry import TABLE_KINDS
from prvstream.daemon.nsys import heldjoin
from prvstream.daemon.nsys.export import Export
from prvstream.daemon.nsys.sources import InProcessSource
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger
from prvstream.sinks.scratch import ScratchFile

__all__ = ["HeldRows", "HeldSource", "RowSpill", "hold", "read_early"]

log = get_logger(__name__)

#: where one chunk lies in the spill: (offset, rows, dtype)
_Slot = tuple[int, int, np.dtype]
#: a report's held rows: kind -> its chunks' slots, in stream order
HeldRows = dict[str, list[_Slot]]


class RowSpill:
    """One anonymous temporary file that chunks are appended to and read back from."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self._file = ScratchFile("prvstream-rows-", directory)

    def put(self, chunks: Mapping[str, Iterable[np.ndarray]]) -> HeldRows:
        """Append every kind's chunks (one write); where each went."""
        held: HeldRows = {}
        parts: list[np.ndarray] = []
        at = self._file.end
        for kind, kind_chunks in chunks.items():
            slots = held.setdefault(kind, [])
            for chunk in kind_chunks:
                data = np.ascontiguousarray(chunk)
                slots.append((at, len(data), data.dtype))
                if len(data):
                    parts.append(data.view(np.uint8))
                at += data.nbytes
        if parts:
            self._file.append([np.concatenate(parts).data])
        return held

    def read(self, slot: _Slot) -> np.ndarray:
        """One chunk back (a fresh, writable array)."""
        offset, rows, dtype = slot
        out = np.empty(rows, dtype=dtype)
        if rows:
            view = out.view(np.uint8).data
            got = os.preadv(self._file.fileno(), [view], offset)
            if got != len(view):
                raise OSError(f"held rows: read {got} of {len(view)} bytes")
        return out

    def close(self) -> None:
        """Remove the file (the held rows are gone)."""
        self._file.close()


class HeldSource:
    """A ``ChunkSource`` over a report's held rows: each kind's chunks as they were read."""

    def __init__(self, spill: RowSpill, held: HeldRows) -> None:
        self._spill = spill
        self._held = held

    def chunks(self, kind: str) -> Iterator[np.ndarray]:
        for slot in self._held.get(kind, ()):
            yield self._spill.read(slot)

    def close(self) -> None:
        """Nothing to free: the spill belongs to the batch."""


def read_early(export: Export, kinds: list[str], limit: int, chunk_rows: int, *,
               presort: bool = True) -> dict[str, list[np.ndarray]] | None:
    """When the export's data tables hold at most ``limit`` rows (as planning counted them):
    the chunks of the ``kinds`` that can be read before the plan, as their stream reads them
    (``chunk_rows``), for the plan to take its distinct values from; else None."""
    total = 0
    for kind in TABLE_KINDS:
        for src in export.sources(kind):
            n = export.known_rows(src.table, src.where)
            if n is None:
                return None
            total += n
    if not 0 < total <= limit:
        return None
    return _read(export, [k for k in kinds if _before_plan(k)], chunk_rows, presort)


def hold(spill: RowSpill, export: Export, kinds: list[str],
         early: Mapping[str, list[np.ndarray]], chunk_rows: int, *,
         presort: bool = True) -> HeldRows | None:
    """After the plan: read the kinds ``read_early`` left (the comm arrows joined from the
    held rows where ``heldjoin`` can), and put every kind's chunks in
    ``spill``; the export reconnects from now on only if something not held is asked for.
    None when a read fails (the report then streams from the export, and meets it there)."""
    todo = [k for k in kinds if k not in early]
    # the arrows joined from the held rows where that gives SQLite's rows (issue 11)
    joined = heldjoin.comm_chunks(export, early, chunk_rows) if "comm" in todo else None
    late = _read(export, [k for k in todo if k != "comm" or joined is None], chunk_rows,
                 presort)
    if late is None:
        return None
    if joined is not None:
        late["comm"] = joined
    held = spill.put({k: early[k] if k in early else late[k] for k in kinds})
    export.reopen_on_use()
    return held


def _before_plan(kind: str) -> bool:
    """Whether a kind's rows can be read before the plan (an inline-text kind's texts are
    numbered by the plan's scan; a derived kind is not planned)."""
    spec = registry.get(kind)
    return not spec.derived and not spec.inline_text


def _read(export: Export, kinds: list[str], chunk_rows: int, presort: bool
          ) -> dict[str, list[np.ndarray]] | None:
    source = InProcessSource(export, chunk_rows, presort=presort)
    try:
        return {kind: list(source.chunks(kind)) for kind in kinds}
    except (PrvstreamError, sqlite3.Error, ValueError, TypeError, OverflowError):
        return None
