"""What BSC's BasicAnalysis (its GPU paths, read at commit 099bac8c) computes from a trace, redone.

BasicAnalysis is not vendored or run here; these are the facts it relies on, stated as code
so tests can pin them on our traces (docs/mapping.md has what it gave when run beside the
project). Its mode comes from byte markers in the .pcf: no ``STATES`` section and nsys2prv's
labels make an nsys2prv trace (stream rows ``CUDA-D<d>.S<s>`` on the task's node, host threads
= the other rows of processes with streams, memcpy values 3-6 only, NCCL kernels 63000007 as
communication, host useful = T minus each host thread's time in CUDA calls). Otherwise
``Detailed`` plus ``+MPI`` for the 500000xx types and ``+CUDA`` for 630000xx; ``Detailed+CUDA``
takes the Extrae GPU path. It reads the .row thread labels by position: a ``THREAD a.t.h`` row
sets the task, every other row is the next thread of that task; ``CUDA-D<d>.<anything>-<node>``
rows are streams of device ``<node>:D<d>``. Device useful time is the union of the stream rows'
Running (state 1) time; communication is the union of their Memory transfer (state 17) time
not under useful time (NCCL kernels, state 13, are neither); T is the trace length. Host
useful time is the Running time of the ``THREAD`` rows and its host offload efficiency that
over (``THREAD`` rows x T).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["HOST_ROW", "NSYS2PRV_LABELS", "STREAM_ROW", "Metrics", "analyse", "mode", "union"]

#: the host-thread and GPU-stream row labels BasicAnalysis recognises in Extrae-style traces
HOST_ROW = re.compile(r"^THREAD\s+(\d+)\.(\d+)\.(\d+)\s*$")
STREAM_ROW = re.compile(r"^(?:CUDA|HIP)-(D\d+)\.[^-]*-(\S+)\s*$")
#: nsys2prv's traces: their .pcf labels, stream rows without the node, GPU metrics rows, and
#: the memcpy values BasicAnalysis counts (it hard-codes 3-6; nsys2prv numbers them as it goes)
NSYS2PRV_LABELS = ("CUDA memcpy kernel", "NCCL kernel")
NSYS2PRV_STREAM_ROW = re.compile(r"^(?:CUDA|HIP)-(D\d+)\.S(\d+)(?:-(\S+))?\s*$")
METRICS_ROW = re.compile(r"^Metrics GPU\d+\s*$")
NSYS2PRV_MEMOPS = frozenset({3, 4, 5, 6})
_NSYS2PRV_GPU = {63000006: "kernel", 63000001: "memop", 63000007: "nccl"}
#: Extrae path: the stream states it reads (and state 13, which it does not count)
_EXTRAE_STATES = {1: "kernel", 17: "memop", 13: "nccl"}
#: .pcf byte markers of its mode detection (a type line is ``0    <type>    <label>``)
_MARKERS = (("Sampling", b"    30000"), ("+MPI", b"   500000"), ("+Pthreads", b"   610000"),
            ("+CUDA", b"   630000"), ("+CUDA", b"   631000"), ("+CUDA", b"   632000"),
            ("+HIP", b"   635000"))

Intervals = list[tuple[int, int]]


def union(intervals: Intervals) -> Intervals:
    out: Intervals = []
    for b, e in sorted(intervals):
        if out and b <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        elif e > b:
            out.append((b, e))
    return out


def _total(intervals: Intervals) -> int:
    return sum(e - b for b, e in intervals)


def _minus(a: Intervals, b: Intervals) -> int:
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


def mode(pcf: bytes) -> str:
    """Its trace mode from the .pcf bytes (``Detailed``: no burst events in our traces)."""
    if re.search(rb"(?m)^STATES\s*$", pcf) is None and any(
            label.encode() in pcf for label in NSYS2PRV_LABELS):
        return "nsys2prv+CUDA"
    if _MARKERS[0][1] in pcf:
        return "Sampling"
    found = [name for name, marker in _MARKERS[1:] if marker in pcf]
    return "Detailed" + "".join(dict.fromkeys(found))


@dataclass
class Metrics:
    """The numbers BasicAnalysis reports for a GPU trace (times in ns)."""

    mode: str = ""
    trace_ns: int = 0
    useful: dict[str, int] = field(default_factory=dict)
    comm: dict[str, int] = field(default_factory=dict)
    #: Extrae path: the kernel event's (63000006) union per device, what its older cfg
    #: (Running x kernel event) reads, and the communication it would see if it took the NCCL
    #: kernels (state 13) as communication too, as the summary does by default
    kernel_event: dict[str, int] = field(default_factory=dict)
    comm_with_nccl: dict[str, int] = field(default_factory=dict)
    nccl_ns: dict[str, int] = field(default_factory=dict)
    host_threads: int = 0
    host_useful_ns: int = 0
    host_cuda_ns: int = 0
    #: Extrae path: the (task, thread) it reads for each THREAD-section row, by position
    positional: list[tuple[int, int] | None] = field(default_factory=list)

    @property
    def has_states(self) -> bool:
        return self.mode != "nsys2prv+CUDA"

    @property
    def nsys2prv(self) -> bool:
        return self.mode == "nsys2prv+CUDA"

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


def _positional(labels: list[str]) -> list[tuple[int, int] | None]:
    """The (task, thread) of each row as its Extrae path reads the .row: a THREAD row sets the
    task, any other row is the next thread of the last THREAD row's task."""
    out: list[tuple[int, int] | None] = []
    current: tuple[int, int] | None = None
    for label in labels:
        m = HOST_ROW.match(label)
        if m:
            current = (int(m.group(2)), int(m.group(3)))
        elif current is not None:
            current = (current[0], current[1] + 1)
        out.append(current)
    return out


def _levels(row: Path) -> dict[str, list[str]]:
    levels: dict[str, list[str]] = defaultdict(list)
    level = ""
    for line in row.read_text().splitlines():
        if line.startswith("LEVEL "):
            level = line.split()[1]
        elif line.strip():
            levels[level].append(line.strip())
    return levels


def analyse(prv: Path) -> Metrics:
    """What BasicAnalysis reads from ``prv``: as nsys2prv's when its .pcf has no STATES and
    nsys2prv's labels, else by its Extrae path."""
    with prv.open() as fh:
        header = fh.readline()
    entries = [t.split(":") for t in header.rsplit("(", 1)[1].split(")")[0].split(",")]
    counts = [int(t[0]) for t in entries]
    levels = _levels(prv.with_suffix(".row"))
    metrics = Metrics(mode=mode(prv.with_suffix(".pcf").read_bytes()))
    nsys2prv = metrics.nsys2prv
    objects = [(task, thread) for task, n in enumerate(counts, 1) for thread in range(1, n + 1)]
    metrics.positional = _positional(levels["THREAD"])
    # the Extrae path keys rows by the object it reads by position, nsys2prv's by the header's
    read_as = objects if nsys2prv else metrics.positional
    stream_of: dict[tuple[int, int], str] = {}
    host: set[tuple[int, int]] = set()
    for obj, read, label in zip(objects, read_as, levels["THREAD"], strict=True):
        m = (NSYS2PRV_STREAM_ROW if nsys2prv else STREAM_ROW).match(label)
        if m and nsys2prv:
            node_id = int(entries[obj[0] - 1][1])
            node = levels["NODE"][node_id - 1] if 0 < node_id <= len(levels["NODE"]) \
                else f"node{node_id}"
            stream_of[obj] = f"{m.group(3) or node}:{m.group(1)}"
        elif m and read is not None:
            stream_of[read] = f"{m.group(2)}:{m.group(1)}"
        elif (nsys2prv and not METRICS_ROW.match(label)) or HOST_ROW.match(label):
            host.add(obj)
    if nsys2prv:  # the host threads of the processes with GPU streams
        host = {o for o in host if o[0] in {s[0] for s in stream_of}}
    metrics.host_threads = len(host)
    opened: dict[tuple[tuple[int, int], int], int] = {}
    gpu: dict[str, dict[str, Intervals]] = defaultdict(lambda: defaultdict(list))
    cuda_calls: dict[tuple[int, int], int] = defaultdict(int)
    end = 0
    with prv.open() as fh:
        next(fh)
        for line in fh:
            f = line.rstrip().split(":")
            obj = (int(f[3]), int(f[4]))
            if f[0] == "1":
                begin, stop, state = int(f[5]), int(f[6]), int(f[7])
                end = max(end, stop)
                if obj in host and state == 1:
                    metrics.host_useful_ns += stop - begin
                elif not nsys2prv and obj in stream_of and state in _EXTRAE_STATES:
                    gpu[stream_of[obj]][_EXTRAE_STATES[state]].append((begin, stop))
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
                elif int(etype) in _NSYS2PRV_GPU and obj in stream_of:
                    what = _NSYS2PRV_GPU[int(etype)] if nsys2prv else "kernel_event"
                    if not nsys2prv and int(etype) != 63000006:
                        continue
                    if value == "0":
                        if key in opened:
                            gpu[stream_of[obj]][what].append((opened.pop(key), t))
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
        metrics.useful[device] = _total(useful)
        if nsys2prv:
            metrics.comm[device] = _minus(union(gpu[device]["memop"] + gpu[device]["nccl"]),
                                          useful)
            continue
        metrics.comm[device] = _minus(union(gpu[device]["memop"]), useful)
        metrics.comm_with_nccl[device] = _minus(
            union(gpu[device]["memop"] + gpu[device]["nccl"]), useful)
        metrics.kernel_event[device] = _total(union(gpu[device]["kernel_event"]))
        metrics.nccl_ns[device] = _total(union(gpu[device]["nccl"]))
    return metrics
