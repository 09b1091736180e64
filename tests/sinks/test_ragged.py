"""Ragged (many small int64 lists in one shared array) against a plain list of lists: whatever
owner grows in whatever order, whether it moves or the array is compacted."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.efficiency import ragged
from prvstream.sinks.efficiency.ragged import Ragged

#: (op, owner, values): add an owner, append values to one, add a value at a position of one
_ops = st.lists(st.one_of(
    st.tuples(st.just("new"), st.just(0), st.just([])),
    st.tuples(st.just("extend"), st.integers(0, 7), st.lists(st.integers(-9, 9), max_size=5)),
    st.tuples(st.just("add"), st.integers(0, 7), st.lists(st.integers(-9, 9), min_size=2,
                                                         max_size=2)),
), max_size=60)


@settings(max_examples=150, deadline=None)
@given(ops=_ops, compact=st.sampled_from([ragged.COMPACT_AT, 0, 3]))
def test_lists_are_those_of_a_list_of_lists(ops: list[tuple[str, int, list[int]]],
                                           compact: int) -> None:
    saved = ragged.COMPACT_AT
    ragged.COMPACT_AT = compact
    try:
        store = Ragged()
        expected: list[list[int]] = []
        for op, owner, values in ops:
            if op == "new" or not expected:
                assert store.add_owner() == len(expected)
                expected.append([])
                continue
            owner %= len(expected)
            if op == "extend":
                store.extend(owner, values)
                expected[owner] += values
            elif expected[owner]:
                j = values[0] % len(expected[owner])
                store.add_at(owner, j, values[1])
                expected[owner][j] += values[1]
            for o, want in enumerate(expected):
                assert store.get(o).tolist() == want
                assert store.size(o) == len(want)
                assert [store.item(o, j) for j in range(len(want))] == want
        assert len(store) == len(expected)
    finally:
        ragged.COMPACT_AT = saved



def test_lengths_widen_as_an_owner_grows() -> None:
    store = Ragged()
    owners = [store.add_owner() for _ in range(3)]
    expected: list[list[int]] = [[] for _ in owners]
    for step in range(70):  # owner 1 past 8 and 16 bits of values, moving between the others
        for o in owners:
            values = list(range(step, step + (1000 if o == 1 else 3)))
            store.extend(o, values)
            expected[o] += values
    for o in owners:
        assert store.size(o) == len(expected[o])
        assert store.get(o).tolist() == expected[o]
