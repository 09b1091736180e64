"""Records repeated by overlapping capture ranges (``stream.dedupe``): dropped exactly where an
earlier report holds an equal record at the same instant on the same row, whatever the
batching of the stream."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.stream.dedupe import Repeats, drop_repeats
from prvstream.daemon.stream.merge import RecordBatch, sort_batch
from prvstream.sinks.paraver.records import make_keys

__all__: list[str] = []

record = st.tuples(st.integers(0, 4), st.integers(1, 2), st.integers(0, 2),
                   st.integers(0, 1), st.integers(0, 2))


def _batch(rows: list[tuple[int, int, int, int, int]]) -> RecordBatch:
    """(time, thread, report, template, value) rows as records: a value 0 is a trailing
    zero field, so equal records may come padded differently."""
    a = np.array(rows, np.int64).reshape(-1, 5)
    keys = make_keys(a[:, 0], 1, 1, a[:, 1], 5, 0, np.arange(len(a)))
    keys[:, 2] |= a[:, 2] << 40
    fields = np.zeros((len(a), 4), np.int64)
    fields[:, 0], fields[:, 1], fields[:, 2] = 1, a[:, 1], a[:, 0]
    fields[:, 3] = a[:, 4]
    return sort_batch(RecordBatch(keys, fields, a[:, 3].astype(np.int16)))


def _expected(rows: list[tuple[int, int, int, int, int]]) -> int:
    """Records kept: those with no equal record of a lower report at their instant and row."""
    return sum(1 for t, h, r, k, v in rows
               if not any((t2, h2, k2, v2) == (t, h, k, v) and r2 < r
                          for t2, h2, r2, k2, v2 in rows))


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(record, max_size=40), cuts=st.lists(st.integers(0, 40), max_size=6))
def test_repeats_of_earlier_reports_are_dropped_whatever_the_batching(
        rows: list[tuple[int, int, int, int, int]], cuts: list[int]) -> None:
    whole = _batch(rows)
    at = sorted({0, len(whole), *(c % (len(whole) + 1) for c in cuts)})
    stream = [(whole.take(np.arange(a, b)), 0) for a, b in itertools.pairwise(at)]
    repeats = Repeats()
    kept = RecordBatch.concat([b for b, _ in drop_repeats(iter(stream), repeats)])
    assert len(kept) == _expected(rows) == len(whole) - repeats.dropped
    # equal records of different reports: only the lowest report's are kept
    reports: dict[tuple[object, ...], set[int]] = {}
    for k, f, tm in zip(kept.keys.tolist(), kept.fields.tolist(), kept.tmpl.tolist(),
                        strict=True):
        reports.setdefault((k[0], k[1], tm, tuple(f)), set()).add(k[2] >> 40)
    assert all(len(r) == 1 for r in reports.values())
