"""The packed last time per (task, thread) behaves as the dict it replaced and holds a few
bytes a thread (issue 11: memory flat in the number of reports)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.stream.threadlast import ThreadLast
from tests.traced import held_by

_keys = st.tuples(st.integers(1, 40), st.integers(0, 2**32 - 1))
_ops = st.lists(st.tuples(st.booleans(), _keys, st.integers(0, 2**62)), max_size=1500)

#: what a thread may cost once packed: two int64 (the dict entry keyed by a tuple it replaced
#: held ~190 B a thread: the tuple, its two ints, the time and the table slot)
PACKED_PER_THREAD = 40


@settings(max_examples=60, deadline=None)
@given(_ops)
def test_it_answers_as_a_dict(ops: list[tuple[bool, tuple[int, int], int]]) -> None:
    packed, plain = ThreadLast(), dict[tuple[int, int], int]()
    for set_it, key, t in ops:
        if set_it:
            packed[key] = t
            plain[key] = t
        else:
            packed.raise_to(key, t)
            plain[key] = max(plain.get(key, -1), t)
        assert packed.get(key, -1) == plain[key]
    assert all(packed.get(k, -1) == v for k, v in plain.items())
    assert (7, 7) in packed or (7, 7) not in plain
    assert packed.get((41, 0), -5) == -5
    assert sorted(packed.items()) == sorted(plain.items())
    assert len(packed) == len(plain)
    assert ThreadLast(plain.items()).as_dict() == plain


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
