"""SharedRows (the model's rows of every device or host process in one table) against a plain
dict of rows: whatever moves from an owner's store to the table, in whatever owner order, and
whatever integer type its full chunks are packed in (values of 8 to 64 bits)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.efficiency import sharedrows
from prvstream.sinks.efficiency.sharedrows import SharedRows

WIDTH = 3

#: a value added to a row: small, or needing 16, 32 or 64 bits (a packed chunk's type)
_values = st.one_of(st.integers(0, 9), st.sampled_from([-300, 70_000, -(2**40), 2**40]))
#: (op, owner, keys, value): add one value to whole rows of an owner, or end its "report"
#: (settle all and move its rows to the table when they are few and it has none there)
_ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 5),
              st.lists(st.integers(0, 40), min_size=1, max_size=5), _values),
    st.tuples(st.just("end"), st.integers(0, 5), st.just([]), st.just(0)),
    st.tuples(st.just("load"), st.integers(0, 5),
              st.lists(st.integers(0, 40), min_size=1, max_size=4, unique=True),
              st.integers(1, 9)),
), max_size=40)


@settings(max_examples=150, deadline=None)
@given(ops=_ops, chunk=st.sampled_from([sharedrows.CHUNK, 2, 5]))
def test_rows_are_those_of_a_dict_whatever_moved(
        ops: list[tuple[str, int, list[int], int]], chunk: int) -> None:
    saved = sharedrows.CHUNK
    sharedrows.CHUNK = chunk
    try:
        table = SharedRows(WIDTH)
        table.small = 6  # owners with more rows keep their store
        expected: dict[tuple[int, int], list[int]] = {}
        for op, owner, keys, value in ops:
            if op == "end":
                table.settle(owner, final=True)
                continue
            rows = np.full((len(keys), WIDTH), value, np.int64)
            if op == "load":
                table.load(owner, np.array(keys, np.int64), rows)
            else:
                table.add(owner, np.array(keys, np.int64), rows)
            for k in keys:
                row = expected.setdefault((owner, k), [0] * WIDTH)
                row[:] = [x + value for x in row]
        for owner in range(6):
            want = {k: r for (o, k), r in expected.items() if o == owner and any(r)}
            keys, rows = table.rows(owner)
            assert dict(zip(keys.tolist(), rows.tolist(), strict=True)) == want
            for k in range(41):
                got = table.get(owner, k)
                if k in want:
                    assert got is not None and got.tolist() == want[k]
                else:
                    assert got is None or not got.any()
    finally:
        sharedrows.CHUNK = saved
