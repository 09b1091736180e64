"""The model's state as a mergeable msgspec Struct: export, restore, and ``merge(a, b)``.

``EfficiencyState`` holds everything the views are built from, keyed by what things are
(device (host, id), window index, phase name and occurrence in a process), never by the order
the model met them, so states of disjoint sets of reports merge by sums, minima and maxima.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from functools import cache, reduce
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from prvstream.sinks.efficiency.host import HOST_WIDTH, restore_process
from prvstream.sinks.efficiency.parts import NOTE_NAMES, WIDTH
from prvstream.sinks.efficiency.repeats import load_nvtx
from prvstream.sinks.efficiency.tables import NAME_CAP, Tables, merge_tables
from prvstream.sinks.errors import OverlappingStates
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary.records import DEFAULT_RECENT, SummaryState
from prvstream.sinks.summary.spill import SpilledFolder

if TYPE_CHECKING:
    from prvstream.sinks.efficiency.model import EfficiencyModel

__all__ = [
    "STATE_VERSION",
    "DeviceState",
    "EfficiencyState",
    "HostState",
    "ProcessState",
    "Rows",
    "absorb",
    "decode_partial",
    "encode_partial",
    "encode_state_chunks",
    "export_state",
    "group_state",
    "merge",
    "merge_all",
    "restore",
]

log = get_logger(__name__)

#: version of ``EfficiencyState``; additive changes only (new fields with defaults)
STATE_VERSION = 1


class Rows(msgspec.Struct, array_like=True):
    """A sparse table: sorted distinct ``keys`` and one row of totals per key, flattened
    (``len(values) == len(keys) * width``)."""

    keys: list[int] = msgspec.field(default_factory=list)
    values: list[int] = msgspec.field(default_factory=list)


class DeviceState(msgspec.Struct, kw_only=True):
    """One GPU: who uses it, when its reports were captured, and its totals per view."""

    host: str
    device: int
    rank: int | None = None
    pid: int = 0
    #: host of the process whose phases its time goes to ((proc_host, pid) is that process)
    proc_host: str = ""
    #: (start, report id) of the earliest report that has it: that report names its process
    first: tuple[int, str] = (0, "")
    #: wall-clock spans of its reports, sorted
    spans: list[tuple[int, int]] = msgspec.field(default_factory=list)
    totals: list[int] = msgspec.field(default_factory=list)
    #: by window index
    windows: Rows = msgspec.field(default_factory=Rows)
    #: by phase name, then occurrence of the name in the device's process
    instances: dict[str, Rows] = msgspec.field(default_factory=dict)
    #: by phase name: totals over all its instances
    names: dict[str, list[int]] = msgspec.field(default_factory=dict)
    #: (pid, stream, first start, last start) of each report's activity on it, sorted
    #: (``repeats``: a later overlapping capture of the process does not count it again)
    streams: list[tuple[int, int, int, int]] = msgspec.field(default_factory=list)


class ProcessState(msgspec.Struct, kw_only=True):
    """A process with phases: each name's occurrences as flattened (start, end) pairs."""

    host: str
    pid: int
    phases: dict[str, list[int]] = msgspec.field(default_factory=dict)


class HostState(msgspec.Struct, kw_only=True):
    """A host process: its captured spans and its CUDA runtime and MPI time per view
    (``host.HOST_WIDTH`` columns per row)."""

    host: str
    pid: int
    rank: int | None = None
    #: spans of its reports with calls of it, and of those with MPI calls
    spans: list[tuple[int, int]] = msgspec.field(default_factory=list)
    mpi_spans: list[tuple[int, int]] = msgspec.field(default_factory=list)
    totals: list[int] = msgspec.field(default_factory=list)
    windows: Rows = msgspec.field(default_factory=Rows)
    #: by phase name, then occurrence of the name in this process
    instances: dict[str, Rows] = msgspec.field(default_factory=dict)
    #: its host threads' captured spans (tid, start, end), and their call time summed per
    #: thread, in the same rows (a state written before these existed has none)
    threads: list[tuple[int, int, int]] = msgspec.field(default_factory=list)
    thread_totals: list[int] = msgspec.field(default_factory=list)
    thread_windows: Rows = msgspec.field(default_factory=Rows)
    thread_instances: dict[str, Rows] = msgspec.field(default_factory=dict)


class EfficiencyState(msgspec.Struct, kw_only=True):
    """Everything the model's views are built from, for a set of whole reports."""

    version: int = STATE_VERSION
    job: str = ""
    window_ns: int = 10_000_000_000
    gap_threshold_ns: int = 1_000_000
    nccl_as: str = "communication"
    reports: int = 0
    #: the greatest (start, report id) included: ``last_report`` of the records
    last: tuple[int, str] | None = None
    #: earliest report start and latest report end (None before any report)
    span: tuple[int, int] | None = None
    devices: list[DeviceState] = msgspec.field(default_factory=list)
    processes: list[ProcessState] = msgspec.field(default_factory=list)
    #: top-N tables: table -> name -> [count, total ns, min ns, max ns, bytes]
    tables: dict[str, dict[str, list[int]]] = msgspec.field(default_factory=dict)
    #: the same tables per phase name (rows whose start falls in one of its occurrences)
    phase_tables: dict[str, dict[str, dict[str, list[int]]]] = msgspec.field(
        default_factory=dict)
    #: notes about the reports: note -> (reports it applies to, first few report ids)
    notes: dict[str, tuple[int, list[str]]] = msgspec.field(default_factory=dict)
    #: host processes (host metrics), by (host, pid)
    hosts: list[HostState] = msgspec.field(default_factory=list)
    #: (host, pid, first, last) NVTX range start of each report with ranges, sorted
    #: (``repeats``: a later overlapping capture of the process does not count them again)
    nvtx: list[tuple[str, int, int, int]] = msgspec.field(default_factory=list)


_ENC = msgspec.msgpack.Encoder()
#: a device's or process's table of at most this many rows is made in Python: a checkpoint
#: makes a few a device, most of one or two rows, where numpy's calls cost more than the work
_FEW_ROWS = 16


@cache
def _decoder() -> msgspec.msgpack.Decoder[EfficiencyState]:
    """Built at its first use: resolving the state's types is start-up that a conversion,
    which never reads a state, does without."""
    return msgspec.msgpack.Decoder(EfficiencyState)


def encode_partial(state: EfficiencyState) -> bytes:
    """Compact bytes (msgpack) of a state, e.g. to checkpoint it or send it to another worker."""
    return _ENC.encode(state)


def decode_partial(data: bytes) -> EfficiencyState:
    """The state ``encode_partial`` wrote."""
    return _decoder().decode(data)


def _table(keys: np.ndarray, values: np.ndarray) -> Rows:
    """Rows with nonzero values, sorted by key (duplicate keys summed)."""
    if not len(keys):
        return Rows()
    if len(keys) <= _FEW_ROWS:
        by_key: dict[int, list[int]] = {}
        for k, row in zip(keys.tolist(), values.tolist(), strict=True):
            held = by_key.get(k)
            by_key[k] = row if held is None else [a + b for a, b in zip(held, row, strict=True)]
        return _kept_rows(sorted(by_key.items()))
    uk, inv = np.unique(keys, return_inverse=True)
    summed = np.zeros((len(uk), WIDTH), np.int64)
    np.add.at(summed, inv, values)
    nz = summed.any(axis=1)
    return Rows(uk[nz].tolist(), summed[nz].ravel().tolist())


def _kept_rows(rows: Iterable[tuple[int, list[int]]]) -> Rows:
    """``Rows`` of (key, row) pairs in key order, rows of zeros left out."""
    kept = [(k, row) for k, row in rows if any(row)]
    return Rows([k for k, _ in kept], [x for _, row in kept for x in row])


def _arrays(rows: Rows) -> tuple[np.ndarray, np.ndarray]:
    return (np.asarray(rows.keys, np.int64),
            np.asarray(rows.values, np.int64).reshape(len(rows.keys), WIDTH))


def export_state(m: EfficiencyModel) -> EfficiencyState:
    """The model's state (between reports), in canonical form."""
    return EfficiencyState(**_scalars(m), devices=list(_device_states(m)),
                           processes=list(_process_states(m)),
                           tables=m._tables.export(), phase_tables=_phase_tables(m),
                           notes=dict(sorted(m._notes.items())),
                           hosts=list(_host_states(m)),
                           nvtx=_nvtx_state(m))


def _nvtx_state(m: EfficiencyModel) -> list[tuple[str, int, int, int]]:
    return list(_nvtx_rows(m))


def _nvtx_rows(m: EfficiencyModel) -> Iterator[tuple[str, int, int, int]]:
    """Each process's NVTX spans as (host, pid, start, end), sorted, one at a time: the
    processes in (host, pid) order, each one's pairs sorted (a checkpoint never holds a tuple
    a span of the whole job)."""
    for (h, p), sp in m._nvtx.in_key_order():
        for s, e in sorted(zip(sp[0::2], sp[1::2], strict=True)):
            yield h, p, s, e


def encode_state_chunks(m: EfficiencyModel) -> Iterator[bytes]:
    """``encode_partial(export_state(m))`` in pieces: one device, process or host process
    built and encoded at a time, so a checkpoint of a job of many devices never holds the
    whole state as objects (their concatenation is those bytes exactly)."""
    fields = EfficiencyState.__struct_fields__
    scalars = _scalars(m)
    lists: dict[str, tuple[int, Iterator[Any]]] = {
        "devices": (len(m._devices), _device_states(m)),
        "processes": (m._phase_procs, _process_states(m)),
        "hosts": (m._host.count, _host_states(m)),
        "nvtx": (m._nvtx.pair_count(), _nvtx_rows(m))}
    rest: dict[str, Any] = {"tables": m._tables.export(), "phase_tables": _phase_tables(m),
                            "notes": dict(sorted(m._notes.items()))}
    yield _header(0x80, 0xDE, len(fields))
    for name in fields:
        yield _ENC.encode(name)
        if name in lists:
            count, items = lists[name]
            yield _header(0x90, 0xDC, count)
            for item in items:
                yield _ENC.encode(item)
        else:
            yield _ENC.encode(scalars[name] if name in scalars else rest[name])


def _header(fix: int, wide: int, n: int) -> bytes:
    """A msgpack map (``fix`` 0x80, ``wide`` 0xde) or array (0x90, 0xdc) header of ``n``."""
    if n < 16:
        return bytes([fix | n])
    if n < 1 << 16:
        return bytes([wide]) + n.to_bytes(2, "big")
    return bytes([wide + 1]) + n.to_bytes(4, "big")


def _scalars(m: EfficiencyModel) -> dict[str, Any]:
    if m._report is not None:
        raise RuntimeError("export the state between reports, not inside one")
    return {"version": STATE_VERSION, "job": m.job, "window_ns": m.window_ns,
            "gap_threshold_ns": m.gap_threshold_ns, "nccl_as": m.nccl_as,
            "reports": m._reports, "last": m._last_key, "span": m._span}


def _phase_tables(m: EfficiencyModel) -> dict[str, dict[str, dict[str, list[int]]]]:
    return {n: t for n, t in ((n, v.export()) for n, v in sorted(m._phase_tables.items()))
            if t}


def _process_states(m: EfficiencyModel) -> Iterator[ProcessState]:
    for p in m._phase_processes():
        yield ProcessState(host=m._procs.host(p), pid=m._procs.pid(p),
                           phases={n: s.tolist() for n, s in m._named_spans(p)})


def _device_states(m: EfficiencyModel) -> Iterator[DeviceState]:
    """Each device's state, in (host, device) order, built one at a time."""
    k_of_slot = np.zeros(len(m._window_slots), np.int64)
    for k, slot in m._window_slots.items():
        k_of_slot[slot] = k
    for gid in m._device_order:  # every device, kept in (host, device) order as added
        d = m._devices[gid]
        held, rows = m._dev_windows.rows(gid)
        windows = _table(k_of_slot[held], rows)
        instances: dict[str, Rows] = {}
        ids, tab = m._dev_instances.rows(gid)
        if len(ids):
            nids = m._i_name[ids]
            for nid in sorted(set(nids.tolist())):
                sel = ids[nids == nid]
                instances[m._names[nid].name] = _table(m._i_occ[sel], tab[nids == nid])
        nids, named = m._dev_names.rows(gid)
        names = {m._names[nid].name: row for nid, row in zip(nids.tolist(), named.tolist(),
                                                              strict=True)}
        yield DeviceState(
            host=d.host, device=d.device, rank=d.rank, pid=d.pid, proc_host=d.process[0],
            first=d.first, spans=sorted(d.spans), totals=m._dev_totals[gid].tolist(),
            windows=windows,
            instances=instances, names=names,
            streams=sorted(tuple(d.streams[j:j + 4])  # type: ignore[misc]
                           for j in range(0, len(d.streams), 4)))


def _rows(table: dict[int, list[int]]) -> Rows:
    keys = sorted(k for k, v in table.items() if any(v))
    return Rows(keys, [x for k in keys for x in table[k]])


def _host_states(m: EfficiencyModel) -> Iterator[HostState]:
    """Each host process's state, in (host, pid) order, built one at a time."""
    procs, windows, rows = m._host.windows.by_process()
    for i in m._host.in_key_order():
        a, b = np.searchsorted(procs, [i, i + 1]).tolist()
        yield _host_state(m, i, windows[a:b], rows[a:b])


def _halves(keys: np.ndarray, rows: np.ndarray) -> tuple[Rows, Rows]:
    """A process's rows and its threads' (``HOST_WIDTH`` columns each), rows of zeros left
    out."""
    if len(keys) <= _FEW_ROWS:
        ks, rs = keys.tolist(), rows.tolist()
        return (_kept_rows((k, r[:HOST_WIDTH]) for k, r in zip(ks, rs, strict=True)),
                _kept_rows((k, r[HOST_WIDTH:]) for k, r in zip(ks, rs, strict=True)))
    out = []
    for half in (rows[:, :HOST_WIDTH], rows[:, HOST_WIDTH:]):
        nz = half.any(axis=1)
        out.append(Rows(keys[nz].tolist(), half[nz].ravel().tolist()))
    return out[0], out[1]


def _host_state(m: EfficiencyModel, i: int, windows: np.ndarray,
                rows: np.ndarray) -> HostState:
    instances: dict[str, Rows] = {}
    thread_instances: dict[str, Rows] = {}
    ids, vals = m._host.instances.rows(i)
    if len(ids):
        nids = m._i_name[ids]
        for nid in sorted(set(nids.tolist()), key=lambda n: m._names[n].name):
            sel = nids == nid
            occ = m._i_occ[ids[sel]]
            order = np.argsort(occ, kind="stable")
            own, theirs = _halves(occ[order], vals[sel][order])
            name = m._names[nid].name
            if own.keys:
                instances[name] = own
            if theirs.keys:
                thread_instances[name] = theirs
    own_w, theirs_w = _halves(windows, rows)
    h = m._host
    return HostState(host=m._procs.host(i), pid=m._procs.pid(i), rank=h.rank(i),
                     spans=sorted(h.spans(i)), mpi_spans=sorted(h.mpi_spans(i)),
                     totals=h.totals(i), windows=own_w, instances=instances,
                     threads=sorted(h.threads(i)), thread_totals=h.thread_totals(i),
                     thread_windows=theirs_w,
                     thread_instances=thread_instances)


def restore(state: EfficiencyState, *, flush_rows: int = 65536, recent: int = DEFAULT_RECENT,
            published: SummaryState | None = None) -> EfficiencyModel:
    """A model that continues from ``state``. ``published``: the last ``summary.json`` (the
    bounded state keeps records as they were published); without it the bounded state is
    rebuilt from ``state`` (every record built now)."""
    from prvstream.sinks.efficiency.model import EfficiencyModel

    m = EfficiencyModel(state.job, window_ns=state.window_ns,
                        gap_threshold_ns=state.gap_threshold_ns, flush_rows=flush_rows,
                        nccl_as=state.nccl_as,
                        recent=recent)
    _load(m, state)
    m._reports = state.reports
    m._tables = Tables(state.tables)
    m._phase_tables = {n: Tables(t) for n, t in state.phase_tables.items()}
    load_nvtx(m._nvtx, state.nvtx)
    m._notes = {k: (v[0], list(v[1])) for k, v in state.notes.items()}
    m._last_key = None if state.last is None else (state.last[0], state.last[1])
    m._last_report = state.last[1] if state.last is not None else ""
    m._span = None if state.span is None else (state.span[0], state.span[1])
    if published is not None:
        m._folder = SpilledFolder(published, recent)
    else:
        m._rebuild_state()
    return m


def _load(m: EfficiencyModel, state: EfficiencyState) -> array[int]:
    """Load the processes' phase occurrences, the devices and the host processes of
    ``state`` into ``m``, none of which ``m`` holds yet; return the instance id of every
    occurrence loaded."""
    touched = array("q")
    for p in state.processes:
        proc = (p.host, p.pid)
        for name, flat in p.phases.items():
            for j in range(0, len(flat), 2):
                touched.append(m._occurrence(proc, name, flat[j], flat[j + 1]))
    for ds in state.devices:
        proc = (ds.proc_host, ds.pid)
        gid = m._add_device(ds.host, ds.device, ds.rank, proc, (ds.first[0], ds.first[1]))
        dev = m._devices[gid]
        for sp in ds.spans:
            dev.add_span(sp[0], sp[1])
        for rec in ds.streams:
            dev.add_streams(rec)
        m._add_totals(gid, slice(0, WIDTH), np.asarray(ds.totals or [0] * WIDTH, np.int64))
        keys, values = _arrays(ds.windows)
        if len(keys):
            m._dev_windows.load(gid, np.array(m._window_rows(dev, keys.tolist()), np.int64),
                                values)
        for name, rows in ds.instances.items():
            keys, values = _arrays(rows)
            m._dev_instances.load(gid, m._names[m._name_ids[name]].instances[keys], values)
        if ds.names:
            m._dev_names.load(gid, np.array([m._name_ids[n] for n in ds.names], np.int64),
                              np.array(list(ds.names.values()), np.int64))
    for h in state.hosts:
        hp = restore_process(m._host, h.host, h.pid, h.rank, h.spans, h.mpi_spans, h.threads,
                             h.totals, h.thread_totals)
        for col, rows in ((0, h.windows), (HOST_WIDTH, h.thread_windows)):
            m._host.windows.load(hp, col, rows.keys, rows.values)
        at: list[np.ndarray] = []  # both halves at once: a process's rows are loaded once
        halves: list[np.ndarray] = []
        for col, named in ((0, h.instances), (HOST_WIDTH, h.thread_instances)):
            for name, rows in named.items():
                ids = m._names[m._name_ids[name]].instances
                half = np.zeros((len(rows.keys), 2 * HOST_WIDTH), np.int64)
                half[:, col:col + HOST_WIDTH] = np.asarray(rows.values, np.int64).reshape(
                    -1, HOST_WIDTH)
                at.append(ids[np.asarray(rows.keys, np.int64)])
                halves.append(half)
        if at:
            m._host.instances.load(hp, np.concatenate(at), np.concatenate(halves))
    return touched


def group_state(m: EfficiencyModel) -> tuple[EfficiencyState, list[int]]:
    """The state of a model whose updates are held (``hold_updates``) and the windows its
    reports touched: what ``absorb`` takes into another model."""
    if m._held is None:
        raise RuntimeError("group_state of a model whose updates are not held")
    return export_state(m), sorted(m._held[0])


def absorb(m: EfficiencyModel, state: EfficiencyState, windows: Iterable[int],
           last_report: str) -> None:
    """Take the reports of ``state`` (``group_state`` of another model, with the ``windows``
    they touched) into ``m``, whose updates are held, as if ``m`` had been fed them: the
    records of its update are then those of one model fed every report in order, the last
    of which is ``last_report``.

    Exact only where the two sets of reports share no process and no device (nothing of one
    report then depends on a report of the other set but through sums, extremes and the
    phase instances, which widen alike in any order) and no table is near its name cap
    (``tables.NAME_CAP``, where a single pass would fold names by the order it met them):
    anything else raises ``ValueError`` before ``m`` is changed.
    """
    if m._held is None or m._report is not None:
        raise RuntimeError("absorb into a model between reports, its updates held")
    if (m.window_ns, m.gap_threshold_ns, m.nccl_as) != (state.window_ns,
                                                         state.gap_threshold_ns, state.nccl_as):
        raise ValueError("cannot absorb an efficiency state of other settings")
    procs = {(p.host, p.pid) for p in state.processes} | {(h.host, h.pid) for h in state.hosts}
    shared = next((f"{h}:{p}" for h, p in procs
                   if m._has_phases((h, p)) or m._host.has(h, p) or (h, p) in m._nvtx), None)
    shared = shared or next((f"{d.host} GPU {d.device}" for d in state.devices
                             if m._devices.find(d.host, d.device) is not None), None)
    shared = shared or next((f"{h}:{p} NVTX ranges" for h, p, _, _ in state.nvtx
                             if (h, p) in m._nvtx or m._has_phases((h, p))), None)
    if shared is not None:
        raise ValueError(f"cannot absorb a state sharing {shared} with the model")
    tables = merge_tables(m._tables.export(), state.tables)
    phase_tables = {n: merge_tables(m._phase_tables[n].export() if n in m._phase_tables
                                    else {}, state.phase_tables.get(n, {}))
                    for n in sorted(m._phase_tables.keys() | state.phase_tables.keys())}
    every = [*m._tables.data.values(), *state.tables.values(), *tables.values(),
             *(t for p in m._phase_tables.values() for t in p.data.values()),
             *(t for p in state.phase_tables.values() for t in p.values()),
             *(t for p in phase_tables.values() for t in p.values())]
    if any(len(t) > NAME_CAP // 2 for t in every):
        raise ValueError("cannot absorb tables near their name cap (the names a single pass "
                         "folds depend on the order it met them)")
    touched = _load(m, state)
    m._reports += state.reports
    m._tables = Tables(tables)
    m._phase_tables = {n: Tables(t) for n, t in phase_tables.items()}
    load_nvtx(m._nvtx, state.nvtx)
    m._notes = _merge_notes(m._notes, state.notes)
    lasts = [x for x in (m._last_key, state.last) if x is not None]
    m._last_key = max((x[0], x[1]) for x in lasts) if lasts else None
    m._last_report = last_report
    spans = [s for s in (m._span, state.span) if s is not None]
    m._span = (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None
    m._held[0].update(windows)
    m._held[1].extend(touched)


def _order(a: list[int], b: list[int]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Merge two start-ordered occurrence lists (flattened pairs): the new position of each of
    ``a``'s and ``b``'s occurrences, and the merged list."""
    pa = np.asarray(a, np.int64).reshape(-1, 2)
    pb = np.asarray(b, np.int64).reshape(-1, 2)
    both = np.concatenate((pa, pb))
    order = np.lexsort((both[:, 1], both[:, 0]))
    pos = np.empty(len(both), np.int64)
    pos[order] = np.arange(len(both))
    return pos[:len(pa)], pos[len(pa):], both[order].ravel().tolist()


def _sum(a: list[int], b: list[int]) -> list[int]:
    if not a:
        return list(b)
    if not b:
        return list(a)
    return [x + y for x, y in zip(a, b, strict=True)]


def merge(a: EfficiencyState, b: EfficiencyState) -> EfficiencyState:
    """The state of the reports of ``a`` and of ``b`` (disjoint sets of whole reports).

    Associative and commutative: any grouping and order of merges gives the state one model
    reaches by taking every report in start order. Phase occurrences of a process are
    renumbered in start order; a device's process is the one of its earliest report.
    """
    if (a.window_ns, a.gap_threshold_ns, a.nccl_as) != (b.window_ns, b.gap_threshold_ns,
                                                         b.nccl_as):
        raise ValueError("cannot merge efficiency states with different window_ns, "
                         "gap_threshold_ns or nccl_as; convert every part with the same "
                         "settings")
    _refuse_overlaps(a, b)
    maps: tuple[dict[tuple[str, int, str], np.ndarray], ...] = ({}, {})
    pa = {(p.host, p.pid): p for p in a.processes}
    pb = {(p.host, p.pid): p for p in b.processes}
    processes: list[ProcessState] = []
    for key in sorted(pa.keys() | pb.keys()):
        x = pa[key].phases if key in pa else {}
        y = pb[key].phases if key in pb else {}
        phases: dict[str, list[int]] = {}
        for name in sorted(x.keys() | y.keys()):
            ma, mb, phases[name] = _order(x.get(name, []), y.get(name, []))
            maps[0][(*key, name)], maps[1][(*key, name)] = ma, mb
        processes.append(ProcessState(host=key[0], pid=key[1], phases=phases))
    da = {(d.host, d.device): d for d in a.devices}
    db = {(d.host, d.device): d for d in b.devices}
    devices = []
    for key in sorted(da.keys() | db.keys()):
        parts = [(side, d) for side, d in ((0, da.get(key)), (1, db.get(key))) if d is not None]
        head = min((d for _, d in parts), key=lambda d: tuple(d.first))
        totals: list[int] = []
        wk: list[np.ndarray] = []
        wv: list[np.ndarray] = []
        names_sum: dict[str, list[int]] = {}
        inst: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        for side, d in parts:
            totals = _sum(totals, d.totals)
            k, v = _arrays(d.windows)
            wk.append(k)
            wv.append(v)
            for name, row in d.names.items():
                names_sum[name] = _sum(names_sum.get(name, []), row)
            for name, rows in d.instances.items():
                k, v = _arrays(rows)
                remap = maps[side].get((d.proc_host, d.pid, name))
                if remap is not None:
                    k = remap[k]
                lst = inst.setdefault(name, ([], []))
                lst[0].append(k)
                lst[1].append(v)
        devices.append(DeviceState(
            host=head.host, device=head.device, rank=head.rank, pid=head.pid,
            proc_host=head.proc_host, first=head.first,
            spans=sorted([*(da[key].spans if key in da else []),
                          *(db[key].spans if key in db else [])]),
            totals=totals, windows=_table(np.concatenate(wk), np.concatenate(wv)),
            instances={n: _table(np.concatenate(k), np.concatenate(v))
                       for n, (k, v) in sorted(inst.items())},
            names=dict(sorted(names_sum.items())),
            streams=sorted(t for _, d in parts for t in d.streams)))
    spans = [s for s in (a.span, b.span) if s is not None]
    lasts = [x for x in (a.last, b.last) if x is not None]
    return EfficiencyState(
        job=a.job or b.job, window_ns=a.window_ns, gap_threshold_ns=a.gap_threshold_ns,
        nccl_as=a.nccl_as,
        reports=a.reports + b.reports, last=max(lasts) if lasts else None,
        span=(min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None,
        devices=devices, processes=processes, notes=_merge_notes(a.notes, b.notes),
        tables=merge_tables(a.tables, b.tables),
        phase_tables={n: merge_tables(a.phase_tables.get(n, {}), b.phase_tables.get(n, {}))
                      for n in sorted(a.phase_tables.keys() | b.phase_tables.keys())},
        hosts=_merge_hosts([(0, h) for h in a.hosts] + [(1, h) for h in b.hosts], maps),
        nvtx=sorted([*a.nvtx, *b.nvtx]))


def _refuse_overlaps(a: EfficiencyState, b: EfficiencyState) -> None:
    """Overlapping capture ranges of one process on both sides cannot merge exactly: the
    single pass yields the later report's host time and repeated GPU activity to the earlier
    one (``host``, ``repeats``), and a state keeps totals, not the calls and rows needed to
    find what the two sides hold twice. Refused (in every grouping alike) instead of
    counting that time twice."""
    threads: dict[tuple[str, int, int], list[tuple[int, int]]] = {}
    for h in a.hosts:
        for t, s, e in h.threads:
            threads.setdefault((h.host, h.pid, t), []).append((s, e))
    clash = next((f"{h.host}:{h.pid} thread {t}" for h in b.hosts for t, s, e in h.threads
                  if any(s < e2 and s2 < e for s2, e2 in threads.get((h.host, h.pid, t), []))),
                 None)
    if clash is None:
        runs: dict[tuple[str, int, int, int], list[tuple[int, int]]] = {}
        for d in a.devices:
            for pid, st, s, e in d.streams:
                runs.setdefault((d.host, d.device, pid, st), []).append((s, e))
        clash = next((f"{d.host}:{pid} GPU {d.device} stream {st}" for d in b.devices
                      for pid, st, s, e in d.streams
                      if any(s <= e2 and s2 <= e
                             for s2, e2 in runs.get((d.host, d.device, pid, st), []))), None)
    if clash is None:
        nvtx: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for host, pid, s, e in a.nvtx:
            nvtx.setdefault((host, pid), []).append((s, e))
        clash = next((f"{host}:{pid} NVTX ranges" for host, pid, s, e in b.nvtx
                      if any(s <= e2 and s2 <= e for s2, e2 in nvtx.get((host, pid), []))),
                     None)
    if clash is not None:
        raise OverlappingStates(
            f"cannot merge efficiency states whose reports overlap in time on {clash} "
            "(overlapping capture ranges of one process): feed those reports to one model "
            "(convert them together); its state then merges with any other")


def _add_rows(into: dict[int, list[int]], rows: Rows, remap: np.ndarray | None = None) -> None:
    for i, k in enumerate(rows.keys):
        key = int(remap[k]) if remap is not None else k
        into[key] = _sum(into.get(key, []), rows.values[i * HOST_WIDTH:(i + 1) * HOST_WIDTH])


def _merge_hosts(sides: list[tuple[int, HostState]],
                 maps: tuple[dict[tuple[str, int, str], np.ndarray], ...]) -> list[HostState]:
    """Host processes of disjoint sets of reports: spans join, times add, phase occurrences
    renumbered as the processes' phases are (``maps``)."""
    by: dict[tuple[str, int], list[tuple[int, HostState]]] = {}
    for side, h in sides:
        by.setdefault((h.host, h.pid), []).append((side, h))
    out = []
    for (host, pid), parts in sorted(by.items()):
        ranks = [h.rank for _, h in parts if h.rank is not None]
        windows: dict[int, list[int]] = {}
        t_windows: dict[int, list[int]] = {}
        instances: dict[str, dict[int, list[int]]] = {}
        t_instances: dict[str, dict[int, list[int]]] = {}
        totals: list[int] = []
        t_totals: list[int] = []
        for side, h in parts:
            totals = _sum(totals, h.totals)
            t_totals = _sum(t_totals, h.thread_totals)
            _add_rows(windows, h.windows)
            _add_rows(t_windows, h.thread_windows)
            for into, named in ((instances, h.instances), (t_instances, h.thread_instances)):
                for name, rows in named.items():
                    _add_rows(into.setdefault(name, {}), rows,
                              maps[side].get((host, pid, name)))
        out.append(HostState(host=host, pid=pid, rank=min(ranks) if ranks else None,
                             spans=sorted(s for _, h in parts for s in h.spans),
                             mpi_spans=sorted(s for _, h in parts for s in h.mpi_spans),
                             totals=totals, windows=_rows(windows),
                             instances={n: _rows(t) for n, t in sorted(instances.items())},
                             threads=sorted(t for _, h in parts for t in h.threads),
                             thread_totals=t_totals, thread_windows=_rows(t_windows),
                             thread_instances={n: _rows(t)
                                               for n, t in sorted(t_instances.items())}))
    return out


def _merge_notes(a: dict[str, tuple[int, list[str]]],
                 b: dict[str, tuple[int, list[str]]]) -> dict[str, tuple[int, list[str]]]:
    """Notes of disjoint sets of reports: counts add, the first report ids of both."""
    out: dict[str, tuple[int, list[str]]] = {}
    for note in sorted(a.keys() | b.keys()):
        ca, na = a.get(note, (0, []))
        cb, nb = b.get(note, (0, []))
        out[note] = (ca + cb, sorted({*na, *nb})[:NOTE_NAMES])
    return out


def merge_all(states: Iterable[EfficiencyState]) -> EfficiencyState:
    """``merge`` over any number of states (at least one)."""
    return reduce(merge, states)
