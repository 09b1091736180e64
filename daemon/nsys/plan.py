"""An export's plan: its GPU streams, CPU threads, processes, rows and distinct values per data
kind, from COUNT and DISTINCT scans (each kind's ``plan`` in the registry says what to scan), or
for a kind whose rows were read already (a small export's, ``heldrows``), from those rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from prvstream.daemon.kinds.base import KindSource
from prvstream.daemon.kinds.context import factorize, process_of
from prvstream.daemon.kinds.registry import KINDS, get
from prvstream.daemon.kinds.sql import quote_identifier as _q
from prvstream.daemon.kinds.sql import wrap_i4
from prvstream.sinks.arrays import distinct
from prvstream.sinks.logger import get_logger

if TYPE_CHECKING:
    from prvstream.daemon.nsys.export import Export

__all__ = ["ExportPlan", "HeldChunks", "plan_export"]

log = get_logger(__name__)


class ExportPlan(msgspec.Struct, forbid_unknown_fields=True):
    """Distinct objects and values of an export, from DISTINCT scans per table (no sorts).

    ``values[kind]`` lists the distinct values, sorted; they are string ids (kernel
    shortName, runtime/osrt nameId, NVTX textId or negative interned inline text, MPI textId,
    graph name), or enum ids (memcpy copyKind, sync syncType, openacc
    eventKind, GPU metricId). Extra key: ``nvtx_domain`` (domainId).
    """

    #: (globalPid, deviceId, streamId) of every GPU stream with activity, sorted
    streams: list[tuple[int, int, int]]
    #: globalTid of every CPU thread with activity, sorted
    threads: list[int]
    #: globalPid -> its active globalTids (sorted)
    threads_by_process: dict[int, list[int]]
    #: every globalPid with CPU or GPU activity, sorted
    processes: list[int]
    #: rows per kind (only kinds with rows)
    counts: dict[str, int]
    values: dict[str, list[int]]
    #: (gpu, metricId) pairs of GPU_METRICS
    gpu_metrics: list[tuple[int, int]] = msgspec.field(default_factory=list)
    #: (globalPid, streamId, deviceId as written, device it belongs to) of sync rows
    sync_devices: list[tuple[int, int, int, int]] = msgspec.field(default_factory=list)


#: (schema key, kind) -> the field each SQL expression of the kind's SELECT fills: built from
#: the schema alone, so once per nsys version
_FIELDS_BY_SQL: dict[tuple[int, str], dict[str, str]] = {}
_FIELDS_KEPT = 512

#: the greatest integer ``wrap_i4``'s SQL wraps in integers (past it, SQLite's sum is a REAL)
_WRAP_SAFE = (1 << 63) - 1 - (1 << 31)


def _wrap_i4(value: int) -> int:
    """``wrap_i4``'s SQL on an integer of at most ``_WRAP_SAFE``."""
    return ((value + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


#: a kind's rows read before planning: its chunks, every row of its one table
HeldChunks = Mapping[str, Sequence[np.ndarray]]


def plan_export(export: Export, held: HeldChunks | None = None,
                kinds: Iterable[str] | None = None) -> ExportPlan:
    """Scan ``export`` once per kind table (``Export.plan`` caches the result). A kind in
    ``held`` takes its distinct values from those rows where its plan's SQL expressions are
    the very ones its rows were read with (the same values, without a scan). Every kind gives
    its threads, streams and counts; only the converted ``kinds`` (default: all) their
    values, which nothing reads of a kind that is not converted."""
    return _Planner(export, held or {}, None if kinds is None else frozenset(kinds)).run()


class _Planner:
    """Builds an ExportPlan from COUNT and DISTINCT scans: SQLite keeps a small b-tree of the
    distinct values and never sorts a table (a GROUP BY would sort every row). Implements the
    ``kinds.base.PlanScan`` primitives each kind's ``plan`` calls."""

    def __init__(self, export: Export, held: HeldChunks,
                 kinds: frozenset[str] | None = None) -> None:
        self.x = export
        self.held = held
        self.kinds = kinds
        #: whether the kind being planned is converted (its values are labelled)
        self._values_wanted = True
        self.streams: set[tuple[int, int, int]] = set()
        #: (globalPid, deviceId, streamId) of synchronization rows, placed after the others
        self.sync_keys: set[tuple[int, int, int]] = set()
        self.threads: set[int] = set()
        self.counts: dict[str, int] = {}
        self.values: dict[str, set[int]] = {}
        self.metrics: set[tuple[int, int]] = set()

    # -- PlanScan ----------------------------------------------------------------------------
    @property
    def schema(self) -> Export:
        return self.x

    @property
    def values_wanted(self) -> bool:
        return self._values_wanted

    def col(self, table: str, col: str, default: str = "-1") -> str:
        return f"COALESCE({_q(col)}, {default})" if self.x.has(table, col) else default

    def rows(self, sql: str) -> Iterator[tuple[object, ...]]:
        return self.x.rows(sql)

    def count_rows(self, table: str, where: str = "") -> int:
        return self.x.count_rows(table, where)

    def see(self, key: str, value: int) -> None:
        self.values.setdefault(key, set()).add(value)

    def see_all(self, key: str, values: Iterable[int]) -> None:
        self.values.setdefault(key, set()).update(values)

    def texts(self, sql: str) -> list[str]:
        return self.x.texts(sql)

    def count(self, kind: str, n: int) -> None:
        if n:
            self.counts[kind] = self.counts.get(kind, 0) + n

    def thread(self, gtid: int) -> None:
        self.threads.add(gtid)

    def metric(self, gpu: int, metric: int) -> None:
        self.metrics.add((gpu, metric))

    def intern_texts(self, texts: Iterable[str]) -> dict[str, int]:
        return self.x.number_inline_texts(texts)

    def _held_fields(self, kind: str, table: str, where: str, exprs: list[str]
                     ) -> tuple[np.ndarray, list[str]] | None:
        """The held rows and their fields whose read expressions are ``exprs``, when
        ``kind``'s rows are held and come from ``table`` alone (with this condition); else
        None (scan)."""
        chunks = self.held.get(kind)
        if chunks is None:
            return None
        sources = self.x.sources(kind)
        if len(sources) != 1 or sources[0].table != table or sources[0].where != where:
            return None
        key = (self.x.schema_key, kind)
        by_sql = _FIELDS_BY_SQL.get(key)
        if by_sql is None:
            by_sql = {}
            for fld, expr in get(kind).field_sql(self.x, sources[0]).items():
                by_sql.setdefault(expr, fld)
            if len(_FIELDS_BY_SQL) >= _FIELDS_KEPT:
                _FIELDS_BY_SQL.clear()
            _FIELDS_BY_SQL[key] = by_sql
        fields = [f for f in (by_sql.get(e) for e in exprs) if f is not None]
        if len(fields) != len(exprs):
            return None
        if not chunks:
            return np.zeros(0, get(kind).dtype), fields
        return (chunks[0] if len(chunks) == 1 else np.concatenate(chunks)), fields

    def _see_all(self, key: str, values: np.ndarray) -> None:
        if len(values):
            self.values.setdefault(key, set()).update(distinct(values).tolist())

    def _distinct(self, key: str, table: str, column: str, where: str = "") -> None:
        """Every value of ``column`` (one DISTINCT per column: much cheaper in SQLite than one
        over every key column together)."""
        for (v,) in self.x.rows(f"SELECT DISTINCT {column} FROM {_q(table)}{where}"):
            self.see(key, int(v))  # type: ignore[call-overload]

    def gpu(self, kind: str, table: str, values: list[tuple[str, str]], *,
            placed_later: bool = False) -> None:
        """GPU activity table: stream keys, rows, and distinct values (plan key, SQL) when the
        kind is converted."""
        if not self._values_wanted:
            values = []
        keys = [self.col(table, "globalPid"), wrap_i4(self.col(table, "deviceId")),
                wrap_i4(self.col(table, "streamId"))]
        found = self._held_fields(kind, table, "", [*keys, *(c for _, c in values)])
        target = self.sync_keys if placed_later else self.streams
        if found is not None:
            rows, fields = found
            if len(rows):
                combos, _ = factorize(rows, tuple(fields[:3]))
                target.update((g, d, s) for g, d, s in combos)
            self.count(kind, self.x.count_rows(table))
            for (key_name, _), fld in zip(values, fields[3:], strict=True):
                self._see_all(key_name, rows[fld])
            return
        target.update(self._stream_keys(table, keys))
        self.count(kind, self.x.count_rows(table))
        for key_name, column in values:
            self._distinct(key_name, table, column)

    def _stream_keys(self, table: str, keys: list[str]) -> set[tuple[int, int, int]]:
        """The distinct (globalPid, deviceId, streamId) of ``table``: a DISTINCT of the bare
        columns, the ids wrapped here as ``wrap_i4`` wraps them (SQLite evaluates no
        expression per row); the DISTINCT of the ``keys`` expressions themselves where a
        value is not an integer those expressions wrap alike."""
        bare = [_q(c) if self.x.has(table, c) else "-1"
                for c in ("globalPid", "deviceId", "streamId")]
        out: set[tuple[int, int, int]] = set()
        for row in self.x.rows(f"SELECT DISTINCT {', '.join(bare)} FROM {_q(table)}"):
            g, d, s = (-1 if v is None else v for v in row)
            if not (type(g) is int and type(d) is int and type(s) is int
                    and d <= _WRAP_SAFE and s <= _WRAP_SAFE):
                return {(int(g), int(d), int(s))  # type: ignore[call-overload]
                        for g, d, s in self.x.rows(
                            f"SELECT DISTINCT {', '.join(keys)} FROM {_q(table)}")}
            out.add((g, _wrap_i4(d), _wrap_i4(s)))
        return out

    def cpu(self, kind: str, src: KindSource, value: str) -> None:
        """CPU call table: threads, rows and the distinct values of ``value`` (SQL) when the
        kind is converted."""
        t = src.table
        found = self._held_fields(kind, t, src.where, [self.col(t, "globalTid"), value])
        if found is not None:
            rows, (gtid, named) = found
            self.threads.update(distinct(rows[gtid]).tolist())
            self.count(kind, self.x.count_rows(t, src.where))
            if self._values_wanted:
                self._see_all(kind, rows[named])
            return
        where = f" WHERE {src.where}" if src.where else ""
        if self._values_wanted:
            # threads and values in one scan: a thread calls few distinct functions, so the
            # pairs are few, and SQLite reads the table once instead of twice
            gtid = _q("globalTid") if self.x.has(t, "globalTid") else "-1"
            for g, v in self.x.rows(f"SELECT DISTINCT {gtid}, {value} FROM {_q(t)}{where}"):
                self.thread(-1 if g is None else int(g))  # type: ignore[call-overload]
                self.see(kind, int(v))  # type: ignore[call-overload]
            self.count(kind, self.x.count_rows(t, src.where))
            return
        for (g,) in self.x.rows(f"SELECT DISTINCT {self.col(t, 'globalTid')} FROM {_q(t)}"
                                f"{where}"):
            self.thread(int(g))  # type: ignore[call-overload]
        self.count(kind, self.x.count_rows(t, src.where))

    # -- the plan ----------------------------------------------------------------------------
    def run(self) -> ExportPlan:
        for spec in KINDS.values():
            if spec.plan is not None:
                self._values_wanted = self.kinds is None or spec.name in self.kinds
                for src in self.x.sources(spec.name):  # kept per schema
                    spec.plan(self, src)
        sync_devices = self._place_syncs()
        by_proc: dict[int, list[int]] = {}
        for g in sorted(self.threads):
            by_proc.setdefault(process_of(g), []).append(g)
        procs = sorted(set(by_proc) | {s[0] for s in self.streams})
        values = {k: sorted(d) for k, d in self.values.items()}
        return ExportPlan(streams=sorted(self.streams), threads=sorted(self.threads),
                          threads_by_process=by_proc, processes=procs, counts=self.counts,
                          values=values, gpu_metrics=sorted(self.metrics),
                          sync_devices=sync_devices)

    def _place_syncs(self) -> list[tuple[int, int, int, int]]:
        """Synchronization rows carry deviceId 0 in real exports whatever the GPU: take the
        device from the process's other activity on the same stream, or its only device."""
        devices_of: dict[tuple[int, int], set[int]] = {}
        per_process: dict[int, set[int]] = {}
        for g, d, s in self.streams:
            devices_of.setdefault((g, s), set()).add(d)
            per_process.setdefault(g, set()).add(d)
        placed: list[tuple[int, int, int, int]] = []
        for g, d, s in sorted(self.sync_keys):
            on_stream = devices_of.get((g, s), set())
            in_process = per_process.get(g, set())
            if len(on_stream) == 1:
                device = next(iter(on_stream))
            elif s < 0 and len(in_process) == 1:
                device = next(iter(in_process))
            else:
                device = d
            placed.append((g, s, d, device))
            self.streams.add((g, device, s))
        return placed

