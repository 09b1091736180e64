"""The facts BSC's BasicAnalysis relies on hold on our traces (``tests/compat/basicanalysis.py``).

On every real export: its mode detection takes the trace for ``Detailed+CUDA`` (the Extrae GPU
path: the .pcf has STATES, CUDA types and no MPI ones), every CPU thread row is
``THREAD 1.<task>.<thread>`` for its own position and starts its task, so the rows it reads by
position are the rows they are, every stream row ``CUDA-D<d>.S<s>-<host>`` of its task's host;
what that path computes from the rows and states (device useful time from Running, device
communication from Memory transfer, LB, CE, OE, PE, the host threads' Running time and host
offload efficiency) equals our summary over the summary's T, but for the NCCL kernels, which
it does not count as communication (docs/mapping.md).
"""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from prvstream.daemon.cli.main import cli
from tests.compat.basicanalysis import HOST_ROW, STREAM_ROW, analyse
from tests.compat.test_nsys2prv_compat import nsys2prv_trace
from tests.compat.traces import pcf_labels
from tests.conftest import real_export_params

__all__: list[str] = []


def _rows(out: Path) -> tuple[list[str], list[str], list[int]]:
    levels: dict[str, list[str]] = {}
    level = ""
    for line in out.with_name(out.name + ".row").read_text().splitlines():
        if line.startswith("LEVEL "):
            level = line.split()[1]
            levels[level] = []
        elif line.strip():
            levels[level].append(line)
    with out.with_name(out.name + ".prv").open() as fh:
        header = fh.readline()
    counts = [int(t.split(":")[0]) for t in header.rsplit("(", 1)[1].split(")")[0].split(",")]
    return levels["THREAD"], levels["NODE"], counts


@pytest.mark.parametrize("export", real_export_params())
def test_basicanalysis_reads_our_trace_like_our_summary(export: Path, tmp_path: Path) -> None:
    out = tmp_path / export.stem
    assert cli("convert", str(export), "-o", str(out), "--no-progress") == 0
    prv = out.with_name(out.name + ".prv")
    types, _ = pcf_labels(prv.with_suffix(".pcf"))
    assert types[63000000] == "CUDA library call" and types[63000006] == "CUDA kernel"
    assert types[63000001] == "CUDA memcpy kernel" and types[9110] == "Kernel Registers/Thread"
    threads, nodes, counts = _rows(out)
    summary = json.loads(out.with_name(out.name + ".summary.json").read_text())
    hosts = {d["host"] for d in summary["devices"]}
    position = 0
    for task, n in enumerate(counts, 1):
        for thread in range(1, n + 1):
            label = threads[position]
            position += 1
            host_row, stream_row = HOST_ROW.match(label), STREAM_ROW.match(label)
            if host_row:
                assert host_row.groups() == ("1", str(task), str(thread))
            elif stream_row:
                assert stream_row.group(2) in hosts and stream_row.group(2) in nodes
            else:
                assert label.startswith("Metrics GPU"), label
    got = analyse(prv)
    assert got.mode == "Detailed+CUDA"  # the Extrae GPU path: states, CUDA types, no MPI ones
    objects = [(task, thread) for task, n in enumerate(counts, 1) for thread in range(1, n + 1)]
    assert got.positional == objects  # rows read by position are the rows they are
    want = {f"{d['host']}:D{d['device']}": (d["useful_ns"], d["comm_ns"])
            for d in summary["devices"]}
    assert {k: (got.useful[k], got.comm_with_nccl[k]) for k in got.useful} == want
    # its older cfg reads Running x the kernel event: the same time on our stream rows
    assert got.kernel_event == got.useful
    for device, comm in got.comm.items():  # memory transfers only: NCCL kernels are not
        assert comm == want[device][1] if got.nccl_ns[device] == 0 else comm <= want[device][1]
    nccl = {k for k in got.comm if got.comm[k] != got.comm_with_nccl[k]}
    metrics = got.device(summary["span_ns"])
    mine = summary["metrics"]
    pairs = {"load_balance": "LB", "parallel_efficiency": "PE",
             "orchestration_efficiency": "OE", "communication_efficiency": "CE"}
    for ours, theirs in list(pairs.items())[:2] if nccl else pairs.items():
        assert math.isclose(mine[ours], metrics[theirs], rel_tol=1e-9), (ours, metrics)
    if nccl:  # NCCL time outside kernels and copies is idle to it
        assert metrics["CE"] > mine["communication_efficiency"]
        assert metrics["OE"] < mine["orchestration_efficiency"]
    assert got.trace_ns > summary["span_ns"]  # its T starts at the session start
    assert got.host_threads > 0
    assert got.host_cuda_ns > 0 and got.host_useful_ns > 0
    host = summary["host_metrics"]
    assert got.host_threads == sum(h["threads"] for h in host["hosts"])
    assert got.host_useful_ns == sum(h["thread_useful_ns"] for h in host["hosts"])
    assert math.isclose(host["device_offload_efficiency"], got.offload(summary["span_ns"]),
                        rel_tol=1e-12)


@pytest.mark.parametrize("export", real_export_params())
def test_basicanalysis_reads_nsys2prv_traces_kernel_time_like_ours(export: Path,
                                                                   tmp_path: Path) -> None:
    """On nsys2prv's trace it takes nsys2prv's path (no states): the same kernel time per
    device as on ours, and no more communication than ours with the NCCL kernels, which that
    path counts (it counts memcpy values 3-6 only, which nsys2prv does not keep for copies:
    its own limit, docs/mapping.md)."""
    theirs, _ = nsys2prv_trace(export)
    out = tmp_path / export.stem
    assert cli("convert", str(export), "-o", str(out), "--no-progress") == 0
    ours = analyse(out.with_name(out.name + ".prv"))
    got = analyse(theirs)
    assert got.nsys2prv and not got.has_states and not ours.nsys2prv
    assert sorted(got.useful.values()) == sorted(ours.useful.values())
    assert sum(got.comm.values()) <= sum(ours.comm_with_nccl.values())
    assert got.host_threads > 0 and 0.0 < got.offload(got.trace_ns) <= 1.0


def _gpu_only_process(export: Path, work: Path) -> tuple[Path, int] | None:
    """A copy of ``export`` where the last process with kernels has no CPU-thread rows."""
    copy = work / export.name
    shutil.copyfile(export, copy)
    with closing(sqlite3.connect(copy)) as db:
        pids = sorted({int(g) >> 24 & 0xFFFFFF for (g,) in db.execute(
            "SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL")})
        if len(pids) < 2:
            return None
        tables = [name for (name,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            if "globalTid" in columns and table != "ThreadNames":
                db.execute(f"DELETE FROM {table} WHERE (globalTid >> 24) & 16777215 = ?",
                           (pids[-1],))
        db.commit()
    return copy, pids[-1]


@pytest.mark.parametrize("export", real_export_params())
def test_a_process_with_gpu_rows_only_starts_with_its_main_thread(export: Path,
                                                                   tmp_path: Path) -> None:
    """Its Extrae path reads the .row by position: a task whose first row were a stream would
    be read as threads of the previous task, and its devices' time lost. A process with GPU
    rows only gets its main thread first (no records), so every row is read as itself."""
    found = _gpu_only_process(export, tmp_path)
    if found is None:
        pytest.skip(f"{export.name} has one process with kernels")
    copy, pid = found
    out = tmp_path / "out"
    assert cli("convert", str(copy), "-o", str(out), "--no-progress") == 0
    threads, _, counts = _rows(out)
    tasks = [line for line in out.with_name(out.name + ".row").read_text().splitlines()
             if f":{pid} " in line]
    assert len(tasks) == 1
    got = analyse(out.with_name(out.name + ".prv"))
    objects = [(task, thread) for task, n in enumerate(counts, 1) for thread in range(1, n + 1)]
    assert got.positional == objects
    assert all(HOST_ROW.match(threads[sum(counts[:i])]) for i in range(len(counts)))
    summary = json.loads(out.with_name(out.name + ".summary.json").read_text())
    assert {f"{d['host']}:D{d['device']}": d["useful_ns"] for d in summary["devices"]} \
        == got.useful
    # the main thread holds nothing: one more host thread for it than for the summary
    assert got.host_threads == sum(h["threads"] for h in summary["host_metrics"]["hosts"]) + 1
