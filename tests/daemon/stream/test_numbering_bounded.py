"""A live numbering of thousands of tasks keeps a bounded cache of thread lookups, and ids
found again after the cache let a task go are the ones first published."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.stream.numbering import Numbering, cpu_key, gpu_key


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 700), st.integers(0, 3)), min_size=1, max_size=2000))
def test_thread_ids_are_stable_whatever_the_cache_dropped(lookups: list[tuple[int, int]]
                                                          ) -> None:
    num = Numbering()
    first: dict[tuple[int, int], int] = {}
    for pid, stream in lookups:
        task = num.task("node", pid, "p")
        key = cpu_key(pid) if stream == 0 else gpu_key(0, stream)
        got = num.thread(task, key, "t")
        assert first.setdefault((pid, stream), got) == got
        assert num.find_thread("node", pid, key) == (task, got)
    assert len(num._thread_index) <= 256
    assert sum(len(t.thread_keys) for t in num.tasks) == len(first)
