"""RowStore (the model's per-instance rows, closed ones packed) against a plain dict of rows."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.efficiency.rowstore import RowStore

WIDTH = 3

#: (op, keys, column or -1 for whole rows, value): add rows / one column, settle below a key
_ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(st.integers(0, 60), min_size=1, max_size=6),
              st.integers(-1, WIDTH - 1), st.integers(-5, 9)),
    st.tuples(st.just("settle"), st.just([]), st.integers(0, 70), st.just(0)),
), max_size=40)


@settings(max_examples=150, deadline=None)
@given(ops=_ops, loaded=st.dictionaries(st.integers(0, 60), st.integers(1, 9), max_size=5))
def test_rows_are_those_of_a_dict_whatever_is_settled(
        ops: list[tuple[str, list[int], int, int]], loaded: dict[int, int]) -> None:
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
