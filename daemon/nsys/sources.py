"""Where a report's chunks come from: the ``ChunkSource`` protocol, read in this process
(``InProcessSource``) or partly by the reader process (``ReaderSource``), and ``open_source``,
the one place that chooses between them. Both give the same chunks, hence the same bytes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from prvstream.daemon.kinds import registry
from prvstream.daemon.nsys import tables
from prvstream.daemon.nsys.export import Export
from prvstream.daemon.nsys.readerstart import large_file
from prvstream.sinks.logger import get_logger

if TYPE_CHECKING:
    from prvstream.daemon.nsys.reader import ReaderLease

__all__ = ["ChunkSource", "InProcessSource", "ReaderSource", "open_source", "prestart_reader",
           "reader_kinds", "retire_reader"]

log = get_logger(__name__)

#: share of the estimated reading cost the reader process takes: every table it may read.
#: Since tables are read in storage order without SQLite's sort (``presort``), reading costs
#: the reader less than converting, merging, formatting and summarizing cost this process
#: (CPU per process on the 1M-row synthetic export, all kinds: 0.75 -> converter 3.2 s,
#: reader 1.7 s; 1.0 -> 2.8 s and 2.3 s)
_READER_SHARE = 1.0
#: below this many rows the reader costs more (requests, copies) than it saves
_READER_MIN_ROWS = 50_000
#: kinds whose rows the reader weighs even when not converted: derived kinds' inputs
_COST_INPUTS = frozenset(k for s in registry.KINDS.values() for k in s.cost_inputs)


class ChunkSource(Protocol):
    """A report's chunks, kind by kind; ``close`` frees what the source holds."""

    def chunks(self, kind: str) -> Iterator[np.ndarray]:
        """The kind's chunks (its registry dtype) in non-decreasing start."""
        ...

    def close(self) -> None: ...


class InProcessSource:
    """Every kind read by this process on the export's connection (``tables.stream``)."""

    def __init__(self, export: Export, chunk_rows: int, *, presort: bool = True) -> None:
        self.export = export
        self.chunk_rows = chunk_rows
        self.presort = presort

    def chunks(self, kind: str) -> Iterator[np.ndarray]:
        return tables.stream(self.export, kind, self.chunk_rows, presort=self.presort)

    def close(self) -> None:
        """Nothing to free: the connection belongs to the report."""


class ReaderSource:
    """Some kinds read by the reader process (their queries start at once, costliest first, so
    that SQLite sorts there while this process works), the others in-process."""

    def __init__(self, export: Export, lease: ReaderLease, kinds: Iterable[str],
                 chunk_rows: int, *, presort: bool = True) -> None:
        self._lease: ReaderLease | None = lease
        self._local = InProcessSource(export, chunk_rows, presort=presort)
        self._started: dict[str, Iterator[np.ndarray]] = {}
        for kind in kinds:
            spec = registry.get(kind)
            sql = tables.select_sql(export, kind)

            def part(part_sql: str, wide: np.dtype, kind: str = kind) -> Iterator[np.ndarray]:
                return lease.stream(part_sql, wide, tables.fetch_layout(wide), chunk_rows, kind,
                                    unwrapped=tables.unwrapped_part(part_sql, wide))

            joined = None if sql is None or not presort else tables.join_stream(
                export, kind, chunk_rows, part)
            inline = (spec.inline_text, _numbering(export)) if spec.inline_text else None
            scan = tables.scan_plan(export, kind) if presort else None
            unwrapped = tables.unwrapped_statements(export, kind)
            # a table whose bounds a join read already (its driving table): not read again,
            # and read as the runs found there
            window = None if scan is None else export.known_window(*scan[1:])
            runs = None if scan is None else export.known_runs(*scan[1:])
            if sql is None:
                self._started[kind] = iter(())
            elif joined is not None:
                self._started[kind] = joined
            elif scan is not None and runs is not None:
                self._started[kind] = lease.stream_runs(
                    sql, spec.dtype, tables.LAYOUTS[kind], chunk_rows, kind, scan, runs, inline,
                    unwrapped)
            else:
                self._started[kind] = lease.stream(
                    sql, spec.dtype, tables.LAYOUTS[kind], chunk_rows, kind, scan, inline,
                    window=window, unwrapped=unwrapped)

    @property
    def kinds(self) -> list[str]:
        """The kinds started in the reader and not yet taken."""
        return list(self._started)

    def chunks(self, kind: str) -> Iterator[np.ndarray]:
        started = self._started.pop(kind, None)
        return started if started is not None else self._local.chunks(kind)

    def close(self) -> None:
        """Hand the reader back (streams not read to the end are abandoned)."""
        self._started.clear()
        if self._lease is not None:
            lease, self._lease = self._lease, None
            lease.release()


def _numbering(export: Export) -> Callable[[list[str]], list[int]]:
    """Inline NVTX texts to their ids, as an in-process read numbers them
    (``tables._inline_chunk``: the canonical ids, and a text the plan did not see the next
    free one)."""
    def number(texts: list[str]) -> list[int]:
        ids = export.inline_ids()
        return [ids.get(t) or export.intern_inline(t) for t in texts]
    return number


def open_source(export: Export, kinds: list[str], chunk_rows: int,
                rows: Mapping[str, int] | None = None, *, use_reader: bool = True,
                presort: bool = True) -> ChunkSource:
    """The chunk source for a report: the reader process for its costliest kinds when
    ``use_reader``, the reader is available and free and the report is large enough; else
    in-process. ``rows``: rows per kind (a plan's counts), counted now when None.
    ``presort`` (``Settings.presort``): storage-order scans with a reorder buffer where safe."""
    if use_reader:
        chosen = reader_kinds(kinds, _table_rows(export, kinds) if rows is None else rows)
        lease = _lease(export) if chosen else None
        if lease is not None:
            try:
                return ReaderSource(export, lease, chosen, chunk_rows, presort=presort)
            except BaseException:
                lease.release()
                raise
    return InProcessSource(export, chunk_rows, presort=presort)


def _lease(export: Export) -> ReaderLease | None:
    """The reader process for ``export`` when it can run here and is free (its module, with
    ``subprocess`` and ``threading``, loads only for a report large enough to use it)."""
    from prvstream.daemon.nsys import reader

    return reader.lease(export.path) if reader.enabled() else None


def prestart_reader(path: Path, use_reader: bool = True) -> bool:
    """``reader.prestart`` for an export about to be planned and streamed alone, when its file
    is ``readerstart.PRESTART_BYTES`` or more (``readerstart.large_file``; ``open_source``
    then leases the reader started): the child's interpreter starts while this process opens
    and plans the export. True when the file is that large (the reader is then likely to read
    it)."""
    if not use_reader or not large_file(path):
        return False
    from prvstream.daemon.nsys import reader

    reader.prestart()
    return True


def retire_reader() -> None:
    """``reader.retire``: the idle reader process quits now (a batch's last report has
    streamed); nothing when no reader was started (its module is not loaded for this)."""
    module = sys.modules.get("prvstream.daemon.nsys.reader")
    if module is not None:
        module.retire()


def _weighed(kinds: Iterable[str]) -> set[str]:
    """Table kinds the reader may read whose rows count."""
    return {k for k in {*kinds, *_COST_INPUTS} if not registry.get(k).derived}


def _table_rows(export: Export, kinds: list[str]) -> dict[str, int]:
    """Rows per kind that ``reader_kinds`` weighs, before a plan exists (``COUNT(*)`` is cheap:
    SQLite counts a table's b-tree pages without decoding rows)."""
    return {kind: sum(export.count_rows(src.table) for src in export.sources(kind))
            for kind in _weighed(kinds)}


def reader_kinds(kinds: list[str], rows: Mapping[str, int]) -> list[str]:
    """The kinds the reader process reads (none for a small report), costliest first (the
    order their queries start in); the rest are read in-process. ``rows``: rows per kind.

    Cost estimate (``KindSpec.cost``): rows x (values fetched per row + 2) per table; a
    derived kind's from its inputs' rows. Largest first, each one that keeps the reader
    within its share (the largest always).
    """
    weighed = _weighed(kinds)
    if sum(rows.get(k, 0) for k in weighed) < _READER_MIN_ROWS:
        return []
    costs = {k: registry.get(k).cost(rows) for k in kinds
             if k in weighed or registry.get(k).derived}
    total = sum(costs.values())
    chosen: list[str] = []
    taken = 0
    for kind in sorted(costs, key=lambda k: (-costs[k], k)):
        if not chosen or taken + costs[kind] <= _READER_SHARE * total:
            chosen.append(kind)
            taken += costs[kind]
    return chosen
