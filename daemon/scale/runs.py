"""Sorted runs on a shared file system, and the merge of one time range of many runs.

A *run* is one report's records in full-key order, already formatted: four files beside each
other (``.time``: int64 record times; ``.key2``: the object and order key columns;
``.offs``: int64 byte offsets of every line, n + 1 of them; ``.txt``: the lines). A range
merge reads only its slice of every run (binary search on ``.time``), orders the slice by the
full sort key, and writes the lines: concatenating the ranges in order gives exactly the text
a single-process merge writes, because the sort key is a total order. Every range's size is
known from the runs' offsets before it is merged (``range_extents``), so ranges are written
in place into the trace, each at its own offset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from prvstream.daemon.stream.merge import KEY_TIME, RecordBatch, sort_order
from prvstream.sinks.logger import get_logger

__all__ = ["RunInfo", "RunWriter", "merge_range", "range_extents", "remove_run", "split_times"]

log = get_logger(__name__)

_PARTS = (".time", ".key2", ".offs", ".txt")
#: records per sample a run reports for choosing range boundaries
_SAMPLES = 256
#: records gathered per write when a range is assembled (bounds the gather index)
_GATHER = 1 << 16


@dataclass
class RunInfo:
    """A finished run: where it is, its size, and a sample of its record times."""

    base: str
    records: int = 0
    text_bytes: int = 0
    end_time: int = 0
    #: every ``step``-th record time (for range boundaries)
    samples: list[int] = field(default_factory=list)
    step: int = 1


class RunWriter:
    """Write one sorted record stream as a run (temporary names, renamed by ``close``)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._tmp = [base.with_name(f"{base.name}{ext}.part") for ext in _PARTS]
        self._fh = [p.open("wb") for p in self._tmp]
        self._offset = 0
        self._fh[2].write(np.zeros(1, np.int64).tobytes())
        self.records = 0
        self.end_time = 0
        self._times: list[np.ndarray] = []

    def add(self, batch: RecordBatch, text: bytes | None = None) -> bytes:
        """Append a sorted batch (after every earlier one); returns its text."""
        if text is None:
            text = batch.text()
        if not len(batch):
            return text
        ends = np.flatnonzero(np.frombuffer(text, np.uint8) == 10) + 1
        if len(ends) != len(batch):
            raise ValueError("a record's text holds a newline; cannot index the run")
        times = np.ascontiguousarray(batch.keys[:, KEY_TIME])
        self._fh[0].write(times.tobytes())
        self._fh[1].write(np.ascontiguousarray(batch.keys[:, 1:]).tobytes())
        self._fh[2].write((ends + self._offset).astype(np.int64).tobytes())
        self._fh[3].write(text)
        self._offset += len(text)
        self.records += len(batch)
        self.end_time = max(self.end_time, int(times[-1]))
        self._times.append(times[:: max(1, len(times) // 8)].copy())
        return text

    def close(self) -> RunInfo:
        """Flush and rename the run into place; return its description."""
        for fh in self._fh:
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
        for tmp, ext in zip(self._tmp, _PARTS, strict=True):
            os.replace(tmp, self.base.with_name(self.base.name + ext))
        times = np.memmap(self.base.with_name(self.base.name + ".time"), np.int64, "r",
                          shape=(self.records,)) if self.records else np.empty(0, np.int64)
        step = max(1, self.records // _SAMPLES)
        return RunInfo(base=str(self.base), records=self.records, text_bytes=self._offset,
                       end_time=self.end_time, samples=np.asarray(times[::step]).tolist(),
                       step=step)

    def abort(self) -> None:
        for fh in self._fh:
            fh.close()
        for tmp in self._tmp:
            tmp.unlink(missing_ok=True)


def remove_run(base: str) -> None:
    """Delete a run's files."""
    for ext in _PARTS:
        Path(base + ext).unlink(missing_ok=True)


def split_times(runs: list[RunInfo], ranges: int) -> list[int]:
    """Up to ``ranges - 1`` increasing times that cut the runs' records into ranges of about
    equal size (from the runs' samples)."""
    if ranges < 2:
        return []
    times = np.array([t for r in runs for t in r.samples], dtype=np.int64)
    weights = np.array([r.step for r in runs for _ in r.samples], dtype=np.int64)
    if not len(times):
        return []
    order = np.argsort(times, kind="stable")
    times, weights = times[order], np.cumsum(weights[order])
    targets = weights[-1] * np.arange(1, ranges) / ranges
    cuts = times[np.searchsorted(weights, targets, side="left").clip(0, len(times) - 1)]
    return sorted({int(c) for c in cuts.tolist()} - {int(times[0])})


def range_extents(runs: list[RunInfo], cuts: list[int]) -> list[tuple[int, int]]:
    """(records, text bytes) of each range the ``cuts`` make (``split_times``), from every
    run's times and line offsets: where each range lands in the trace, before any merge."""
    counts = np.zeros(len(cuts) + 1, np.int64)
    sizes = np.zeros(len(cuts) + 1, np.int64)
    for run in runs:
        if not run.records:
            continue
        times = np.memmap(run.base + ".time", np.int64, "r", shape=(run.records,))
        offs = np.memmap(run.base + ".offs", np.int64, "r", shape=(run.records + 1,))
        at: np.ndarray = np.zeros(len(cuts) + 2, np.int64)
        at[1:-1] = np.searchsorted(times, np.asarray(cuts, np.int64), side="left")
        at[-1] = run.records
        counts += at[1:] - at[:-1]
        edge = np.asarray(offs[at], np.int64)
        sizes += edge[1:] - edge[:-1]
    return list(zip(counts.tolist(), sizes.tolist(), strict=True))


def merge_range(runs: list[tuple[str, int]], lo: int | None, hi: int | None,
                out: str, offset: int | None = None) -> tuple[int, int]:
    """Merge the records with ``lo <= time < hi`` (None: unbounded) of every run
    ((base, records)) into ``out``, renamed into place; returns (records, bytes).

    With ``offset``, ``out`` is the trace itself (already sized): the range is written in
    place at ``offset`` and synced, so the coordinator copies nothing; a rerun writes the
    same bytes again."""
    keys_parts: list[np.ndarray] = []
    starts_parts: list[np.ndarray] = []
    lens_parts: list[np.ndarray] = []
    texts: list[bytes] = []
    base_at = 0
    for base, n in runs:
        if not n:
            continue
        times = np.memmap(base + ".time", np.int64, "r", shape=(n,))
        i = 0 if lo is None else int(np.searchsorted(times, lo, side="left"))
        j = n if hi is None else int(np.searchsorted(times, hi, side="left"))
        if i >= j:
            continue
        key2 = np.memmap(base + ".key2", np.int64, "r", shape=(n, 2))
        offs = np.array(np.memmap(base + ".offs", np.int64, "r", shape=(n + 1,))[i : j + 1])
        keys = np.empty((j - i, 3), np.int64)
        keys[:, 0] = times[i:j]
        keys[:, 1:] = key2[i:j]
        with open(base + ".txt", "rb") as fh:
            fh.seek(int(offs[0]))
            text = fh.read(int(offs[-1] - offs[0]))
        keys_parts.append(keys)
        starts_parts.append(offs[:-1] - offs[0] + base_at)
        lens_parts.append(np.diff(offs))
        texts.append(text)
        base_at += len(text)
    tmp = Path(out + ".part") if offset is None else Path(out)
    records = 0
    with tmp.open("wb") if offset is None else tmp.open("r+b") as fh:
        if offset is not None:
            fh.seek(offset)
        if keys_parts:
            keys = np.concatenate(keys_parts)
            starts = np.concatenate(starts_parts)
            lens = np.concatenate(lens_parts)
            buf = np.frombuffer(b"".join(texts), np.uint8)
            order = sort_order(keys)
            records = len(order)
            for a in range(0, len(order), _GATHER):
                idx = order[a : a + _GATHER]
                s, ln = starts[idx], lens[idx]
                first = np.cumsum(ln) - ln
                gather = np.repeat(s - first, ln) + np.arange(int(ln.sum()), dtype=np.int64)
                fh.write(buf[gather].tobytes())
        fh.flush()
        os.fsync(fh.fileno())
        size = fh.tell() - (offset or 0)
    if offset is None:
        os.replace(tmp, out)
    return records, size
