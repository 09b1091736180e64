"""Summary records of the model's views: cumulative, window, phase instance, phase total."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice

import numpy as np

from prvstream.sinks.arrays import distinct
from prvstream.sinks.efficiency.devices import DeviceTable
from prvstream.sinks.efficiency.host import HostParts, HostTotals
from prvstream.sinks.efficiency.metrics import (
    covered_pairs,
    exact_columns,
    group_order,
    job_metrics,
    job_metrics_of,
    single_metrics,
)
from prvstream.sinks.efficiency.parts import (
    COMM,
    GAP_NS,
    GAPS,
    K1,
    K4,
    OVERLAP,
    USEFUL,
    WIDTH,
    Device,
    Name,
    note_lines,
)
from prvstream.sinks.efficiency.processes import ProcessTable
from prvstream.sinks.efficiency.sharedrows import SharedRows
from prvstream.sinks.efficiency.tables import Tables
from prvstream.sinks.logger import get_logger
from prvstream.sinks.madesequence import MadeSequence
from prvstream.sinks.summary import encoded
from prvstream.sinks.summary.encoded import EncodedRecord, ListField, record_pieces
from prvstream.sinks.summary.records import (
    SCHEMA_VERSION,
    DeviceRow,
    GroupRow,
    HostRow,
    Metrics,
    SummaryRecord,
)
from prvstream.sinks.summary.verdict import judge

__all__ = ["RecordViews"]

log = get_logger(__name__)


class RecordViews:
    """Builds records from the model's tables (mixed into ``EfficiencyModel``)."""

    job: str
    window_ns: int
    gap_threshold_ns: int
    _devices: DeviceTable
    _dev_windows: SharedRows
    _dev_instances: SharedRows
    _dev_totals: np.ndarray
    _dev_names: SharedRows
    _ranked: Callable[[], array[int]]
    _window_slots: dict[int, int]
    _names: list[Name]
    _procs: ProcessTable
    _has: list[bytes | bytearray]
    _i_name: np.ndarray
    _i_occ: np.ndarray
    _i_start: np.ndarray
    _i_end: np.ndarray
    _occ_count: Callable[[int, str], int]
    _occ_span: Callable[[int, str, int], tuple[int, int]]
    _span: tuple[int, int] | None
    _reports: int
    _last_report: str
    _tables: Tables
    _phase_tables: dict[str, Tables]
    _host: HostTotals
    top: int
    nccl_as: str
    _notes: dict[str, tuple[int, list[str]]]


    def _record(self, view: str, start: int, end: int, gids: Iterable[int],
                row_of: Callable[[int], np.ndarray | None], name: str = "",
                index: int = 0, span: int | None = None, captured: bool = False,
                ) -> _Draft:
        """One record over [start, end) (length ``span``) for devices ``gids``; a device's
        totals are ``row_of(device id)`` (zeros when None). With ``captured``, each device's
        time is its reports' spans inside [start, end), else the whole span.

        Its devices, hosts and ranks are columns here and JSON in the result, made into
        objects ``ROWS_AT_ONCE`` at a time: never one object a device for the whole job."""
        if span is None:
            span = max(end - start, 0)
        ids = self._in_rank_order(gids)
        table = self._devices
        cols = _Columns(len(ids), table)
        spans = array("q")  # every device's, flattened pairs
        at_once = encoded.ROWS_AT_ONCE
        for lo in range(0, len(ids), at_once):
            part = ids[lo:lo + at_once]
            for j, gid in enumerate(part if isinstance(part, list) else part.tolist(), lo):
                found = row_of(gid)
                if found is not None:
                    cols.values[j] = found
                if captured:
                    log_ = table.span_log(gid)
                    cols.captured[j] = covered_pairs(log_, start, end)
                    spans += log_
                else:
                    cols.captured[j] = span
                cols.gids.append(gid)
        total = cols.metrics(None, span)
        head = SummaryRecord(
            schema=SCHEMA_VERSION, job=self.job, view=view, name=name, index=index,
            start_ns=start, end_ns=end, span_ns=span,
            captured_ns=covered_pairs(spans, start, end) if captured else span,
            wall_ns=self._span[1] if self._span else 0, reports=self._reports,
            last_report=self._last_report, metrics=total, devices=[],
            window_ns=self.window_ns, gap_threshold_ns=self.gap_threshold_ns,
            verdict=judge(total, cols, span), nccl_as=self.nccl_as)
        return _Draft(head, cols, span)

    def _in_rank_order(self, gids: Iterable[int]) -> list[int] | np.ndarray:
        """The distinct devices ``gids`` in rank order: a short list in Python, else numpy."""
        ranked = self._ranked()
        if isinstance(gids, list) and len(gids) <= encoded.ROWS_AT_ONCE:
            return sorted(set(gids), key=lambda g: (ranked[g], g))
        ids = distinct(np.fromiter(gids, np.int64))
        ordered: np.ndarray = ids[np.argsort(np.asarray(ranked, np.int64)[ids], kind="stable")]
        return ordered

    def _cumulative(self) -> EncodedRecord:
        start, end = self._span if self._span else (0, 0)
        draft = self._record("cumulative", start, end, range(len(self._devices)),
                             lambda g: self._dev_totals[g], captured=True)
        draft.head.notes = note_lines(self._notes)
        draft.head.tables = self._tables.top(self.top)
        draft.host_metrics(self._host.metrics())
        return draft.encoded()

    def _window(self, k: int) -> EncodedRecord:
        w = self.window_ns
        ws, we = k * w, (k + 1) * w
        js, je = self._span if self._span else (ws, we)
        devices = self._devices
        present = _device_ids(i for i in range(len(devices))
                              if _meets(devices.span_log(i), ws, we))
        slot = self._window_slots.get(k, -1)
        draft = self._record("window", max(ws, js), min(we, je), present,
                             lambda g: self._dev_windows.get(g, slot) if slot >= 0 else None,
                             index=k,
                             captured=True)
        draft.host_metrics(self._host.metrics(k))
        return draft.encoded()

    def _present(self, processes: Iterable[int]) -> list[int] | array[int]:
        out = array("q")
        for p in processes:
            out += array("q", self._devices.of_process(self._procs.key(p)))
        return _device_ids(out)

    def _phase(self, i: int) -> EncodedRecord:
        procs = [p for p, has in enumerate(self._has) if i < len(has) and has[i]]
        nm = self._names[int(self._i_name[i])]
        draft = self._record("phase", int(self._i_start[i]), int(self._i_end[i]),
                             self._present(procs), lambda g: self._dev_instances.get(g, i),
                             name=nm.name, index=int(self._i_occ[i]))
        occ = int(self._i_occ[i])
        draft.host_metrics(self._host.phase_metrics(
            self._occurrences(procs, nm.name, lambda count: [(occ, i)])))
        return draft.encoded()

    def _occurrences(self, procs: Iterable[int], name: str,
                     pick: Callable[[int], Iterable[tuple[int, int]]],
                     ) -> Iterator[tuple[int, int, int, int]]:
        """(process id, start, end, instance id) of each process's occurrences ``pick`` names
        as (occurrence, instance id), given how many occurrences of ``name`` the process has
        (each read alone: no copy of a process's spans a record)."""
        for p in procs:
            count = self._occ_count(p, name)
            if count < 0:
                continue
            for occ, inst in pick(count):
                if occ < count:
                    yield (p, *self._occ_span(p, name, occ), inst)

    def _phase_total(self, nid: int) -> EncodedRecord:
        nm = self._names[nid]
        draft = self._record("phase_total", nm.start, nm.end,
                             self._present(sorted(nm.processes)),
                             lambda g: self._dev_names.get(g, nid), name=nm.name,
                             index=nm.count,
                             span=nm.span)
        ids = nm.instances.tolist()
        draft.host_metrics(self._host.phase_metrics(self._occurrences(
            sorted(nm.processes), nm.name,
            lambda count: [(k, ids[k]) for k in range(count) if k < len(ids)])))
        tables = self._phase_tables.get(nm.name)
        if tables is not None:
            draft.head.tables = tables.top(self.top)
        return draft.encoded()


class _Columns(MadeSequence[DeviceRow]):
    """A record's devices (in rank order) as columns: totals rows and captured time; read as
    a sequence, each ``DeviceRow`` is made when it is read (``judge`` reads them twice).

    A record of at most ``ROWS_AT_ONCE`` devices (every phase record of a small job) is read
    from Python lists and its rows made once: numpy's per-call cost outweighs its work there
    (filled first: the lists are taken at the first read)."""

    def __init__(self, n: int, table: DeviceTable) -> None:
        self.values = np.zeros((n, WIDTH), np.int64)
        self.captured = np.zeros(n, np.int64)
        #: the devices' ids: each ``Device`` is made from ``table`` when its row is (a record
        #: of every device of a big job held no object a device)
        self.gids = array("q")
        self.table = table
        self._small = n <= encoded.ROWS_AT_ONCE
        self._lists: tuple[list[list[int]], list[int]] | None = None
        self._rows: list[DeviceRow] | None = None

    def __len__(self) -> int:
        return len(self.gids)

    def devices(self) -> Iterator[Device]:
        """The record's devices in order, each made as it is read."""
        table = self.table
        for gid in self.gids:
            yield table[gid]

    def _item(self, i: int) -> DeviceRow:
        if self._small:
            return self._made()[i]
        return self._row(self.table[self.gids[i]], self.values[i].tolist(),
                         int(self.captured[i]))

    def __iter__(self) -> Iterator[DeviceRow]:
        if self._small:
            yield from self._made()
            return
        table = self.table
        for lo in range(0, len(self), encoded.ROWS_AT_ONCE):
            hi = lo + encoded.ROWS_AT_ONCE
            for gid, v, t in zip(self.gids[lo:hi], self.values[lo:hi].tolist(),
                                 self.captured[lo:hi].tolist(), strict=True):
                yield self._row(table[gid], v, t)

    def _listed(self) -> tuple[list[list[int]], list[int]]:
        """A small record's values and captured times as lists (taken once)."""
        if self._lists is None:
            self._lists = self.values.tolist(), self.captured.tolist()
        return self._lists

    def _made(self) -> list[DeviceRow]:
        """A small record's rows (made once)."""
        if self._rows is None:
            values, captured = self._listed()
            self._rows = [self._row(dev, v, t)
                          for dev, v, t in zip(self.devices(), values, captured, strict=True)]
        return self._rows

    @staticmethod
    def _row(dev: Device, v: list[int], t: int) -> DeviceRow:
        useful, comm, overlap = v[USEFUL], v[COMM], v[OVERLAP]
        busy_k = v[K1:K4 + 1]
        return DeviceRow(
            host=dev.host, device=dev.device, useful_ns=useful, comm_ns=comm,
            idle_ns=max(t - useful - comm, 0), overlap_ns=overlap,
            overlap_share=overlap / (comm + overlap) if comm + overlap else 0.0,
            inflight_ns=[max(t - sum(busy_k), 0), *busy_k], gaps=v[GAPS],
            gap_ns=v[GAP_NS], rank=dev.rank, pid=dev.pid, captured_ns=t)

    def metrics(self, rows: Sequence[int] | np.ndarray | None, span: int) -> Metrics:
        """The metrics of the devices at ``rows`` (None: every device)."""
        if self._small:
            values, captured = self._listed()
            if rows is not None:
                values, captured = [values[j] for j in rows], [captured[j] for j in rows]
            return job_metrics([v[USEFUL] for v in values], [v[COMM] for v in values], span,
                               captured)
        at = slice(None) if rows is None else rows
        return job_metrics_of(self.values[at, USEFUL], self.values[at, COMM], span,
                              self.captured[at])

    def grouped(self, keys: Iterable[str]) -> _Groups:
        """Each row's group (a host, a rank) by ``keys``: the groups' (name, code) in
        ``group_order``, the rows sorted by code (stable) and each code's bounds in them."""
        codes: dict[str, int] = {}
        if self._small:
            of = [codes.setdefault(k, len(codes)) for k in keys]
            order = sorted(range(len(of)), key=of.__getitem__)
            bounds = [0] * (len(codes) + 1)
            for c in of:
                bounds[c + 1] += 1
            for c in range(len(codes)):
                bounds[c + 1] += bounds[c]
            return _named(codes), order, bounds
        of_a = np.fromiter((codes.setdefault(k, len(codes)) for k in keys), np.int64, len(self))
        order_a = np.argsort(of_a, kind="stable")
        return _named(codes), order_a, np.searchsorted(of_a[order_a], np.arange(len(codes) + 1))

    def rank_grouped(self) -> _Groups:
        """``grouped`` by each device's rank (``DeviceTable.group_key``). A big record's
        ranked devices are grouped by their ranks in numpy and named as each group is read:
        no text, tuple or dict entry a rank for a job of thousands."""
        table = self.table
        if self._small:
            return self.grouped(map(table.group_key, self.gids))
        gids = np.array(self.gids, np.int64)
        ranks, has = table.ranks_of(gids)
        ranked, others = np.flatnonzero(has), np.flatnonzero(~has)
        values, inverse = np.unique(ranks[ranked], return_inverse=True)
        codes = np.empty(len(gids), np.int64)
        codes[ranked] = inverse
        # the rest are named host:pid, which no number parses: after every rank, by name
        keys = [table.group_key(g) for g in gids[others].tolist()]
        names = sorted(set(keys))
        at = {name: len(values) + j for j, name in enumerate(names)}
        codes[others] = [at[key] for key in keys]
        order = np.argsort(codes, kind="stable")
        return (_RankNames(values, names), order,
                np.searchsorted(codes[order], np.arange(len(values) + len(names) + 1)))

    def groups(self, grouped: _Groups, span: int) -> Iterator[GroupRow]:
        """One row per group: its devices' sums and metrics (a big record's groups of one
        device, ``ROWS_AT_ONCE`` at a time, by ``single_metrics``)."""
        named, order, bounds = grouped
        if self._small:
            values = self._listed()[0]
            for name, c in named:
                rows = order[bounds[c]:bounds[c + 1]]
                yield GroupRow(name=name, devices=len(rows),
                               useful_ns=sum(values[j][USEFUL] for j in rows),
                               comm_ns=sum(values[j][COMM] for j in rows),
                               metrics=self.metrics(rows, span))
            return
        lo_hi, rows_in_order = np.asarray(bounds), np.asarray(order)
        exact = exact_columns(span, self.values[:, USEFUL], self.values[:, COMM], self.captured)
        named_in = iter(named)
        while chunk := list(islice(named_in, encoded.ROWS_AT_ONCE)):
            codes = np.fromiter((c for _, c in chunk), np.int64, len(chunk))
            lo = lo_hi[codes]
            alone = (lo_hi[codes + 1] - lo == 1) & exact
            rows = rows_in_order[lo[alone]]
            u, c = self.values[rows, USEFUL], self.values[rows, COMM]
            made = zip(u.tolist(), c.tolist(),
                       *(m.tolist() for m in single_metrics(u, c, span, self.captured[rows])),
                       strict=True)
            for (name, code), one in zip(chunk, alone.tolist(), strict=True):
                if one:
                    useful, comm, lb, ce, oe, pe = next(made)
                    yield GroupRow(name=name, devices=1, useful_ns=useful, comm_ns=comm,
                                   metrics=Metrics(load_balance=lb, communication_efficiency=ce,
                                                   orchestration_efficiency=oe,
                                                   parallel_efficiency=pe))
                    continue
                at = order[bounds[code]:bounds[code + 1]]
                yield GroupRow(name=name, devices=len(at),
                               useful_ns=int(self.values[at, USEFUL].sum()),
                               comm_ns=int(self.values[at, COMM].sum()),
                               metrics=self.metrics(at, span))


class _RankNames:
    """A big record's rank groups' (name, code) in group order, named as they are read: the
    ranks (ascending: numbers sort by value) then the host:pid names of devices without one."""

    def __init__(self, ranks: np.ndarray, names: list[str]) -> None:
        self._ranks = ranks
        self._names = names

    def __iter__(self) -> Iterator[tuple[str, int]]:
        n = len(self._ranks)
        for lo in range(0, n, encoded.ROWS_AT_ONCE):
            for code, rank in enumerate(self._ranks[lo:lo + encoded.ROWS_AT_ONCE].tolist(), lo):
                yield str(rank), code
        for code, name in enumerate(self._names, n):
            yield name, code


#: ``_Columns.grouped``: the groups' (name, code) in ``group_order``, the rows sorted by code
#: (stable) and each code's bounds in them
_Groups = tuple[Iterable[tuple[str, int]], list[int] | np.ndarray, list[int] | np.ndarray]


def _device_ids(found: Iterable[int]) -> list[int] | array[int]:
    """A record's device ids: a list while few (``_in_rank_order`` sorts them in Python),
    else an array (no Python int a device)."""
    ids = found if isinstance(found, array) else array("q", found)
    return ids.tolist() if len(ids) <= encoded.ROWS_AT_ONCE else ids


def _meets(spans: array[int], start: int, end: int) -> bool:
    """Whether one of the flattened [a, b) pairs ``spans`` overlaps [start, end)."""
    return any(spans[j] < end and spans[j + 1] > start for j in range(0, len(spans), 2))


def _named(codes: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(codes.items(), key=lambda kv: group_order(kv[0]))


class _Draft:
    """A record being made: its head (every field but the long lists) and the columns its
    lists are made from as its pieces are written (``record_pieces``)."""

    def __init__(self, head: SummaryRecord, cols: _Columns, span: int) -> None:
        self.head = head
        self._cols = cols
        self._span = span
        self._host_rows: Callable[[], Iterator[HostRow]] | None = None

    def host_metrics(self, found: HostParts | None) -> None:
        if found is not None:
            self.head.host_metrics, self._host_rows = found

    def encoded(self) -> EncodedRecord:
        h, cols, span = self.head, self._cols, self._span
        fields: list[ListField] = [
            (b"devices", b"hosts", lambda: iter(cols)),
            (b"hosts", b"ranks",
             lambda: cols.groups(cols.grouped(map(cols.table.host, cols.gids)), span)),
            (b"ranks", b"window_ns", lambda: cols.groups(cols.rank_grouped(), span))]
        if self._host_rows is not None:
            fields.append((b"hosts", b"process_offload_efficiency", self._host_rows))
        return EncodedRecord(h.view, h.name, h.index, h.start_ns,
                             lambda: record_pieces(h, fields))


