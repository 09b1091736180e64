"""Bounded-memory k-way merges of time-ordered record streams.

A *stream* yields ``(batch, watermark)`` pairs: ``batch`` holds records whose sort keys may lie
anywhere at or after the stream's previous watermark, and ``watermark`` promises that every
record the stream yields later has ``time >= watermark``. ``merge`` keeps a pool of records not
yet safe to emit (ends of open intervals, records past the slowest stream's watermark), pulls
from the stream with the lowest watermark, and emits, fully sorted, every pooled record whose
time lies before the lowest watermark. Memory is O(chunk x fan-in + open intervals), never
O(trace). ``merge_bounded`` adds multi-pass merging through temporary run files when there are
more streams than the fan-in allows.
"""

from __future__ import annotations

import heapq
import os
import pickle
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import structlog

__all__ = [
    "KEY_DTYPE",
    "PRIO_BEGIN",
    "PRIO_END",
    "PRIO_END_AFTER_BEGIN",
    "RecordBatch",
    "Stream",
    "merge",
    "merge_bounded",
    "sort_batch",
]

log = structlog.get_logger(__name__)

#: Sort key of one record. Order: time, then ``prio`` (ends before begins at one instant, and
#: the end of a zero-length interval after its own begin), then the object (task, thread), then
#: ``rank`` (record type and data kind), then the report's canonical index, then ``seq`` (the
#: record's position in its report's stream). Every field is derived from the data alone, so
#: the order never depends on arrival order.
KEY_DTYPE = np.dtype(
    [
        ("time", "<i8"),
        ("prio", "u1"),
        ("task", "<i4"),
        ("thread", "<i4"),
        ("rank", "<i2"),
        ("report", "<i4"),
        ("seq", "<i8"),
    ]
)

PRIO_END = 0
PRIO_BEGIN = 1
PRIO_END_AFTER_BEGIN = 2

#: lexsort takes its keys last-significant first
_LEXSORT_FIELDS = ("seq", "report", "rank", "thread", "task", "prio", "time")

_EMPTY_KEYS = np.empty(0, dtype=KEY_DTYPE)
_EMPTY_LINES = np.empty(0, dtype=object)


@dataclass(slots=True)
class RecordBatch:
    """Records as parallel arrays: sort keys and the Paraver text line of each record."""

    keys: np.ndarray = field(default_factory=lambda: _EMPTY_KEYS)
    lines: np.ndarray = field(default_factory=lambda: _EMPTY_LINES)

    def __len__(self) -> int:
        return len(self.keys)

    @staticmethod
    def concat(batches: Iterable[RecordBatch]) -> RecordBatch:
        parts = [b for b in batches if len(b)]
        if not parts:
            return RecordBatch()
        if len(parts) == 1:
            return parts[0]
        return RecordBatch(
            np.concatenate([b.keys for b in parts]), np.concatenate([b.lines for b in parts])
        )

    def take(self, index: np.ndarray) -> RecordBatch:
        return RecordBatch(self.keys[index], self.lines[index])


#: a stream of batches, each with the watermark that follows it
Stream = Iterator[tuple[RecordBatch, int]]

#: watermark of an exhausted stream
_DONE = np.iinfo(np.int64).max


def sort_batch(batch: RecordBatch) -> RecordBatch:
    """Sort a batch by its full key (stable)."""
    if len(batch) < 2:
        return batch
    keys = batch.keys
    order = np.lexsort(tuple(keys[name] for name in _LEXSORT_FIELDS))
    return batch.take(order)


def merge(streams: Iterable[Stream]) -> Iterator[tuple[RecordBatch, int]]:
    """Merge streams into one: yields sorted ``(batch, watermark)`` pairs.

    Every record of a yielded batch sorts before every record yielded later, and the yielded
    watermark is the time before which the output is complete, so merges nest (a merge is itself
    a stream).
    """
    heap: list[tuple[int, int, Stream]] = []
    pool: list[RecordBatch] = []
    for index, stream in enumerate(streams):
        heap.append((np.iinfo(np.int64).min, index, stream))
    heapq.heapify(heap)
    while heap:
        _, index, stream = heapq.heappop(heap)
        try:
            batch, watermark = next(stream)
        except StopIteration:
            watermark = _DONE
        else:
            if len(batch):
                pool.append(batch)
            heapq.heappush(heap, (watermark, index, stream))
        horizon = heap[0][0] if heap else _DONE
        if horizon == np.iinfo(np.int64).min or not pool:
            continue
        merged = RecordBatch.concat(pool)
        if horizon >= _DONE:
            ready_mask = None
        else:
            ready_mask = merged.keys["time"] < horizon
            if not ready_mask.any():
                pool = [merged]
                continue
        if ready_mask is None or ready_mask.all():
            ready, pool = merged, []
        else:
            ready = merged.take(np.flatnonzero(ready_mask))
            pool = [merged.take(np.flatnonzero(~ready_mask))]
        yield sort_batch(ready), min(horizon, _DONE)
    if pool:  # pragma: no cover - the loop drains the pool when the last stream ends
        yield sort_batch(RecordBatch.concat(pool)), _DONE


def _write_run(batches: Iterator[tuple[RecordBatch, int]], directory: Path) -> Path:
    """Spill a merged stream to a temporary run file (our own pickle frames)."""
    fd, name = tempfile.mkstemp(prefix="run-", suffix=".bin", dir=directory)
    with os.fdopen(fd, "wb") as fh:
        for batch, watermark in batches:
            pickle.dump((batch.keys, batch.lines, watermark), fh, protocol=5)
    return Path(name)


def _read_run(path: Path) -> Stream:
    """Stream a run file back, deleting it once read."""
    try:
        with path.open("rb") as fh:
            while True:
                try:
                    keys, lines, watermark = pickle.load(fh)  # our own temporary file
                except EOFError:
                    break
                yield RecordBatch(keys, lines), watermark
    finally:
        path.unlink(missing_ok=True)


def merge_bounded(
    streams: list[Stream], fan_in: int, tmpdir: str | os.PathLike[str] | None = None
) -> Iterator[tuple[RecordBatch, int]]:
    """Merge any number of streams with at most ``fan_in`` open at once.

    Beyond the fan-in, groups are merged into temporary run files first (multi-pass), so that
    memory stays O(chunk x fan_in) whatever the number of inputs.
    """
    if fan_in < 2:
        raise ValueError("fan_in must be at least 2")
    if len(streams) <= fan_in:
        yield from merge(streams)
        return
    with tempfile.TemporaryDirectory(prefix="prvstream-merge-", dir=tmpdir) as scratch:
        directory = Path(scratch)
        level: list[Stream] = list(streams)
        passes = 0
        while len(level) > fan_in:
            passes += 1
            runs: list[Stream] = []
            for start in range(0, len(level), fan_in):
                group = level[start : start + fan_in]
                runs.append(_read_run(_write_run(merge(group), directory)))
            log.debug("merge_pass", inputs=len(level), runs=len(runs), pass_no=passes)
            level = runs
        yield from merge(level)
