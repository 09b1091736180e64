"""A live numbering keeps one copy of each GPU thread key and name, shared by the tasks that
have it: the state (ids, keys, names, the journal's bytes) is the one unshared copies give,
and a job of many one-rank tasks holds a bounded number of bytes a task."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.kinds.context import metrics_key, metrics_name, stream_name
from prvstream.daemon.stream import numbering as numbering_mod
from prvstream.daemon.stream.numbering import Numbering, cpu_key, gpu_key
from prvstream.sinks.paraver import format as pv
from tests.traced import held_by

#: what one more one-rank task (a CPU thread, two streams and a GPU's metrics) may hold in
#: the numbering: its TaskEntry, label and two lists, the CPU thread's key and name, its
#: lookup key and the lookup dicts' share; the GPU keys and names are shared. Measured
#: ~930 B (~1,310 B when each thread keeps a tuple and a string of its own).
PER_TASK = 1100

_names = st.text(st.characters(codec="utf-8"), max_size=12)
_calls = st.lists(st.tuples(st.integers(1, 30), st.integers(0, 2), st.integers(-1, 3),
                            st.integers(0, 40), _names), min_size=1, max_size=300)


class _Unshared(Numbering):
    """The numbering as it was: every thread keeps the key and name it was given."""

    def _share(self, key: tuple[int, int, int], name: str) -> tuple[tuple[int, int, int], str]:
        return key, name


@settings(max_examples=60, deadline=None)
@given(_calls, st.integers(0, 5))
def test_shared_keys_and_names_give_the_unshared_state(
        calls: list[tuple[int, int, int, int, str]], kept: int) -> None:
    old_kept = numbering_mod._SHARED_KEPT
    numbering_mod._SHARED_KEPT = kept  # also when the shared copies run out
    try:
        ours, theirs = Numbering(), _Unshared()
        for pid, kind, a, b, name in calls:
            key = (kind, a, b)
            ids = [n.thread(n.task("node", pid, "p"), key, name) for n in (ours, theirs)]
            assert ids[0] == ids[1]
            assert ours.find_thread("node", pid, key) == theirs.find_thread("node", pid, key)
        assert msgspec.json.encode(ours.state) == msgspec.json.encode(theirs.state)
        assert len(ours._shared_keys) <= kept and len(ours._shared_names) <= kept
        mark = ours.mark()
        ours.thread(ours.task("other", 1, "q"), gpu_key(9, 9), "x")
        ours.undo(mark)
        assert msgspec.json.encode(ours.state) == msgspec.json.encode(theirs.state)
    finally:
        numbering_mod._SHARED_KEPT = old_kept


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
    again = Numbering(msgspec.json.decode(msgspec.json.encode(numbering.state),
                                          type=type(numbering.state)))
    assert all(again.task(host, pid) == task for (host, pid), task in ids.items())
    assert len(again.tasks) == len(ids)
