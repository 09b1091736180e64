"""The model's process table: one id a (host, pid), found again after the packed index merges,
for pids the packed code holds and those it does not."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.efficiency import devices
from prvstream.sinks.efficiency.processes import ProcessTable

_KEYS = st.lists(st.tuples(st.sampled_from(["a", "b", "node-7"]),
                           st.one_of(st.integers(0, 50), st.integers(-(2**63), 2**63 - 1))),
                 max_size=60)


@settings(max_examples=40, deadline=None)
@given(_KEYS)
def test_ids_are_the_order_first_added_and_found_again(keys: list[tuple[str, int]]) -> None:
    saved = devices._RECENT
    devices._RECENT = 4  # the packed index (devices.PairIndex) merges often
    try:
        table = ProcessTable()
        ids: dict[tuple[str, int], int] = {}
        for key in keys:
            assert table.find(*key) == ids.get(key)
            ids.setdefault(key, len(ids))
            assert table.add(*key) == ids[key]
        assert len(table) == len(ids)
        for key, i in ids.items():
            assert table.find(*key) == i and table.key(i) == key
        assert table.find("nohost", 1) is None
        assert list(table.in_key_order(ids.values())) == [ids[k] for k in sorted(ids)]
    finally:
        devices._RECENT = saved
