"""Host-thread states as Extrae writes them: a CPU thread is Running outside CUDA runtime calls
and in the call's state inside one (synchronization, memory transfer, launch, other).

BSC's BasicAnalysis takes a host thread's useful time from its Running state, so this is what
makes host offload efficiency computable from a trace. Every CPU thread of a report with CUDA
runtime calls gets states from the report's first record to its last. The Running stretch after
a thread's last call cannot be written until its next call (or the report's end) is known; to
keep memory bounded it is cut at every multiple of ``GRID`` and written up to the last grid
point the runtime stream has passed, so the stream's watermark lags by at most ``GRID``. The
cuts depend on the data only, never on chunking, so outputs stay byte-identical.
"""

from __future__ import annotations

import numpy as np

from prvstream.daemon.kinds.context import ReportContext
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.records import PRIO_BEGIN, RecordBatch, make_keys, state_lines

__all__ = ["GRID", "api_state", "finish", "register", "states", "watermark"]

log = get_logger(__name__)

#: Running stretches are cut at every multiple of this many ns
GRID = 1_000_000_000
#: sort rank of host states (the runtime kind's rank; line type 0: states)
_RANK = 5 * 4


def api_state(label: str) -> int:
    """The state of a host thread inside the CUDA runtime call ``label`` (Extrae's choice:
    synchronizations 5, copies and memsets 17, launches 7, anything else 15)."""
    if "Synchronize" in label or "Wait" in label or "Query" in label:
        return pv.STATE_SYNC
    if "Memcpy" in label or "Memset" in label:
        return pv.STATE_MEMORY
    if "Launch" in label:
        return pv.STATE_SCHEDULING
    return pv.STATE_OTHERS


def register(ctx: ReportContext, tasks: np.ndarray, threads: np.ndarray) -> None:
    """The CPU threads that get host states, Running from the report's first record."""
    for key in zip(tasks.tolist(), threads.tolist(), strict=True):
        ctx.host_pending.setdefault(key, ctx.start_rel)


def _cut(begin: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals [begin, end) cut at every multiple of ``GRID``; empty ones dropped."""
    keep = end > begin
    begin, end = begin[keep], end[keep]
    pieces = (end - 1) // GRID - begin // GRID + 1
    idx = np.repeat(np.arange(len(begin)), pieces)
    k = np.arange(len(idx)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    cell = begin[idx] // GRID + k
    return np.where(k == 0, begin[idx], cell * GRID), np.minimum(end[idx], (cell + 1) * GRID)


class _Out:
    def __init__(self) -> None:
        self.parts: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, key: tuple[int, int], begin: np.ndarray, end: np.ndarray,
            state: np.ndarray | int) -> None:
        if len(begin):
            st = np.broadcast_to(np.asarray(state, dtype=np.int64), begin.shape)
            self.parts.append((key[0], key[1], begin, end, st))

    def batch(self, ctx: ReportContext) -> RecordBatch:
        if not self.parts:
            return RecordBatch()
        task = np.concatenate([np.full(len(p[2]), p[0], dtype=np.int64) for p in self.parts])
        thread = np.concatenate([np.full(len(p[2]), p[1], dtype=np.int64) for p in self.parts])
        begin = np.concatenate([p[2] for p in self.parts])
        end = np.concatenate([p[3] for p in self.parts])
        state = np.concatenate([p[4] for p in self.parts])
        seq = ctx.next_seq("host_state", len(begin))
        keys = make_keys(begin, PRIO_BEGIN, task, thread, _RANK, ctx.report_index, seq)
        return state_lines(task, thread, begin, end, state).batch(keys)


def _advance(ctx: ReportContext, out: _Out, upto: int) -> None:
    for key, pending in ctx.host_pending.items():
        if upto > pending:
            begin, end = _cut(np.array([pending]), np.array([upto]))
            out.add(key, begin, end, pv.STATE_RUNNING)
            ctx.host_pending[key] = upto


def states(ctx: ReportContext, task: np.ndarray, thread: np.ndarray, start: np.ndarray,
           end: np.ndarray, state: np.ndarray) -> RecordBatch:
    """The states of one chunk of runtime calls (trace-relative times, in start order), then
    every registered thread Running up to the last grid point before the chunk's last call."""
    out = _Out()
    code = (task.astype(np.int64) << 32) | thread.astype(np.int64)
    order = np.lexsort((start, code))
    cuts = np.flatnonzero(np.diff(code[order])) + 1
    for idx in np.split(order, cuts):
        key = (int(task[idx[0]]), int(thread[idx[0]]))
        pending = ctx.host_pending.get(key, ctx.start_rel)
        s, e = start[idx], np.maximum(end[idx], start[idx])
        before = np.maximum.accumulate(np.concatenate(([pending], e)))[:-1]
        out.add(key, *_cut(before, s), pv.STATE_RUNNING)
        inside = np.maximum(s, before)
        busy = e > inside
        out.add(key, inside[busy], e[busy], state[idx][busy])
        ctx.host_pending[key] = max(pending, int(e.max()))
    last = int(start.max())
    _advance(ctx, out, last - last % GRID)
    return out.batch(ctx)


def watermark(ctx: ReportContext, mark: int) -> int:
    """No host state written later begins before this."""
    return min([mark, *ctx.host_pending.values()])


def finish(ctx: ReportContext) -> RecordBatch:
    """Every registered thread Running from its last call to the report's last record."""
    out = _Out()
    _advance(ctx, out, ctx.end_rel)
    return out.batch(ctx)
