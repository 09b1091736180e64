"""Paraver trace format: header, .pcf, .row, record line templates, and crash-safe file output.

Knows the format rules learned from Paraver's loader: ``_ns`` times relative to the trace
origin, integer fields only, no trailing spaces on records, a fixed-capacity header padded with
``,0`` and spaces so it can be rewritten in place, value keys that fit in int32.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import msgspec

from prvstream.sinks.logger import get_logger

__all__ = [
    "EV_API",
    "EV_CORRELATION",
    "EV_GPU_METRIC_BASE",
    "EV_GRAPH",
    "EV_KERNEL",
    "EV_KERNEL_ATTRS",
    "EV_MEMOP",
    "EV_MEMOP_BYTES",
    "EV_MPI_BASE",
    "EV_NCCL",
    "EV_NVTX_MARK",
    "EV_NVTX_PUSHPOP_BASE",
    "EV_NVTX_STARTEND",
    "EV_OPENACC",
    "EV_OSRT",
    "EV_SYNC",
    "MAX_PARAVER_OBJECTS",
    "STATE_COMM",
    "STATE_IDLE",
    "STATE_MEMORY",
    "STATE_NAMES",
    "STATE_OTHERS",
    "STATE_RUNNING",
    "STATE_SCHEDULING",
    "STATE_SYNC",
    "TAG_API_MEMCPY",
    "TAG_LAUNCH_KERNEL",
    "EventTypeSpec",
    "TaskLayout",
    "TraceLayout",
    "header_from_parts",
    "header_line",
    "header_task",
    "pcf_text",
    "rewrite_header",
    "row_from_parts",
    "row_label",
    "row_line",
    "row_pieces",
    "row_text",
    "sanitize_label",
    "sanitize_many",
    "sanitize_once",
]

log = get_logger(__name__)

# Event types (interoperable with BSC's GPU cfgs and BasicAnalysis; see docs/mapping.md).
EV_API = 63000000
EV_MEMOP = 63000001
EV_MEMOP_BYTES = 63000002
EV_SYNC = 63000004
EV_KERNEL = 63000006
EV_NCCL = 63000007
EV_GRAPH = 63000100
EV_OPENACC = 63000200
#: kernel attributes emitted with each kernel begin, all ended with 0 at the kernel's end:
#: (type, label, column of the kernel batch); numbers and labels as nsys2prv writes them
EV_KERNEL_ATTRS: tuple[tuple[int, str, str], ...] = (
    (9101, "Kernel GrdX", "grid_x"),
    (9102, "Kernel GrdY", "grid_y"),
    (9103, "Kernel GrdZ", "grid_z"),
    (9104, "Kernel BlkX", "block_x"),
    (9105, "Kernel BlkY", "block_y"),
    (9106, "Kernel BlkZ", "block_z"),
    (9107, "Kernel Static Shared Memory", "smem_static"),
    (9108, "Kernel Dynamic Shared Memory", "smem_dynamic"),
    (9109, "Kernel Local memory reserved for kernel", "local_mem"),
    (9110, "Kernel Registers/Thread", "registers"),
)
EV_CORRELATION = 9200
EV_OSRT = 9300
EV_NVTX_STARTEND = 9004
EV_NVTX_MARK = 9005
#: NVTX push/pop ranges of domain k (0 = default domain) use type 9600 + 100*k
EV_NVTX_PUSHPOP_BASE = 9600
EV_MPI_BASE = 50000000
#: metric m of GPU metrics uses type 9400 + m
EV_GPU_METRIC_BASE = 9400

TAG_LAUNCH_KERNEL = 55001
TAG_API_MEMCPY = 55002

STATE_IDLE = 0
STATE_RUNNING = 1
STATE_SYNC = 5
#: Extrae's states of a host thread inside a CUDA runtime call other than a synchronization
#: or a copy: launches (its "overhead" state) and everything else
STATE_SCHEDULING = 7
STATE_OTHERS = 15
STATE_COMM = 13
STATE_MEMORY = 17
STATE_NAMES: dict[int, str] = {
    0: "Idle",
    1: "Running",
    2: "Not created",
    3: "Waiting a message",
    4: "Blocking Send",
    5: "Synchronization",
    6: "Test/Probe",
    7: "Scheduling and Fork/Join",
    8: "Wait/WaitAll",
    9: "Blocked",
    10: "Immediate Send",
    11: "Immediate Receive",
    12: "I/O",
    13: "Group Communication",
    14: "Tracing Disabled",
    15: "Others",
    16: "Send Receive",
    17: "Memory transfer",
}
_STATE_COLORS: dict[int, tuple[int, int, int]] = {
    0: (117, 195, 255),
    1: (0, 0, 255),
    2: (255, 255, 255),
    3: (255, 0, 0),
    4: (255, 0, 174),
    5: (179, 0, 0),
    6: (0, 255, 0),
    7: (255, 255, 0),
    8: (235, 0, 0),
    9: (0, 162, 0),
    10: (255, 0, 255),
    11: (100, 100, 177),
    12: (172, 174, 41),
    13: (255, 144, 26),
    14: (2, 255, 177),
    15: (192, 224, 0),
    16: (66, 66, 66),
    17: (189, 168, 100),
}

#: default Paraver builds hold at most this many tasks or threads
MAX_PARAVER_OBJECTS = 65535
#: the largest value key the .pcf may hold
MAX_VALUE_KEY = 2**31 - 1
_LABEL_LIMIT = 400
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


#: labels made before (every report of a job names the same kernels and calls), bounded:
#: texts up to the label limit, at most this many
_SANITIZED: dict[str, str] = {}
_SANITIZED_KEPT = 4096


def sanitize_once(text: str) -> str:
    """``sanitize_label`` without its memo, for a text met once (a task's or a thread's
    label: kept in the memo it would only hold a string an object, up to the bound)."""
    clean = _CONTROL.sub(" ", text).strip()
    if len(clean) > _LABEL_LIMIT:
        clean = clean[: _LABEL_LIMIT - 3] + "..."
    return clean or "(unnamed)"


def sanitize_many(texts: Sequence[str]) -> list[str]:
    """``sanitize_label`` of every text, in order: one search for control characters over
    them all, and a strip of each, when none has any and every label is of a fit length (an
    export's thousands of inline NVTX texts), else one at a time."""
    joined = "".join(texts)  # printable: no control character (the search's 10x cost)
    if joined.isprintable() or _CONTROL.search(joined) is None:
        out = [text.strip() for text in texts]
        if not out or (min(map(len, out)) > 0 and max(map(len, out)) <= _LABEL_LIMIT):
            return out
    return [sanitize_once(text) for text in texts]


def sanitize_label(text: str) -> str:
    """Make a name safe for one .pcf/.row line: no control characters, bounded length."""
    found = _SANITIZED.get(text)
    if found is not None:
        return found
    clean = sanitize_once(text)
    if len(text) <= _LABEL_LIMIT:
        if len(_SANITIZED) >= _SANITIZED_KEPT:
            _SANITIZED.clear()
        _SANITIZED[text] = clean
    return clean


class TaskLayout(msgspec.Struct):
    """One Paraver task (a process): its name, node (1-based) and thread names in id order."""

    name: str
    node: int
    threads: list[str] = msgspec.field(default_factory=list)


class TraceLayout(msgspec.Struct):
    """The object tree of a trace: one application, its tasks, their threads, the nodes."""

    nodes: list[str] = msgspec.field(default_factory=list)
    tasks: list[TaskLayout] = msgspec.field(default_factory=list)

    def thread_count(self) -> int:
        return sum(len(t.threads) for t in self.tasks)


class EventTypeSpec(msgspec.Struct):
    """One EVENT_TYPE block of the .pcf: type ids sharing one value table."""

    types: list[tuple[int, str]]
    values: Mapping[int, str] = msgspec.field(default_factory=dict)
    gradient: int = 0


def header_task(threads: int, node: int) -> str:
    """One task's ``<threads>:<node>`` in the header's task list."""
    return f"{max(threads, 1)}:{node}"


def header_from_parts(nodes: int, tasks: Sequence[str], end_time: int, origin_wall_ns: int,
                      capacity: int = 0) -> bytes:
    """``header_line`` from the node count and each task's ``header_task`` (a live trace
    keeps them between appends)."""
    when = dt.datetime.fromtimestamp(origin_wall_ns / 1e9, tz=dt.UTC)
    stamp = when.strftime("%d/%m/%Y at %H:%M")
    node_list = ",".join("1" for _ in range(nodes)) or "1"
    task_list = ",".join(tasks) or "1:1"
    body = (
        f"#Paraver ({stamp}):{max(end_time, 0)}_ns:{max(nodes, 1)}({node_list})"
        f":1:{max(len(tasks), 1)}({task_list}),0"
    ).encode()
    if capacity <= 0:
        return body + b"\n"
    if len(body) + 1 > capacity:
        raise ValueError(f"header needs {len(body) + 1} bytes, capacity is {capacity}")
    return body + b" " * (capacity - len(body) - 1) + b"\n"


def header_line(
    layout: TraceLayout, end_time: int, origin_wall_ns: int, capacity: int = 0
) -> bytes:
    """The .prv header, padded with spaces to ``capacity`` bytes (newline included).

    Raises ``ValueError`` when the header does not fit; callers then rewrite the file with a
    larger capacity.
    """
    return header_from_parts(len(layout.nodes),
                             [header_task(len(t.threads), t.node) for t in layout.tasks],
                             end_time, origin_wall_ns, capacity)


def rewrite_header(path: Path, header: bytes) -> None:
    """Overwrite the first ``len(header)`` bytes in place (the line keeps its byte length)."""
    with path.open("r+b") as fh:
        old = fh.read(len(header))
        if len(old) != len(header) or old[-1:] != b"\n":
            raise ValueError(f"{path}: header capacity changed; rewrite the trace")
        fh.seek(0)
        fh.write(header)
        fh.flush()
        os.fsync(fh.fileno())


def pcf_text(event_types: Iterable[EventTypeSpec]) -> str:
    """The .pcf file: display defaults, states with colours, one block per event type group."""
    out: list[str] = [
        "DEFAULT_OPTIONS",
        "",
        "LEVEL               THREAD",
        "UNITS               NANOSEC",
        "LOOK_BACK           100",
        "SPEED               1",
        "FLAG_ICONS          ENABLED",
        "NUM_OF_STATE_COLORS 1000",
        "YMAX_SCALE          37",
        "",
        "",
        "DEFAULT_SEMANTIC",
        "",
        "THREAD_FUNC          State As Is",
        "",
        "",
        "STATES",
    ]
    out += [f"{key:<4}{name}" for key, name in STATE_NAMES.items()]
    out += ["", "", "STATES_COLOR"]
    out += [f"{key:<4}{{{r},{g},{b}}}" for key, (r, g, b) in _STATE_COLORS.items()]
    out.append("")
    for spec in event_types:
        out += ["", "EVENT_TYPE"]
        for type_id, label in spec.types:
            out.append(f"{spec.gradient}    {type_id}    {sanitize_label(label)}")
        if spec.values:
            out.append("VALUES")
            keys = sorted(spec.values)
            if not 0 <= keys[0] <= keys[-1] <= MAX_VALUE_KEY:
                bad = next(k for k in keys if not 0 <= k <= MAX_VALUE_KEY)
                raise ValueError(f"value key {bad} does not fit in int32")
            labels = sanitize_many([spec.values[key] for key in keys])
            out += [f"{key}      {label}" for key, label in zip(keys, labels, strict=True)]
        out.append("")
    return "\n".join(out) + "\n"


def row_label(task: int, thread: int, key: tuple[int, int, int], host: str) -> str:
    """A thread's row in the .row file, in the conventions BSC's tools read.

    ``key`` is the thread's kind and identity: ``(0, tid, 0)`` a CPU thread, written
    ``THREAD 1.<task>.<thread>`` as Extrae does (BasicAnalysis takes such rows for host
    threads); ``(1, device, stream)`` a GPU stream, written ``CUDA-D<device>.S<stream>-<host>``
    (``CUDA-D<device>.sync-<host>`` for synchronizations not tied to a stream), Extrae's
    stream rows with nsys's device and stream ids; ``(2, gpu, 0)`` a GPU's metrics, written
    ``Metrics GPU<gpu>`` as nsys2prv does. The process's readable name is the task's row.
    """
    if key[0] == 0:
        return f"THREAD 1.{task}.{thread}"
    if key[0] == 1:
        stream = f"S{key[2]}" if key[2] >= 0 else "sync"
        node = re.sub(r"\s+", "_", sanitize_label(host)) if host else "unknown-host"
        return f"CUDA-D{key[1]}.{stream}-{node}"
    return f"Metrics GPU{key[1]}"


def row_line(task: int, thread: int, key: tuple[int, int, int], host: str) -> str:
    """``sanitize_label(row_label(...))`` without the memo: each thread's row is met once, so
    keeping it there would only hold a string a thread (up to the memo's bound)."""
    return sanitize_once(row_label(task, thread, key, host))


def row_text(layout: TraceLayout) -> str:
    """The .row file: CPU, node, task and thread names in object order."""
    return row_from_parts([sanitize_label(n) for n in layout.nodes],
                          [sanitize_label(t.name) for t in layout.tasks],
                          [[sanitize_label(name) for name in t.threads]
                           for t in layout.tasks]).decode()


def row_from_parts(nodes: Sequence[str], tasks: Sequence[str],
                   threads: Sequence[Sequence[str]]) -> bytes:
    """The .row file from names already sanitized: nodes, tasks, each task's threads."""
    return b"".join(row_pieces(nodes, len(tasks), ("".join(t + "\n" for t in tasks).encode(),),
                               sum(len(t) for t in threads),
                               ("".join(n + "\n" for names in threads for n in names).encode(),)))


def row_pieces(nodes: Sequence[str], tasks: int, task_lines: Iterable[bytes], threads: int,
               thread_lines: Iterable[bytes]) -> Iterator[bytes]:
    """The .row file in pieces, every task's and thread's name sanitized, encoded and
    newline-ended in ``task_lines`` and ``thread_lines`` (pieces in order: a live trace keeps
    them so between appends, no string a task); ``tasks`` and ``threads`` count them."""
    nodes = nodes or ["node"]
    out = [f"LEVEL CPU SIZE {len(nodes)}"]
    out += [f"CPU {i}.1 {n}" for i, n in enumerate(nodes, 1)]
    out += ["", f"LEVEL NODE SIZE {len(nodes)}", *nodes]
    out += ["", f"LEVEL TASK SIZE {tasks}"]
    yield ("\n".join(out) + "\n").encode()
    yield from task_lines
    yield f"\nLEVEL THREAD SIZE {threads}\n".encode()
    yield from thread_lines


