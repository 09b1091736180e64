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


def test_a_task_column_past_8_bits_widens() -> None:
    """Labels, hosts and thread counts past what a byte holds (the columns start at 8 bits)."""
    table = TaskTable()
    entries = [TaskEntry(host=f"h{i}", pid=i, name=f"task {i}", rank=None,
                         thread_keys=[(0, 70_000 + j, j) for j in range(i % 3)],
                         thread_names=[f"t{j}" for j in range(i % 3)]) for i in range(300)]
    table.extend(entries)
    many = [(1, 5, s) for s in range(200)]
    table.add_threads(7, many, [f"s{s}" for s in range(200)])
    entries[7].thread_keys += many
    entries[7].thread_names += [f"s{s}" for s in range(200)]
    assert list(table) == entries
    assert table.thread_count(7) == 1 + 200
