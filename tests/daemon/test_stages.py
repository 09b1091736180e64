"""``stages``: a conversion's wall clock by stage (``convert --timings``)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prvstream.daemon import stages
from prvstream.daemon.stages import STAGES, StageClock


@pytest.fixture(autouse=True)
def _no_clock_left() -> Iterator[None]:
    yield
    stages.stop()


def test_each_stage_runs_from_the_mark_before_it() -> None:
    clock = StageClock(10.0)
    clock.marks = {"loaded": 10.1, "planned": 10.15, "written": 10.35, "synced": 10.4}
    clock.reader_wait = 0.05
    got = clock.seconds()
    assert [stage for stage, _ in got] == ["start-up", "planning", "converting", "writing out"]
    assert [s for _, s in got] == pytest.approx([0.1, 0.05, 0.2, 0.05])
    assert clock.line() == ("start-up 0.100 s, planning 0.050 s, converting 0.200 s (waiting "
                            "for the reader 0.050 s), writing out 0.050 s; 0.400 s in all")


def test_stages_not_reached_are_named_with_the_next_one() -> None:
    clock = StageClock(0.0)
    clock.marks = {"loaded": 0.5, "synced": 3.0}  # a Dask conversion marks neither between
    assert clock.seconds() == [("start-up", 0.5),
                               ("planning and converting and writing out", 2.5)]
    assert clock.line().endswith("planning and converting and writing out 2.500 s; "
                                 "3.000 s in all")


@given(st.lists(st.floats(0.0, 100.0), min_size=len(STAGES), max_size=len(STAGES)),
       st.lists(st.booleans(), min_size=len(STAGES), max_size=len(STAGES)))
def test_the_stages_add_up_to_the_total(gaps: list[float], reached: list[bool]) -> None:
    clock = StageClock(1.0)
    at = 1.0
    for (name, _), gap, hit in zip(STAGES, gaps, reached, strict=True):
        at += gap
        if hit:
            clock.marks[name] = at
    got = clock.seconds()
    assert sum(s for _, s in got) == pytest.approx(clock.total(), abs=1e-9)
    names = [n for stage, _ in got for n in stage.split(" and ")]
    assert names == [stage for _, stage in STAGES][:len(names)]  # every stage once, in order


def test_marks_and_waits_do_nothing_without_a_clock() -> None:
    stages.stop()
    stages.mark("loaded")
    stages.waited(1.0)
    assert stages.current() is None


def test_a_mark_counts_once_and_waits_add_up() -> None:
    clock = stages.start(time.perf_counter())
    stages.mark("loaded")
    first = clock.marks["loaded"]
    stages.mark("loaded")
    stages.waited(0.25)
    stages.waited(0.5)
    assert clock.marks["loaded"] == first and clock.reader_wait == 0.75
    assert stages.current() is clock


def test_the_process_started_before_now() -> None:
    started = stages.process_started()
    assert started <= time.perf_counter()
    # this test process is older than the clock's tick, not older than a day
    assert time.perf_counter() - started < 86_400
