"""A canonical numbering starts every task with a CPU thread: a process with GPU rows only gets
its main thread (tid = pid) first, so readers that take the .row by position read every row as
itself (BasicAnalysis); a task with CPU threads keeps exactly its own threads."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.stream.numbering import MAIN_THREAD, Numbering, cpu_key, gpu_key


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.integers(1, 50), st.tuples(
    st.sets(st.integers(1, 99), max_size=3), st.sets(st.integers(0, 20), max_size=3)),
    min_size=1, max_size=8))
def test_every_task_starts_with_a_cpu_thread(procs: dict[int, tuple[set[int], set[int]]]
                                             ) -> None:
    tasks = [("node", pid, "p", None,
              {**{cpu_key(pid * 100 + t): f"t {t}" for t in cpus},
               **{gpu_key(0, s): f"s {s}" for s in streams}})
             for pid, (cpus, streams) in procs.items() if cpus or streams]
    num = Numbering.canonical(tasks, {})
    for entry, (_, pid, _, _, threads) in zip(num.tasks, sorted(tasks, key=lambda t: t[1]),
                                              strict=True):
        assert entry.pid == pid
        assert entry.thread_keys[0][0] == 0
        if any(k[0] == 0 for k in threads):
            assert sorted(entry.thread_keys) == sorted(threads)
        else:
            assert entry.thread_keys == [cpu_key(pid), *sorted(threads)]
            assert entry.thread_names[0] == f"{MAIN_THREAD} {pid}"


_VALUE_LABELS = st.lists(st.text(max_size=4) | st.sampled_from(["a", "b", "a\u2028", "a ",
                                                                 "\x85b", "k<int>"]),
                         max_size=10)


@given(before=_VALUE_LABELS, labels=_VALUE_LABELS)
def test_values_of_is_value_of_each_label_in_order(before: list[str],
                                                   labels: list[str]) -> None:
    """Labels new and known, repeated, printable or not: the ids and the appended labels are
    what ``value`` of each label in turn gives."""
    batch, one_by_one = Numbering(), Numbering()
    for numbering in (batch, one_by_one):
        for label in before:
            numbering.value("g", label)
    assert batch.values_of("g", labels) == [one_by_one.value("g", lab) for lab in labels]
    assert batch.values == one_by_one.values
    assert [batch.value("g", lab) for lab in [*before, *labels, "fresh"]] == \
        [one_by_one.value("g", lab) for lab in [*before, *labels, "fresh"]]
