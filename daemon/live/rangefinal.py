"""Finalize on a Dask cluster: the committed blocks merged by time range on the workers.

1. the workers index the committed blocks in pieces (``blockrange.index_piece``: line counts
   and a sampled line every ``SAMPLE``), so nothing but the sample travels to the coordinator;
2. the coordinator cuts the time axis into ranges of about equal size from the samples and
   gives each range every block's slice that can hold its records (reaching one ``GRID``
   further each way when host Running stretches are cut again at the new origin, and back to
   the block's start when its host states yield to an overlapping earlier report: a clipped
   state may begin anywhere after its committed start);
3. each worker merges one range straight from the ``.prv`` (shared file system, by path) into
   a part file with its codes; the coordinator sizes the trace from the parts' sizes and the
   workers copy the parts into place, each at its offset (``copy_file_range``); the
   coordinator writes the header and the new codes file (in the job's state directory).
The result is byte-identical to ``blockmerge.merge_blocks`` (its finalize form), with memory
per worker bounded by fan-in x chunk.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from prvstream.daemon.kinds import hoststates
from prvstream.daemon.live.blockclip import Clips, clips_of
from prvstream.daemon.live.blockmerge import MergeResult, blocks_of, canonical_of
from prvstream.daemon.live.blockparse import BlockUnreadable, Renumber
from prvstream.daemon.live.blockrange import (
    SAMPLE,
    FinalizeJob,
    PieceIndex,
    RangeDone,
    Slice,
    index_piece,
    margin,
    merge_block_range,
    place_part,
)
from prvstream.daemon.live.blockstore import BlockStore, CodesWriter
from prvstream.daemon.scale.cluster import get_client, worker_count
from prvstream.daemon.scale.runs import RunInfo, split_times
from prvstream.daemon.stream.dedupe import shares_processes
from prvstream.daemon.stream.numbering import Numbering
from prvstream.daemon.stream.trace import trace_metadata
from prvstream.sinks.files import atomic_write, fsync_dir, output_mode
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.writer import header_capacity as paraver_capacity

__all__ = ["merge_blocks_on_dask", "plan_ranges"]

log = get_logger(__name__)

#: bytes of a block one index task reads
_PIECE = 64 << 20
#: records a range merge aims at
_RANGE_RECORDS = 1_000_000
#: times Dask reruns a task whose worker died
_RETRIES = 3
#: shortest range, in host-state grid cells, when host states are cut again (0: any)
_RECUT_SPAN = 3
#: smallest chunk of text read from a block at once (as ``blockmerge``)
_MIN_CHUNK = 1 << 16

Block = tuple[int, int, int, int]


def _index(client: Any, prv: Path, blocks: list[Block], shift: int
           ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per block: sampled lines' byte offsets, record numbers in the block and canonical
    times (increasing)."""
    jobs = [(b, a, min(a + _PIECE, block[1]))
            for b, block in enumerate(blocks) for a in range(block[0], block[1], _PIECE)]
    futures = [client.submit(index_piece, str(prv), a, z, blocks[b][1], pure=False,
                             retries=_RETRIES, key=f"finalize-index-{b}-{a}-{id(jobs)}")
               for b, a, z in jobs]
    pieces: list[PieceIndex] = client.gather(futures)
    found: list[list[tuple[int, int, int]]] = [[] for _ in blocks]
    lines = [0] * len(blocks)
    for (b, _, _), piece in zip(jobs, pieces, strict=True):
        found[b].extend((at, lines[b] + n, t + shift) for at, n, t in piece.samples)
        lines[b] += piece.lines
    for block, count in zip(blocks, lines, strict=True):
        if count != block[3]:
            raise BlockUnreadable(f"{prv} holds {count} records in a block its journal says "
                                  f"has {block[3]}; the trace was changed outside prvstream")
    out = []
    for samples in found:
        arr = np.array(samples, np.int64).reshape(-1, 3)
        out.append((arr[:, 0], arr[:, 1], arr[:, 2]))
    return out


def _range_count(total: int, workers: int,
                 index: list[tuple[np.ndarray, np.ndarray, np.ndarray]], recut: bool) -> int:
    """About ``_RANGE_RECORDS`` a range, at least two a worker; when host states are cut
    again, no range shorter than ``_RECUT_SPAN`` grid cells (each range also reads one cell
    before its start); a multiple of the workers when there are more ranges than workers."""
    ranges = max(1, -(-total // _RANGE_RECORDS))
    if total > 4 * SAMPLE:
        ranges = max(ranges, 2 * workers)
    if recut and _RECUT_SPAN > 0:
        times = [t for _, _, t in index if len(t)]
        if times:
            span = max(int(t[-1]) for t in times) - min(int(t[0]) for t in times)
            ranges = max(1, min(ranges, span // (_RECUT_SPAN * hoststates.GRID)))
    if ranges > workers:  # whole rounds: no worker left merging alone at the end
        ranges -= ranges % workers
    return ranges


def _clipped(store: BlockStore, position: np.ndarray, clips: Clips) -> list[bool]:
    """Per block (``blocks_of``): whether a report of it has host states to clip."""
    reports = {key[0] for key in clips}
    out: list[bool] = []
    start = None
    for i, entry in enumerate(store.journal.reports):
        hit = int(position[i]) in reports
        if out and entry.block_start == start:
            out[-1] = out[-1] or hit
        else:
            out.append(hit)
            start = entry.block_start
    return out


def plan_ranges(blocks: list[Block], index: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
                ranges: int, reach: int, from_start: list[bool] | None = None
                ) -> list[tuple[int | None, int | None, list[Slice]]]:
    """Up to ``ranges`` time ranges ``[lo, hi)`` cutting the samples into about equal parts,
    each with the slice of every block that holds its records (``reach`` further each way;
    from the start of the blocks ``from_start`` says)."""
    runs = [RunInfo(base="", records=b[3], samples=times.tolist(), step=SAMPLE)
            for b, (_, _, times) in zip(blocks, index, strict=True)]
    cuts = split_times(runs, ranges)
    out: list[tuple[int | None, int | None, list[Slice]]] = []
    for lo, hi in zip([None, *cuts], [*cuts, None], strict=True):
        slices = []
        for b, (block, (offs, nums, times)) in enumerate(zip(blocks, index, strict=True)):
            start, end, first, records = block
            a_at, a_n, z_at, z_n = start, 0, end, records
            if lo is not None and not (from_start and from_start[b]):
                i = int(np.searchsorted(times, lo - reach, side="left")) - 1
                if i >= 0:
                    a_at, a_n = int(offs[i]), int(nums[i])
            if hi is not None:
                j = int(np.searchsorted(times, hi + reach, side="left"))
                if j < len(times):
                    z_at, z_n = int(offs[j]), int(nums[j])
            if z_n > a_n:
                slices.append(Slice(a_at, z_at, first + a_n, z_n - a_n, a_n))
        out.append((lo, hi, slices))
    return out


def merge_blocks_on_dask(spec: str, store: BlockStore, prv: Path, out_prv: Path, *,
                         live: Numbering, live_origin: int, fan_in: int, chunk_rows: int,
                         header_capacity: int, codes_out: CodesWriter,
                         progress: Callable[[int, int], None] | None = None) -> MergeResult:
    """``blockmerge.merge_blocks`` of a finalize (canonical ids, earliest start as origin,
    ``.pcf``/``.row`` beside ``out_prv``) with the merge spread over time ranges on the
    cluster ``spec``."""
    client = get_client(spec)
    began = time.perf_counter()
    state = store.journal.state
    metas = store.metas()
    target, canon_index = canonical_of(metas, live)
    origin = min(m.wall_start for m in metas)
    ren = Renumber.between(live, target, live_origin - origin)
    position = np.array(canon_index, np.int64)
    clips = clips_of([m.claims or [] for m in metas], canon_index, target, origin)
    blocks = blocks_of(store)
    total = sum(b[3] for b in blocks)
    recut = ren.shift % hoststates.GRID != 0
    chunk = max(_MIN_CHUNK, chunk_rows * 64 // max(1, min(len(blocks), fan_in)))
    scratch = Path(tempfile.mkdtemp(prefix=f".{out_prv.name}.dask-", dir=out_prv.parent))
    result = MergeResult(origin=origin, numbering=target)
    futures: list[Any] = []
    try:
        codes_copy = scratch / "codes"  # the state directory need not be shared
        shutil.copyfile(store.codes_path(), codes_copy)
        index = _index(client, prv, blocks, ren.shift)
        indexed = time.perf_counter()
        ranges = _range_count(total, worker_count(client), index, recut)
        plan = plan_ranges(blocks, index, ranges, margin(recut), _clipped(store, position,
                                                                            clips))
        job = FinalizeJob(prv=str(prv), codes=str(codes_copy), renumber=ren,
                          position=position, journal_of=np.argsort(position), fan_in=fan_in,
                          chunk=chunk, recut=recut, clips=clips, scratch=str(scratch),
                          repeats=shares_processes({(h, p) for h, p, *_ in m.objects}
                                                   for m in metas))
        shared = client.scatter(job, broadcast=True)
        futures = [client.submit(merge_block_range, shared, k, lo, hi, slices, pure=False,
                                 retries=_RETRIES, key=f"finalize-range-{k}-{id(plan)}")
                   for k, (lo, hi, slices) in enumerate(plan)]
        pcf, row = trace_metadata(target)  # meanwhile
        done: list[RangeDone] = []
        written = 0
        for future in futures:  # in time order
            part: RangeDone = future.result()
            done.append(part)
            written += part.records
            if progress is not None:
                progress(written, total)
        merged = time.perf_counter()
        capacity = paraver_capacity(target.layout(), origin, header_capacity)
        size = sum(d.size for d in done)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{out_prv.name}.", suffix=".tmp",
                                        dir=out_prv.parent)
        tmp = Path(tmp_name)
        try:
            os.fchmod(fd, output_mode())
            os.ftruncate(fd, capacity + size)
            offsets = np.cumsum([capacity] + [d.size for d in done]).tolist()
            futures = [client.submit(place_part, d.text, str(tmp), at, d.size, pure=False,
                                     retries=_RETRIES, key=f"finalize-place-{k}-{id(plan)}")
                       for k, (d, at) in enumerate(zip(done, offsets, strict=False))]
            for d in done:  # meanwhile: the codes go to the state directory
                with open(d.codes, "rb") as fh:
                    codes_out.write(np.frombuffer(fh.read(), "<u4"))
                result.records += d.records
                result.end_time = max(result.end_time, d.end_time)
                for obj, t in d.thread_last.items():
                    if t > result.thread_last.get(obj, -1):
                        result.thread_last[obj] = t
            placed = sum(f.result() for f in futures)
            if placed != size:
                raise RuntimeError(f"range parts placed {placed} of {size} bytes")
            os.pwrite(fd, pv.header_line(target.layout(), result.end_time, origin, capacity),
                      0)
            os.fsync(fd)
            os.close(fd)
            fd = -1
            atomic_write(out_prv.with_suffix(".pcf"), pcf)
            atomic_write(out_prv.with_suffix(".row"), row)
            os.replace(tmp, out_prv)
            fsync_dir(out_prv.parent)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
    except BaseException:
        client.cancel(futures)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ended = time.perf_counter()
    if result.records != total and not recut and not clips and not job.repeats:
        log.warning("block_merge_records", written=result.records, committed=total,
                    job=state.job_dir)
    log.info("dask_finalize_ranges", job=state.job_dir, blocks=len(blocks), ranges=len(plan),
             records=result.records, mb=round(size / 1e6, 1), recut=recut,
             clipped=len(clips),
             index_s=round(indexed - began, 3), merge_s=round(merged - indexed, 3),
             place_s=round(ended - merged, 3),
             mb_per_s=round(size / 1e6 / max(ended - began, 1e-9), 1))
    return result
