"""What a Dask worker runs to finalize a live trace: index a piece of a committed block, and
merge one time range of every block into a part file.

An *index* of a piece of a block holds its line count and, every ``SAMPLE``-th line, the line's
byte offset, record number and time, so the coordinator can choose the ranges and tell each
worker where every block's slice of its range begins and ends. A *range merge* reads those
slices (``blockmerge``'s block stream: the same parsing, renumbering and host-state recut),
keeps the records of ``[lo, hi)``, merges them with bounded fan-in and writes their text and
codes beside the trace. Concatenated in range order they are the single-process finalize's
body, because the sort key is a total order. Every task writes under ``.part`` names and
renames, so a rerun after a worker died writes the same bytes again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from prvstream.daemon.kinds import hoststates
from prvstream.daemon.live.blockclip import Clips
from prvstream.daemon.live.blockmerge import block_stream
from prvstream.daemon.live.blockparse import Renumber
from prvstream.daemon.live.blockstore import CodesFile
from prvstream.daemon.stream.blockcodes import codes_of
from prvstream.daemon.stream.dedupe import drop_repeats
from prvstream.daemon.stream.merge import KEY_TIME, Stream, merge_bounded
from prvstream.daemon.stream.trace import track_thread_last
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver.writer import PrvWriter

__all__ = ["SAMPLE", "FinalizeJob", "PieceIndex", "RangeDone", "Slice", "index_piece",
           "margin", "merge_block_range", "place_part"]

log = get_logger(__name__)

#: lines between two sampled lines of a block
SAMPLE = 1024
#: bytes read at once while indexing
_READ = 1 << 22
#: bytes that hold a line's first six fields (kind to time: at most 6 x 21)
_HEAD = 160


@dataclass
class PieceIndex:
    """Lines of a block that end in ``[start, end)`` and samples of the lines after them."""

    start: int
    end: int
    #: newlines in the piece
    lines: int = 0
    #: (byte offset of a line, newlines before it in the piece, its time as committed)
    samples: list[tuple[int, int, int]] = field(default_factory=list)


def index_piece(prv: str, start: int, end: int, block_end: int) -> PieceIndex:
    """Count the newlines of ``prv[start:end]`` and sample the lines that follow them."""
    out = PieceIndex(start, end)
    fd = os.open(prv, os.O_RDONLY | os.O_CLOEXEC)
    try:
        at = start
        while at < end:
            data = os.pread(fd, min(_READ, end - at), at)
            if not data:
                raise OSError(f"{prv} is shorter than its journal says")
            ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
            first = (-(out.lines + 1)) % SAMPLE  # newline ranks in the piece: r + 1 ≡ 0
            for r in range(first, len(ends), SAMPLE):
                begin = at + int(ends[r]) + 1
                if begin >= block_end:
                    break
                head = os.pread(fd, _HEAD, begin).split(b":", 6)
                out.samples.append((begin, out.lines + r + 1, int(head[5])))
            out.lines += len(ends)
            at += len(data)
    finally:
        os.close(fd)
    return out


@dataclass
class FinalizeJob:
    """What every range merge of one finalize shares (scattered to the workers once)."""

    prv: str
    codes: str
    renumber: Renumber
    position: np.ndarray
    journal_of: np.ndarray
    fan_in: int
    chunk: int
    recut: bool
    #: host states that yield to earlier overlapping reports (``blockclip``)
    clips: Clips
    scratch: str
    #: a process is in several reports: drop records repeating an earlier report's
    #: (``stream.dedupe``; equal records share a time, so never a range boundary)
    repeats: bool = False


@dataclass
class Slice:
    """Part of a committed block: bytes ``[start, end)``, holding ``records`` records from
    the job's record ``first`` on, the block's ``seq0``-th record first."""

    start: int
    end: int
    first: int
    records: int
    seq0: int


@dataclass
class RangeDone:
    """A merged range: its part files and what the trace's header and journal need."""

    text: str
    codes: str
    records: int
    size: int
    end_time: int
    thread_last: dict[tuple[int, int], int]


def _window(stream: Stream, lo: int | None, hi: int | None) -> Stream:
    """The records of ``stream`` with ``lo <= time < hi`` (watermarks pass unchanged); the
    stream is left as soon as its watermark reaches ``hi`` (nothing later can fall inside)."""
    try:
        for batch, mark in stream:
            if len(batch) and (lo is not None or hi is not None):
                time = batch.keys[:, KEY_TIME]
                keep = np.ones(len(batch), bool)
                if lo is not None:
                    keep &= time >= lo
                if hi is not None:
                    keep &= time < hi
                if not keep.all():
                    batch = batch.take(np.flatnonzero(keep))
            yield batch, mark
            if hi is not None and mark >= hi:
                return
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()


def margin(recut: bool) -> int:
    """How far before and after a range its slices must reach: a host Running stretch that
    crosses a range boundary is joined from its committed pieces (each at most ``GRID``
    long) and cut again only when it is recut."""
    return hoststates.GRID if recut else 0


def merge_block_range(job: FinalizeJob, index: int, lo: int | None, hi: int | None,
                      slices: list[Slice]) -> RangeDone:
    """Merge the records with ``lo <= time < hi`` (None: unbounded) of ``slices`` into
    ``job.scratch``/range-INDEX.prv and .codes."""
    prv = Path(job.prv)
    codes = CodesFile(Path(job.codes))
    # template ids are this process's own
    ren = Renumber(job.renumber.task, job.renumber.thread_base, job.renumber.thread,
                   job.renumber.types, job.renumber.values, job.renumber.shift)
    streams = [_window(block_stream(prv, (s.start, s.end, s.first, s.records), codes, ren,
                                     job.position, job.chunk, job.recut, job.clips, s.seq0),
                       lo, hi)
               for s in slices]
    base = Path(job.scratch) / f"range-{index:06d}"
    text_part, codes_part = (base.with_name(base.name + ext + ".part")
                             for ext in (".prv", ".codes"))
    last: dict[tuple[int, int], int] = {}
    try:
        with text_part.open("wb") as fh, codes_part.open("wb") as cfh:
            writer = PrvWriter(fh)
            merged = merge_bounded(streams, job.fan_in, tmpdir=job.scratch)
            for batch, _ in drop_repeats(merged) if job.repeats else merged:
                if not len(batch):
                    continue
                writer.write(batch)
                track_thread_last(batch.keys, last)
                cfh.write(codes_of(batch.keys, job.journal_of).tobytes())
            for out in (fh, cfh):
                out.flush()
                os.fsync(out.fileno())
            size = fh.tell()
        os.replace(text_part, base.with_name(base.name + ".prv"))
        os.replace(codes_part, base.with_name(base.name + ".codes"))
    except BaseException:
        text_part.unlink(missing_ok=True)
        codes_part.unlink(missing_ok=True)
        raise
    return RangeDone(text=str(base) + ".prv", codes=str(base) + ".codes",
                     records=writer.records, size=size, end_time=writer.end_time,
                     thread_last=last)


def place_part(part: str, out: str, offset: int, size: int) -> int:
    """Copy the part file ``part`` into ``out`` at ``offset`` (in the kernel where it can) and
    sync it; returns the bytes placed."""
    src = os.open(part, os.O_RDONLY | os.O_CLOEXEC)
    dst = os.open(out, os.O_WRONLY | os.O_CLOEXEC)
    try:
        done = 0
        while done < size:
            try:
                n = os.copy_file_range(src, dst, size - done, done, offset + done)
            except OSError:
                n = 0
            if n <= 0:  # not supported here, or no progress: copy through memory
                data = os.pread(src, min(size - done, 1 << 22), done)
                if not data:
                    raise OSError(f"{part} holds fewer than {size} bytes")
                n = os.pwrite(dst, data, offset + done)
            done += n
        os.fsync(dst)
    finally:
        os.close(src)
        os.close(dst)
    return done

