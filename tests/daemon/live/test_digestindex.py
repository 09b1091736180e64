"""The report log's packed digest index answers as the dict digest -> last index it replaces,
whatever is added, merged into its arrays or dropped."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from prvstream.daemon.live import digestindex
from prvstream.daemon.live.digestindex import DigestIndex

#: a few digests, some ending in NUL bytes (kept whole by the packed arrays)
_digest = st.sampled_from([bytes([i]) * 15 + bytes([j]) for i in (0, 1, 255) for j in (0, 7)])
#: an add (digest), or a drop to a count (None, count)
_op = st.one_of(_digest, st.tuples(st.none(), st.integers(0, 40)))


@settings(max_examples=80, deadline=None)
@given(st.lists(_op, max_size=60), st.integers(1, 4), st.sampled_from([0, 2**31 - 3]))
# a digest added again after a merge, then its last add dropped: the older index is gone too
@example([bytes(16), bytes(15) + b"\x07", bytes(16), (None, 1)], 2, 0)
def test_digest_index_equals_a_dict(ops: list[object], recent: int, base: int) -> None:
    """``base``: indexes from 0, or crossing int32's limit (the column widens)."""
    old = digestindex._RECENT
    digestindex._RECENT = recent  # merge into the arrays often
    try:
        index, want = DigestIndex(), dict[bytes, int]()
        count = base
        for op in ops:
            if isinstance(op, bytes):
                index.add(op, count)
                want[op] = count
                count += 1
            else:
                assert isinstance(op, tuple)
                count = min(count, base + op[1])
                index.drop_from(count)
                want = {d: i for d, i in want.items() if i < count}
            for d in {bytes([i]) * 15 + bytes([j]) for i in (0, 1, 255) for j in (0, 7)}:
                assert index.get(d) == want.get(d)
                assert (d in index) == (d in want)
    finally:
        digestindex._RECENT = old
