"""The model's device columns give back what was registered: each ``Device`` made on demand has
the fields it was added with, the packed look-ups find what dicts of tuples would, and the
totals are int32 until a sum does not fit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.efficiency import EfficiencyModel, devices, feed_report
from prvstream.sinks.efficiency.devices import DeviceTable, PairIndex
from prvstream.sinks.efficiency.partial import encode_partial
from tests.sinks.test_efficiency import C, acts, dev, report

_INT = st.one_of(st.integers(-3, 3), st.integers(-(2**40), 2**40))
_PAIRS = st.lists(st.tuples(st.integers(0, 3), _INT), max_size=40)


@settings(max_examples=50, deadline=None)
@given(pairs=_PAIRS, probes=st.lists(st.tuples(st.integers(0, 4), _INT), max_size=10))
def test_pair_index_finds_what_a_dict_of_lists_does(pairs: list[tuple[int, int]],
                                                     probes: list[tuple[int, int]]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(devices, "_RECENT", 4)  # merges into the packed arrays every few pairs
        index = PairIndex()
        want: dict[tuple[int, int], list[int]] = {}
        for gid, pair in enumerate(pairs):
            index.add(*pair, gid)
            want.setdefault(pair, []).append(gid)
            assert index.find(*pair) == want[pair]
        for pair in [*pairs, *probes]:
            assert index.find(*pair) == want.get(pair, [])
            assert index.first(*pair) == (want[pair][0] if pair in want else None)


_DEVICE = st.tuples(st.sampled_from(["a", "node1", "h\udcff"]), _INT,
                    st.one_of(st.none(), _INT), st.sampled_from(["a", "b"]), _INT,
                    st.integers(-(2**62), 2**62),
                    st.one_of(st.text(max_size=8), st.just("r\udcff.sqlite")))


@settings(max_examples=40, deadline=None)
@given(added=st.lists(_DEVICE, max_size=12, unique_by=lambda d: (d[0], d[1])))
def test_devices_read_back_as_registered(
        added: list[tuple[str, int, int | None, str, int, int, str]]) -> None:
    table = DeviceTable()
    for host, device, rank, phost, pid, ns, rid in added:
        table.add(host, device, rank, (phost, pid), (ns, rid))
    assert len(table) == len(added)
    for gid, (host, device, rank, phost, pid, ns, rid) in enumerate(added):
        d = table[gid]
        assert (d.host, d.device, d.rank, d.pid, d.process, d.at) == (
            host, device, rank, pid, (phost, pid), gid)
        assert d.first == (ns, rid)
        assert table.key(gid) == (host, device)
        assert table.find(host, device) == gid
        assert gid in table.of_process((phost, pid))
    assert [d.at for d in table] == list(range(len(added)))
    assert table.find("nowhere", 0) is None
    assert table.of_process(("nowhere", 0)) == []


def test_totals_widen_when_a_sum_leaves_int32() -> None:
    big = 3 * 10**9  # 3 s of compute: past an int32 of nanoseconds
    model = EfficiencyModel("j", window_ns=10**12)
    spans = [(0, 0, 1000, 100), (1, 10**6, 10**6 + big + 10, big), (2, 2 * big, 2 * big + 500, 50)]
    for i, t0, t1, busy in spans:
        feed_report(model, report(f"r{i}", "h", 10 + i, i, [i], t0, t1),
                    acts([(t0, t0 + busy, 0, 0, C)]))
        assert model._dev_totals.dtype == (np.int32 if i == 0 else np.int64)
    (cumulative,) = [r for r in model.take_updates() if r.view == "cumulative"][-1:]
    assert [dev(cumulative, "h", i).useful_ns for i in range(3)] == [100, big, 50]
    restored = EfficiencyModel.from_partial(model.partial())
    assert restored._dev_totals.dtype == np.int64
    assert encode_partial(restored.partial()) == encode_partial(model.partial())
