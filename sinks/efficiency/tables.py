"""Top-N tables of a job: kernels, NCCL collectives, memcpy by kind, NVTX ranges, by name.

Per table and name the model keeps count, total, min, max (ns) and bytes; the summary shows
the top ``top`` names by total and one ``other`` row for the rest. Totals merge by sums and
extremes, so tables of disjoint sets of reports merge exactly.
"""

from __future__ import annotations

import heapq
from array import array

import numpy as np

from prvstream.sinks.base import TableDetail, TableRows
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import TableRow

__all__ = ["TABLES", "SpanIndex", "Tables", "merge_tables", "phase_rows"]

log = get_logger(__name__)

#: the tables, in the order the summary shows them
TABLES = ("kernels", "nccl", "memcpy", "nvtx")
#: distinct names kept per table; beyond it the smallest totals fold into "other" (a job with
#: more distinct kernel or range names than this gets approximate rows below the top)
NAME_CAP = 65536
_COUNT, _TOTAL, _MIN, _MAX, _BYTES = range(5)
_OTHER = "other"

Table = dict[str, list[int]]


def _fold(a: list[int], b: list[int]) -> list[int]:
    return [a[0] + b[0], a[1] + b[1], min(a[2], b[2]), max(a[3], b[3]), a[4] + b[4]]


def merge_tables(a: dict[str, Table], b: dict[str, Table]) -> dict[str, Table]:
    """The tables of both (sums of counts, totals and bytes; extremes of min and max)."""
    out: dict[str, Table] = {}
    for name in sorted(a.keys() | b.keys()):
        rows = dict(a.get(name, {}))
        for key, v in b.get(name, {}).items():
            rows[key] = _fold(rows[key], v) if key in rows else list(v)
        out[name] = dict(sorted(rows.items()))
    return out


class Tables:
    """The model's running tables."""

    def __init__(self, data: dict[str, Table] | None = None) -> None:
        self.data: dict[str, Table] = {k: dict(v) for k, v in (data or {}).items()}

    def add(self, rows: TableRows) -> None:
        table = self.data.setdefault(rows.table, {})
        new = [list(row) for row in zip(rows.count.tolist(), rows.total.tolist(),
                                        rows.min.tolist(), rows.max.tolist(),
                                        rows.bytes.tolist(), strict=True)]
        if len(new) != len(rows.names):
            raise ValueError(f"{len(rows.names)} names for {len(new)} table rows")
        if table.keys().isdisjoint(rows.names) and len(set(rows.names)) == len(new):
            table.update(zip(rows.names, new, strict=True))  # names met for the first time
        else:
            for name, row in zip(rows.names, new, strict=True):
                old = table.get(name)
                table[name] = row if old is None else _fold(old, row)
        if len(table) > NAME_CAP:
            self._cap(table, rows.table)

    @staticmethod
    def _cap(table: Table, name: str) -> None:
        keep = sorted(table, key=lambda k: -table[k][_TOTAL])[:NAME_CAP // 2]
        other: list[int] | None = None
        for key in list(table):
            if key not in keep:
                v = table.pop(key)
                other = v if other is None else _fold(other, v)
        if other is not None:
            table[_OTHER] = _fold(table[_OTHER], other) if _OTHER in table else other
        log.warning("table_names_capped", table=name, kept=len(table))

    def export(self) -> dict[str, Table]:
        return {k: dict(sorted(v.items())) for k, v in sorted(self.data.items()) if v}

    def top(self, n: int) -> dict[str, list[TableRow]]:
        """Every table's top ``n`` names by total, then ``other`` (the rest, summed)."""
        out: dict[str, list[TableRow]] = {}
        for table in sorted(self.data, key=lambda t: (*TABLES, t).index(t)):
            rows = self.data[table]
            if not rows:
                continue
            totals = [v[_TOTAL] for v in rows.values()]
            total = sum(totals)
            # the names sorted by total (largest first), then name, are only needed as far
            # as the n-th: those whose total reaches the n-th largest are the candidates
            leading: list[str] = []
            if n > 0:
                least = heapq.nlargest(n, totals)[-1]
                leading = [k for k, v in rows.items() if v[_TOTAL] >= least]
            order = sorted(leading, key=lambda k: (-rows[k][_TOTAL], k))
            shown = [(k, rows[k]) for k in order[:n] if k != _OTHER]
            keys = {k for k, _ in shown}
            rest = [v for k, v in rows.items() if k not in keys]
            if rest:  # summed by column (what folding them one by one gives)
                count, total_ns, lo, hi, nbytes = zip(*rest, strict=True)
                shown.append((_OTHER, [sum(count), sum(total_ns), min(lo), max(hi),
                                       sum(nbytes)]))
            out[table] = [_row(table, k, v, total) for k, v in shown]
        return out


class SpanIndex:
    """Per key, a phase's occurrences (start, end pairs, an ``array('q')`` that only grows)
    as ``phase_rows`` searches them: starts sorted, and the running greatest end. Kept and
    extended as occurrences are appended in start order, instead of sorted again for every
    batch of rows (whose cost grew with the occurrences so far: quadratic over a run)."""

    def __init__(self) -> None:
        #: key -> (the pairs array, occurrences indexed, sorted starts, running greatest end)
        self._index: dict[object, tuple[array[int], int, np.ndarray, np.ndarray]] = {}

    def clear(self) -> None:
        """Forget every index (they are made again from the pairs when asked for)."""
        self._index.clear()

    def get(self, key: object, pairs: array[int]) -> tuple[np.ndarray, np.ndarray]:
        n = len(pairs) // 2
        found = self._index.get(key)
        if found is not None and found[0] is pairs and found[1] <= n:
            _, done, lo, reach = found
            if done == n:
                return lo, reach
            flat = np.frombuffer(pairs, dtype=np.int64)[2 * done:2 * n]
            new_lo, new_hi = flat[0::2], flat[1::2]
            if (done == 0 or int(new_lo[0]) >= int(lo[-1])) and not bool(
                    (new_lo[1:] < new_lo[:-1]).any()):  # appended in order: extend
                new_reach = np.maximum.accumulate(new_hi)
                if done:
                    np.maximum(new_reach, reach[-1], out=new_reach)
                lo, reach = np.concatenate((lo, new_lo)), np.concatenate((reach, new_reach))
                del flat, new_lo, new_hi  # no view of ``pairs`` outlives the call (it grows)
                self._index[key] = (pairs, n, lo, reach)
                return lo, reach
            del flat, new_lo, new_hi
        flat = np.frombuffer(pairs, dtype=np.int64) if n else np.zeros(0, np.int64)
        order = np.argsort(flat[0::2], kind="stable")
        lo, reach = flat[0::2][order], np.maximum.accumulate(flat[1::2][order])
        del flat
        self._index[key] = (pairs, n, lo, reach)
        return lo, reach


def phase_rows(detail: TableDetail, origin: int,
               spans: dict[str, tuple[np.ndarray, np.ndarray]]
               ) -> list[tuple[str, TableRows]]:
    """Per phase name, the rows of ``detail`` (one process's) that start inside one of its
    occurrences ``spans[name]`` (``SpanIndex.get``: sorted starts and running greatest end;
    a row counts once per name even where occurrences nest), aggregated per row name."""
    out: list[tuple[str, TableRows]] = []
    t = detail.start + origin
    for name, (lo, reach) in sorted(spans.items()):
        if not len(lo):
            continue
        idx = lo.searchsorted(t, side="right") - 1
        inside = (idx >= 0) & (reach[np.maximum(idx, 0)] > t)
        if inside.any():
            out.append((name, detail.take(inside).rows()))
    return out


def _row(table: str, name: str, v: list[int], total: int) -> TableRow:
    count, ns = v[_COUNT], v[_TOTAL]
    gbps = v[_BYTES] / ns if table == "memcpy" and ns > 0 else None  # bytes/ns = GB/s
    return TableRow(name=name, count=count, total_ns=ns, mean_ns=ns / count if count else 0.0,
                    min_ns=v[_MIN], max_ns=v[_MAX], share=ns / total if total else 0.0,
                    bytes=v[_BYTES], gbps=gbps)
