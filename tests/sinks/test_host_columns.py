"""A record's host processes sampled as columns (``HostTotals._columns``, ``hostcolumns``)
give the metrics and rows that sampling one process at a time gives: processes with several
spans, overlapping and outside the interval, threads captured over several spans, MPI spans,
window rows (packed and wide), and values past float64's exact integers (where the columns
give way to the one-at-a-time path)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.efficiency import host, hostcolumns
from prvstream.sinks.efficiency.host import MPI_SPAN, SPAN, HostTotals
from prvstream.sinks.efficiency.metrics import covered


@pytest.fixture(autouse=True)
def _columns_for_any_number(monkeypatch: pytest.MonkeyPatch) -> None:
    """Columns from the first process (by default a record of few processes goes one at a
    time, where numpy's calls cost more than they save)."""
    monkeypatch.setattr(host, "COLUMNS_FROM", 0)


#: times: near a small origin (overlaps and window edges) or near today's wall clock in ns
_BASE = st.sampled_from([0, 1_735_689_600_000_000_000])
_NS = st.one_of(st.integers(0, 300), st.integers(0, 10**12), st.integers(2**52 - 5, 2**53 + 10),
                st.integers(-300, -1))
WINDOW = 100


@st.composite
def _totals(draw: st.DrawFn) -> tuple[HostTotals, list[int]]:
    base = draw(_BASE)
    totals = HostTotals(WINDOW)
    windows: set[int] = set()
    for pid in draw(st.lists(st.integers(1, 30), max_size=12, unique=True)):
        host = draw(st.sampled_from(["n0", "n1", "a-very-long-host"]))
        i = totals.process(host, pid, draw(st.one_of(st.none(), st.integers(0, 8))))
        sums = draw(st.lists(_NS, min_size=4, max_size=4))
        totals.logs.set_at(i, 0, sums)
        for _ in range(draw(st.integers(0, 4))):
            s = base + draw(st.integers(-50, 400))
            e = s + draw(st.integers(-5, 200))
            tags = draw(st.lists(st.one_of(st.just(SPAN), st.just(MPI_SPAN),
                                           st.integers(0, 5)), max_size=5, unique=True))
            totals.add_spans(i, (s, e), tags)
        for w in draw(st.lists(st.integers(-3, 6), max_size=3, unique=True)):
            col = draw(st.integers(0, 3))
            totals.windows.add(i, col, [base // WINDOW + w], [draw(_NS)])
            windows.add(base // WINDOW + w)
    return totals, [*sorted(windows), base // WINDOW + 50]


def _with_and_without(totals: HostTotals, columns_of: str,
                      parts: Callable[[], object]) -> tuple[object, object]:
    """``parts()`` (a ``HostParts`` or None) with the columns, then with ``columns_of``, the
    method that makes them, answering None (the one-at-a-time path); each as the metrics and
    its rows made twice (the rows are made again for each pass)."""
    out = []
    kept = getattr(HostTotals, columns_of)
    for use in (True, False):
        try:
            if not use:
                setattr(HostTotals, columns_of, lambda self, *a: None)
            found = parts()
        finally:
            setattr(HostTotals, columns_of, kept)
        out.append(None if found is None else (found[0], list(found[1]()),  # type: ignore[index]
                                               list(found[1]())))  # type: ignore[index]
    return out[0], out[1]


def _both(totals: HostTotals, window: int | None) -> tuple[object, object]:
    return _with_and_without(totals, "_columns", lambda: totals.metrics(window))


@settings(max_examples=300, deadline=None)
@given(_totals(), st.sampled_from([1, 2, 5, host.BLOCK]))
def test_columns_give_the_metrics_of_one_process_at_a_time(
        made: tuple[HostTotals, list[int]], block: int) -> None:
    """Whatever the block size: the processes are sampled a block at a time."""
    totals, windows = made
    kept = host.BLOCK
    try:
        host.BLOCK = block
        for window in (None, *windows):
            columns, alone = _both(totals, window)
            assert columns == alone, window
    finally:
        host.BLOCK = kept


def test_the_columns_are_used_for_a_job_of_ordinary_values() -> None:
    """A job of wall-clock spans and small sums is sampled as columns (not handed back)."""
    totals = HostTotals(WINDOW)
    base = 1_735_689_600_000_000_000
    for pid in range(1, 50):
        i = totals.process("n0", pid, pid)
        totals.logs.set_at(i, 0, [pid, 0, 2 * pid, 0])
        totals.add_spans(i, (base, base + 1000 + pid), [SPAN, MPI_SPAN, 7, 9])
        totals.add_spans(i, (base + 500, base + 3000), [SPAN, 7])
    ids = np.array(totals.in_key_order(), np.int64)
    found = totals._columns(ids, -(2**62), 2**62, None)
    assert found is not None
    cols, mpi = found
    assert mpi and len(cols) == 49 and cols.exact() and cols.captured.tolist()[0] == 3000
    assert cols.threads.tolist() == [2] * 49
    assert cols.thread_captured.tolist()[0] == 3000 + 1001
    assert _both(totals, None)[0] == _both(totals, None)[1]


def test_values_past_the_exact_range_go_one_process_at_a_time() -> None:
    totals = HostTotals(WINDOW)
    i = totals.process("n0", 1, None)
    totals.logs.set_at(i, 0, [2**53 + 1, 0, 0, 0])
    totals.add_spans(i, (0, 10), [SPAN])
    found = totals._columns(np.array([i], np.int64), -(2**62), 2**62, None)
    assert found is not None and not found[0].exact()  # the sums are Python's, then
    columns, alone = _both(totals, None)
    assert columns is not None and columns == alone


@pytest.mark.parametrize("spans", [[], [(0, 5)], [(0, 5), (3, 9)], [(5, 2), (1, 4), (1, 4)],
                                   [(-10, 3), (50, 200)]])
def test_union_lengths_are_covered(spans: list[tuple[int, int]]) -> None:
    group = np.zeros(len(spans), np.int64)
    start = np.array([s for s, _ in spans], np.int64)
    end = np.array([e for _, e in spans], np.int64)
    for lo, hi in ((0, 100), (2, 4), (-(2**62), 2**62)):
        got = hostcolumns.union_lengths(group, start, end, 1, lo, hi)
        assert got.tolist() == [covered(spans, lo, hi)]


def test_a_process_with_too_many_threads_goes_one_at_a_time() -> None:
    owner = np.zeros(2000, np.int64)
    tag = np.arange(2000, dtype=np.int64)
    times = np.zeros(2000, np.int64)
    assert hostcolumns.thread_sums(owner, tag, times, times + 1, 1, 0, 10) is None


@st.composite
def _occurrences(draw: st.DrawFn) -> tuple[HostTotals, list[tuple[int, int, int, int]]]:
    """A job's host processes with phase instance rows, and phase occurrences of them (and
    of process ids that are not host processes)."""
    totals, _ = draw(_totals())
    ids = list(totals.in_key_order())
    for i in ids:
        keys = draw(st.lists(st.integers(0, 6), max_size=3, unique=True))
        if keys:
            rows = np.array([draw(st.lists(_NS, min_size=4, max_size=4)) for _ in keys],
                            np.int64)
            totals.instances.add(i, np.array(keys, np.int64), rows)
            totals.instances.settle(i, final=True)
    base = draw(_BASE)
    occ = draw(st.lists(st.tuples(st.one_of(st.sampled_from(ids or [0]), st.integers(0, 40)),
                                  st.integers(-50, 400), st.integers(0, 300),
                                  st.integers(0, 7)), max_size=20))
    return totals, [(k, base + s, base + s + d, i) for k, s, d, i in occ]


def _phase_both(totals: HostTotals, occ: list[tuple[int, int, int, int]]
                ) -> tuple[object, object]:
    return _with_and_without(totals, "_occurrence_block", lambda: totals.phase_metrics(occ))


@settings(max_examples=300, deadline=None)
@given(_occurrences(), st.sampled_from([1, 3, host.BLOCK]), st.sampled_from([2, host._PAIRS]))
def test_phase_occurrences_as_columns_give_the_metrics_of_one_at_a_time(
        made: tuple[HostTotals, list[tuple[int, int, int, int]]], block: int,
        pairs: int) -> None:
    """Whatever the block size, and with blocks of too many (occurrence, span) pairs
    measured one occurrence at a time."""
    totals, occ = made
    kept = host.BLOCK, host._PAIRS
    try:
        host.BLOCK, host._PAIRS = block, pairs
        columns, alone = _phase_both(totals, occ)
        assert columns == alone
    finally:
        host.BLOCK, host._PAIRS = kept


def test_spans_of_pairs_each_item_with_its_owners_spans() -> None:
    owner = np.array([0, 0, 2, 2, 2], np.int64)
    item, span = hostcolumns.spans_of(owner, np.array([2, 1, 0, 2], np.int64))
    assert item.tolist() == [0, 0, 0, 2, 2, 3, 3, 3]
    assert span.tolist() == [2, 3, 4, 0, 1, 2, 3, 4]


def test_mpi_counts_only_inside_occurrences_that_are_measured() -> None:
    """An occurrence of a process captured nowhere inside it is skipped, its MPI calls too:
    the MPI metrics then stay off, in both paths."""
    totals = HostTotals(WINDOW)
    a = totals.process("n0", 1, 0)
    b = totals.process("n0", 2, 1)
    totals.add_spans(a, (0, 100), [SPAN])
    totals.add_spans(b, (200, 300), [MPI_SPAN])  # MPI, but never captured as a process
    occ = [(a, 10, 50, 0), (b, 210, 250, 0)]
    columns, alone = _phase_both(totals, occ)
    assert columns is not None and columns == alone
    metrics = columns[0]  # type: ignore[index]
    assert metrics.mpi_parallel_efficiency is None and metrics.load_balance is None
