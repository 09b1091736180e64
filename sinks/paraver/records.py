"""Paraver records in flight: a sort key, integer fields and a line template per record.

Records travel as numbers (no Python object per record) and become text only when a writer
formats them (``fastfmt``). The line builders here hold Paraver's record syntax: states
(``1:``), events (``2:``) and communications (``3:``).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec
import numpy as np

from prvstream.sinks.logger import get_logger
from prvstream.sinks.native import OptionalExtension
from prvstream.sinks.paraver.fastfmt import WIDTH, format_records, template

__all__ = [
    "KEYS",
    "KEY_OBJECT",
    "KEY_ORDER",
    "KEY_TIME",
    "PRIO_BEGIN",
    "PRIO_END",
    "PRIO_END_AFTER_BEGIN",
    "Lines",
    "RecordBatch",
    "comm_lines",
    "event_lines",
    "key_objects",
    "lines",
    "make_keys",
    "rows_of",
    "state_lines",
]

log = get_logger(__name__)

#: Sort keys are (n, 3) int64 rows: time, object, order. Order: time, then ``prio`` (ends
#: before begins at one instant, and the end of a zero-length interval after its own begin),
#: then the object (task, thread), then ``rank`` (record type and data kind), then the report's
#: canonical index, then ``seq`` (the record's position in its report's stream). Every field is
#: derived from the data alone, so the order never depends on arrival order. The object column
#: packs prio (5 bits), task (21), thread (21) and rank (16); the order column packs the report
#: (23 bits) and seq (40).
KEY_TIME, KEY_OBJECT, KEY_ORDER = 0, 1, 2

PRIO_END = 0
PRIO_BEGIN = 1
PRIO_END_AFTER_BEGIN = 2

_TASK_SHIFT, _THREAD_SHIFT, _PRIO_SHIFT, _REPORT_SHIFT = 37, 16, 58, 40
_ID_MASK = (1 << 21) - 1

#: a batch's keys in one C call (optional; the numpy code below gives the same arrays, and is
#: what runs without it)
KEYS = OptionalExtension("prvstream.sinks.paraver._records", "make_keys", "record keys")


def _key_part(value: np.ndarray | int, n: int) -> np.ndarray | int | None:
    """A key part as the compiled ``make_keys`` takes it (None: one it does not take)."""
    if isinstance(value, np.ndarray):
        if value.shape != (n,) or value.dtype.kind not in "iub":
            return None
        if value.dtype == np.int64 and value.flags.c_contiguous:
            return value
        return np.ascontiguousarray(value, dtype=np.int64)
    if isinstance(value, int | np.integer):
        return int(value)
    return None


def make_keys(time: np.ndarray, prio: np.ndarray | int, task: np.ndarray | int,
              thread: np.ndarray | int, rank: int, report: int,
              seq: np.ndarray, *, pure: bool = False) -> np.ndarray:
    """Sort keys of records from their parts (arrays or scalars, broadcast to ``time``)."""
    n = len(time)
    compiled = KEYS.use(pure)
    if compiled is not None:
        at, order = _key_part(time, n), _key_part(seq, n)
        if isinstance(at, np.ndarray) and isinstance(order, np.ndarray):
            p, ta, th = _key_part(prio, n), _key_part(task, n), _key_part(thread, n)
            if p is not None and ta is not None and th is not None:
                keys = np.empty((n, 3), dtype=np.int64)
                compiled(keys, at, p, ta, th, int(rank), int(report), order)
                return keys
    keys = np.empty((n, 3), dtype=np.int64)
    keys[:, KEY_TIME] = time
    keys[:, KEY_OBJECT] = ((np.asarray(prio, np.int64) << _PRIO_SHIFT)
                           | (np.asarray(task, np.int64) << _TASK_SHIFT)
                           | (np.asarray(thread, np.int64) << _THREAD_SHIFT) | int(rank))
    keys[:, KEY_ORDER] = (int(report) << _REPORT_SHIFT) | np.asarray(seq, np.int64)
    return keys


def key_objects(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (task, thread) arrays of ``keys``."""
    obj = keys[:, KEY_OBJECT]
    return (obj >> _TASK_SHIFT) & _ID_MASK, (obj >> _THREAD_SHIFT) & _ID_MASK


def rows_of(a: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``a[index]``: for integer indices ``take`` along the first axis (numpy copies the rows
    of a 2-d array several times faster so than by fancy indexing), else ``a[index]``."""
    if index.dtype.kind in "iu":
        return a.take(index, axis=0)
    out: np.ndarray = a[index]
    return out


_EMPTY_KEYS = np.empty((0, 3), dtype=np.int64)
_EMPTY_FIELDS = np.empty((0, WIDTH), dtype=np.int64)
_EMPTY_TMPL = np.empty(0, dtype=np.int16)


class RecordBatch(msgspec.Struct):
    """Records as parallel arrays: sort keys, integer fields and the line template of each.

    ``fields`` is (n, w) with w the most fields any record of the batch has (unused trailing
    fields are zero). A record's text is its template with the fields filled in
    (``fastfmt``); it is made only when the record is written.
    """

    keys: np.ndarray = msgspec.field(default_factory=lambda: _EMPTY_KEYS)
    fields: np.ndarray = msgspec.field(default_factory=lambda: _EMPTY_FIELDS)
    tmpl: np.ndarray = msgspec.field(default_factory=lambda: _EMPTY_TMPL)

    def __len__(self) -> int:
        return len(self.keys)

    @staticmethod
    def concat(batches: Iterable[RecordBatch]) -> RecordBatch:
        parts: list[RecordBatch] = []
        sizes: list[int] = []
        for b in batches:
            n = len(b.keys)
            if n:
                parts.append(b)
                sizes.append(n)
        if not parts:
            return RecordBatch()
        if len(parts) == 1:
            return parts[0]
        widths = [b.fields.shape[1] for b in parts]
        width = max(widths)
        fields = np.empty((sum(sizes), width), dtype=np.int64)
        row = 0
        for b, n, w in zip(parts, sizes, widths, strict=True):  # each part's fields, zeros
            end = row + n  # beyond them (not the whole array twice)
            if w < width:
                fields[row:end, :w] = b.fields
                fields[row:end, w:] = 0
            else:
                fields[row:end] = b.fields
            row = end
        return RecordBatch(
            np.concatenate([b.keys for b in parts]),
            fields,
            np.concatenate([b.tmpl for b in parts]),
        )

    def take(self, index: np.ndarray) -> RecordBatch:
        return RecordBatch(rows_of(self.keys, index), rows_of(self.fields, index),
                           rows_of(self.tmpl, index))

    def text(self) -> bytes:
        """The records' lines, in batch order."""
        return format_records(self.fields, self.tmpl)


class Lines(msgspec.Struct):
    """Records of one or more templates without their sort keys: fields (n, w), template ids."""

    fields: np.ndarray
    tmpl: np.ndarray

    def batch(self, keys: np.ndarray) -> RecordBatch:
        return RecordBatch(keys, self.fields, self.tmpl)

    def take(self, index: np.ndarray) -> Lines:
        return Lines(rows_of(self.fields, index), rows_of(self.tmpl, index))


def lines(fmt: str, *columns: np.ndarray) -> Lines:
    """Records of line format ``fmt`` (``%d`` fields) filled from integer columns."""
    n = len(columns[0])
    if len(columns) > WIDTH:
        raise ValueError(f"a record holds at most {WIDTH} fields")
    fields = np.empty((n, len(columns)), dtype=np.int64)
    for i, column in enumerate(columns):
        fields[:, i] = column
    return Lines(fields, np.full(n, template(fmt), dtype=np.int16))


#: a field given per record (an array) or the same for every record (a literal in the line)
Field = np.ndarray | int


def _fmt(value: Field, columns: list[np.ndarray]) -> str:
    if isinstance(value, int | np.integer):
        return str(int(value))
    columns.append(value)
    return "%d"


def state_lines(task: np.ndarray, thread: np.ndarray, begin: np.ndarray, end: np.ndarray,
                state: Field) -> Lines:
    """``1:cpu:appl:task:thread:begin:end:state`` records."""
    columns = [task, thread, begin, end]
    return lines("1:0:1:%d:%d:%d:%d:" + _fmt(state, columns), *columns)


def event_lines(task: np.ndarray, thread: np.ndarray, time: np.ndarray,
                *pairs: tuple[Field, Field]) -> Lines:
    """``2:cpu:appl:task:thread:time:type:value[:type:value...]`` records."""
    columns = [task, thread, time]
    fmt = "2:0:1:%d:%d:%d"
    for etype, value in pairs:
        fmt += ":" + _fmt(etype, columns)
        fmt += ":" + _fmt(value, columns)
    return lines(fmt, *columns)


def comm_lines(send_task: np.ndarray, send_thread: np.ndarray, send: np.ndarray,
               recv_task: np.ndarray, recv_thread: np.ndarray, recv: np.ndarray,
               size: np.ndarray, tag: np.ndarray) -> Lines:
    """``3:`` communication records (logical time = physical time on both sides)."""
    return lines("3:0:1:%d:%d:%d:%d:0:1:%d:%d:%d:%d:%d:%d", send_task, send_thread, send,
                 send, recv_task, recv_thread, recv, recv, size, tag)
