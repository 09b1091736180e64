"""Summary records of the model's views: cumulative, window, phase instance, phase total."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from prvstream.sinks.efficiency.host import HostTotals
from prvstream.sinks.efficiency.metrics import covered, group_order, job_metrics
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
from prvstream.sinks.efficiency.tables import Tables
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import (
    SCHEMA_VERSION,
    DeviceRow,
    GroupRow,
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
    _devices: list[Device]
    _ranked: Callable[[], list[int]]
    _process_devices: dict[tuple[str, int], list[int]]
    _window_slots: dict[int, int]
    _names: list[Name]
    _processes: list[tuple[str, int]]
    _has: list[np.ndarray]
    _i_name: np.ndarray
    _i_occ: np.ndarray
    _i_start: np.ndarray
    _i_end: np.ndarray
    _occ_spans: dict[tuple[tuple[str, int], str], array[int]]
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
                row_of: Callable[[Device], np.ndarray | None], name: str = "",
                index: int = 0, span: int | None = None, captured: bool = False,
                ) -> SummaryRecord:
        """One record over [start, end) (length ``span``) for devices ``gids``; a device's
        totals are ``row_of(device)`` (zeros when None). With ``captured``, each device's
        time is its reports' spans inside [start, end), else the whole span."""
        if span is None:
            span = max(end - start, 0)
        spans: list[tuple[int, int]] = []
        rows: list[DeviceRow] = []
        rank_of = self._ranked()
        for gid in sorted(set(gids), key=rank_of.__getitem__):
            dev = self._devices[gid]
            found = row_of(dev)
            v = found.tolist() if found is not None else [0] * WIDTH
            useful, comm, overlap = v[USEFUL], v[COMM], v[OVERLAP]
            busy_k = v[K1:K4 + 1]
            t = covered(dev.spans, start, end) if captured else span
            if captured:
                spans += dev.spans
            rows.append(DeviceRow(
                host=dev.host, device=dev.device, useful_ns=useful, comm_ns=comm,
                idle_ns=max(t - useful - comm, 0), overlap_ns=overlap,
                overlap_share=overlap / (comm + overlap) if comm + overlap else 0.0,
                inflight_ns=[max(t - sum(busy_k), 0), *busy_k], gaps=v[GAPS],
                gap_ns=v[GAP_NS], rank=dev.rank, pid=dev.pid, captured_ns=t))
        hosts: dict[str, list[DeviceRow]] = {}
        ranks: dict[str, list[DeviceRow]] = {}
        for r in rows:
            hosts.setdefault(r.host, []).append(r)
            ranks.setdefault(str(r.rank) if r.rank is not None else f"{r.host}:{r.pid}",
                             []).append(r)

        #: groups of the same devices (one host, one rank, the job) share their metrics
        seen: dict[tuple[int, ...], Metrics] = {}

        def metrics(v: list[DeviceRow]) -> Metrics:
            key = tuple(id(r) for r in v)
            m = seen.get(key)
            if m is None:
                m = seen[key] = job_metrics([r.useful_ns for r in v], [r.comm_ns for r in v],
                                            span, [r.captured_ns for r in v])
            return m

        def groups(by: dict[str, list[DeviceRow]]) -> list[GroupRow]:
            return [GroupRow(name=k, devices=len(v), useful_ns=sum(r.useful_ns for r in v),
                             comm_ns=sum(r.comm_ns for r in v), metrics=metrics(v))
                    for k, v in sorted(by.items(), key=lambda kv: group_order(kv[0]))]

        total = metrics(rows)
        return SummaryRecord(
            schema=SCHEMA_VERSION, job=self.job, view=view, name=name, index=index,
            start_ns=start, end_ns=end, span_ns=span,
            captured_ns=covered(spans, start, end) if captured else span,
            wall_ns=self._span[1] if self._span else 0, reports=self._reports,
            last_report=self._last_report,
            metrics=total, devices=rows, hosts=groups(hosts), ranks=groups(ranks),
            window_ns=self.window_ns,
            gap_threshold_ns=self.gap_threshold_ns, verdict=judge(total, rows, span),
            nccl_as=self.nccl_as)

    def _cumulative(self) -> SummaryRecord:
        start, end = self._span if self._span else (0, 0)
        record = self._record("cumulative", start, end, range(len(self._devices)),
                              lambda d: d.totals, captured=True)
        record.notes = note_lines(self._notes)
        record.tables = self._tables.top(self.top)
        record.host_metrics = self._host.metrics()
        return record

    def _window(self, k: int) -> SummaryRecord:
        w = self.window_ns
        ws, we = k * w, (k + 1) * w
        js, je = self._span if self._span else (ws, we)
        present = [i for i, d in enumerate(self._devices)
                   if any(a < we and b > ws for a, b in d.spans)]
        slot = self._window_slots.get(k, -1)
        record = self._record("window", max(ws, js), min(we, je), present,
                              lambda d: d.windows.get(slot) if slot >= 0 else None, index=k,
                              captured=True)
        record.host_metrics = self._host.metrics(k)
        return record

    def _present(self, processes: Iterable[int]) -> list[int]:
        return [g for p in processes
                for g in self._process_devices.get(self._processes[p], [])]

    def _phase(self, i: int) -> SummaryRecord:
        procs = [p for p, has in enumerate(self._has) if i < len(has) and has[i]]
        nm = self._names[int(self._i_name[i])]
        record = self._record("phase", int(self._i_start[i]), int(self._i_end[i]),
                              self._present(procs), lambda d: d.instances.get(i),
                              name=nm.name, index=int(self._i_occ[i]))
        occ = int(self._i_occ[i])
        record.host_metrics = self._host.phase_metrics(
            self._occurrences(procs, nm.name, lambda spans: [(occ, i)]))
        return record

    def _occurrences(self, procs: Iterable[int], name: str,
                     pick: Callable[[Sequence[int]], Iterable[tuple[int, int]]],
                     ) -> Iterator[tuple[tuple[str, int], int, int, int]]:
        """((host, pid), start, end, instance id) of each process's occurrences ``pick`` names
        as (occurrence, instance id), given the process's flattened occurrence spans."""
        for p in procs:
            proc = self._processes[p]
            spans = self._occ_spans.get((proc, name))
            if spans is None:
                continue
            for occ, inst in pick(spans):
                if 2 * occ + 1 < len(spans):
                    yield proc, spans[2 * occ], spans[2 * occ + 1], inst

    def _phase_total(self, nid: int) -> SummaryRecord:
        nm = self._names[nid]
        record = self._record("phase_total", nm.start, nm.end,
                              self._present(sorted(nm.processes)),
                              lambda d: _row(d.names, nid), name=nm.name, index=nm.count,
                              span=nm.span)
        ids = nm.instances.tolist()
        record.host_metrics = self._host.phase_metrics(self._occurrences(
            sorted(nm.processes), nm.name,
            lambda spans: [(k, ids[k]) for k in range(len(spans) // 2) if k < len(ids)]))
        tables = self._phase_tables.get(nm.name)
        if tables is not None:
            record.tables = tables.top(self.top)
        return record


def _row(table: np.ndarray, i: int) -> np.ndarray | None:
    """Row ``i`` of a growing table, None when the table has not reached it."""
    return table[i] if 0 <= i < len(table) else None
