"""A second synthetic export for the benchmarks, shaped unlike ``prvstream synth``.

``synth`` models one data-parallel training rank: one process, three streams, long kernels and
heavy NVTX. This models two pipeline stages of an inference server in one export (two
processes, one GPU each, four streams each): many short kernels, a memory copy at every stage
boundary, a stream synchronization per request, few NVTX ranges (one per request and stage)
and ``cudaGetLastError`` calls between launches. Rows are stored the way a real multi-process
export stores them: GPU activity in interleaved flushes of a few thousand records per process
(bounded disorder), each process's CUDA API rows in one block after the other's (the
second block starts back at the beginning of time, as in the real 2026.2 exports).

The schema, metadata and static tables come from a one-step ``prvstream synth`` export of the
same nsys version; its activity rows are replaced. Usage from the bench scripts:
``write_export(path, rows)``; or ``python tests/bench/gen_pipeline.py OUT.sqlite ROWS``.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import numpy as np

__all__ = ["write_export"]

_ACTIVITY = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
             "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME",
             "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS", "OSRT_API")
_KERNELS = ("gemm_bf16_tn_128x64", "layernorm_fwd", "gelu_fwd", "softmax_warp_fwd",
            "rotary_embedding", "flash_fwd_splitkv", "flash_fwd_combine", "residual_add",
            "rmsnorm_fwd", "sampling_topk", "embedding_lookup", "allgather_copy")
_API = ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaGetLastError",
        "cudaEventRecord")
#: kernels per request and stage, streams per stage, GPU activity records per flush
_LAYERS, _STREAMS, _FLUSH = 12, 4, 3000
#: rows one request adds over both stages: kernels, copies, syncs, API calls, NVTX ranges
_ROWS_PER_REQUEST = 2 * (_LAYERS + 1 + 1 + _LAYERS + _LAYERS // 3 + 1 + 1 + 1 + 1)


def _skeleton(path: Path, version: str) -> None:
    from prvstream.daemon.synthetic.synth import SynthSpec
    from prvstream.daemon.synthetic.synth import write_export as synth_write

    synth_write(path, SynthSpec(ranks=1, steps=1, nsys_version=version), 0)


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]


def _insert(con: sqlite3.Connection, table: str, cols: dict[str, np.ndarray | int | None],
            order: np.ndarray) -> None:
    """Insert the rows of ``cols`` (arrays, or constants) in ``order``, columns the table has."""
    have = set(_columns(con, table))
    names = [c for c in cols if c in have]
    n = len(order)
    data = [(v[order].tolist() if isinstance(v, np.ndarray) else [v] * n)
            for v in (cols[c] for c in names)]
    con.executemany(f"INSERT INTO {table} ({', '.join(names)}) VALUES "
                    f"({', '.join('?' * len(names))})", zip(*data, strict=True))


def _flushes(pid_of_row: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Storage order of GPU records: per process in start order, written in flushes of
    ``_FLUSH`` records that alternate between the processes."""
    blocks: list[tuple[int, int, np.ndarray]] = []
    for p in np.unique(pid_of_row):
        rows = np.flatnonzero(pid_of_row == p)
        rows = rows[np.argsort(start[rows], kind="stable")]
        for k, lo in enumerate(range(0, len(rows), _FLUSH)):
            blocks.append((k, int(p), rows[lo:lo + _FLUSH]))
    blocks.sort(key=lambda b: (b[0], b[1]))
    return np.concatenate([b[2] for b in blocks]) if blocks else np.empty(0, np.int64)


def _fill(con: sqlite3.Connection, rows: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    (gpid0,) = con.execute("SELECT globalPid FROM PROCESSES").fetchone()
    (t0,) = con.execute("SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    (sid,) = con.execute("SELECT MAX(id) FROM StringIds").fetchone()
    strings = {s: sid + 1 + i for i, s in enumerate((*_KERNELS, *_API, "request",
                                                     "stage_worker"))}
    con.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)",
                    [(i, s) for s, i in strings.items()])
    for table in _ACTIVITY:
        con.execute(f"DELETE FROM {table}")
    con.execute("DELETE FROM TARGET_INFO_CUDA_STREAM")
    con.execute("DELETE FROM ThreadNames")
    con.execute("DELETE FROM PROCESSES")
    n_req = max(1, rows // _ROWS_PER_REQUEST)
    vm = gpid0 & ~((1 << 48) - 1)
    pids = (31001, 31002)
    gpids = [vm | (p << 24) for p in pids]
    gtids = [g | p for g, p in zip(gpids, pids, strict=True)]
    for g, p, t in zip(gpids, pids, gtids, strict=True):
        con.execute("INSERT INTO PROCESSES (globalPid, pid, name) VALUES (?, ?, 'serve.py')",
                    (g, p))
        con.execute("INSERT INTO ThreadNames (nameId, priority, globalTid) VALUES (?, 20, ?)",
                    (strings["stage_worker"], t))
        for s in range(_STREAMS):
            con.execute("INSERT INTO TARGET_INFO_CUDA_STREAM VALUES (?, 0, 1, ?, 1, 0, 2)",
                        (20 + s, p))
    # request arrivals: bursts with gaps; each stage runs after the previous one's copy
    arrive = t0 + np.cumsum(rng.exponential(120_000, n_req).astype(np.int64) + 20_000)
    k_dur = rng.integers(3_000, 60_000, (2, n_req, _LAYERS))
    api = {name: [] for name in ("start", "end", "tid", "corr", "name")}
    kern = {name: [] for name in ("start", "end", "stage", "stream", "corr", "name")}
    copy = {name: [] for name in ("start", "end", "stage", "stream", "corr", "kind", "bytes")}
    sync = {name: [] for name in ("start", "end", "stage", "stream", "corr")}
    nvtx = {name: [] for name in ("start", "end", "stage")}
    corr = [1, 1]

    def call(stage: int, at: np.ndarray, dur: np.ndarray, name: str) -> np.ndarray:
        c = np.arange(corr[stage], corr[stage] + len(at))
        corr[stage] += len(at)
        for key, val in (("start", at), ("end", at + dur), ("tid", np.full(len(at), stage)),
                         ("corr", c), ("name", np.full(len(at), strings[name]))):
            api[key].append(val)
        return c

    ready = arrive.copy()
    for stage in (0, 1):
        host = ready + 2_000
        nvtx["start"].append(host)
        for layer in range(_LAYERS):
            at = host + layer * 4_000
            c = call(stage, at, rng.integers(2_000, 3_500, n_req), "cudaLaunchKernel")
            if layer % 3 == 2:
                call(stage, at + 3_600, np.full(n_req, 150), "cudaGetLastError")
            gstart = np.maximum(at + 5_000, ready + layer * 9_000)
            for key, val in (("start", gstart), ("end", gstart + k_dur[stage, :, layer]),
                             ("stage", np.full(n_req, stage)),
                             ("stream", np.full(n_req, 20 + layer % _STREAMS)), ("corr", c),
                             ("name", np.full(n_req, strings[_KERNELS[layer]]))):
                kern[key].append(val)
        done = gstart + k_dur[stage, :, -1]
        at = host + _LAYERS * 4_000
        c = call(stage, at, np.full(n_req, 4_000), "cudaMemcpyAsync")
        cstart = np.maximum(done, at + 4_500)
        nbytes = rng.integers(1, 64, n_req) * 65_536
        for key, val in (("start", cstart), ("end", cstart + nbytes // 12_000 + 1_500),
                         ("stage", np.full(n_req, stage)), ("stream", np.full(n_req, 20)),
                         ("corr", c), ("kind", np.full(n_req, 10 if stage == 0 else 2)),
                         ("bytes", nbytes)):
            copy[key].append(val)
        sat = at + 4_200
        send = np.maximum(cstart + nbytes // 12_000 + 1_600, sat + 1_000)
        c = call(stage, sat, send - sat, "cudaStreamSynchronize")
        for key, val in (("start", sat + 500), ("end", send - 200),
                         ("stage", np.full(n_req, stage)), ("stream", np.full(n_req, 20)),
                         ("corr", c)):
            sync[key].append(val)
        call(stage, send + 300, np.full(n_req, 900), "cudaEventRecord")
        nvtx["end"].append(send + 1_500)
        nvtx["stage"].append(np.full(n_req, stage))
        ready = send + 2_000
    cat = {name: {k: np.concatenate(v) for k, v in d.items()}
           for name, d in (("api", api), ("kern", kern), ("copy", copy), ("sync", sync),
                           ("nvtx", nvtx))}
    g = np.array(gpids, dtype=np.int64)
    t = np.array(gtids, dtype=np.int64)
    k = cat["kern"]
    _insert(con, "CUPTI_ACTIVITY_KIND_KERNEL", {
        "start": k["start"], "end": k["end"], "deviceId": k["stage"], "contextId": 1,
        "streamId": k["stream"], "correlationId": k["corr"], "globalPid": g[k["stage"]],
        "demangledName": k["name"], "shortName": k["name"], "launchType": 0, "cacheConfig": 0,
        "registersPerThread": 64, "gridX": 132, "gridY": 4, "gridZ": 1, "blockX": 256,
        "blockY": 1, "blockZ": 1, "staticSharedMemory": 0, "dynamicSharedMemory": 49_152,
        "localMemoryPerThread": 0, "localMemoryTotal": 0, "gridId": k["corr"],
        "sharedMemoryExecuted": 102_400,
    }, _flushes(k["stage"], k["start"]))
    c = cat["copy"]
    _insert(con, "CUPTI_ACTIVITY_KIND_MEMCPY", {
        "start": c["start"], "end": c["end"], "deviceId": c["stage"], "contextId": 1,
        "streamId": c["stream"], "correlationId": c["corr"], "globalPid": g[c["stage"]],
        "bytes": c["bytes"], "copyKind": c["kind"], "srcKind": 2, "dstKind": 2,
    }, _flushes(c["stage"], c["start"]))
    s = cat["sync"]
    _insert(con, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", {
        "start": s["start"], "end": s["end"], "deviceId": s["stage"], "contextId": 1,
        "streamId": s["stream"], "correlationId": s["corr"], "globalPid": g[s["stage"]],
        "syncType": 3, "eventId": 1,
    }, _flushes(s["stage"], s["start"]))
    a = cat["api"]
    by_stage = np.lexsort((a["start"], a["tid"]))  # one block per process
    _insert(con, "CUPTI_ACTIVITY_KIND_RUNTIME", {
        "start": a["start"], "end": a["end"], "eventClass": 0, "globalTid": t[a["tid"]],
        "correlationId": a["corr"], "nameId": a["name"], "returnValue": 0,
    }, by_stage)
    v = cat["nvtx"]
    _insert(con, "NVTX_EVENTS", {
        "start": v["start"], "end": v["end"], "eventType": 59, "textId": strings["request"],
        "globalTid": t[v["stage"]], "domainId": 0,
    }, np.lexsort((v["start"], v["stage"])))


def write_export(path: Path, rows: int, version: str = "2024.5", seed: int = 0) -> Path:
    """Write a two-stage pipeline export of about ``rows`` rows to ``path`` (kept if present)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    _skeleton(tmp, version)
    con = sqlite3.connect(tmp, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("BEGIN")
        _fill(con, rows, seed)
        con.execute("COMMIT")
        con.execute("VACUUM")
    finally:
        con.close()
    os.replace(tmp, path)
    return path


if __name__ == "__main__":
    write_export(Path(sys.argv[1]), int(sys.argv[2]))
