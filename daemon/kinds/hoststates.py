"""Host-thread states as Extrae writes them: a CPU thread is Running outside CUDA runtime calls
and in the call's state inside one (synchronization, memory transfer, launch, other).

BSC's BasicAnalysis takes a host thread's useful time from its Running state, so this is what
makes host offload efficiency computable from a trace. Every CPU thread of a report with CUDA
runtime calls gets states from the report's first record to its last, outside the spans where
an earlier report of the same process gives that thread states (overlapping capture ranges:
the earlier report's states stand, ``stream.claims``). The Running stretch after
a thread's last call cannot be written until its next call (or the report's end) is known; to
keep memory bounded it is cut at every multiple of ``GRID`` and written up to the last grid
point the runtime stream has passed, so the stream's watermark lags by at most ``GRID``. The
cuts depend on the data only, never on chunking, so outputs stay byte-identical. A piece that
continues the one before it (it begins at a cut) has the low bit of its key's order set, so a
merge of committed blocks can join and cut the stretches again for another origin.
"""

from __future__ import annotations

import numpy as np

from prvstream.daemon.kinds.context import ReportContext
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.records import PRIO_BEGIN, RecordBatch, make_keys, state_lines

__all__ = ["GRID", "RANK", "api_state", "cut", "finish", "register", "states", "watermark",
           "yield_to"]

log = get_logger(__name__)

#: Running stretches are cut at every multiple of this many ns
GRID = 1_000_000_000
#: sort rank of host states (the runtime kind's rank; line type 0: states)
RANK = 5 * 4
_RANK = RANK


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


def cut(begin: np.ndarray, end: np.ndarray, grid_at: int = 0
        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals [begin, end) cut at every ``grid_at`` + multiple of ``GRID``; empty ones
    dropped. Returns begins, ends and whether each piece begins at a cut."""
    keep = end > begin
    begin, end = begin[keep] - grid_at, end[keep] - grid_at
    pieces = (end - 1) // GRID - begin // GRID + 1
    if not bool((pieces != 1).any()):  # none crosses a grid point (most chunks): as they are
        return begin + grid_at, end + grid_at, np.zeros(len(begin), bool)
    idx = np.repeat(np.arange(len(begin)), pieces)
    k = np.arange(len(idx)) - np.repeat(pieces.cumsum() - pieces, pieces)
    cell = begin[idx] // GRID + k
    return (np.where(k == 0, begin[idx], cell * GRID) + grid_at,
            np.minimum(end[idx], (cell + 1) * GRID) + grid_at, k > 0)


def _cut(begin: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return cut(begin, end)


def yield_to(spans: list[tuple[int, int]], begin: np.ndarray, end: np.ndarray,
             state: np.ndarray, cont: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The parts of states [begin, end) outside ``spans`` (claimed by earlier reports), in
    begin order; a part that begins where a span ends continues nothing."""
    for a, b in spans:
        right = np.maximum(begin, b)
        begin, end, state, cont = (np.concatenate((begin, right)),
                                   np.concatenate((np.minimum(end, a), end)),
                                   np.concatenate((state, state)),
                                   np.concatenate((cont, cont & (right == begin))))
        keep = end > begin
        begin, end, state, cont = begin[keep], end[keep], state[keep], cont[keep]
    order = begin.argsort(kind="stable")
    return begin[order], end[order], state[order], cont[order]


class _Out:
    def __init__(self, ctx: ReportContext) -> None:
        self.parts: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.claimed = ctx.host_claimed

    def add(self, key: tuple[int, int], begin: np.ndarray, end: np.ndarray,
            state: np.ndarray | int, cont: np.ndarray | None = None) -> None:
        st = np.broadcast_to(np.asarray(state, dtype=np.int64), begin.shape)
        flags = np.zeros(len(begin), np.int64) if cont is None else cont.astype(np.int64)
        spans = self.claimed.get(key)
        if spans:
            begin, end, st, flags = yield_to(spans, begin, end, st, flags)
        if len(begin):
            self.parts.append((key[0], key[1], begin, end, st, flags))

    def running(self, ctx: ReportContext, key: tuple[int, int], begin: np.ndarray,
                end: np.ndarray, first_continues: bool) -> None:
        """Running stretches [begin, end), cut at the grid; the first stretch's first piece
        continues the thread's previous piece when ``first_continues``."""
        b, e, cont = _cut(begin, end)
        if first_continues and len(begin) and end[0] > begin[0]:
            cont[0] = True
        self.add(key, b, e, pv.STATE_RUNNING, cont)

    def batch(self, ctx: ReportContext) -> RecordBatch:
        if not self.parts:
            return RecordBatch()
        task = np.concatenate([np.full(len(p[2]), p[0], dtype=np.int64) for p in self.parts])
        thread = np.concatenate([np.full(len(p[2]), p[1], dtype=np.int64) for p in self.parts])
        begin = np.concatenate([p[2] for p in self.parts])
        end = np.concatenate([p[3] for p in self.parts])
        state = np.concatenate([p[4] for p in self.parts])
        cont = np.concatenate([p[5] for p in self.parts])
        seq = ctx.next_seq("host_state", len(begin))
        keys = make_keys(begin, PRIO_BEGIN, task, thread, _RANK, ctx.report_index,
                         seq * 2 + cont)
        return state_lines(task, thread, begin, end, state).batch(keys)


def _advance(ctx: ReportContext, out: _Out, upto: int) -> None:
    for key, pending in ctx.host_pending.items():
        if upto > pending:
            out.running(ctx, key, np.array([pending]), np.array([upto]),
                        key in ctx.host_cut)
            ctx.host_pending[key] = upto
            ctx.host_cut.add(key)


def states(ctx: ReportContext, task: np.ndarray, thread: np.ndarray, start: np.ndarray,
           end: np.ndarray, state: np.ndarray) -> RecordBatch:
    """The states of one chunk of runtime calls (trace-relative times, in start order), then
    every registered thread Running up to the last grid point before the chunk's last call."""
    out = _Out(ctx)
    code = (task.astype(np.int64) << 32) | thread.astype(np.int64)
    order = np.lexsort((start, code))
    cuts = np.diff(code[order]).nonzero()[0] + 1
    for idx in np.split(order, cuts):
        key = (int(task[idx[0]]), int(thread[idx[0]]))
        pending = ctx.host_pending.get(key, ctx.start_rel)
        s, e = start[idx], np.maximum(end[idx], start[idx])
        before = np.maximum.accumulate(np.concatenate(([pending], e)))[:-1]
        out.running(ctx, key, before, s, key in ctx.host_cut)
        ctx.host_cut.discard(key)  # a call ends the stretch
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
    out = _Out(ctx)
    _advance(ctx, out, ctx.end_rel)
    return out.batch(ctx)
