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
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from prvstream.sinks.logger import get_logger
from prvstream.sinks.native import OptionalExtension
from prvstream.sinks.paraver.records import (
    KEY_OBJECT,
    KEY_ORDER,
    KEY_TIME,
    PRIO_BEGIN,
    PRIO_END,
    PRIO_END_AFTER_BEGIN,
    RecordBatch,
    key_objects,
    make_keys,
    rows_of,
)

__all__ = [
    "GATHERER",
    "KEY_OBJECT",
    "KEY_ORDER",
    "KEY_TIME",
    "MAX_BATCH",
    "PRIO_BEGIN",
    "PRIO_END",
    "PRIO_END_AFTER_BEGIN",
    "SORTER",
    "RecordBatch",
    "Stream",
    "key_objects",
    "make_keys",
    "merge",
    "merge_bounded",
    "merge_whole",
    "read_run",
    "reduce_streams",
    "sort_batch",
    "sort_order",
    "write_run",
]

log = get_logger(__name__)

#: a stream of batches, each with the watermark that follows it
Stream = Iterator[tuple[RecordBatch, int]]

#: watermark of an exhausted stream
_DONE = int(np.iinfo(np.int64).max)
#: watermark of a stream not pulled yet
_FIRST = int(np.iinfo(np.int64).min)


#: the full-key sort and the k-way gather in C (optional; the numpy code below gives the same
#: arrays, and is what runs without them)
SORTER = OptionalExtension("prvstream.daemon.stream._merge", "sort_order", "merge sort")
GATHERER = OptionalExtension("prvstream.daemon.stream._merge", "gather", "merge gather")


def _sort_order(keys: np.ndarray, *, pure: bool = False) -> np.ndarray:
    """Order of ``keys`` by the full key, stable: by time (cheap on presorted runs), then the
    records that share a time with another are put in full-key order among themselves."""
    compiled = SORTER.use(pure)
    if compiled is not None:  # one natural merge sort by the full key, without the GIL
        order = np.empty(len(keys), dtype=np.int64)
        compiled(np.ascontiguousarray(keys, dtype=np.int64), order)
        return order
    time = keys[:, KEY_TIME]
    order = np.argsort(time, kind="stable")
    ordered = time[order]
    tie = ordered[1:] == ordered[:-1]
    if tie.any():
        tied = np.zeros(len(order), dtype=bool)
        tied[1:] = tie
        tied[:-1] |= tie
        where = np.flatnonzero(tied)
        sub = order[where]
        sub_keys = keys[sub]
        order[where] = sub[np.lexsort((sub_keys[:, KEY_ORDER], sub_keys[:, KEY_OBJECT],
                                       sub_keys[:, KEY_TIME]))]
    return order


#: the public name: range merges of sorted runs order their slices with it
sort_order = _sort_order


def _in_order(keys: np.ndarray) -> bool:
    """Whether ``keys`` are in full-key order already (what ``_sort_order`` would leave
    as they are): a merged stream's batches are, and checking costs less than sorting."""
    if len(keys) < 2:
        return True
    time = keys[:, KEY_TIME]
    if not bool((time[:-1] <= time[1:]).all()):
        return False
    tie = np.flatnonzero(time[:-1] == time[1:])
    if not len(tie):
        return True
    obj, nxt = keys[tie, KEY_OBJECT], keys[tie + 1, KEY_OBJECT]
    return bool(((obj < nxt) | ((obj == nxt)
                                & (keys[tie, KEY_ORDER] <= keys[tie + 1, KEY_ORDER]))).all())


def sort_batch(batch: RecordBatch) -> RecordBatch:
    """Sort a batch by its full key (stable)."""
    if len(batch) < 2:
        return batch
    return batch.take(_sort_order(batch.keys))


#: largest batch a merge yields (bigger ones are sliced, each gathered when it is asked for):
#: the .prv writer holds two of them beside the one being gathered, 16 int64 fields a record
#: wide (16,384 records: about 3 MiB more converter peak at 10M rows than 4,096)
MAX_BATCH = 4096


def merge(streams: Iterable[Stream], max_batch: int = MAX_BATCH
          ) -> Iterator[tuple[RecordBatch, int]]:
    """Merge streams into one: yields sorted ``(batch, watermark)`` pairs.

    Every record of a yielded batch sorts before every record yielded later, and the yielded
    watermark is the time before which the output is complete, so merges nest (a merge is itself
    a stream). An incoming batch is not copied: its sort order is computed once, what is ready
    is a prefix of that order, and ready records are gathered straight into their place in the
    output, so each record's fields are copied about twice whatever the fan-in.
    """
    heap: list[tuple[int, int, Stream]] = []
    #: pooled batches with their full-key order and the times in that order
    pool: list[tuple[RecordBatch, np.ndarray, np.ndarray]] = []
    for index, stream in enumerate(streams):
        heap.append((_FIRST, index, stream))
    heapq.heapify(heap)
    while heap:
        _, index, stream = heapq.heappop(heap)
        try:
            batch, watermark = next(stream)
        except StopIteration:
            watermark = _DONE
        else:
            if len(batch):
                if _in_order(batch.keys):  # a merged stream's batch: no sort, no copy
                    order = np.arange(len(batch))
                    pool.append((batch, order, np.ascontiguousarray(batch.keys[:, KEY_TIME])))
                else:
                    order = _sort_order(batch.keys)
                    pool.append((batch, order, batch.keys[order, KEY_TIME]))
            heapq.heappush(heap, (watermark, index, stream))
        horizon = heap[0][0] if heap else _DONE
        if horizon == _FIRST or not pool:
            continue
        ready: list[tuple[RecordBatch, np.ndarray]] = []
        rest: list[tuple[RecordBatch, np.ndarray, np.ndarray]] = []
        for part, order, times in pool:
            cut = len(order) if horizon >= _DONE else int(
                times.searchsorted(horizon, side="left"))
            if cut:
                ready.append((part, order[:cut]))
            if cut < len(order):
                rest.append((part, order[cut:], times[cut:]))
        if not ready:
            continue
        pool = rest
        yield from _gather_slices(ready, min(horizon, _DONE), max_batch)


def merge_whole(streams: list[Stream]) -> Iterator[tuple[RecordBatch, int]]:
    """``merge(streams)`` for streams small enough to hold whole: they are pulled in the order
    ``merge`` pulls them (lowest watermark first, ties in input order), so whatever they do as
    they are pulled happens in the same order, and their records are sorted once instead of at
    every pull (a merge's output depends only on the records)."""
    heap: list[tuple[int, int, Stream]] = [(_FIRST, i, s)
                                           for i, s in enumerate(streams)]
    batches: list[RecordBatch] = []
    while heap:
        _, index, stream = heapq.heappop(heap)
        try:
            batch, watermark = next(stream)
        except StopIteration:
            continue
        batches.append(batch)
        heapq.heappush(heap, (watermark, index, stream))
    merged = sort_batch(RecordBatch.concat(batches))
    if len(merged):
        yield from _pieces(merged, int(_DONE), MAX_BATCH)


def _gather(parts: list[tuple[RecordBatch, np.ndarray]], *, pure: bool = False
            ) -> RecordBatch:
    """The records ``part[index]`` of every part, in full-key order (each index is sorted;
    equal keys: the earlier part's record first)."""
    compiled = GATHERER.use(pure)
    if compiled is not None:  # one k-way merge straight into the output, without the GIL
        total = sum(len(index) for _, index in parts)
        width = max(part.fields.shape[1] for part, _ in parts)
        keys = np.empty((total, 3), dtype=np.int64)
        fields = np.empty((total, width), dtype=np.int64)
        tmpl = np.empty(total, dtype=np.int16)
        compiled([(np.ascontiguousarray(part.keys, dtype=np.int64),
                   np.ascontiguousarray(part.fields, dtype=np.int64), part.fields.shape[1],
                   np.ascontiguousarray(part.tmpl, dtype=np.int16),
                   np.ascontiguousarray(index, dtype=np.int64)) for part, index in parts],
                 keys, fields, width, tmpl)
        return RecordBatch(keys, fields, tmpl)
    if len(parts) == 1:
        part, index = parts[0]
        return part.take(index)
    keys = np.concatenate([rows_of(part.keys, index) for part, index in parts])
    order = _sort_order(keys)
    place = np.empty(len(order), dtype=np.int64)
    place[order] = np.arange(len(order))
    width = max(part.fields.shape[1] for part, _ in parts)
    fields = np.zeros((len(order), width), dtype=np.int64)
    tmpl = np.empty(len(order), dtype=np.int16)
    at = 0
    for part, index in parts:
        where = place[at : at + len(index)]
        fields[where, : part.fields.shape[1]] = part.fields[index]
        tmpl[where] = part.tmpl[index]
        at += len(index)
    return RecordBatch(keys[order], fields, tmpl)


def _gather_slices(parts: list[tuple[RecordBatch, np.ndarray]], watermark: int, size: int
                   ) -> Iterator[tuple[RecordBatch, int]]:
    """``_gather(parts)`` in slices of at most ``size`` records with ``_pieces``' watermarks,
    each slice gathered (as wide as its own records need) only when it is asked for: the
    fields of a whole release are never in memory at once while the writer works through
    its slices. Which records a slice takes from each part follows from one sort of the
    parts' keys."""
    total = sum(len(index) for _, index in parts)
    if total <= size:
        yield _gather(parts), watermark
        return
    if len(parts) == 1:
        part, index = parts[0]
        for lo, hi, mark in _slices(part.keys[index, KEY_TIME], watermark, size):
            yield _gather([(part, index[lo:hi])]), mark
        return
    keys = np.concatenate([rows_of(part.keys, index) for part, index in parts])
    order = _sort_order(keys)
    times = keys[order, KEY_TIME]
    place = np.empty(total, dtype=np.int64)
    place[order] = np.arange(total)
    del keys, order
    # a part's records keep their order in the output: their places only grow
    wheres, at = [], 0
    for _, index in parts:
        wheres.append(place[at : at + len(index)])
        at += len(index)
    taken = [0] * len(parts)
    for _, hi, mark in _slices(times, watermark, size):
        cuts = [int(where.searchsorted(hi)) for where in wheres]
        yield _gather([(part, index[a:b]) for (part, index), a, b
                       in zip(parts, taken, cuts, strict=True) if b > a]), mark
        taken = cuts


def _slices(times: np.ndarray, watermark: int, size: int) -> Iterator[tuple[int, int, int]]:
    """(lo, hi, watermark) of sorted ``times`` cut every ``size`` records: each slice's
    watermark is the first time of the next one, the last's is ``watermark``."""
    for lo in range(0, len(times), size):
        hi = min(lo + size, len(times))
        yield lo, hi, int(times[hi]) if hi < len(times) else watermark


def _pieces(batch: RecordBatch, watermark: int, size: int) -> Iterator[tuple[RecordBatch, int]]:
    """A sorted batch in slices of at most ``size`` records; each slice's watermark is the
    first time of the next one, so consumers never hold more than a slice of it."""
    if len(batch) <= size:
        yield batch, watermark
        return
    for lo, hi, mark in _slices(batch.keys[:, KEY_TIME], watermark, size):
        yield RecordBatch(batch.keys[lo:hi], batch.fields[lo:hi], batch.tmpl[lo:hi]), mark


#: records a run file's frame gathers (merges yield many small batches; one frame each would
#: make the pickling and the next pass's merge pay per batch, not per record)
RUN_FRAME = 4096


def write_run(batches: Iterator[tuple[RecordBatch, int]], directory: Path) -> Path:
    """Spill a merged stream to a temporary run file (our own pickle frames of at least
    ``RUN_FRAME`` records but the last; a frame carries the watermark of its last batch)."""
    import tempfile  # a merge of runs only

    fd, name = tempfile.mkstemp(prefix="run-", suffix=".bin", dir=directory)
    held: list[RecordBatch] = []
    count = 0
    with os.fdopen(fd, "wb") as fh:
        for batch, watermark in batches:
            if len(batch):
                held.append(batch)
                count += len(batch)
            if count >= RUN_FRAME:
                frame = held[0] if len(held) == 1 else RecordBatch.concat(held)
                pickle.dump((frame.keys, frame.fields, frame.tmpl, watermark), fh, protocol=5)
                held, count = [], 0
        if held:
            frame = held[0] if len(held) == 1 else RecordBatch.concat(held)
            pickle.dump((frame.keys, frame.fields, frame.tmpl, int(_DONE)), fh, protocol=5)
    return Path(name)


def read_run(path: Path) -> Stream:
    """Stream a run file back, deleting it once read."""
    try:
        with path.open("rb") as fh:
            while True:
                try:
                    keys, fields, tmpl, watermark = pickle.load(fh)  # our own temp file
                except EOFError:
                    break
                yield RecordBatch(keys, fields, tmpl), watermark
    finally:
        path.unlink(missing_ok=True)


def merge_bounded(
    streams: list[Stream], fan_in: int, tmpdir: str | os.PathLike[str] | None = None,
    weights: list[int] | None = None,
) -> Iterator[tuple[RecordBatch, int]]:
    """Merge any number of streams with at most ``fan_in`` open at once.

    Beyond the fan-in, groups are merged into temporary run files first, so that memory stays
    O(chunk x fan_in) whatever the number of inputs. The groups are those of a Huffman tree in
    which every input weighs one: the first run merges just enough inputs that every later
    merge is full, and each merge takes the lightest ``fan_in`` streams left (inputs before
    runs, earlier before later), so most records are spilled once and few twice (a merge is
    the same whatever its grouping: only the data orders records). ``weights`` (default one
    each) says how many inputs a stream stands for (a run merged elsewhere: merged last).
    """
    if fan_in < 2:
        raise ValueError("fan_in must be at least 2")
    if len(streams) <= fan_in:
        yield from merge(streams)
        return
    import tempfile  # a merge of runs only

    with tempfile.TemporaryDirectory(prefix="prvstream-merge-", dir=tmpdir) as scratch:
        yield from merge([s for s, _, _ in reduce_streams(streams, fan_in, fan_in,
                                                          Path(scratch), weights)])


#: a stream left by ``reduce_streams``: (stream, inputs it holds, its run file or None)
Reduced = tuple[Stream, int, Path | None]


def reduce_streams(streams: list[Stream], fan_in: int, keep: int, directory: Path,
                   weights: list[int] | None = None) -> list[Reduced]:
    """Merge the lightest groups of at most ``fan_in`` streams into run files in
    ``directory`` (``merge_bounded``'s Huffman order) until at most ``keep`` streams are
    left; those, in input order (runs after the inputs), with what each holds."""
    #: (inputs it holds, sequence number, stream, run file): a heap, lightest, earliest first
    queue: list[tuple[int, int, Stream, Path | None]] = [
        (1 if weights is None else weights[i], i, s, None) for i, s in enumerate(streams)]
    heapq.heapify(queue)
    if len(queue) > keep:
        size = (len(queue) - keep - 1) % (fan_in - 1) + 2
        runs = 0
        while len(queue) > keep:
            group = [heapq.heappop(queue) for _ in range(size)]
            path = write_run(merge([s for _, _, s, _ in group]), directory)
            heapq.heappush(queue, (sum(w for w, *_ in group), len(streams) + runs,
                                   read_run(path), path))
            runs += 1
            size = fan_in
        log.debug("merge_runs", inputs=len(streams), runs=runs, fan_in=fan_in, keep=keep)
    return [(s, w, path) for w, _, s, path in sorted(queue, key=lambda item: item[1])]
