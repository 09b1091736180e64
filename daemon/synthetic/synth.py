"""``prvstream synth``: synthetic Nsight Systems SQLite exports with a real nsys version's schema.

Each export is one rank (one capture range with ``slices``) of a data-parallel training loop;
see docs/synth.md for the model. Output is deterministic for a given spec (seed included).
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prvstream.daemon.nsys.schema import DDL, TABLE_ORDER
from prvstream.daemon.synthetic.model import (
    API_NAMES,
    KERNELS,
    OP_KERNEL,
    OP_MEMCPY,
    OP_MEMSET,
    SLOT_API,
    SLOT_PUSH,
    STREAM_IDS,
    Template,
    schedule,
    template,
)
from prvstream.daemon.synthetic.spec import (
    EVT_THREAD,
    LEAD_NS,
    LOADER_THREAD,
    MAIN_THREAD,
    NSYS_VERSIONS,
    OSRT_CALLS,
    VM_BITS,
    RankLayout,
    SynthSpec,
    export_name,
    rank_layout,
)
from prvstream.daemon.synthetic.statics import (
    ENUMS,
    iso_time,
    mangle,
    metadata_rows,
    string_table,
)
from prvstream.daemon.synthetic.timing import durations, slice_timing, step_batches
from prvstream.sinks.errors import ConfigError
from prvstream.sinks.logger import get_logger

__all__ = [
    "NSYS_VERSIONS",
    "SynthSpec",
    "export_name",
    "iter_job",
    "rank_layout",
    "rows_per_step",
    "static_rows",
    "steps_for_rows",
    "write_export",
    "write_job",
]

log = get_logger(__name__)


# --------------------------------------------------------------------------- writing


class _Writer:
    """Inserts column dicts into a table of the export, binding only the varying columns."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.columns: dict[str, list[str]] = {}
        self.rows = 0

    def create(self, table: str, ddl: str) -> None:
        self.conn.execute(ddl)
        self.columns[table] = [r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")]

    def insert(self, table: str, values: dict[str, Any], *, mixed: bool = False) -> None:
        cols = self.columns[table]
        bound = [c for c in cols if isinstance(values.get(c), np.ndarray | list)]
        consts = [c for c in cols if c in values and c not in bound and values[c] is not None]
        if not bound:
            return
        sql = (f"INSERT INTO {table} ({', '.join(bound + consts)}) VALUES ("
               + ", ".join(["?"] * len(bound) + [_literal(values[c]) for c in consts]) + ")")
        data: Any
        if mixed:
            data = zip(*(v.tolist() if isinstance(v, np.ndarray) else v
                         for v in (values[c] for c in bound)), strict=True)
        else:
            data = np.column_stack([values[c] for c in bound]).tolist()
        before = self.conn.total_changes
        self.conn.executemany(sql, data)
        self.rows += self.conn.total_changes - before

    def rows_of(self, table: str, rows: Sequence[Sequence[Any]]) -> None:
        cols = self.columns[table][: len(rows[0])]
        sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        self.conn.executemany(sql, rows)
        self.rows += len(rows)


def _literal(value: object) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(int(value))  # type: ignore[call-overload]


def write_export(path: str | os.PathLike[str], spec: SynthSpec, rank: int, slice_: int = 0,
                 ) -> Path:
    """Write rank ``rank``'s export of capture range ``slice_`` to ``path`` (via a dot-named
    temporary file renamed into place when complete). Returns the path."""
    spec.check()
    if not 0 <= rank < spec.ranks or not 0 <= slice_ < spec.slices:
        raise ConfigError(f"synth: rank {rank} / slice {slice_} outside the spec")
    final = Path(path)
    tmp = final.with_name(f".{final.name}.tmp")
    tmp.unlink(missing_ok=True)
    began = time.perf_counter()
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        conn.execute("BEGIN")
        rows = _fill(conn, spec, rank, slice_, final.name)
        conn.execute("COMMIT")
    finally:
        conn.close()
    os.replace(tmp, final)
    log.info("synth_export_written", path=str(final), rank=rank, slice=slice_, rows=rows,
             seconds=round(time.perf_counter() - began, 3))
    return final


def _fill(conn: sqlite3.Connection, spec: SynthSpec, rank: int, slice_: int, name: str) -> int:
    ddl = DDL[spec.nsys_version]
    w = _Writer(conn)
    meta = "EXPORT_META_DATA" if spec.nsys_version == "2022.2" else "META_DATA_EXPORT"
    tables = [t for t in TABLE_ORDER
              if t in ddl and t not in ("EXPORT_META_DATA", "META_DATA_EXPORT")]
    if not spec.has_gpu_table:
        tables.remove("TARGET_INFO_GPU")
    if not spec.mpi_ranks_table:
        tables.remove("MPI_RANKS")
    for table in [*tables, meta]:
        w.create(table, ddl[table])
    lay = rank_layout(spec, rank)
    t = template(spec.layers, spec.gpus_per_rank)
    strings = string_table(spec)
    sid = {s: i + 1 for i, s in enumerate(strings)}
    gpid = VM_BITS | (lay.pid << 24)
    main_tid, loader_tid, evt_tid = gpid | lay.pid, gpid | (lay.pid + 11), gpid | (lay.pid + 5)
    w.rows_of("StringIds", [(i, s) for s, i in sid.items()])

    start_wall, _offsets, per_batch = slice_timing(spec, slice_)
    session_wall = start_wall - LEAD_NS + lay.skew_ns
    session_clock = lay.clock_base + (session_wall - _job_origin(spec))

    _static(w, spec, lay, t, sid, gpid, (main_tid, loader_tid, evt_tid), session_wall,
            session_clock)
    # the earliest event of the export: the NCCL domain's creation at the session start
    w.rows_of("NVTX_EVENTS", [(session_clock, None, 75, None, None, None, "NCCL", main_tid,
                               None, None, 1)])
    first_step = slice_ * 2 * spec.steps
    epoch_open: int | None = None
    last_end = session_clock
    for (b, n), (rel, ready, _) in zip(step_batches(spec), per_batch, strict=True):
        cpu, gap, gpu, ggap, _loader = durations(spec, t, slice_, b, n, rank)
        s = schedule(t, cpu, gap, gpu, ggap, ready)
        step0 = first_step + b * spec.batch_steps
        steps = np.arange(step0, step0 + n, dtype=np.int64)
        base = (lay.clock_base + (start_wall - _job_origin(spec)) + rel)[:, None]
        _batch_rows(w, spec, lay, t, sid, s, base, steps, gpid, main_tid, loader_tid)
        # epochs (NVTX start/end ranges) and marks
        starts = base[:, 0]
        ends = base[:, 0] + s.cpu_end
        marks: list[tuple[Any, ...]] = []
        ranges: list[tuple[Any, ...]] = []
        for i, step in enumerate(steps.tolist()):
            epoch, pos = divmod(step, spec.steps_per_epoch)
            if epoch_open is None:
                epoch_open = int(starts[i]) - 1_000
                if step == first_step:
                    marks.append((int(starts[i]) - 2_000, None, 34, None, None, None,
                                  "capture_start", main_tid, None, None, 0))
            if pos == spec.steps_per_epoch - 1 or step == first_step + spec.steps - 1:
                ranges.append((epoch_open, int(ends[i]) + 1_000, 60, epoch + 1, None, None,
                               f"epoch_{epoch}", main_tid, main_tid, None, 0))
                epoch_open = None
                if pos == spec.steps_per_epoch - 1:
                    marks.append((int(ends[i]) + 500, None, 34, None, None, None,
                                  f"checkpoint_epoch_{epoch}", main_tid, None, None, 0))
        last_end = int(ends[-1]) + 1_000
        if marks or ranges:
            w.rows_of("NVTX_EVENTS", ranges + marks)
    end_wall = session_wall + (last_end - session_clock) + 2 * 10**9
    rng = np.random.default_rng([spec.seed, 3, rank, slice_])
    elapsed = f"{rng.uniform(0.05, 3.0):.2f}"
    w.rows_of(meta, metadata_rows(spec, lay, name, end_wall, elapsed))
    return w.rows


def _job_origin(spec: SynthSpec) -> int:
    """The wall-clock instant the clocks' bases refer to (the job's reference instant)."""
    return slice_timing(spec, 0)[0] - LEAD_NS


def _static(w: _Writer, spec: SynthSpec, lay: RankLayout, t: Template, sid: dict[str, int],
            gpid: int, tids: tuple[int, int, int], session_wall: int, session_clock: int) -> None:
    main_tid, loader_tid, evt_tid = tids
    w.rows_of("PROCESSES", [(gpid, lay.pid, MAIN_THREAD)])
    w.rows_of("ThreadNames", [(sid[MAIN_THREAD], 20, main_tid),
                              (sid[LOADER_THREAD], 20, loader_tid),
                              (sid[EVT_THREAD], 20, evt_tid)])
    session = [session_wall, iso_time(session_wall), iso_time(session_wall)]
    if "systemClockNs" in w.columns["TARGET_INFO_SESSION_START_TIME"]:
        session.append(session_clock)
    w.rows_of("TARGET_INFO_SESSION_START_TIME", [tuple(session)])
    w.rows_of("TARGET_INFO_SYSTEM_ENV", [
        (VM_BITS, "Local (CLI)", name, enum, value) for name, enum, value in (
            ("CpuCores", 1, "64"), ("CpuSpeedMhz", 2, "2450"), ("CpuArchitecture", 3, "x86_64"),
            ("NvDriverVersion", 205, "550.54.15"), ("Hostname", 619, lay.host))])
    if "TARGET_INFO_GPU" in w.columns:
        per_host = math.ceil(spec.ranks / (spec.hosts or spec.ranks)) * spec.gpus_per_rank
        rng = np.random.default_rng([spec.seed, 5, lay.host_index])
        gpus = []
        for dev in range(per_host):
            uuid = "-".join(rng.bytes(n).hex() for n in (4, 2, 2, 2, 6))
            bus = f"0000:{0x03 + 0x40 * dev:02x}:00.0"
            gpus.append((VM_BITS, dev, "NVIDIA A100-SXM4-40GB", bus,
                         1, 41943040, 42297524224, 1555200000000, 1410000000, 108, dev, uuid, 0,
                         "GA100", dev, None, None, 161, 0, 65536, 4, 65536, 49152, 166912,
                         167936, 65536, 32, 5, 64, 32, 1024, 1024, 1024, 64, 2147483647, 65535,
                         65535, 8, 0, 8, 0))
        w.rows_of("TARGET_INFO_GPU", gpus)
    streams = []
    for k, _dev in enumerate(lay.devices):
        for role, sid_ in enumerate(STREAM_IDS):
            streams.append((sid_ + 16 * k, 0, 1, lay.pid, k + 1, 0, 3 if role == 0 else 2))
    w.rows_of("TARGET_INFO_CUDA_STREAM", streams)
    if "MPI_RANKS" in w.columns:
        w.rows_of("MPI_RANKS", [(main_tid, lay.rank)])
    for table, rows in ENUMS.items():
        if table in w.columns:
            w.rows_of(table, rows)


def _batch_rows(w: _Writer, spec: SynthSpec, lay: RankLayout, t: Template, sid: dict[str, int],
                s: Any, base: np.ndarray, steps: np.ndarray, gpid: int, main_tid: int,
                loader_tid: int) -> None:
    """Insert one batch of steps: per table, per stream/thread blocks (not in time order)."""
    n = len(steps)
    n_api = t.n_api
    api_slots = np.flatnonzero(t.slot_kind == SLOT_API)
    api_rank = np.full(len(t.slot_kind), -1, dtype=np.int64)
    api_rank[api_slots] = np.arange(n_api)
    corr = (1 + steps[:, None] * n_api) + api_rank[None, :]          # [n, slots]
    slot_start = base + s.slot_start
    slot_end = base + s.slot_end
    dev_ids = np.array(lay.devices, dtype=np.int64)

    # --- GPU activity, one block per (device, stream) ---
    op_start = base + s.op_start
    op_end = base + s.op_end
    for d in range(t.devices):
        for role in range(3):
            sel = np.flatnonzero((t.op_dev == d) & (t.op_role == role))
            if not len(sel):
                continue
            common = {
                "deviceId": dev_ids[t.op_dev[sel]], "contextId": d + 1, "greenContextId": 0,
                "streamId": STREAM_IDS[role] + 16 * d, "globalPid": gpid,
            }
            for kind in (OP_KERNEL, OP_MEMCPY, OP_MEMSET):
                ops = sel[t.op_kind[sel] == kind]
                if not len(ops):
                    continue
                cols: dict[str, Any] = dict(common)
                m = n * len(ops)
                cols["start"] = op_start[:, ops].ravel()
                cols["end"] = op_end[:, ops].ravel()
                cols["correlationId"] = corr[:, t.op_slot[ops]].ravel()
                cols["deviceId"] = np.tile(dev_ids[t.op_dev[ops]], n)
                if kind == OP_KERNEL:
                    _kernel_cols(cols, t, sid, ops, steps, n, m)
                    w.insert("CUPTI_ACTIVITY_KIND_KERNEL", cols)
                elif kind == OP_MEMCPY:
                    ck = np.tile(t.op_copy[ops], n)
                    cols.update(bytes=np.tile(t.op_bytes[ops], n), copyKind=ck,
                                srcKind=np.where(ck == 1, 1, 2), dstKind=np.where(ck == 2, 1, 2),
                                copyCount=1)
                    w.insert("CUPTI_ACTIVITY_KIND_MEMCPY", cols)
                else:
                    cols.update(value=0, bytes=np.tile(t.op_bytes[ops], n), memKind=2)
                    w.insert("CUPTI_ACTIVITY_KIND_MEMSET", cols)
    # synchronisation rows: the wait-event and stream-synchronize API calls
    sync_slots = np.flatnonzero(t.slot_sync > 0)
    ev = np.cumsum(t.slot_api == 3)  # events recorded so far in the step
    events_per_step = int(ev[-1])
    event_id = 1 + steps[:, None] * events_per_step + (ev[sync_slots] - 1)[None, :]
    is_stream_sync = np.tile(t.slot_sync[sync_slots] == 3, n)
    w.insert("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", {
        "start": slot_start[:, sync_slots].ravel(), "end": slot_end[:, sync_slots].ravel(),
        "deviceId": np.tile(dev_ids[t.slot_dev[sync_slots]], n),
        "contextId": np.tile(t.slot_dev[sync_slots] + 1, n),
        "streamId": np.tile(np.array(STREAM_IDS)[t.slot_role[sync_slots]]
                            + 16 * t.slot_dev[sync_slots], n),
        "correlationId": corr[:, sync_slots].ravel(), "globalPid": gpid,
        "syncType": np.tile(t.slot_sync[sync_slots], n),
        "eventId": np.where(is_stream_sync, 4294967295, event_id.ravel()),
        "eventSyncId": np.where(is_stream_sync, 0, event_id.ravel() + 10_000),
    })
    # --- CUDA runtime on the main thread: launches first, then the other calls (two buffers) ---
    api_names = np.array([sid[a] for a in API_NAMES], dtype=np.int64)
    for group in (api_slots[t.slot_api[api_slots] == 0], api_slots[t.slot_api[api_slots] != 0]):
        w.insert("CUPTI_ACTIVITY_KIND_RUNTIME", {
            "start": slot_start[:, group].ravel(), "end": slot_end[:, group].ravel(),
            "eventClass": 0, "globalTid": main_tid, "correlationId": corr[:, group].ravel(),
            "nameId": np.tile(api_names[t.slot_api[group]], n), "returnValue": 0,
        })
    # --- NVTX push/pop ranges, in the order they close (as nsys writes them) ---
    pushes = np.flatnonzero(t.slot_kind == SLOT_PUSH)
    order = pushes[np.argsort(t.slot_pop[pushes], kind="stable")]
    default = order[t.slot_domain[order] == 0]
    texts = [t.slot_text[i] for i in default]
    w.insert("NVTX_EVENTS", {
        "start": slot_start[:, default].ravel(), "end": slot_start[:, t.slot_pop[default]].ravel(),
        "eventType": 59, "text": texts * n, "globalTid": main_tid, "domainId": 0,
    }, mixed=True)
    nccl = order[t.slot_domain[order] == 1]
    w.insert("NVTX_EVENTS", {
        "start": slot_start[:, nccl].ravel(), "end": slot_start[:, t.slot_pop[nccl]].ravel(),
        "eventType": 59, "globalTid": main_tid, "textId": sid["ncclAllReduce"], "domainId": 1,
    })
    # --- OS runtime calls on the data-loader thread ---
    step_start = base[:, 0]
    span = s.slot_start[:, t.n_pre - 1]
    rng = np.random.default_rng([spec.seed, 4, int(steps[0]), lay.rank])
    frac = np.sort(rng.uniform(0.02, 0.4, (n, 3)), axis=1)
    short_start = step_start[:, None] + (frac * span[:, None]).astype(np.int64)
    short_end = short_start + rng.integers(4_000, 120_000, (n, 3))
    names = np.array([sid[OSRT_CALLS[i]] for i in range(3)], dtype=np.int64)
    w.insert("OSRT_API", {
        "start": short_start.ravel(), "end": short_end.ravel(), "eventClass": 27,
        "globalTid": loader_tid, "nameId": np.tile(names, n),
        "returnValue": np.tile(np.array([1 << 20, 0, 0], dtype=np.int64), n),
        "nestingLevel": 0, "callchainId": 0,
    })
    wait_start = short_end[:, -1] + 2_000
    wait_end = np.maximum(wait_start + 1_000, step_start + s.cpu_end - 5_000)
    w.insert("OSRT_API", {
        "start": wait_start, "end": wait_end, "eventClass": 27, "globalTid": loader_tid,
        "nameId": sid[OSRT_CALLS[3]], "returnValue": 0, "nestingLevel": 0, "callchainId": 0,
    })


_KATTR = np.array([[k[2], *k[3], *k[4], k[5], k[6]] for k in KERNELS], dtype=np.int64)


def _kernel_cols(cols: dict[str, Any], t: Template, sid: dict[str, int], ops: np.ndarray,
                 steps: np.ndarray, n: int, m: int) -> None:
    kidx = t.op_kernel[ops]
    short = np.array([sid[KERNELS[k][0]] for k in kidx], dtype=np.int64)
    dem = np.array([sid[KERNELS[k][1]] for k in kidx], dtype=np.int64)
    mang = np.array([sid[mangle(KERNELS[k][0])] for k in kidx], dtype=np.int64)
    attr = np.tile(_KATTR[kidx], (n, 1))
    kern_rank = (np.cumsum(t.op_kind == OP_KERNEL) - 1)[ops]
    nccl = np.tile(kidx == len(KERNELS) - 1, n)
    cols.update(
        demangledName=np.tile(dem, n), shortName=np.tile(short, n), mangledName=np.tile(mang, n),
        launchType=1, cacheConfig=0, registersPerThread=attr[:, 0],
        gridX=attr[:, 1], gridY=attr[:, 2], gridZ=attr[:, 3],
        blockX=attr[:, 4], blockY=attr[:, 5], blockZ=attr[:, 6],
        staticSharedMemory=attr[:, 7], dynamicSharedMemory=attr[:, 8], localMemoryPerThread=0,
        localMemoryTotal=attr[:, 0] * 1_179_648,
        gridId=(1000 + steps[:, None] * t.n_kernels + kern_rank[None, :]).ravel(),
        sharedMemoryExecuted=np.where(attr[:, 7] + attr[:, 8] > 0, 135168, 32768),
        sharedMemoryLimitConfig=nccl.astype(np.int64),
        clusterX=0, clusterY=0, clusterZ=0, clusterSchedulingPolicy=1,
        maxPotentialClusterSize=0, maxActiveClusters=0, tensorSizeMinusOneElements="[]",
    )
    assert len(cols["start"]) == m


# --------------------------------------------------------------------------- jobs and counts


def rows_per_step(spec: SynthSpec) -> int:
    """Rows one training step adds to one export."""
    t = template(spec.layers, spec.gpus_per_rank)
    gpu = len(t.op_kind)
    sync = int(np.count_nonzero(t.slot_sync > 0))
    nvtx = int(np.count_nonzero(t.slot_kind == SLOT_PUSH))
    return int(gpu + sync + t.n_api + nvtx + 4)


def static_rows(spec: SynthSpec, slice_: int = 0) -> int:
    """Rows an export holds besides its steps (strings, metadata, enums, epochs, marks)."""
    strings = len(string_table(spec))
    enums = sum(len(v) for v in ENUMS.values()) if spec.nsys_version != "2022.2" else 0
    meta = {"2022.2": 23, "2024.5": 29, "2026.2": 34}[spec.nsys_version]
    gpus = (math.ceil(spec.ranks / (spec.hosts or spec.ranks)) * spec.gpus_per_rank
            if spec.has_gpu_table else 0)
    first = slice_ * 2 * spec.steps
    captured = range(first, first + spec.steps)
    epochs = (len({step // spec.steps_per_epoch for step in captured}) + 1
              + sum(1 for step in captured if step % spec.steps_per_epoch
                    == spec.steps_per_epoch - 1))
    return int(strings + enums + meta + gpus + 3 * spec.gpus_per_rank + 1 + 3 + 1 + 5
            + int(spec.mpi_ranks_table) + 1 + epochs)


def steps_for_rows(rows: int, spec: SynthSpec | None = None) -> int:
    """How many ``steps`` make one export of about ``rows`` rows."""
    spec = spec or SynthSpec()
    return max(1, round((rows - static_rows(spec)) / rows_per_step(spec)))


def iter_job(outdir: str | os.PathLike[str], spec: SynthSpec, *, interval: float = 0.0,
             sleep: Callable[[float], None] = time.sleep) -> Iterator[Path]:
    """Write every export of the job, slice by slice, yielding each path once it is in place;
    with ``interval`` > 0, wait that long before each export after the first."""
    spec.check()
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    first = True
    for slice_ in range(spec.slices):
        for rank in range(spec.ranks):
            if interval > 0 and not first:
                sleep(interval)
            first = False
            yield write_export(out / export_name(spec, rank, slice_), spec, rank, slice_)


def write_job(outdir: str | os.PathLike[str], spec: SynthSpec, *, interval: float = 0.0,
              ) -> list[Path]:
    """Write every export of the job into ``outdir``; returns their paths in writing order."""
    return list(iter_job(outdir, spec, interval=interval))
