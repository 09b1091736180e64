"""The facts BSC's BasicAnalysis relies on hold on our traces (``tests/compat/basicanalysis.py``).

On every real export: the trace is Extrae-style (its .pcf has STATES), every CPU thread row is
``THREAD 1.<task>.<thread>`` for its own position, every stream row ``CUDA-D<d>.S<s>-<host>``
of its task's host; what BasicAnalysis computes from the rows and events (device useful and
communication time, LB, CE, OE, PE, and the host threads' Running time and host offload
efficiency) equals our summary over the summary's T.
"""

from __future__ import annotations

import json
import math
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
    assert got.has_states  # Extrae-style: the path that reads states and these row labels
    want = {f"{d['host']}:D{d['device']}": (d["useful_ns"], d["comm_ns"])
            for d in summary["devices"]}
    assert {k: (got.useful[k], got.comm[k]) for k in got.useful} == want
    metrics = got.device(summary["span_ns"])
    mine = summary["metrics"]
    for ours, theirs in (("load_balance", "LB"), ("communication_efficiency", "CE"),
                         ("orchestration_efficiency", "OE"), ("parallel_efficiency", "PE")):
        assert math.isclose(mine[ours], metrics[theirs], rel_tol=1e-9), (ours, metrics)
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
    device as on ours, and no more communication (it counts memcpy values 3-6 only, which
    nsys2prv does not keep for copies: its own limit, docs/mapping.md)."""
    theirs, _ = nsys2prv_trace(export)
    out = tmp_path / export.stem
    assert cli("convert", str(export), "-o", str(out), "--no-progress") == 0
    ours = analyse(out.with_name(out.name + ".prv"))
    got = analyse(theirs)
    assert got.nsys2prv and not got.has_states and not ours.nsys2prv
    assert sorted(got.useful.values()) == sorted(ours.useful.values())
    assert sum(got.comm.values()) <= sum(ours.comm.values())
    assert got.host_threads > 0 and 0.0 < got.offload(got.trace_ns) <= 1.0
