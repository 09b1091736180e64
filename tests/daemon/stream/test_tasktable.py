"""A numbering's task table keeps its thread columns narrow and widens one when a value needs
it: every task and thread reads back as it was added, in a mixed order of adds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.kinds.context import ThreadKey
from prvstream.daemon.stream.numbering import TaskEntry
from prvstream.daemon.stream.tasktable import TaskTable

_ints = st.one_of(st.integers(-3, 300), st.integers(-(2**63), 2**63 - 1))
_keys = st.lists(st.tuples(st.integers(0, 2) | _ints, _ints, _ints), max_size=4)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), _keys), min_size=1, max_size=12))
def test_columns_read_back_whatever_they_hold(adds: list[tuple[int, list[ThreadKey]]]
                                              ) -> None:
    table = TaskTable()
    expected: list[TaskEntry] = []
    for at, keys in adds:
        names = [f"t{k[1]}" for k in keys]
        if at >= len(expected):  # a new task
            entry = TaskEntry(host=f"h{at}", pid=2**40 + at, name=f"task {at}", rank=at,
                              thread_keys=list(keys), thread_names=names)
            table.append(entry)
            expected.append(TaskEntry(host=entry.host, pid=entry.pid, name=entry.name,
                                      rank=entry.rank, thread_keys=list(keys),
                                      thread_names=list(names)))
        else:  # threads added to an earlier task (its run moves to the end)
            table.add_threads(at, keys, names)
            expected[at].thread_keys += keys
            expected[at].thread_names += names
    assert list(table) == expected
    table.keep_threads(0, 1)
    assert table.keys(0) == expected[0].thread_keys[:1]
