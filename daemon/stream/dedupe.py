"""Records that overlapping capture ranges of one process both hold: in a merged, sorted stream,
a record equal to one of an earlier report at the same instant on the same row (same sort
rank, priority and fields) is dropped, so the trace shows what the two ranges share once.

Equal records sort next to each other (the key orders by time, row, rank, then report), so
only runs of records that share a time and a row are compared, carried across batches. The
efficiency model counts the same activity once by its own rule (``efficiency.repeats``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from prvstream.daemon.stream.merge import KEY_OBJECT, KEY_ORDER, KEY_TIME, RecordBatch, Stream
from prvstream.sinks.logger import get_logger

__all__ = ["Repeats", "drop_repeats", "shares_processes"]

log = get_logger(__name__)

_REPORT_SHIFT = 40


class Repeats:
    """The state of ``drop_repeats`` between batches: the run of records at the last
    (time, row) seen, and how many records were dropped."""

    def __init__(self) -> None:
        self.last: tuple[int, int] | None = None
        self.seen: dict[tuple[int, tuple[int, ...]], int] = {}
        self.dropped = 0

    def batch(self, batch: RecordBatch) -> RecordBatch:
        """``batch`` (the next of a sorted stream) without repeats of earlier reports."""
        n = len(batch)
        if not n:
            return batch
        t, o = batch.keys[:, KEY_TIME], batch.keys[:, KEY_OBJECT]
        new = np.ones(n, bool)  # a record that starts a run of one (time, row)
        new[1:] = (t[1:] != t[:-1]) | (o[1:] != o[:-1])
        if self.last is not None and (int(t[0]), int(o[0])) == self.last:
            new[0] = False
        bounds = [*np.flatnonzero(new).tolist(), n]
        runs = [(0, bounds[0])] if bounds[0] > 0 else []  # the run carried from before
        sizes = np.diff(bounds)
        runs += [(bounds[j], bounds[j + 1]) for j in np.flatnonzero(sizes > 1).tolist()]
        if bounds[-2:-1] and sizes[-1] == 1:
            runs.append((n - 1, n))  # the last run, carried to the next batch
        drop: list[int] = []
        for lo, hi in runs:
            seen = self.seen if lo == 0 and not new[0] else {}
            for i in range(lo, hi):
                self._note(seen, batch, i, drop)
            if hi == n:
                self.seen = seen
        self.last = (int(t[-1]), int(o[-1]))
        if not drop:
            return batch
        self.dropped += len(drop)
        keep = np.ones(n, bool)
        keep[drop] = False
        return batch.take(np.flatnonzero(keep))

    @staticmethod
    def _note(seen: dict[tuple[int, tuple[int, ...]], int], batch: RecordBatch, i: int,
              drop: list[int]) -> None:
        row = batch.fields[i].tolist()
        while row and row[-1] == 0:
            row.pop()
        sig = (int(batch.tmpl[i]), tuple(row))
        report = int(batch.keys[i, KEY_ORDER]) >> _REPORT_SHIFT
        first = seen.setdefault(sig, report)
        if first != report:
            drop.append(i)


def drop_repeats(stream: Stream, repeats: Repeats | None = None) -> Stream:
    """``stream`` (merged, sorted) without the records repeating an earlier report's."""
    state = repeats if repeats is not None else Repeats()
    for batch, mark in stream:
        yield state.batch(batch), mark
    if state.dropped:
        log.info("repeated_records_dropped", records=state.dropped)


def shares_processes(processes: Iterable[Iterable[tuple[str, int]]]) -> bool:
    """Whether any (host, pid) is in more than one report (each report's processes): only
    then can two reports hold the same record."""
    seen: set[tuple[str, int]] = set()
    for procs in processes:
        mine = set(procs)
        if seen & mine:
            return True
        seen |= mine
    return False
