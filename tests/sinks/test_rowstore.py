"""RowStore (the model's per-instance rows, closed ones packed) against a plain dict of rows."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.efficiency import rowstore
from prvstream.sinks.efficiency.rowstore import RowStore

WIDTH = 3

#: (op, keys, column or -1 for whole rows, value): add rows / one column, settle below a key
_ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(st.integers(0, 60), min_size=1, max_size=6),
              st.integers(-1, WIDTH - 1), st.integers(-5, 9)),
    st.tuples(st.just("settle"), st.just([]), st.integers(0, 70), st.just(0)),
), max_size=40)


@contextmanager
def _spilling(spill_bytes: int, max_files: int = rowstore.MAX_FILES) -> Iterator[None]:
    """RowStores that move packed rows to their file past ``spill_bytes`` (one record: 32)."""
    saved = rowstore.SPILL_BYTES, rowstore.MAX_FILES
    rowstore.SPILL_BYTES, rowstore.MAX_FILES = spill_bytes, max_files
    try:
        yield
    finally:
        rowstore.SPILL_BYTES, rowstore.MAX_FILES = saved


@settings(max_examples=150, deadline=None)
@given(ops=_ops, loaded=st.dictionaries(st.integers(0, 60), st.integers(1, 9), max_size=5),
       spill=st.sampled_from([1 << 16, 32, 96]))
def test_rows_are_those_of_a_dict_whatever_is_settled(
        ops: list[tuple[str, list[int], int, int]], loaded: dict[int, int],
        spill: int) -> None:
    with _spilling(spill):
        _check_against_dict(ops, loaded)


def _check_against_dict(ops: list[tuple[str, list[int], int, int]],
                        loaded: dict[int, int]) -> None:
    store = RowStore(WIDTH)
    expected: dict[int, list[int]] = {}
    keys = sorted(loaded)
    store.load(np.array(keys, np.int64), np.array([[loaded[k]] * WIDTH for k in keys]))
    for k in keys:
        expected[k] = [loaded[k]] * WIDTH
    for op, ks, col, value in ops:
        if op == "settle":
            store.settle(col)
            continue
        arr = np.array(ks, np.int64)
        if col < 0:
            vals = np.array([[value + j for j in range(WIDTH)] for _ in ks], np.int64)
            store.add(arr, vals)
            for k in ks:
                row = expected.setdefault(k, [0] * WIDTH)
                for j in range(WIDTH):
                    row[j] += value + j
        else:
            store.add(arr, np.full(len(ks), value, np.int64), col)
            for k in ks:
                expected.setdefault(k, [0] * WIDTH)[col] += value
    nonzero = {k: v for k, v in expected.items() if any(v)}
    got_k, got_v = store.rows()
    assert got_k.tolist() == sorted(nonzero)
    assert got_v.tolist() == [nonzero[k] for k in sorted(nonzero)]
    for k in range(62):
        row = store.get(k)
        assert (row.tolist() if row is not None else [0] * WIDTH) == expected.get(k, [0] * WIDTH)


def test_settled_rows_are_packed_and_the_dense_block_stays_small() -> None:
    """Instances met in order and closed as the report moves on: the dense block holds only
    the open ones, whatever the number of instances."""
    store = RowStore(WIDTH)
    for i in range(10_000):
        store.add(np.array([i, i + 1]), np.ones((2, WIDTH), np.int64))
        store.settle(i)
    assert len(store.dense) <= 16
    assert store.base >= 9_999  # everything below the open instances is packed
    keys, vals = store.rows()
    assert keys.tolist() == list(range(10_001))
    assert vals[0].tolist() == [1] * WIDTH and vals[5].tolist() == [2] * WIDTH


@pytest.mark.parametrize("max_files", [rowstore.MAX_FILES, 0])
def test_spilled_rows_leave_only_their_keys_in_memory(max_files: int) -> None:
    """Past SPILL_BYTES the packed rows are in the store's file (none when no file may be
    opened: then they stay in memory), and read back the same."""
    with _spilling(256, max_files):
        store = RowStore(WIDTH)
        for i in range(2_000):
            store.add(np.array([i]), np.full((1, WIDTH), i + 1, np.int64))
            store.settle(i)
        in_memory = 0 if store._packed is None else len(store._packed)
        if max_files:
            assert in_memory < 256 and store._keys is not None and len(store._keys) > 1_900
        else:
            assert store._keys is None and in_memory >= 2_000 * (WIDTH + 1) * 8 - 256
        assert store.get(1_234).tolist() == [1_235] * WIDTH
        keys, vals = store.rows()
        assert keys.tolist() == list(range(2_000))
        assert vals[:, 0].tolist() == list(range(1, 2_001))
