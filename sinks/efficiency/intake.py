"""The model's intake of activity and phases: ``feed_interleaved``'s calls taken in one, with
the per-row arrays (times, categories, repeats) computed once a block instead of once a call.

Every activity batch and phase is booked exactly as separate ``add_activity`` and ``add_phases``
calls would book it (the same pending slices, frontiers and sweeps at the same points), so the
results are those of the calls; only numpy's per-call cost goes (mixed into ``EfficiencyModel``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from prvstream.sinks.efficiency.devices import DeviceTable
from prvstream.sinks.efficiency.host import HostTotals
from prvstream.sinks.efficiency.parts import REPEATED, Report
from prvstream.sinks.efficiency.phases import phase_label
from prvstream.sinks.efficiency.repeats import NvtxSpans, repeated
from prvstream.sinks.logger import get_logger

__all__ = ["BLOCK_ROWS", "ActivityIntake", "plan_segments"]

log = get_logger(__name__)

#: activity rows whose arrays are computed together (bounds the temporaries of a large feed)
BLOCK_ROWS = 8192

_ORDER = ("activity batches must arrive in non-decreasing start order "
          "(see the Sink protocol in prvstream.sinks.base)")
_PHASE_ORDER = ("phase batches must arrive in non-decreasing start order "
                "(see the Sink protocol in prvstream.sinks.base)")
_MIN = -(2**63)

#: kept rows' start, end, global device, category; per batch: kept rows' bounds, frontier,
#: greatest end of its own rows so far; the first start of its own rows
_Prepared = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[int], list[int],
                  list[int], int]


def plan_segments(n: int, cuts: list[int], step: int) -> list[tuple[int, int]]:
    """``feed_interleaved``'s calls: (a, b) an activity batch [a, b), (-1, p) phase ``p``."""
    out: list[tuple[int, int]] = []
    done = 0
    for p, cut in enumerate([*cuts, n]):
        while done < cut:
            out.append((done, min(cut, done + step)))
            done = out[-1][1]
        if p < len(cuts):
            out.append((-1, p))
    return out


class ActivityIntake:
    """``add_activity``, ``add_phases`` and ``add_interleaved`` (mixed into the model)."""

    flush_rows: int
    _category: np.ndarray
    _devices: DeviceTable
    _nvtx: NvtxSpans
    _host: HostTotals
    _require_report: Callable[[], Report]
    _sweep_pending: Callable[[Report], None]
    _held_occurrence: Callable[..., int | None]
    _occurrence: Callable[..., int]

    def add_activity(self, batch: np.ndarray) -> None:
        """Take ACTIVITY_DTYPE rows (non-decreasing start); sweep when ``flush_rows`` wait."""
        self.add_interleaved(batch, None)

    def add_phases(self, batch: np.ndarray) -> None:
        """Take PHASE_DTYPE rows: each is the next occurrence of its name in its process."""
        rep = self._require_report()
        self._book_phases(rep, zip(batch["start"].tolist(), batch["end"].tolist(),
                                  batch["process"].tolist(), batch["name"].tolist(),
                                  strict=True))

    def add_interleaved(self, activity: np.ndarray, phases: np.ndarray | None,
                        chunk_rows: int = 0) -> None:
        """Start-sorted activity and phases as ``feed_interleaved`` feeds them: the activity
        before each phase's start (in batches of ``chunk_rows`` when > 0), then the phase."""
        rep = self._require_report()
        n = len(activity)
        cuts: list[int] = []
        if phases is not None and len(phases):
            starts = np.ascontiguousarray(activity["start"])
            cuts = starts.searchsorted(phases["start"], side="left").tolist()
        plan = plan_segments(n, cuts, chunk_rows if chunk_rows > 0 else max(n, 1))
        rows: list[tuple[int, int, int, int]] = []
        if cuts:
            assert phases is not None
            rows = list(zip(phases["start"].tolist(), phases["end"].tolist(),
                            phases["process"].tolist(), phases["name"].tolist(), strict=True))
        i = 0
        while i < len(plan):  # blocks of whole batches, each with the phases after it
            j, size = i, 0
            while j < len(plan) and (plan[j][0] < 0 or size < BLOCK_ROWS):
                size += plan[j][1] - plan[j][0] if plan[j][0] >= 0 else 0
                j += 1
            self._block(rep, activity, rows, plan[i:j])
            i = j

    def _block(self, rep: Report, activity: np.ndarray, phases: list[tuple[int, int, int, int]],
               plan: list[tuple[int, int]]) -> None:
        """Book one block of ``plan``: its activity's arrays at once, then call by call."""
        segs = [(a, b) for a, b in plan if a >= 0]
        if segs:
            s, e, dev, cat, kept, frontier, last, first = self._prepare(
                rep, activity[segs[0][0]:segs[-1][1]], [a - segs[0][0] for a, _ in segs])
        k = 0
        for a, b in plan:
            if a < 0:
                self._book_phases(rep, phases[b:b + 1])
                continue
            ka, kb = kept[k], kept[k + 1]
            rep.frontier = frontier[k]
            if last[k] > _MIN:  # rows of its own so far
                rep.last = max(rep.last, last[k])
                rep.first = min(rep.first, first)
            rep.pending.append((s[ka:kb], e[ka:kb], dev[ka:kb], cat[ka:kb]))
            rep.pending_rows += kb - ka
            k += 1
            if rep.pending_rows >= self.flush_rows:
                self._sweep_pending(rep)

    def _prepare(self, rep: Report, batch: np.ndarray, bounds: list[int]) -> _Prepared:
        """The kept rows' (start, end, global device, category) of ``batch`` (wall clock),
        and per batch starting at each of ``bounds``: where its kept rows end, the frontier
        after it, the greatest end of the rows of its own so far (``_MIN``: none), and the
        first start of its own rows."""
        s = batch["start"] + np.int64(rep.origin)  # int64 fields: no astype copy
        e = batch["end"] + np.int64(rep.origin)
        if int(s[0]) < rep.frontier or (len(s) > 1 and bool((s[1:] < s[:-1]).any())):
            raise ValueError(_ORDER)
        keep = e > s
        cat = self._category[batch["kind"]]
        own = keep  # rows of its own: an earlier report holds the rest
        again = repeated(self._devices, rep, batch["device"], batch["stream"], s, bounds)
        if again is not None:  # overlapping capture ranges: counted with the earlier report,
            cat = cat + (again * REPEATED).astype(np.int8)  # swept as what it already saw
            own = keep & ~again
        device = batch["device"]
        ends = np.array([*bounds[1:], len(s)], np.int64)
        if not keep.all():
            kept = np.concatenate(([0], keep.cumsum()))[[0, *ends.tolist()]].tolist()
            s, e, device, cat, own = s[keep], e[keep], device[keep], cat[keep], own[keep]
        else:
            kept = [0, *ends.tolist()]
        frontier = (batch["start"][ends - 1] + np.int64(rep.origin)).tolist()
        last = np.maximum.accumulate(np.where(own, e, np.int64(_MIN)))
        kept_ends = np.array(kept[1:], np.int64)
        last_at = np.where(kept_ends > 0, last[np.maximum(kept_ends - 1, 0)] if len(last)
                           else _MIN, _MIN).tolist()
        mine = own.nonzero()[0]
        first = int(s[mine[0]]) if len(mine) else 0
        return s, e, rep.devices[device], cat, kept, frontier, last_at, first

    def _book_phases(self, rep: Report, rows: Iterable[tuple[int, int, int, int]]) -> None:
        """Book phase rows (start, end, process, name), each the next occurrence of its name."""
        names = rep.labels
        if len(names) < len(rep.info.phase_names):  # the pipeline adds names as it meets them
            names += [phase_label(n) for n in rep.info.phase_names[len(names):]]
        for row_start, row_end, row_proc, row_name in rows:
            start, end = row_start + rep.origin, row_end + rep.origin
            if start < rep.frontier:
                raise ValueError(_PHASE_ORDER)
            rep.frontier = start
            if end < start:
                continue
            proc = rep.processes[row_proc]
            i = self._held_occurrence(proc, names[row_name], start, end, self._nvtx.get(proc))
            if i is None:  # else the occurrence an overlapping earlier report holds
                i = self._occurrence(proc, names[row_name], start, end)
            rep.touched.append(i)
            rep.recent.setdefault(proc, []).append((start, end, i))
            self._host.phase(row_proc, start, end, i)
