"""What most kinds convert a row to: a begin and an end event (and maybe a state) on one
thread, with sort keys; plus GPU activity intervals for the efficiency model.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from prvstream.daemon.kinds.base import ChunkResult
from prvstream.daemon.kinds.context import (
    ReportContext,
    factorize,
    process_of,
    tid_of,
)
from prvstream.sinks.arrays import unique_inverse
from prvstream.sinks.base import ACTIVITY_DTYPE, HOST_DTYPE, HostKind
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver.records import (
    PRIO_BEGIN,
    PRIO_END,
    PRIO_END_AFTER_BEGIN,
    Lines,
    RecordBatch,
    event_lines,
    make_keys,
)

__all__ = [
    "LINE_COMM",
    "LINE_EVENT",
    "LINE_STATE",
    "activity",
    "cpu_named",
    "end_prio",
    "host_calls",
    "interval_batch",
    "process_indices",
    "state_starts",
]

log = get_logger(__name__)

#: record rank = kind rank * 4 + line type, so that at one instant on one object the order is
#: fixed
LINE_STATE, LINE_EVENT, LINE_COMM = 0, 1, 2


def end_prio(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """An end sorts before begins at its instant, but after its own zero-length begin."""
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
    order = code.argsort(kind="stable")
    sorted_code = code[order]
    cuts = np.diff(sorted_code).nonzero()[0] + 1
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(order)], strict=True):
        if hi <= lo:
            continue
        idx = order[lo:hi]
        c = int(sorted_code[lo])
        obj_task, obj_thread = c >> 32, c & 0xFFFFFFFF
        carry = ctx.state_end(kind, obj_task, obj_thread)
        e = end[idx]
        prev = np.maximum.accumulate(np.concatenate(([carry], e)))[:-1]
        out[idx] = np.minimum(np.maximum(start[idx], prev), e)
        ctx.set_state_end(kind, obj_task, obj_thread, max(carry, int(e.max())))
    return out


def interval_batch(ctx: ReportContext, kind: str, rank: int, start: np.ndarray,
                   end: np.ndarray, task: np.ndarray, thread: np.ndarray, begin_lines: Lines,
                   end_lines: Lines, state_lines: Lines | None = None,
                   end_priority: np.ndarray | None = None) -> RecordBatch:
    """Begin and end events (and states) of intervals, keyed for the merge."""
    seq = ctx.next_seq(kind, len(start))
    rank = rank * 4
    prio = end_prio(start, end) if end_priority is None else end_priority
    parts = [
        begin_lines.batch(make_keys(start, PRIO_BEGIN, task, thread, rank + LINE_EVENT,
                                    ctx.report_index, seq)),
        end_lines.batch(make_keys(end, prio, task, thread, rank + LINE_EVENT,
                                  ctx.report_index, seq)),
    ]
    if state_lines is not None:
        parts.append(state_lines.batch(make_keys(start, PRIO_BEGIN, task, thread,
                                                 rank + LINE_STATE, ctx.report_index, seq)))
    return RecordBatch.concat(parts)


def activity(ctx: ReportContext, chunk: np.ndarray, start: np.ndarray, end: np.ndarray,
             kind: np.ndarray | int) -> np.ndarray:
    """GPU activity intervals of a GPU kind's chunk (true times, not the shown ones)."""
    act = np.empty(len(chunk), dtype=ACTIVITY_DTYPE)
    act["start"] = start
    act["end"] = end
    act["stream"] = chunk["stream"]
    act["kind"] = kind
    pairs, inverse = factorize(chunk, ("gpid", "device"))
    dev = np.array([ctx.device_index.get((g, d), 0) for g, d in pairs], dtype=np.int32)
    act["device"] = dev[inverse]
    return act


def process_indices(ctx: ReportContext, gpids: np.ndarray) -> np.ndarray:
    """Per row, the index into ``ReportInfo.processes`` of its process (globalPid ``gpids``)."""
    uniq, inverse = unique_inverse(gpids)
    procs = np.array([ctx.process_index.get(g, 0) for g in uniq.tolist()], dtype=np.int64)
    out: np.ndarray = procs[inverse]
    return out


def host_calls(ctx: ReportContext, gtid: np.ndarray, start: np.ndarray, end: np.ndarray,
               kind: HostKind) -> np.ndarray:
    """HOST_DTYPE rows of CPU calls (trace-relative times) for the host metrics: each call's
    process as an index into ``ReportInfo.processes`` and its thread's OS tid."""
    out = np.empty(len(start), dtype=HOST_DTYPE)
    out["start"], out["end"], out["kind"] = start, np.maximum(end, start), int(kind)
    out["thread"] = tid_of(gtid)
    out["process"] = process_indices(ctx, process_of(gtid))
    return out


def cpu_named(ctx: ReportContext, chunk: np.ndarray, kind: str, rank: int, group: str,
              type_of: Callable[[str], int], host: HostKind | None = None) -> ChunkResult:
    """A CPU call interval named by a string id: event ``type_of(label)`` with the label's
    value at start, 0 at end (an end before its start is clamped to the start)."""
    start = chunk["start"] + ctx.offset
    end = np.maximum(chunk["end"] + ctx.offset, start)
    task, thread = ctx.cpu_objects(chunk["gtid"])
    value, labels, inverse = ctx.values(group, chunk["name"])
    etype = np.array([type_of(lab) for lab in labels], dtype=np.int64)[inverse]
    begin = event_lines(task, thread, start, (etype, value))
    finish = event_lines(task, thread, end, (etype, 0))
    return ChunkResult(
        interval_batch(ctx, kind, rank, start, end, task, thread, begin, finish),
        rows=len(chunk),
        host=None if host is None else host_calls(ctx, chunk["gtid"], start, end, host),
    )
