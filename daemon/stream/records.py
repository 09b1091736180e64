"""Turn one chunk of an export table into Paraver records (sort keys + text lines).

One converter per data kind; each formats whole chunks at once (a format string applied over
column lists, no per-record objects beyond the line itself) and returns GPU activity intervals
and NVTX phases for the efficiency sink alongside. Interval data give a begin record at start
and an end record at end; kernels, memory operations and NCCL kernels also give a state record
on their stream thread. Nested NVTX push/pop: an inner range's end restores the value of the
innermost enclosing range still open.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from prvstream.daemon.nsys.export import NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END, Export
from prvstream.daemon.stream.merge import (
    PRIO_BEGIN,
    PRIO_END,
    PRIO_END_AFTER_BEGIN,
    RecordBatch,
    make_keys,
)
from prvstream.daemon.stream.numbering import Numbering, cpu_key, gpu_key
from prvstream.sinks.base import ACTIVITY_DTYPE, PHASE_DTYPE, ActivityKind
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.fastfmt import WIDTH, template

__all__ = ["CONVERTERS", "ChunkResult", "ReportContext", "memop_labels", "mpi_type"]

log = get_logger(__name__)

# record ranks: kind * 4 + line type, so that at one instant on one object the order is fixed
_LINE_STATE, _LINE_EVENT, _LINE_COMM = 0, 1, 2
_KIND_RANK = {
    "kernel": 1, "memcpy": 2, "memset": 3, "sync": 4, "runtime": 5, "nvtx": 6, "osrt": 7,
    "mpi": 8, "graph": 9, "openacc": 10, "comm": 11, "gpu_metrics": 12,
}

#: memcpy values are the CUPTI copy kind (1..13); unknown copies and memsets get their own
MEMCPY_UNKNOWN_VALUE = 20
MEMSET_VALUE = 21

_MPI_P2P = re.compile(r"(?i)send|recv|probe|wait|test|sendrecv")
_MPI_COLL = re.compile(r"(?i)reduce|bcast|barrier|gather|scatter|alltoall|scan|allgather")


def memop_labels(copy_kinds: dict[int, str]) -> dict[int, str]:
    """Labels of the memcpy/memset event values."""
    labels = {k: f"memcpy {v}" for k, v in copy_kinds.items() if k > 0}
    labels[MEMCPY_UNKNOWN_VALUE] = "memcpy (unknown direction)"
    labels[MEMSET_VALUE] = "memset"
    return labels


def mpi_type(label: str) -> int:
    """MPI event type by call name: 50000001 point-to-point, ...02 collective, ...03 other."""
    if _MPI_COLL.search(label):
        return pv.EV_MPI_BASE + 2
    if _MPI_P2P.search(label):
        return pv.EV_MPI_BASE + 1
    return pv.EV_MPI_BASE + 3


@dataclass(slots=True)
class ChunkResult:
    """What one chunk became."""

    records: RecordBatch
    activity: np.ndarray | None = None
    phases: np.ndarray | None = None
    #: rows of the chunk that produced records (records in = records out checks)
    rows: int = 0


@dataclass
class ReportContext:
    """Everything the converters need about one report and the trace it goes into."""

    export: Export
    numbering: Numbering
    host: str
    #: add to a session-clock timestamp to get trace-relative ns
    offset: int
    #: canonical index of the report in the trace (sort tie-breaker)
    report_index: int
    #: trace-relative end of the report (unterminated NVTX ranges end here)
    end_rel: int
    #: globalPid -> index into ReportInfo.processes
    process_index: dict[int, int]
    #: (globalPid, device) -> index into ReportInfo.devices
    device_index: dict[tuple[int, int], int]
    phase_pattern: re.Pattern[str]
    phase_names: list[str] = field(default_factory=list)
    thread_names: dict[int, str] = field(default_factory=dict)
    nvtx_domain_names: dict[int, str] = field(default_factory=dict)
    #: GPU -> globalPid of the process whose thread carries that GPU's metrics
    metric_owner: dict[int, int] = field(default_factory=dict)
    #: (globalPid, stream, device as written) -> the device synchronization rows belong to
    sync_devices: dict[tuple[int, ...], int] = field(default_factory=dict)
    #: (kind, task, thread) -> end of the last state written there (states never overlap)
    _state_end: dict[tuple[str, int, int], int] = field(default_factory=dict)
    _cpu: dict[int, tuple[int, int]] = field(default_factory=dict)
    _gpu: dict[tuple[int, int, int], tuple[int, int]] = field(default_factory=dict)
    _task: dict[int, int] = field(default_factory=dict)
    _labels: dict[tuple[str, int], str] = field(default_factory=dict)
    _nvtx_stack: dict[tuple[int, int], list[tuple[int, int]]] = field(default_factory=dict)
    _phase_index: dict[str, int] = field(default_factory=dict)
    _seq: dict[str, int] = field(default_factory=dict)

    # -- objects ---------------------------------------------------------------------------
    def task_of(self, gpid: int) -> int:
        task = self._task.get(gpid)
        if task is None:
            pid = (gpid >> 24) & 0xFFFFFF
            task = self.numbering.task(self.host, pid)
            self._task[gpid] = task
        return task

    def bind_task(self, gpid: int, task: int) -> None:
        self._task[gpid] = task

    def cpu_objects(self, gtids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(task, thread) arrays for globalTids, registering unseen threads."""
        uniq, inverse = np.unique(gtids, return_inverse=True)
        tasks = np.empty(len(uniq), dtype=np.int64)
        threads = np.empty(len(uniq), dtype=np.int64)
        for i, g in enumerate(uniq.tolist()):
            found = self._cpu.get(g)
            if found is None:
                task = self.task_of(g & ~0xFFFFFF)
                tid = g & 0xFFFFFF
                name = self.thread_names.get(g, "thread")
                found = (task, self.numbering.thread(task, cpu_key(tid), f"{name} {tid}"))
                self._cpu[g] = found
            tasks[i], threads[i] = found
        return tasks[inverse], threads[inverse]

    def gpu_objects(self, chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(task, thread) arrays for (globalPid, device, stream) columns."""
        uniq, inverse = factorize(chunk, ("gpid", "device", "stream"))
        tasks = np.empty(len(uniq), dtype=np.int64)
        threads = np.empty(len(uniq), dtype=np.int64)
        for i, (g, d, s) in enumerate(uniq):
            found = self._gpu.get((g, d, s))
            if found is None:
                task = self.task_of(g)
                found = (task, self.numbering.thread(task, gpu_key(d, s), stream_name(d, s)))
                self._gpu[(g, d, s)] = found
            tasks[i], threads[i] = found
        return tasks[inverse], threads[inverse]

    # -- values ----------------------------------------------------------------------------
    def label(self, group: str, sid: int) -> str:
        key = (group, sid)
        found = self._labels.get(key)
        if found is None:
            found = value_label(self.export, group, sid)
            self._labels[key] = found
        return found

    def values(self, group: str, ids: np.ndarray) -> tuple[np.ndarray, list[str], np.ndarray]:
        """(value ids per row, labels of the unique ids, inverse index) for string ids."""
        uniq, inverse = np.unique(ids, return_inverse=True)
        self.export.strings(u for u in uniq.tolist() if u >= 0)
        labels = [self.label(group, u) for u in uniq.tolist()]
        mapped = np.array([self.numbering.value(group, lab) for lab in labels], dtype=np.int64)
        return mapped[inverse], labels, inverse

    def next_seq(self, kind: str, n: int) -> np.ndarray:
        start = self._seq.get(kind, 0)
        self._seq[kind] = start + n
        return np.arange(start, start + n, dtype=np.int64)

    def phase_id(self, name: str) -> int:
        found = self._phase_index.get(name)
        if found is None:
            found = len(self.phase_names)
            self.phase_names.append(name)
            self._phase_index[name] = found
        return found


def factorize(chunk: np.ndarray, columns: tuple[str, ...]
              ) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """Distinct combinations of integer columns and each row's index into them.

    Much faster than ``np.unique`` on a structured view: each column is factorized on its own
    and the small codes are combined into one integer.
    """
    code = np.zeros(len(chunk), dtype=np.int64)
    uniques = []
    for name in columns:
        values, inverse = np.unique(chunk[name], return_inverse=True)
        uniques.append(values.tolist())
        code = code * len(values) + inverse
    distinct, inverse = np.unique(code, return_inverse=True)
    combos: list[tuple[int, ...]] = []
    for c in distinct.tolist():
        parts = []
        for values in reversed(uniques):
            c, r = divmod(c, len(values))
            parts.append(values[r])
        combos.append(tuple(reversed(parts)))
    return combos, inverse


def stream_name(device: int, stream: int) -> str:
    return f"CUDA-D{device}.S{stream}" if stream >= 0 else f"CUDA-D{device}.sync"


def value_label(export: Export, group: str, sid: int) -> str:
    """The label of a value: a string id, or an enum/number for graph and OpenACC kinds."""
    if group in ("graph", "openacc"):
        return f"{group} {sid}"
    if group == "nvtx_domain":
        return export.nvtx_domains().get(sid, f"domain {sid}")
    if group == "gpu_metric":
        return gpu_metric_label(sid, export.gpu_metric_names().get(sid, f"metric {sid}"))
    if sid < 0 and group != "nvtx":
        return "(unknown)"
    return pv.sanitize_label(export.string(sid))


def gpu_metric_label(metric: int, name: str) -> str:
    """The label a GPU metric is published under: ``<metricId>:<name>`` (see ``event_types``)."""
    return f"{metric}:{pv.sanitize_label(name)}"


def metrics_key(gpu: int) -> tuple[int, int, int]:
    """Thread key of a GPU's metrics thread (after the CPU threads and the streams)."""
    return (2, gpu, 0)


def metrics_name(gpu: int) -> str:
    return f"GPU{gpu} metrics"


def _keys(time: np.ndarray, prio: np.ndarray | int, task: np.ndarray, thread: np.ndarray,
          rank: int, report: int, seq: np.ndarray) -> np.ndarray:
    return make_keys(time, prio, task, thread, rank, report, seq)


@dataclass(slots=True)
class Lines:
    """Records of one template: their integer fields (n, fields) and template ids."""

    fields: np.ndarray
    tmpl: np.ndarray

    def batch(self, keys: np.ndarray) -> RecordBatch:
        return RecordBatch(keys, self.fields, self.tmpl)

    def take(self, index: np.ndarray) -> Lines:
        return Lines(self.fields[index], self.tmpl[index])


def _lines(fmt: str, *columns: np.ndarray) -> Lines:
    """Records of line format ``fmt`` (``%d`` fields) filled from integer columns."""
    n = len(columns[0])
    if len(columns) > WIDTH:
        raise ValueError(f"a record holds at most {WIDTH} fields")
    fields = np.empty((n, len(columns)), dtype=np.int64)
    for i, column in enumerate(columns):
        fields[:, i] = column
    return Lines(fields, np.full(n, template(fmt), dtype=np.int16))


def _end_prio(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    return np.where(end > start, PRIO_END, PRIO_END_AFTER_BEGIN).astype(np.uint8)


def state_starts(ctx: ReportContext, kind: str, task: np.ndarray, thread: np.ndarray,
                 start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Begin times that never overlap on one thread, for states and begin events.

    Operations on one stream can overlap slightly (programmatic dependent launch); Paraver
    drops a state that begins before the previous one ends, and an end event would clear the
    next operation's value, so each operation shows from the latest end seen on its thread (a
    fully covered one gets zero length). The efficiency model keeps the true intervals.
    """
    out = start.copy()
    code = (task.astype(np.int64) << 32) | thread.astype(np.int64)
    order = np.argsort(code, kind="stable")
    sorted_code = code[order]
    cuts = np.flatnonzero(np.diff(sorted_code)) + 1
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(order)], strict=True):
        if hi <= lo:
            continue
        idx = order[lo:hi]
        c = int(sorted_code[lo])
        key = (kind, c >> 32, c & 0xFFFFFFFF)
        carry = ctx._state_end.get(key, np.iinfo(np.int64).min)
        e = end[idx]
        prev = np.maximum.accumulate(np.concatenate(([carry], e)))[:-1]
        out[idx] = np.minimum(np.maximum(start[idx], prev), e)
        ctx._state_end[key] = max(carry, int(e.max()))
    return out


def _interval_batch(ctx: ReportContext, kind: str, start: np.ndarray, end: np.ndarray,
                    task: np.ndarray, thread: np.ndarray, begin_lines: Lines,
                    end_lines: Lines, state_lines: Lines | None = None,
                    end_prio: np.ndarray | None = None) -> RecordBatch:
    seq = ctx.next_seq(kind, len(start))
    rank = _KIND_RANK[kind] * 4
    prio = _end_prio(start, end) if end_prio is None else end_prio
    parts = [
        begin_lines.batch(_keys(start, PRIO_BEGIN, task, thread, rank + _LINE_EVENT,
                                ctx.report_index, seq)),
        end_lines.batch(_keys(end, prio, task, thread, rank + _LINE_EVENT,
                              ctx.report_index, seq)),
    ]
    if state_lines is not None:
        parts.append(state_lines.batch(_keys(start, PRIO_BEGIN, task, thread,
                                             rank + _LINE_STATE, ctx.report_index, seq)))
    return RecordBatch.concat(parts)


def _activity(ctx: ReportContext, chunk: np.ndarray, start: np.ndarray, end: np.ndarray,
              kind: np.ndarray | int) -> np.ndarray:
    act = np.empty(len(chunk), dtype=ACTIVITY_DTYPE)
    act["start"] = start
    act["end"] = end
    act["stream"] = chunk["stream"]
    act["kind"] = kind
    pairs, inverse = factorize(chunk, ("gpid", "device"))
    dev = np.array([ctx.device_index.get((g, d), 0) for g, d in pairs], dtype=np.int32)
    act["device"] = dev[inverse]
    return act


_ATTR_FMT = "".join(f":{t}:%d" for t, _, _ in pv.EV_KERNEL_ATTRS)


def convert_kernel(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    start = chunk["start"] + ctx.offset
    end = chunk["end"] + ctx.offset
    task, thread = ctx.gpu_objects(chunk)
    value, labels, inverse = ctx.values("kernel", chunk["name"])
    nccl_u = np.array([lab.lower().startswith("nccl") for lab in labels], dtype=bool)
    nccl = nccl_u[inverse]
    etype = np.where(nccl, pv.EV_NCCL, pv.EV_KERNEL)
    state = np.where(nccl, pv.STATE_COMM, pv.STATE_RUNNING)
    attrs = [np.maximum(chunk[col], 0) for _, _, col in pv.EV_KERNEL_ATTRS]
    # a kernel overlapping its predecessor on the stream shows from the predecessor's end
    shown = state_starts(ctx, "kernel", task, thread, start, end)
    begin = _lines("2:0:1:%d:%d:%d:%d:%d:" + str(pv.EV_CORRELATION) + ":%d" + _ATTR_FMT,
                   task, thread, shown, etype, value, np.maximum(chunk["corr"], 0), *attrs)
    finish = _lines("2:0:1:%d:%d:%d:%d:0", task, thread, end, etype)
    states = _lines("1:0:1:%d:%d:%d:%d:%d", task, thread, shown, end, state)
    kind = np.where(nccl, ActivityKind.NCCL, ActivityKind.COMPUTE).astype(np.uint8)
    return ChunkResult(
        _interval_batch(ctx, "kernel", shown, end, task, thread, begin, finish, states),
        activity=_activity(ctx, chunk, start, end, kind), rows=len(chunk),
    )


def _convert_memop(ctx: ReportContext, chunk: np.ndarray, kind: str) -> ChunkResult:
    start = chunk["start"] + ctx.offset
    end = chunk["end"] + ctx.offset
    task, thread = ctx.gpu_objects(chunk)
    if kind == "memcpy":
        ck = chunk["copy_kind"]
        value = np.where((ck > 0) & (ck < MEMCPY_UNKNOWN_VALUE), ck, MEMCPY_UNKNOWN_VALUE)
        act_kind = ActivityKind.MEMCPY
    else:
        value = np.full(len(chunk), MEMSET_VALUE, dtype=np.int64)
        act_kind = ActivityKind.MEMSET
    size = np.maximum(chunk["bytes"], 0)
    corr = np.maximum(chunk["corr"], 0)
    shown = state_starts(ctx, kind, task, thread, start, end)
    begin = _lines(f"2:0:1:%d:%d:%d:{pv.EV_MEMOP}:%d:{pv.EV_MEMOP_BYTES}:%d"
                   f":{pv.EV_CORRELATION}:%d", task, thread, shown, value, size, corr)
    finish = _lines(f"2:0:1:%d:%d:%d:{pv.EV_MEMOP}:0:{pv.EV_MEMOP_BYTES}:0",
                    task, thread, end)
    states = _lines(f"1:0:1:%d:%d:%d:%d:{pv.STATE_MEMORY}", task, thread, shown, end)
    return ChunkResult(
        _interval_batch(ctx, kind, shown, end, task, thread, begin, finish, states),
        activity=_activity(ctx, chunk, start, end, act_kind), rows=len(chunk),
    )


def convert_memcpy(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    return _convert_memop(ctx, chunk, "memcpy")


def convert_memset(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    return _convert_memop(ctx, chunk, "memset")


def convert_sync(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    if ctx.sync_devices:
        chunk = chunk.copy()
        combos, inverse = factorize(chunk, ("gpid", "stream", "device"))
        placed = np.array([ctx.sync_devices.get(c, c[2]) for c in combos], dtype=np.int32)
        chunk["device"] = placed[inverse]
    start = chunk["start"] + ctx.offset
    end = chunk["end"] + ctx.offset
    task, thread = ctx.gpu_objects(chunk)
    value = np.maximum(chunk["sync_type"], 0) + 1
    begin = _lines(f"2:0:1:%d:%d:%d:{pv.EV_SYNC}:%d:{pv.EV_CORRELATION}:%d",
                   task, thread, start, value, np.maximum(chunk["corr"], 0))
    finish = _lines(f"2:0:1:%d:%d:%d:{pv.EV_SYNC}:0", task, thread, end)
    return ChunkResult(
        _interval_batch(ctx, "sync", start, end, task, thread, begin, finish), rows=len(chunk)
    )


def convert_runtime(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    start = chunk["start"] + ctx.offset
    end = chunk["end"] + ctx.offset
    task, thread = ctx.cpu_objects(chunk["gtid"])
    value, _, _ = ctx.values("api", chunk["name"])
    begin = _lines(f"2:0:1:%d:%d:%d:{pv.EV_API}:%d:{pv.EV_CORRELATION}:%d",
                   task, thread, start, value, np.maximum(chunk["corr"], 0))
    finish = _lines(f"2:0:1:%d:%d:%d:{pv.EV_API}:0", task, thread, end)
    return ChunkResult(
        _interval_batch(ctx, "runtime", start, end, task, thread, begin, finish),
        rows=len(chunk),
    )


def _cpu_named(ctx: ReportContext, chunk: np.ndarray, kind: str, group: str,
               type_of: Callable[[str], int]) -> ChunkResult:
    start = chunk["start"] + ctx.offset
    end = np.maximum(chunk["end"] + ctx.offset, start)
    task, thread = ctx.cpu_objects(chunk["gtid"])
    value, labels, inverse = ctx.values(group, chunk["name"])
    etype = np.array([type_of(lab) for lab in labels], dtype=np.int64)[inverse]
    begin = _lines("2:0:1:%d:%d:%d:%d:%d", task, thread, start, etype, value)
    finish = _lines("2:0:1:%d:%d:%d:%d:0", task, thread, end, etype)
    return ChunkResult(
        _interval_batch(ctx, kind, start, end, task, thread, begin, finish), rows=len(chunk)
    )


def convert_osrt(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    return _cpu_named(ctx, chunk, "osrt", "osrt", lambda _: pv.EV_OSRT)


def convert_mpi(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    return _cpu_named(ctx, chunk, "mpi", "mpi", mpi_type)


def convert_graph(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    return _cpu_named(ctx, chunk, "graph", "graph", lambda _: pv.EV_GRAPH)


def convert_openacc(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    return _cpu_named(ctx, chunk, "openacc", "openacc", lambda _: pv.EV_OPENACC)


def nvtx_type(domain_k: int) -> int:
    return pv.EV_NVTX_PUSHPOP_BASE + 100 * domain_k


def convert_nvtx(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    """NVTX marks, start/end and nested push/pop ranges (per thread and domain)."""
    # parents before children when they start together
    chunk = chunk[np.lexsort((-chunk["end"], chunk["start"]))]
    start = chunk["start"] + ctx.offset
    raw_end = chunk["end"]
    end = np.where(raw_end >= 0, raw_end + ctx.offset, ctx.end_rel)
    end = np.maximum(end, start)
    task, thread = ctx.cpu_objects(chunk["gtid"])
    value, labels, inverse = ctx.values("nvtx", chunk["text"])
    etype_col = chunk["event_type"]
    domains = chunk["domain"]
    dom_type: dict[int, int] = {}
    for d in np.unique(domains).tolist():
        k = 0 if d == 0 else ctx.numbering.value(
            "nvtx_domain", ctx.nvtx_domain_names.get(d, f"domain {d}"))
        dom_type[d] = nvtx_type(k)
    uniq_domains, dom_inverse = np.unique(domains, return_inverse=True)
    etype = np.array([dom_type[d] for d in uniq_domains.tolist()], dtype=np.int64)[dom_inverse]
    etype = np.where(etype_col == NVTX_START_END, pv.EV_NVTX_STARTEND, etype)
    etype = np.where(etype_col == NVTX_MARK, pv.EV_NVTX_MARK, etype)
    # value restored at each range's end: the innermost enclosing push/pop range still open
    restore = np.zeros(len(chunk), dtype=np.int64)
    pushpop = np.flatnonzero(etype_col == NVTX_PUSH_POP)
    gt = chunk["gtid"].tolist()
    dl = domains.tolist()
    st = start.tolist()
    en = end.tolist()
    vl = value.tolist()
    for i in pushpop.tolist():
        stack = ctx._nvtx_stack.setdefault((gt[i], dl[i]), [])
        while stack and stack[-1][0] <= st[i]:
            stack.pop()
        for parent_end, parent_value in reversed(stack):
            if parent_end > en[i]:
                restore[i] = parent_value
                break
        stack.append((en[i], vl[i]))
    ranges = np.flatnonzero(etype_col != NVTX_MARK)
    seq = ctx.next_seq("nvtx", len(chunk))
    rank = _KIND_RANK["nvtx"] * 4 + _LINE_EVENT
    begin = _lines("2:0:1:%d:%d:%d:%d:%d", task, thread, start, etype, value)
    parts = [begin.batch(_keys(start, PRIO_BEGIN, task, thread, rank, ctx.report_index, seq))]
    if len(ranges):
        r = ranges
        finish = _lines("2:0:1:%d:%d:%d:%d:%d", task[r], thread[r], end[r], etype[r],
                        restore[r])
        parts.append(finish.batch(
            _keys(end[r], _end_prio(start[r], end[r]), task[r], thread[r], rank,
                  ctx.report_index, seq[r])))
    phases = None
    matching = [bool(ctx.phase_pattern.search(lab)) for lab in labels]
    if any(matching):
        sel = np.flatnonzero(np.array(matching, dtype=bool)[inverse] & (etype_col != NVTX_MARK))
        if len(sel):
            phases = np.empty(len(sel), dtype=PHASE_DTYPE)
            phases["start"] = start[sel]
            phases["end"] = end[sel]
            gpids, pinv = np.unique(chunk["gtid"][sel] & ~0xFFFFFF, return_inverse=True)
            procs = np.array([ctx.process_index.get(g, 0) for g in gpids.tolist()])
            phases["process"] = procs[pinv]
            phases["name"] = [ctx.phase_id(labels[j]) for j in inverse[sel].tolist()]
    return ChunkResult(RecordBatch.concat(parts), phases=phases, rows=len(chunk))


def convert_gpu_metrics(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    """GPU metric samples: event 9400 + metricId with the sampled value, on a thread of the
    GPU's owning process (the one with activity on that device)."""
    start = chunk["start"] + ctx.offset
    gpus, inverse = np.unique(chunk["gpu"], return_inverse=True)
    task_u = np.empty(len(gpus), dtype=np.int64)
    thread_u = np.empty(len(gpus), dtype=np.int64)
    for i, gpu in enumerate(gpus.tolist()):
        task_u[i] = ctx.task_of(ctx.metric_owner.get(gpu, next(iter(ctx.process_index), 0)))
        thread_u[i] = ctx.numbering.thread(int(task_u[i]), metrics_key(gpu), metrics_name(gpu))
    tasks, threads = task_u[inverse], thread_u[inverse]
    metrics, minv = np.unique(chunk["metric"], return_inverse=True)
    for m in metrics.tolist():  # publish the metric's label for the .pcf
        ctx.numbering.value("gpu_metric", ctx.label("gpu_metric", m))
    etype = (pv.EV_GPU_METRIC_BASE + metrics)[minv]
    lines = _lines("2:0:1:%d:%d:%d:%d:%d", tasks, threads, start, etype,
                   np.maximum(chunk["value"], 0))
    seq = ctx.next_seq("gpu_metrics", len(chunk))
    keys = _keys(start, PRIO_BEGIN, tasks, threads, _KIND_RANK["gpu_metrics"] * 4 + _LINE_EVENT,
                 ctx.report_index, seq)
    return ChunkResult(lines.batch(keys), rows=len(chunk))


CONVERTERS: dict[str, Callable[[ReportContext, np.ndarray], ChunkResult]] = {
    "kernel": convert_kernel,
    "memcpy": convert_memcpy,
    "memset": convert_memset,
    "sync": convert_sync,
    "runtime": convert_runtime,
    "nvtx": convert_nvtx,
    "osrt": convert_osrt,
    "mpi": convert_mpi,
    "graph": convert_graph,
    "openacc": convert_openacc,
    "gpu_metrics": convert_gpu_metrics,
}
