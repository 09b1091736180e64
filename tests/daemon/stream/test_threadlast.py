"""The packed last time per (task, thread) behaves as the dict it replaced and holds a few
bytes a thread (issue 11: memory flat in the number of reports)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.stream.threadlast import ThreadLast
from tests.traced import held_by

#: a few keys that repeat (so a key set again after a merge is met) and keys spanning the range
_keys = st.one_of(st.tuples(st.integers(1, 3), st.integers(0, 3)),
                  st.tuples(st.integers(1, 40), st.integers(0, 2**32 - 1)))
#: 0: set, 1: raise_to, 2: len (which merges the recent changes into the arrays)
_ops = st.lists(st.tuples(st.integers(0, 2), _keys, st.integers(0, 2**62)), max_size=1500)

#: what a thread may cost once packed: its int64 time, its narrow number and a share of its
#: task's two int32 (two int64 a thread before; the dict entry keyed by a tuple before them
#: held ~190 B a thread: the tuple, its two ints, the time and the table slot)
PACKED_PER_THREAD = 20


@settings(max_examples=60, deadline=None)
@given(_ops)
def test_it_answers_as_a_dict(ops: list[tuple[int, tuple[int, int], int]]) -> None:
    packed, plain = ThreadLast(), dict[tuple[int, int], int]()
    for op, key, t in ops:
        if op == 0:
            packed[key] = t
            plain[key] = t
        elif op == 1:
            packed.raise_to(key, t)
            plain[key] = max(plain.get(key, -1), t)
        else:
            assert len(packed) == len(plain)
        assert packed.get(key, -1) == plain.get(key, -1)
    assert all(packed.get(k, -1) == v for k, v in plain.items())
    assert (7, 7) in packed or (7, 7) not in plain
    assert packed.get((41, 0), -5) == -5
    assert sorted(packed.items()) == sorted(plain.items())
    assert len(packed) == len(plain)
    assert ThreadLast(plain.items()).as_dict() == plain


@pytest.mark.parametrize("key", [(0, -1), (-1, 0), (1, 2**32), (2**31, 0)])
def test_a_key_it_cannot_pack_is_refused(key: tuple[int, int]) -> None:
    last = ThreadLast()
    with pytest.raises(ValueError, match="task"):
        last[key] = 1
    assert len(last) == 0


def test_a_thread_costs_a_few_bytes() -> None:
    threads = 20_000

    def build() -> ThreadLast:
        last = ThreadLast()
        for task in range(threads // 2):
            for thread in (task + 1000, task + 5000):
                last.raise_to((task + 1, thread), 10 * task)
        return last

    last, held = held_by(build)
    assert len(last) == threads
    assert 0 < held / threads < PACKED_PER_THREAD, held / threads
