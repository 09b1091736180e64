"""What a data kind declares: its tables and columns, dtype, SQL, plan scan, converter, value
groups, .pcf blocks and role in the efficiency model (``KindSpec``), and the protocols a kind
sees of an export and of the planner. Kinds import nothing from the rest of the daemon.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol

import msgspec
import numpy as np

from prvstream.daemon.kinds.sql import fetch_groups, pack_i4_pair, quote_identifier, wrap_i4
from prvstream.sinks.base import TableDetail
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.records import RecordBatch

if TYPE_CHECKING:
    from prvstream.daemon.kinds.context import ReportContext

__all__ = [
    "I4",
    "I8",
    "ChunkResult",
    "Columns",
    "Efficiency",
    "KindSource",
    "KindSpec",
    "Names",
    "PcfBlocks",
    "PlanScan",
    "Schema",
    "UnwrappedSelect",
    "ValueGroup",
    "string_label",
]

log = get_logger(__name__)

I8, I4 = "<i8", "<i4"


class UnwrappedSelect(NamedTuple):
    """A kind's SELECT for the compiled row reader (``KindSpec.select_source_unwrapped``):
    one column a field, in ``fields`` order; ``wraps``: 1 where the reader wraps the value
    into int32 as ``wrap_i4`` would; ``names``: the column of ``select_source`` each value
    is part of (what its messages call it)."""

    sql: str
    fields: tuple[str, ...]
    wraps: tuple[int, ...]
    names: tuple[int, ...]


def _int32_literal(dtype: np.dtype, fld: str, expr: str) -> bool:
    """Whether a packed field is int32 and its expression an int32 integer literal."""
    if dtype[fld] != np.dtype(I4):
        return False
    try:
        value = int(expr)
    except ValueError:
        return False
    return -(2**31) <= value < 2**31


class KindSource(NamedTuple):
    """One table feeding a data kind: its time columns and the rows it contributes."""

    table: str
    start: str = "start"
    end: str | None = "end"
    where: str = ""


class Schema(Protocol):
    """The tables and columns of an export (``nsys.export.Export``)."""

    @property
    def tables(self) -> Mapping[str, list[str]]: ...

    def has(self, table: str, column: str | None = None) -> bool: ...


class Names(Protocol):
    """The names an export resolves value ids to (``nsys.export.Export``)."""

    def string(self, sid: int) -> str: ...

    def strings(self, ids: Iterable[int]) -> dict[int, str]: ...

    def nvtx_domains(self) -> dict[int, str]: ...

    def gpu_metric_names(self) -> dict[int, str]: ...


class PlanScan(Protocol):
    """The planner's primitives a kind's ``plan`` uses (``nsys.plan``)."""

    @property
    def schema(self) -> Schema: ...

    @property
    def values_wanted(self) -> bool:
        """Whether the kind being planned is converted: a kind that is not still gives its
        threads, streams and row counts (the trace's objects do not depend on ``--trace``),
        but its distinct values are never labelled, so its plan may skip them."""
        ...

    def col(self, table: str, col: str, default: str = "-1") -> str: ...

    def rows(self, sql: str) -> Iterator[tuple[object, ...]]: ...

    def count_rows(self, table: str, where: str = "") -> int: ...

    def gpu(self, kind: str, table: str, values: list[tuple[str, str]], *,
            placed_later: bool = False) -> None: ...

    def cpu(self, kind: str, src: KindSource, value: str) -> None: ...

    def thread(self, gtid: int) -> None: ...

    def see(self, key: str, value: int) -> None: ...

    def see_all(self, key: str, values: Iterable[int]) -> None:
        """``see`` of every value."""
        ...

    def texts(self, sql: str) -> list[str]:
        """The first column of ``sql``'s rows as texts, decoded as ``rows`` decodes them."""
        ...

    def count(self, kind: str, n: int) -> None: ...

    def metric(self, gpu: int, metric: int) -> None: ...

    def intern_texts(self, texts: Iterable[str]) -> dict[str, int]: ...


def string_label(names: Names, sid: int) -> str:
    """The label of a StringIds id; ``(unknown)`` for a missing one (-1)."""
    return "(unknown)" if sid < 0 else pv.sanitize_label(names.string(sid))


def string_labels(names: Names, sids: list[int]) -> list[str]:
    """``string_label`` of every id, in order."""
    texts = pv.sanitize_many([names.string(sid) for sid in sids if sid >= 0])
    if len(texts) == len(sids):
        return texts
    known = iter(texts)
    return ["(unknown)" if sid < 0 else next(known) for sid in sids]


class ValueGroup(msgspec.Struct, frozen=True):
    """Event values numbered by label (one .pcf value table): how an id becomes its label."""

    name: str
    label: Callable[[Names, int], str] = string_label
    #: ``label`` of many ids at once, in order (None: ``labels_of`` says)
    labels: Callable[[Names, list[int]], list[str]] | None = None
    #: ids are StringIds ids, fetched in bulk before labelling
    string_ids: bool = True
    #: labels read from the plan even when the kind is not converted (NVTX domains)
    always: bool = False
    #: ids that have no label of their own (the default NVTX domain)
    skip: frozenset[int] = frozenset()

    def labels_of(self, names: Names, sids: list[int]) -> list[str]:
        """``label`` of every id, in order: in one batch where the group has one (``labels``,
        or ``string_labels`` for ``string_label``), else id by id."""
        if self.labels is not None:
            return self.labels(names, sids)
        if self.label is string_label:
            return string_labels(names, sids)
        return [self.label(names, sid) for sid in sids]


class ChunkResult(msgspec.Struct):
    """What one chunk became."""

    records: RecordBatch
    #: GPU activity intervals (``sinks.base.ACTIVITY_DTYPE``) for the efficiency model
    activity: np.ndarray | None = None
    #: NVTX ranges that may be efficiency phases (``sinks.base.PHASE_DTYPE``)
    phases: np.ndarray | None = None
    #: rows of the chunk that produced records (records in = records out checks)
    rows: int = 0
    #: rows of the summary's top-N tables (``sinks.base.TableDetail``: aggregated per name for
    #: the cumulative tables, attributed to phases by start for the tables per phase)
    tables: list[TableDetail] | None = None
    #: host call intervals (``sinks.base.HOST_DTYPE``) for the host metrics
    host: np.ndarray | None = None


#: a kind's role in the efficiency model: GPU activity intervals, phase candidates, host calls
#: that are not host useful work (CUDA runtime, MPI), or none
Efficiency = Literal["activity", "phases", "host", "none"]
#: a table kind's column: (source column or SQL expression, dtype field)
Columns = tuple[tuple[str, str], ...]
#: (position in the .pcf, block): blocks of every kind are written sorted by position
PcfBlocks = list[tuple[int, pv.EventTypeSpec]]


def _no_blocks(values: Mapping[str, list[str]]) -> PcfBlocks:
    return []


class KindSpec(msgspec.Struct, frozen=True, eq=False, dict=True):
    """One data kind, complete: registering it (``registry``) is all the daemon needs."""

    name: str
    #: what the kind is, for ``--trace`` help and docs/mapping.md
    title: str
    #: record rank (unique): orders records of different kinds at one instant on one object
    rank: int
    #: chunk dtype; times are raw session-clock ns
    dtype: np.dtype
    convert: Callable[[ReportContext, np.ndarray], ChunkResult]
    #: (source column or SQL expression, dtype field) in dtype order
    columns: Columns = ()
    #: the tables behind the kind (``discover`` finds them instead when set)
    tables: tuple[KindSource, ...] = ()
    discover: Callable[[Schema], list[KindSource]] | None = None
    #: a column's SQL when the generic ``COALESCE(column, default)`` does not fit:
    #: (schema, table, field, column, default) -> expression or None for the generic one
    column_sql: Callable[[Schema, str, str, str, str], str | None] | None = None
    #: defaults for NULL or missing columns other than -1, by field
    defaults: Mapping[str, str] = msgspec.field(default_factory=dict)
    #: trailing select expressions after the dtype's fields (not filled into the array)
    extra_select: Callable[[Schema, str], list[str]] | None = None
    #: the whole ordered SELECT for kinds not read from one table each (joins)
    select: Callable[[Schema], str | None] | None = None
    #: the driving table and ``select``'s parts as unordered scans of it in rowid order, its
    #: rowid the last value (merged into ``select``'s order by ``daemon.nsys.joinscan``)
    scan_parts: Callable[[Schema], tuple[str, list[str]] | None] | None = None
    #: ``scan_parts``' parts joining TEMP copies of their tables, and the statements that make
    #: the copies (read run by run when the driving table is stored as a few runs)
    copied_parts: Callable[[Schema], tuple[list[str], list[str]] | None] | None = None
    #: the plan scan of one source table (None: the kind is not planned)
    plan: Callable[[PlanScan, KindSource], None] | None = None
    #: value groups, by the key the plan stores the kind's distinct values under
    value_groups: Mapping[str, ValueGroup] = msgspec.field(default_factory=dict)
    #: the .pcf blocks the kind contributes, from a numbering's labels by value group
    pcf: Callable[[Mapping[str, list[str]]], PcfBlocks] = _no_blocks
    efficiency: Efficiency = "none"
    #: counts as CUDA activity (a report without any such kind is not converted)
    cuda: bool = False
    #: the SELECT ends with an inline text column (``extra_select``) that becomes a negative
    #: interned string id in this field: such kinds are read in-process only
    inline_text: str = ""
    #: a derived kind (no table of its own) is converted when this holds for the kinds present
    available: Callable[[set[str]], bool] | None = None
    #: kinds whose row counts ``read_cost`` uses
    cost_inputs: tuple[str, ...] = ()
    #: estimated reading cost from rows per kind (default: rows x (values per row + 2))
    read_cost: Callable[[Mapping[str, int]], int] | None = None
    #: lowers a chunk's watermark (start of its last row) when the kind may still write records
    #: before it (host states wait for the next call on their thread)
    watermark: Callable[[ReportContext, int], int] | None = None
    #: a negative end means "still open" (NVTX ranges), not a hostile value
    open_end: bool = False
    #: time fields besides start and end that must lie in the trusted bound (``kinds.bounds``)
    other_times: tuple[str, ...] = ()
    #: the records the kind still owes when its stream ends
    finish: Callable[[ReportContext], RecordBatch] | None = None

    @property
    def derived(self) -> bool:
        """No table of its own (its rows come from a join of other kinds' tables)."""
        return self.available is not None

    @cached_property
    def groups(self) -> tuple[tuple[str, ...], ...]:
        """Fields fetched together (adjacent int32 fields as one packed int64)."""
        return fetch_groups(self.dtype)

    def sources(self, schema: Schema) -> list[KindSource]:
        """The tables present in the export that feed the kind (possibly empty ones)."""
        if self.discover is not None:
            return self.discover(schema)
        return [s for s in self.tables if schema.has(s.table, s.start)
                and (s.end is None or schema.has(s.table, s.end))]

    def no_end(self, schema: Schema) -> list[KindSource]:
        """Tables of the kind refused because their end column is missing (an interval
        without its end would give negative or made-up times)."""
        return [s for s in self.tables if schema.has(s.table, s.start)
                and s.end is not None and not schema.has(s.table, s.end)]

    def cost(self, rows: Mapping[str, int]) -> int:
        if self.read_cost is not None:
            return self.read_cost(rows)
        return rows.get(self.name, 0) * (len(self.groups) + 2)

    def select_sql(self, schema: Schema) -> str | None:
        """The ordered SELECT of the kind's chunks, or None if no table feeds it."""
        if self.select is not None:
            return self.select(schema)
        sources = self.sources(schema)
        if not sources:
            return None
        body = " UNION ALL ".join(self.select_source(schema, s) for s in sources)
        return f"{body} ORDER BY start"

    def select_source(self, schema: Schema, src: KindSource) -> str:
        """The SELECT of the kind's columns from one of its tables, unordered (``select_sql``
        joins them and orders by start; ``nsys.tables`` scans one in storage order)."""
        by_field = self.field_sql(schema, src)
        exprs: list[str] = []
        for group in self.groups:
            if len(group) == 1:
                exprs.append(f"{by_field[group[0]]} AS {group[0]}")
            else:
                packed = pack_i4_pair(by_field[group[0]], by_field[group[1]])
                exprs.append(f"{packed} AS {'_'.join(group)}")
        if self.extra_select is not None:
            exprs.extend(self.extra_select(schema, src.table))
        where = f" WHERE {src.where}" if src.where else ""
        return f"SELECT {', '.join(exprs)} FROM {quote_identifier(src.table)}{where}"

    def select_source_unwrapped(self, schema: Schema, src: KindSource) -> UnwrappedSelect | None:
        """``select_source`` for the compiled row reader, which wraps int32 values itself
        (``_sqlrows`` fill's ``wraps``): one column a field, each int32 field's expression
        without ``wrap_i4``; None where that reader could not give the same values (extra
        columns, a packed field that is not int32 or whose default is not an int32 literal)."""
        if self.extra_select is not None:
            return None
        bare: dict[str, str] = {}
        wrapped = self.field_sql(schema, src, bare)
        exprs: list[str] = []
        fields: list[str] = []
        wraps: list[int] = []
        names: list[int] = []
        for j, group in enumerate(self.groups):
            for fld in group:
                wrap = fld in bare
                if len(group) == 2 and not wrap and not _int32_literal(self.dtype, fld,
                                                                       wrapped[fld]):
                    return None
                exprs.append(f"{bare[fld] if wrap else wrapped[fld]} AS {fld}")
                fields.append(fld)
                wraps.append(int(wrap or len(group) == 2))
                names.append(j)
        where = f" WHERE {src.where}" if src.where else ""
        sql = f"SELECT {', '.join(exprs)} FROM {quote_identifier(src.table)}{where}"
        return UnwrappedSelect(sql, tuple(fields), tuple(wraps), tuple(names))

    def field_sql(self, schema: Schema, src: KindSource,
                  unwrapped: dict[str, str] | None = None) -> dict[str, str]:
        """Each dtype field's SQL expression in ``select_source`` (before adjacent int32
        fields are packed): a field holds exactly what its expression gives. ``unwrapped``
        gets each field that ``wrap_i4`` wraps, with its expression before the wrapping."""
        t = src.table
        by_field: dict[str, str] = {}
        for col, fld in self.columns:
            default = self.defaults.get(fld, "-1")
            expr = None
            if fld == "start":
                expr = quote_identifier(src.start)
            elif self.column_sql is not None:
                expr = self.column_sql(schema, t, fld, col, default)
            if expr is None:
                expr = (f"COALESCE({quote_identifier(col)}, {default})" if schema.has(t, col)
                        else default)
            if self.dtype[fld] == np.dtype(I4) and expr != default:
                if unwrapped is not None:
                    unwrapped[fld] = expr
                expr = wrap_i4(expr)
            by_field[fld] = expr
        return by_field
