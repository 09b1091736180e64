"""A numbering keeps its tasks as columns (``tasktable``): the state (ids, keys, names, the
journal's bytes) is the one ``TaskEntry`` lists give, and a job of many one-rank tasks holds
a bounded number of bytes a task."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.kinds.context import metrics_key, metrics_name, stream_name
from prvstream.daemon.stream import numbering as numbering_mod
from prvstream.daemon.stream import tasktable
from prvstream.daemon.stream.numbering import (
    Numbering,
    NumberingState,
    TaskEntry,
    cpu_key,
    gpu_key,
    state_json,
)
from prvstream.sinks.paraver import format as pv
from tests.traced import held_by

#: what one more one-rank task (a CPU thread, two streams and a GPU's metrics) may hold in
#: the numbering: its rows of the task table's columns (host, pid, rank, label, thread run),
#: four rows of its thread columns and its names' bytes, with the arrays' spare room, and the
#: pid index's rows. Measured ~295 B (~930 B as a TaskEntry with its label, lists, CPU key
#: and name, ~1,310 B before GPU keys and names were shared).
PER_TASK = 400

_names = st.text(st.characters(codec="utf-8"), max_size=12)
_calls = st.lists(st.tuples(st.integers(1, 30), st.integers(0, 2), st.integers(-1, 3),
                            st.integers(0, 40), _names), min_size=1, max_size=300)


def _plain(calls: list[tuple[int, int, int, int, str]]) -> list[TaskEntry]:
    """The tasks the calls give, kept as ``TaskEntry`` lists (as the numbering did)."""
    tasks: dict[int, TaskEntry] = {}
    for pid, kind, a, b, name in calls:
        entry = tasks.setdefault(pid, TaskEntry(host="node", pid=pid, name=f"node:{pid} p"))
        if (kind, a, b) not in entry.thread_keys:
            entry.thread_keys.append((kind, a, b))
            entry.thread_names.append(numbering_mod.clean_label(name))
    return list(tasks.values())


@settings(max_examples=60, deadline=None)
@given(_calls)
def test_the_task_table_gives_the_tasks_as_entries(
        calls: list[tuple[int, int, int, int, str]]) -> None:
    ours = Numbering()
    for pid, kind, a, b, name in calls:
        ours.thread(ours.task("node", pid, "p"), (kind, a, b), name)
    want = _plain(calls)
    for task, entry in enumerate(want, 1):
        for thread, key in enumerate(entry.thread_keys, 1):
            assert ours.find_thread("node", entry.pid, key) == (task, thread)
    assert list(ours.tasks) == want
    assert state_json(ours.state) == msgspec.json.encode(
        NumberingState(nodes=["node"], tasks=want))
    mark = ours.mark()  # undone: a new task, and threads of an older one (its run moved)
    ours.thread(ours.task("other", 1, "q"), gpu_key(9, 9), "x")
    ours.thread(ours.task("node", calls[0][0], "p"), gpu_key(9, 9), "x")
    ours.undo(mark)
    assert state_json(ours.state) == msgspec.json.encode(
        NumberingState(nodes=["node"], tasks=want))
    again = Numbering(msgspec.json.decode(state_json(ours.state), type=NumberingState))
    assert list(again.tasks) == want


def _tasks(numbering: Numbering, first: int, count: int) -> Numbering:
    for pid in range(first, first + count):
        task = numbering.task(f"h{pid // 8}", pid, "", rank=pid)
        numbering.thread(task, cpu_key(pid), f"python {pid}")
        for stream in (7, 13):
            numbering.thread(task, gpu_key(0, stream), stream_name(0, stream))
        numbering.thread(task, metrics_key(0), metrics_name(0))
    return numbering


def test_a_task_of_a_one_rank_report_holds_a_bounded_number_of_bytes() -> None:
    numbering = _tasks(Numbering(), 0, 200)
    _, held = held_by(lambda: _tasks(numbering, 200, 2000))
    assert 0 < held / 2000 < PER_TASK, held / 2000


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 10**6), st.integers(1, 10**4), st.integers(0, 2),
       st.integers(-1, 10**3), st.text(max_size=300))
def test_row_line_is_the_sanitized_row_label(task: int, thread: int, kind: int, a: int,
                                            host: str) -> None:
    key = (kind, a, 0 if kind != 1 else a)
    assert pv.row_line(task, thread, key, host) == pv.sanitize_label(
        pv.row_label(task, thread, key, host))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c\t", "c "]), st.integers(1, 6)),
                min_size=1, max_size=40))
def test_tasks_are_found_by_host_and_pid_whatever_pids_they_share(
        calls: list[tuple[str, int]]) -> None:
    numbering, ids = Numbering(), dict[tuple[str, int], int]()
    for host, pid in calls:  # the index is by pid; hosts that share one are told apart
        new = (numbering_mod.clean_label(host), pid) not in ids
        task = numbering.task(host, pid)
        assert ids.setdefault((numbering_mod.clean_label(host), pid), task) == task
        assert (numbering.find_thread(host, pid, cpu_key(pid)) is None) == new
        numbering.thread(task, cpu_key(pid), "t")
        assert numbering.find_thread(host, pid, cpu_key(pid)) == (task, 1)
    assert [(t.host, t.pid) for t in numbering.tasks] == list(ids)
    again = Numbering(msgspec.json.decode(state_json(numbering.state),
                                          type=type(numbering.state)))
    assert all(again.task(host, pid) == task for (host, pid), task in ids.items())
    assert len(again.tasks) == len(ids)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3) | st.sampled_from([2**63, -(2**63) - 1]),
                          st.booleans()), max_size=40), st.integers(1, 4))
def test_pid_index_equals_a_dict_of_lists(adds: list[tuple[int, bool]], recent: int) -> None:
    old = tasktable._RECENT
    tasktable._RECENT = recent  # merged into the arrays often
    try:
        index, want = tasktable.PidIndex(), dict[int, list[int]]()
        for task_id, (pid, _) in enumerate(adds, 1):
            index.add(pid, task_id)
            want.setdefault(pid, []).append(task_id)
            for p in {p for p, _ in adds}:
                assert index.tasks(p) == want.get(p, [])
    finally:
        tasktable._RECENT = old
