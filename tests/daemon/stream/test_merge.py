"""Property tests of the bounded-memory merges: sorted, lossless, ties ordered, bounded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from prvstream.daemon.stream import merge as merge_module
from prvstream.daemon.stream.merge import (
    PRIO_BEGIN,
    PRIO_END,
    RecordBatch,
    Stream,
    make_keys,
    merge,
    merge_bounded,
    sort_batch,
)
from prvstream.sinks import native
from prvstream.sinks.paraver.fastfmt import WIDTH, format_records, template

_INTERVALS = st.lists(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 15)), max_size=40),
    min_size=1, max_size=6,
)


_TMPL = template("%d")


def _keys(rows: list[tuple[int, int, int, int, int, int, int]]) -> np.ndarray:
    """Keys from (time, prio, task, thread, rank, report, seq) rows."""
    return np.concatenate([make_keys(np.array([r[0]]), r[1], r[2], r[3], r[4], r[5],
                                     np.array([r[6]])) for r in rows])


def _ident(kind: str, index: int, seq: int) -> int:
    """A record's identity in the first field: begin/end, stream, sequence."""
    return (index * 1_000_000 + seq) * 2 + (kind == "e")


def _stream(index: int, intervals: list[tuple[int, int]], chunk: int, pending: list[int]):
    """Intervals sorted by start -> chunks of begin and end records, like a table stream."""
    rows = sorted(intervals)
    for pos in range(0, len(rows), chunk):
        part = rows[pos : pos + chunk]
        key_rows = []
        fields = np.zeros((2 * len(part), WIDTH), dtype=np.int64)
        for j, (start, length) in enumerate(part):
            seq = pos + j
            key_rows.append((start, PRIO_BEGIN, index, 1, 0, 0, seq))
            key_rows.append((start + length, PRIO_END if length else 2, index, 1, 0, 0, seq))
            fields[2 * j, 0] = _ident("b", index, seq)
            fields[2 * j + 1, 0] = _ident("e", index, seq)
        keys = _keys(key_rows)
        yield RecordBatch(keys, fields, np.full(len(keys), _TMPL, dtype=np.int16)), part[-1][0]
        pending.append(len(part))


def _drain(merged) -> tuple[list[tuple], list[str], int]:
    keys: list[tuple] = []
    lines: list[int] = []
    biggest = 0
    for batch, _ in merged:
        biggest = max(biggest, len(batch))
        keys.extend(tuple(k) for k in batch.keys.tolist())
        lines.extend(batch.fields[:, 0].tolist())
    return keys, lines, biggest


@settings(max_examples=60, deadline=None)
@given(_INTERVALS, st.integers(1, 7))
def test_merge_is_sorted_and_lossless(streams: list[list[tuple[int, int]]], chunk: int) -> None:
    sink: list[int] = []
    keys, lines, _ = _drain(merge([_stream(i, s, chunk, sink) for i, s in enumerate(streams)]))
    assert len(keys) == 2 * sum(len(s) for s in streams)
    assert keys == sorted(keys)
    assert len(set(lines)) == len(lines)


@settings(max_examples=60, deadline=None)
@given(_INTERVALS, st.integers(1, 5), st.integers(2, 3), st.sampled_from([1, 3, 4096]))
def test_bounded_fan_in_equals_single_merge(streams, chunk: int, fan_in: int,
                                            frame: int) -> None:
    """Multi-pass merges through run files whose frames gather ``frame`` records."""
    sink: list[int] = []
    one = _drain(merge([_stream(i, s, chunk, sink) for i, s in enumerate(streams)]))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(merge_module, "RUN_FRAME", frame)
        many = _drain(merge_bounded([_stream(i, s, chunk, sink)
                                     for i, s in enumerate(streams)], fan_in))
    assert one[0] == many[0]
    assert one[1] == many[1]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 5)), min_size=1, max_size=50))
def test_ends_come_before_begins_at_one_instant(intervals: list[tuple[int, int]]) -> None:
    sink: list[int] = []
    _, lines, _ = _drain(merge([_stream(0, intervals, 3, sink)]))
    rows = sorted(intervals)
    position = {line: i for i, line in enumerate(lines)}
    for seq in range(len(rows)):
        # an interval's own begin precedes its end, even at zero length
        assert position[_ident("b", 0, seq)] < position[_ident("e", 0, seq)]
    for i, (s1, l1) in enumerate(rows):
        for j, (s2, _) in enumerate(rows):
            if l1 and s1 + l1 == s2:
                assert position[_ident("e", 0, i)] < position[_ident("b", 0, j)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=300), st.integers(1, 20))
def test_pool_is_bounded_by_chunk_and_open_intervals(starts: list[int], chunk: int) -> None:
    """Short intervals: the merge never holds much more than a chunk per stream."""
    sink: list[int] = []
    streams = [_stream(i, [(s, 1) for s in starts], chunk, sink) for i in range(3)]
    _, _, biggest = _drain(merge(streams))
    same_instant = max(starts.count(s) for s in set(starts))
    assert biggest <= 3 * 2 * (chunk + same_instant) + 6


def test_sort_batch_orders_by_full_key() -> None:
    keys = _keys([(5, PRIO_BEGIN, 1, 1, 0, 0, 0), (5, PRIO_END, 1, 1, 0, 0, 1),
                  (4, PRIO_BEGIN, 2, 1, 0, 0, 2)])
    fields = np.zeros((3, WIDTH), dtype=np.int64)
    fields[:, 0] = [1, 2, 3]
    out = sort_batch(RecordBatch(keys, fields, np.full(3, _TMPL, dtype=np.int16)))
    assert out.fields[:, 0].tolist() == [3, 2, 1]
    assert out.text() == b"3\n2\n1\n"


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=3, max_size=3),
                max_size=30))
@example([[-(2**63), 2**63 - 1, 0], [-1, 9, 10], [-10, 99, -(10**18)], [10**18, -9, 1]])
def test_compiled_and_python_formatters_agree(rows: list[list[int]]) -> None:
    """Every int64 (the C formatter sizes each line's digits exactly before writing)."""
    fmt = template("1:%d:x:%d:%d")
    fields = np.zeros((len(rows), WIDTH), dtype=np.int64)
    if rows:
        fields[:, :3] = rows
    tmpl = np.full(len(rows), fmt, dtype=np.int16)
    expected = "".join(f"1:{a}:x:{b}:{c}\n" for a, b, c in rows).encode()
    assert format_records(fields, tmpl, pure=True) == expected
    assert format_records(fields, tmpl) == expected


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 2), st.integers(1, 3),
                          st.integers(1, 3), st.integers(0, 4), st.integers(0, 2),
                          st.integers(0, 2**39)), min_size=1, max_size=60))
def test_sort_batch_equals_sorting_the_key_tuples(rows: list[tuple[int, ...]]) -> None:
    """Many records share a time: the tie-break puts them in full-key order."""
    keys = _keys(rows)
    fields = np.zeros((len(rows), WIDTH), dtype=np.int64)
    fields[:, 0] = np.arange(len(rows))
    out = sort_batch(RecordBatch(keys, fields, np.full(len(rows), _TMPL, dtype=np.int16)))
    expected = sorted(range(len(rows)), key=lambda i: (rows[i], i))
    assert out.fields[:, 0].tolist() == expected


def test_runs_spill_the_fewest_records_with_at_most_fan_in_streams_open(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """17 streams with a fan-in of 16: one run of the first two, then one merge of the run and
    the other 15 (every other stream's records are never spilled); 400 and 16: most records
    are spilled once, none more than twice, and no more than 16 streams are ever open."""
    spilled: list[int] = []
    write = merge_module.write_run

    def counting(batches: Iterator[tuple[RecordBatch, int]], directory: Path) -> Path:
        def count() -> Iterator[tuple[RecordBatch, int]]:
            for batch, mark in batches:
                spilled.append(len(batch))
                yield batch, mark
        return write(count(), directory)

    monkeypatch.setattr(merge_module, "write_run", counting)
    open_now = [0]
    most = [0]

    def tracked(index: int) -> Stream:
        open_now[0] += 1
        most[0] = max(most[0], open_now[0])
        try:
            yield from _stream(index, [(index * 3 + k, 2) for k in range(5)], 2, [])
        finally:
            open_now[0] -= 1

    for n, fan_in, most_spilled in ((17, 16, 2 * 10), (400, 16, 2 * 4000)):
        spilled.clear()
        most[0] = 0
        whole = _drain(merge([_stream(i, [(i * 3 + k, 2) for k in range(5)], 2, [])
                              for i in range(n)]))
        bounded = _drain(merge_bounded([tracked(i) for i in range(n)], fan_in))
        assert whole[1] == bounded[1]
        assert most[0] <= fan_in
        assert 0 < sum(spilled) <= most_spilled
    assert sum(spilled) < 2 * 4000 * 0.75  # not every record twice, as level by level did


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(1, 2),
                          st.integers(1, 2), st.integers(0, 2), st.integers(0, 1),
                          st.integers(0, 3)), max_size=30),
       st.booleans())
def test_in_order_is_true_exactly_when_sorting_moves_nothing(rows: list[tuple[int, ...]],
                                                              presort: bool) -> None:
    """The merge skips sorting a batch ``_in_order`` calls sorted: it must be so by the full
    key (ties in time, object and order included), never otherwise."""
    if presort:
        rows = sorted(rows)
    keys = _keys(rows) if rows else np.zeros((0, 3), dtype=np.int64)
    moved = not np.array_equal(merge_module.sort_order(keys), np.arange(len(rows)))
    assert merge_module._in_order(keys) is not moved


def _wide_stream(index: int, intervals: list[tuple[int, int]], chunk: int, width: int
                 ) -> Stream:
    """``_stream``'s records with fields ``width`` wide, the first field their identity and
    the others derived from it (a narrower stream's missing fields are zeros)."""
    for batch, mark in _stream(index, intervals, chunk, []):
        fields = np.zeros((len(batch), width), dtype=np.int64)
        for k in range(width):
            fields[:, k] = batch.fields[:, 0] + k
        yield RecordBatch(batch.keys, fields, batch.tmpl), mark


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "numpy"])
@settings(max_examples=80, deadline=None)
@given(_INTERVALS, st.integers(1, 7), st.integers(1, 9),
       st.lists(st.integers(1, WIDTH), min_size=6, max_size=6))
def test_slices_are_gathered_one_by_one_as_narrow_as_their_records(
        pure: bool, streams: list[list[tuple[int, int]]], chunk: int, size: int,
        widths: list[int]) -> None:
    """A merge with small slices yields the same records, fields and watermarks as one with
    whole batches; each slice is its own array (never a view of a batch gathered whole, which
    would stay in memory until its last slice was written) and as wide as its widest record.
    With the compiled sort and gather and with numpy's."""
    def run(max_batch: int) -> list[tuple[RecordBatch, int]]:
        native.prefer_python(pure)
        try:
            return list(merge([_wide_stream(i, s, chunk, widths[i])
                               for i, s in enumerate(streams)], max_batch))
        finally:
            native.prefer_python(False)

    def records(batches: list[tuple[RecordBatch, int]]) -> tuple[list[list[int]], list[list[int]]]:
        keys = [k for b, _ in batches for k in b.keys.tolist()]
        fields = [f for b, _ in batches
                  for f in np.pad(b.fields, ((0, 0), (0, WIDTH - b.fields.shape[1]))).tolist()]
        return keys, fields

    whole, sliced = run(1 << 30), run(size)
    assert records(whole) == records(sliced)
    assert [m for _, m in whole[-1:]] == [m for _, m in sliced[-1:]]
    for (batch, mark), following in zip(sliced, [*sliced[1:], None], strict=False):
        assert 0 < len(batch) <= size
        if following is not None:
            assert mark <= int(following[0].keys[0, 0])
            assert not np.shares_memory(batch.fields, following[0].fields)
        stream_of = batch.fields[:, 0] // 2 // 1_000_000
        assert batch.fields.shape[1] == max(widths[int(i)] for i in stream_of)
