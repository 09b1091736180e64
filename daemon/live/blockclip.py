"""Host states of committed blocks clipped where canonically earlier reports of the same
process give the thread states (``stream.claims``), as batch conversion clips them while
converting: so a merge of blocks of overlapping capture ranges equals ``prvstream convert``.

A live block yields only to the reports committed before it that also come before it in
canonical order; the merge then yields each report to every canonically earlier one. Clipping
again what is already clipped changes nothing, so the blocks keep all a merge needs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prvstream.daemon.kinds import hoststates
from prvstream.daemon.kinds.context import cpu_key
from prvstream.daemon.stream.claims import Claim, earlier_claims, relative_spans
from prvstream.daemon.stream.numbering import Numbering
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver.records import KEY_OBJECT, KEY_ORDER, KEY_TIME, RecordBatch

__all__ = ["Clips", "clip_batch", "clips_of"]

log = get_logger(__name__)

#: (canonical report index, task, thread) -> sorted trace-relative spans its states yield to
Clips = dict[tuple[int, int, int], list[tuple[int, int]]]

_REPORT_SHIFT = 40


def clips_of(claims: Sequence[Sequence[Claim]], position: Sequence[int], target: Numbering,
             origin: int) -> Clips:
    """The spans each report's host states yield to: ``claims`` of each report (journal
    order), ``position`` its canonical index, ids of ``target``, times from ``origin``."""
    order = sorted(range(len(claims)), key=lambda i: position[i])
    out: Clips = {}
    for i, before in zip(order, earlier_claims([list(claims[i]) for i in order]), strict=True):
        for (host, pid, tid), spans in relative_spans(before, origin).items():
            found = target.find_thread(host, pid, cpu_key(tid))
            if found is not None:
                out[(int(position[i]), *found)] = spans
    return out


def clip_batch(batch: RecordBatch, clips: Clips, state_template: int) -> RecordBatch:
    """``batch`` with its host states (template ``state_template``, host-state rank; the low
    bit of the key's order: begins at a cut) outside the spans of their (report, task,
    thread); the parts keep their record's key but for the time and that bit
    (``hoststates.yield_to``)."""
    if not clips or not len(batch):
        return batch
    obj, order = batch.keys[:, KEY_OBJECT], batch.keys[:, KEY_ORDER]
    cand = np.flatnonzero(((obj & 0xFFFF) == hoststates.RANK)
                          & (batch.tmpl == state_template))
    if not len(cand):
        return batch
    task, thread = batch.fields[cand, 0], batch.fields[cand, 1]
    report = order[cand] >> _REPORT_SHIFT
    group = np.stack((report, task, thread), axis=1)
    uniq, inverse = np.unique(group, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    drop = np.zeros(len(batch), bool)
    src: list[np.ndarray] = []
    begins: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    conts: list[np.ndarray] = []
    for g, (r, t, h) in enumerate(uniq.tolist()):
        spans = clips.get((r, t, h))
        if not spans:
            continue
        rows = cand[inverse == g]
        drop[rows] = True
        b, e, s, c = hoststates.yield_to(spans, batch.fields[rows, 2], batch.fields[rows, 3],
                                         rows, order[rows] & 1)
        src.append(s)
        begins.append(b)
        ends.append(e)
        conts.append(c)
    if not src:
        return batch
    at = np.concatenate(src)
    parts = batch.take(at)
    parts.fields[:, 2], parts.fields[:, 3] = np.concatenate(begins), np.concatenate(ends)
    parts.keys[:, KEY_TIME] = parts.fields[:, 2]
    parts.keys[:, KEY_ORDER] = (parts.keys[:, KEY_ORDER] & ~np.int64(1)) | np.concatenate(conts)
    return RecordBatch.concat([batch.take(np.flatnonzero(~drop)), parts])
