"""What BSC's BasicAnalysis (its GPU path, read at commit 099bac8c) computes from a trace, redone.

BasicAnalysis is not vendored or run here; these are the facts it relies on, stated as code
so tests can pin them on our traces. It takes a trace for nsys2prv's when the .pcf has no
``STATES`` section and carries nsys2prv's labels (then: stream rows ``CUDA-D<d>.S<s>`` on the
task's node, host threads = the other rows of processes with streams, memcpy values 3-6 only,
host useful = T minus each host thread's time in CUDA calls), else for Extrae's. On an
Extrae-style trace it classifies .row thread labels: ``THREAD a.t.h`` rows are host threads,
``CUDA-D<d>.S<s>-<node>`` rows are GPU streams of device ``<node>:D<d>``. Device useful time
is the union of the kernel (63000006) intervals of a device's streams; its communication is
the union of memory operations (63000001) and NCCL kernels (63000007) not under useful time;
T is the trace length. Host useful time is the time host threads spend in state 1 Running,
the time in CUDA calls that of event 63000000; without MPI its host device offload
efficiency is the host useful time over (host threads x T).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["HOST_ROW", "NSYS2PRV_LABELS", "STREAM_ROW", "Metrics", "analyse", "union"]

#: the host-thread and GPU-stream row labels BasicAnalysis recognises in Extrae-style traces
HOST_ROW = re.compile(r"^THREAD\s+(\d+)\.(\d+)\.(\d+)\s*$")
STREAM_ROW = re.compile(r"^(?:CUDA|HIP)-(D\d+)\.[^-]*-(\S+)\s*$")
_GPU = {63000006: "kernel", 63000001: "memop", 63000007: "nccl"}
#: nsys2prv's traces: their .pcf labels, stream rows without the node, GPU metrics rows, and
#: the memcpy values BasicAnalysis counts (it hard-codes 3-6; nsys2prv numbers them as it goes)
NSYS2PRV_LABELS = ("CUDA memcpy kernel", "NCCL kernel")
NSYS2PRV_STREAM_ROW = re.compile(r"^(?:CUDA|HIP)-(D\d+)\.S(\d+)(?:-(\S+))?\s*$")
METRICS_ROW = re.compile(r"^Metrics GPU\d+\s*$")
NSYS2PRV_MEMOPS = frozenset({3, 4, 5, 6})


def union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for b, e in sorted(intervals):
        if out and b <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        elif e > b:
            out.append((b, e))
    return out


def _total(intervals: list[tuple[int, int]]) -> int:
    return sum(e - b for b, e in intervals)


def _minus(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Length of the union ``a`` outside the union ``b``."""
    inside = 0
    j = 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            inside += min(end, b[k][1]) - max(start, b[k][0])
            k += 1
    return _total(a) - inside


@dataclass
class Metrics:
    """The numbers BasicAnalysis reports for a GPU trace (times in ns)."""

    trace_ns: int = 0
    useful: dict[str, int] = field(default_factory=dict)
    comm: dict[str, int] = field(default_factory=dict)
    host_threads: int = 0
    host_useful_ns: int = 0
    host_cuda_ns: int = 0
    has_states: bool = False
    nsys2prv: bool = False

    def device(self, t_ns: int) -> dict[str, float]:
        """LB, CE, OE, PE over ``t_ns`` (BasicAnalysis: the trace length)."""
        useful = list(self.useful.values())
        both = [self.useful[d] + self.comm[d] for d in self.useful]
        if not useful or max(useful) == 0:
            return {"LB": float("nan"), "CE": float("nan"), "OE": 0.0, "PE": 0.0}
        return {"LB": sum(useful) / len(useful) / max(useful), "CE": max(useful) / max(both),
                "OE": max(both) / t_ns, "PE": sum(useful) / (len(useful) * t_ns)}

    def offload(self, t_ns: int) -> float:
        """Host device offload efficiency of a GPU run without MPI (its ``Detailed+CUDA``
        mode): the host threads' Running time over (host threads x ``t_ns``); BasicAnalysis
        takes ``t_ns`` = the trace length."""
        total = self.host_threads * t_ns
        return self.host_useful_ns / total if total else float("nan")


def analyse(prv: Path) -> Metrics:
    """What BasicAnalysis reads from ``prv``: as nsys2prv's when its .pcf has no STATES and
    nsys2prv's labels, else as Extrae's."""
    with prv.open() as fh:
        header = fh.readline()
    entries = [t.split(":") for t in header.rsplit("(", 1)[1].split(")")[0].split(",")]
    counts = [int(t[0]) for t in entries]
    levels: dict[str, list[str]] = defaultdict(list)
    level = ""
    for line in prv.with_suffix(".row").read_text().splitlines():
        if line.startswith("LEVEL "):
            level = line.split()[1]
        elif line.strip():
            levels[level].append(line.strip())
    pcf = prv.with_suffix(".pcf").read_text()
    has_states = re.search(r"(?m)^STATES\s*$", pcf) is not None
    nsys2prv = not has_states and any(label in pcf for label in NSYS2PRV_LABELS)
    objects = [(task, thread) for task, n in enumerate(counts, 1) for thread in range(1, n + 1)]
    stream_of: dict[tuple[int, int], str] = {}
    host: set[tuple[int, int]] = set()
    for obj, label in zip(objects, levels["THREAD"], strict=True):
        m = (NSYS2PRV_STREAM_ROW if nsys2prv else STREAM_ROW).match(label)
        if m and nsys2prv:
            node_id = int(entries[obj[0] - 1][1])
            node = levels["NODE"][node_id - 1] if 0 < node_id <= len(levels["NODE"]) \
                else f"node{node_id}"
            stream_of[obj] = f"{m.group(3) or node}:{m.group(1)}"
        elif m:
            stream_of[obj] = f"{m.group(2)}:{m.group(1)}"
        elif (nsys2prv and not METRICS_ROW.match(label)) or HOST_ROW.match(label):
            host.add(obj)
    if nsys2prv:  # the host threads of the processes with GPU streams
        host = {o for o in host if o[0] in {s[0] for s in stream_of}}
    metrics = Metrics(has_states=has_states, nsys2prv=nsys2prv, host_threads=len(host))
    opened: dict[tuple[tuple[int, int], int], int] = {}
    gpu: dict[str, dict[str, list[tuple[int, int]]]] = defaultdict(lambda: defaultdict(list))
    cuda_calls: dict[tuple[int, int], int] = defaultdict(int)
    end = 0
    with prv.open() as fh:
        next(fh)
        for line in fh:
            f = line.rstrip().split(":")
            obj = (int(f[3]), int(f[4]))
            if f[0] == "1":
                end = max(end, int(f[6]))
                if obj in host and f[7] == "1":
                    metrics.host_useful_ns += int(f[6]) - int(f[5])
                continue
            if f[0] != "2":
                continue
            t = int(f[5])
            end = max(end, t)
            for etype, value in zip(f[6::2], f[7::2], strict=True):
                key = (obj, int(etype))
                if int(etype) == 63000000 and obj in host:
                    if value != "0":
                        opened[key] = t
                    elif key in opened:
                        cuda_calls[obj] += t - opened.pop(key)
                elif int(etype) in _GPU and obj in stream_of:
                    if value == "0":
                        if key in opened:
                            gpu[stream_of[obj]][_GPU[int(etype)]].append((opened.pop(key), t))
                    elif not (nsys2prv and int(etype) == 63000001
                              and int(value) not in NSYS2PRV_MEMOPS):
                        opened[key] = t
    metrics.host_cuda_ns = sum(cuda_calls.values())
    declared = re.search(r"\):(\d+)(?:_ns)?:", header)
    metrics.trace_ns = max(end, int(declared.group(1)) if declared else 0)
    if nsys2prv:  # no states: the elapsed time minus the time in CUDA calls, per thread
        metrics.host_useful_ns = sum(max(metrics.trace_ns - cuda_calls[o], 0) for o in host)
    for device in sorted(set(stream_of.values())):
        useful = union(gpu[device]["kernel"])
        comm = union(gpu[device]["memop"] + gpu[device]["nccl"])
        metrics.useful[device] = _total(useful)
        metrics.comm[device] = _minus(comm, useful)
    return metrics
