"""Finalize from the live trace itself: a k-way merge of its committed, time-sorted blocks.

Each block is read back in chunks (``blockparse``), renumbered to the canonical ids, its times
shifted to the earliest report's start, and given back its full sort key from the codes kept
at commit (``blockstore``); host-thread Running stretches are joined and cut again at the new
origin's grid (``kinds.hoststates``). The blocks are merged with bounded fan-in (multi-pass
above it, as ``batch.convert`` merges reports), so the result is ``prvstream convert`` of the
same reports, byte for byte, without reading any export. Memory: fan-in x chunk.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from prvstream.daemon.kinds import hoststates
from prvstream.daemon.live.blockclip import Clips, clip_batch, clips_of
from prvstream.daemon.live.blockparse import BlockUnreadable, Renumber, parse_lines
from prvstream.daemon.live.blockstore import BlockStore, CodesSource, CodesWriter, ReportMeta
from prvstream.daemon.stream.blockcodes import codes_of, split_codes
from prvstream.daemon.stream.dedupe import drop_repeats, shares_processes
from prvstream.daemon.stream.merge import Stream, merge_bounded
from prvstream.daemon.stream.numbering import Numbering
from prvstream.daemon.stream.trace import numbering_of, trace_metadata, track_thread_last
from prvstream.sinks.files import atomic_write, fsync_dir, output_mode
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.fastfmt import template
from prvstream.sinks.paraver.records import PRIO_BEGIN, RecordBatch, make_keys
from prvstream.sinks.paraver.writer import PrvWriter, placeholder
from prvstream.sinks.paraver.writer import header_capacity as paraver_capacity

__all__ = ["BlockUnreadable", "ExtraReport", "MergeResult", "block_stream", "blocks_of",
           "canonical_of", "merge_blocks"]

log = get_logger(__name__)

_STATE = template("1:0:1:%d:%d:%d:%d:%d")
_COMM = template("3:0:1:%d:%d:%d:%d:0:1:%d:%d:%d:%d:%d:%d")
#: smallest chunk of text read from a block at once
_MIN_CHUNK = 1 << 16


@dataclass
class MergeResult:
    """What a merge of blocks wrote."""

    records: int = 0
    end_time: int = 0
    origin: int = 0
    numbering: Numbering | None = None
    thread_last: dict[tuple[int, int], int] = field(default_factory=dict)


def canonical_of(metas: list[ReportMeta], live: Numbering) -> tuple[Numbering, list[int]]:
    """The canonical numbering of the committed reports, and each report's canonical index
    (by journal index). Ids the live trace holds beyond the reports' plans follow, in live
    order (as streaming would register them)."""
    order = sorted(range(len(metas)), key=lambda i: metas[i].sort_key)
    canon = numbering_of((metas[i].report_objects(), metas[i].value_sets()) for i in order)
    for entry in live.tasks:
        task = canon.task(entry.host, entry.pid, entry.name, entry.rank)
        for key, name in zip(entry.thread_keys, entry.thread_names, strict=True):
            canon.thread(task, key, name)
    for group, labels in live.values.items():
        for label in labels:
            canon.value(group, label)
    position = [0] * len(metas)
    for rank, i in enumerate(order):
        position[i] = rank
    return canon, position


def blocks_of(store: BlockStore) -> list[tuple[int, int, int, int]]:
    """(first byte, end byte, first record, records) of every distinct committed block."""
    out: list[tuple[int, int, int, int]] = []
    records = 0
    for entry in store.journal.reports:
        if out and out[-1][0] == entry.block_start:
            out[-1] = (*out[-1][:3], out[-1][3] + entry.records)
        else:
            out.append((entry.block_start, entry.block_end, records, entry.records))
        records += entry.records
    return out


class _Recut:
    """Host Running stretches of one block joined and cut at the new grid; a piece that begins
    at a cut keeps the continuation bit in its key (the codes of the new trace carry it)."""

    def __init__(self) -> None:
        #: (report, task, thread) -> [begin not yet written, end so far, begins at a cut]
        self.open: dict[tuple[int, int, int], list[int]] = {}
        self.out: list[tuple[int, int, int, int, int, int]] = []

    def piece(self, key: tuple[int, int, int], begin: int, end: int, cont: bool) -> None:
        found = self.open.get(key)
        if cont and found is not None and found[1] == begin:
            found[1] = end
            return
        if found is not None:
            self._emit(key, *found)
        self.open[key] = [begin, end, 0]

    def _emit(self, key: tuple[int, int, int], begin: int, end: int, cont: int) -> None:
        """[begin, end) cut at the grid as ``hoststates.cut`` cuts it (one interval: plain
        integers are faster than arrays)."""
        grid = hoststates.GRID
        cell, last = begin // grid, (end - 1) // grid
        while begin < end:
            stop = min(end, (cell + 1) * grid)
            self.out.append((key[0], key[1], key[2], begin, stop, cont))
            if cell >= last:
                break
            cell += 1
            begin, cont = cell * grid, 1

    def settle(self, last: int | None) -> int | None:
        """Write every piece that can no longer grow (``last``: the chunk's last time, None
        at the block's end); the earliest time still held back."""
        held: int | None = None
        for key in list(self.open):
            begin, end, cont = self.open[key]
            if last is None or end < last:
                self._emit(key, begin, end, cont)
                del self.open[key]
                continue
            grid = end - end % hoststates.GRID
            if grid > begin:
                self._emit(key, begin, grid, cont)
                self.open[key] = [grid, end, 1]
                begin = grid
            held = begin if held is None else min(held, begin)
        return held

    def batch(self) -> RecordBatch:
        if not self.out:
            return RecordBatch()
        rows = np.array(self.out, np.int64)
        self.out = []
        fields = np.zeros((len(rows), 5), np.int64)
        fields[:, 0], fields[:, 1] = rows[:, 1], rows[:, 2]
        fields[:, 2], fields[:, 3] = rows[:, 3], rows[:, 4]
        fields[:, 4] = pv.STATE_RUNNING
        keys = make_keys(rows[:, 3], PRIO_BEGIN, rows[:, 1], rows[:, 2], hoststates.RANK,
                         0, rows[:, 5])
        keys[:, 2] |= rows[:, 0] << 40
        return RecordBatch(keys, fields, np.full(len(rows), _STATE, np.int16))


def _convert(parsed_kind: np.ndarray, f: np.ndarray, counts: np.ndarray, codes: np.ndarray,
             ren: Renumber, position: np.ndarray, seq0: int, recut: _Recut | None
             ) -> RecordBatch:
    """One chunk of parsed lines as canonical records with their full sort keys."""
    n = len(parsed_kind)
    report, flag, prio, rank = split_codes(codes)
    creport = position[report]
    task, thread = ren.objects(f[:, 3], f[:, 4])
    time = f[:, 5] + ren.shift
    width = max(10, 3 + max(0, f.shape[1] - 6) // 2)
    fields = np.zeros((n, width), np.int64)
    tmpl = np.empty(n, np.int16)
    fields[:, 0], fields[:, 1], fields[:, 2] = task, thread, time
    keep = np.ones(n, bool)
    if ((f[:, 1] != 0) | (f[:, 2] != 1)).any():
        raise BlockUnreadable("a committed record is not on cpu 0 of application 1")
    states = np.flatnonzero(parsed_kind == 1)
    if len(states):
        fields[states, 3] = f[states, 6] + ren.shift
        fields[states, 4] = f[states, 7]
        tmpl[states] = _STATE
        if recut is not None:
            host = states[(rank[states] == hoststates.RANK)
                          & (f[states, 7] == pv.STATE_RUNNING)]
            keep[host] = False
            for i, t, h, b, e, c in zip(creport[host].tolist(), task[host].tolist(),
                                        thread[host].tolist(), time[host].tolist(),
                                        fields[host, 3].tolist(), flag[host].tolist(),
                                        strict=True):
                recut.piece((i, t, h), b, e, bool(c))
    comms = np.flatnonzero(parsed_kind == 3)
    if len(comms):
        c = f[comms]
        if ((c[:, 7] != 0) | (c[:, 8] != 1)).any():
            raise BlockUnreadable("a committed communication is not on cpu 0 of application 1")
        rtask, rthread = ren.objects(c[:, 9], c[:, 10])
        fields[comms, 3] = c[:, 6] + ren.shift
        fields[comms, 4], fields[comms, 5] = rtask, rthread
        fields[comms, 6], fields[comms, 7] = c[:, 11] + ren.shift, c[:, 12] + ren.shift
        fields[comms, 8], fields[comms, 9] = c[:, 13], c[:, 14]
        tmpl[comms] = _COMM
    events = np.flatnonzero(parsed_kind == 2)
    if len(events):
        _events(events, f, counts, fields, tmpl, ren)
    if ((parsed_kind < 1) | (parsed_kind > 3)).any():
        raise BlockUnreadable("a committed line is not a state, event or communication")
    # the low bit of the order: a host state that begins at a cut (``blockclip`` reads it)
    seq = (seq0 + np.arange(n, dtype=np.int64)) * 2 + np.where(rank == hoststates.RANK, flag, 0)
    keys = make_keys(time, prio, task, thread, 0, 0, seq)
    keys[:, 1] |= rank
    keys[:, 2] |= creport << 40
    batch = RecordBatch(keys, fields, tmpl)
    return batch if keep.all() else batch.take(np.flatnonzero(keep))


def _events(rows: np.ndarray, f: np.ndarray, counts: np.ndarray, fields: np.ndarray,
            tmpl: np.ndarray, ren: Renumber) -> None:
    """Events: values renumbered into the fields, types into the line templates."""
    ev = f[rows]
    pairs = (ev.shape[1] - 6) // 2
    n_pairs = (counts[rows] - 6) // 2
    types = ev[:, 6 : 6 + 2 * pairs : 2]
    vals = ev[:, 7 : 7 + 2 * pairs : 2]
    new_t, new_v = ren.event_pairs(types, vals)
    fields[rows, 3 : 3 + pairs] = new_v
    shape_rows = np.column_stack([n_pairs, new_t]) if pairs else n_pairs[:, None]
    first, inverse = _factorize_rows(shape_rows)
    ids = np.array([ren.template(tuple(row[1 : 1 + row[0]]))
                    for row in shape_rows[first].tolist()], np.int16)
    tmpl[rows] = ids[inverse]


def _factorize_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of one row of each distinct row, the distinct row of each row): constant
    columns are skipped, the others factorized one by one (cheaper than ``np.unique`` of
    whole rows when, as here, a few columns vary among a few values)."""
    code = np.zeros(len(rows), np.int64)
    for col in rows.T:
        if col[0] == col.min() == col.max():
            continue
        values, inv = np.unique(col, return_inverse=True)
        code = code * len(values) + inv.ravel()
        if int(code.max()) >= 1 << 40:  # never overflows: renumber the codes so far
            code = np.unique(code, return_inverse=True)[1].ravel()
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    return first, inverse.ravel()


def block_stream(prv: Path, block: tuple[int, int, int, int], store: CodesSource,
                  ren: Renumber, position: np.ndarray, chunk: int, recut: bool,
                  clips: Clips, seq0: int = 0) -> Stream:
    """One committed block as a stream of canonical, fully keyed record batches, its host
    states clipped by ``clips`` (``blockclip``); ``block`` may be a slice of one whose first
    record is the block's ``seq0``-th."""
    start, end, first, records = block
    cutter = _Recut() if recut else None
    done = 0
    with prv.open("rb") as fh:
        fh.seek(start)
        left = end - start
        tail = b""
        while left > 0 or tail:
            data = fh.read(min(chunk, left)) if left > 0 else b""
            left -= len(data)
            data = tail + data
            cut = data.rfind(b"\n") + 1
            if left <= 0 and cut != len(data):
                raise BlockUnreadable(f"a committed block of {prv} ends inside a line")
            data, tail = data[:cut], data[cut:]
            if not data:
                continue
            parsed = parse_lines(data)
            n = len(parsed.kind)
            if done + n > records:
                raise BlockUnreadable(f"{prv} holds more records than its journal says")
            codes = store.codes(first + done, n)
            batch = _convert(parsed.kind, parsed.fields, parsed.counts, codes, ren, position,
                             seq0 + done, cutter)
            done += n
            last = int(parsed.fields[-1, 5]) + ren.shift
            mark = last
            if cutter is not None:
                held = cutter.settle(last)
                batch = RecordBatch.concat([batch, cutter.batch()])
                if held is not None:
                    mark = min(mark, held)
            yield clip_batch(batch, clips, _STATE), mark
    if done != records:
        raise BlockUnreadable(f"{prv} holds {done} records in a block its journal says has "
                              f"{records}; the trace was changed outside prvstream")
    if cutter is not None:
        cutter.settle(None)
        yield clip_batch(cutter.batch(), clips, _STATE), np.iinfo(np.int64).max


@dataclass
class ExtraReport:
    """A new report merged with the blocks (a compaction): its meta, and its stream given the
    numbering it registers in and its report index."""

    meta: ReportMeta
    stream: Callable[[Numbering, int], Stream]


def merge_blocks(store: BlockStore, prv: Path, out_prv: Path, *, live: Numbering,
                 live_origin: int, fan_in: int, chunk_rows: int, header_capacity: int,
                 codes_out: CodesWriter | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 extra: ExtraReport | None = None, origin: int | None = None,
                 ) -> MergeResult:
    """Write ``out_prv``: the committed blocks of ``prv`` merged. Without ``extra`` the ids
    become canonical and the origin the earliest start, with ``.pcf``/``.row`` beside it
    (finalize); with it, the live ids stay, the new report is merged in at ``origin``
    (compaction). ``codes_out`` receives the new trace's codes."""
    state = store.journal.state
    metas = store.metas()
    if extra is None:
        target, canon_index = canonical_of(metas, live)
        origin = min(m.wall_start for m in metas)
    else:
        assert origin is not None
        target = live
        everyone = [*metas, extra.meta]
        order = sorted(range(len(everyone)), key=lambda i: everyone[i].sort_key)
        canon_index = [0] * len(everyone)
        for rank, i in enumerate(order):
            canon_index[i] = rank
    ren = Renumber.between(live, target, live_origin - origin)
    position = np.array(canon_index, np.int64)
    # overlapping capture ranges of one process: each report yields to the earlier ones
    clips = clips_of([m.claims or [] for m in metas] + ([extra.meta.claims or []]
                                                        if extra is not None else []),
                     canon_index, target, origin)
    journal_of = np.argsort(position)
    blocks = blocks_of(store)
    total = sum(b[3] for b in blocks)
    recut = ren.shift % hoststates.GRID != 0
    chunk = max(_MIN_CHUNK, chunk_rows * 64 // max(1, min(len(blocks), fan_in)))
    streams: list[Stream] = [block_stream(prv, b, store, ren, position, chunk, recut,
                                           clips) for b in blocks]
    if extra is not None:
        streams.append(extra.stream(live, int(position[-1])))
    repeats = shares_processes({(h, p) for h, p, *_ in m.objects}
                               for m in [*metas, *([extra.meta] if extra else [])])
    result = MergeResult(origin=origin, numbering=target)
    capacity = paraver_capacity(target.layout(), origin, header_capacity)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out_prv.name}.", suffix=".tmp",
                                    dir=out_prv.parent)
    tmp = Path(tmp_name)
    os.fchmod(fd, output_mode())
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(placeholder(capacity))
            writer = PrvWriter(fh)
            # even one block is merged: renumbering reorders records that share a time
            merged = merge_bounded(streams, fan_in)
            if repeats:  # overlapping capture ranges of one process hold records twice
                merged = drop_repeats(merged)
            for batch, _ in merged:
                if not len(batch):
                    continue
                writer.write(batch)
                track_thread_last(batch.keys, result.thread_last)
                if codes_out is not None:
                    codes_out.write(codes_of(batch.keys, journal_of))
                if progress is not None:
                    progress(writer.records, total)
            # the header is written last: ids a new report registered are included
            writer.finish(pv.header_line(target.layout(), writer.end_time, origin, capacity))
        if extra is None:
            pcf, row = trace_metadata(target)
            atomic_write(out_prv.with_suffix(".pcf"), pcf)
            atomic_write(out_prv.with_suffix(".row"), row)
        os.replace(tmp, out_prv)
        fsync_dir(out_prv.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    result.records, result.end_time = writer.records, writer.end_time
    if result.records != total and not recut and not clips and not repeats and extra is None:
        log.warning("block_merge_records", written=result.records, committed=total,
                    job=state.job_dir)
    log.info("blocks_merged", job=state.job_dir, blocks=len(blocks), records=result.records,
             recut=recut, clipped=len(clips), compaction=extra is not None)
    return result
