"""The model's one-call intake (``add_interleaved``) books what separate calls book."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prvstream.sinks.base import HOST_DTYPE
from prvstream.sinks.efficiency import EfficiencyModel, encode_partial, intake
from prvstream.sinks.efficiency.intake import plan_segments
from tests.sinks.test_efficiency import C, acts, phases, report
from tests.sinks.test_efficiency_partial import Report, sliced_jobs


def _calls(model: EfficiencyModel, a: np.ndarray, ph: np.ndarray, step: int) -> None:
    """``feed_interleaved``'s calls one by one: each batch and each phase its own call."""
    cuts = np.searchsorted(a["start"], ph["start"], side="left").tolist()
    for lo, hi in plan_segments(len(a), cuts, step if step > 0 else max(len(a), 1)):
        if lo < 0:
            model.add_phases(ph[hi:hi + 1])
        else:
            model.add_activity(a[lo:hi])


def _fed(job: list[Report], step: int, flush: int, *, one_call: bool) -> EfficiencyModel:
    model = EfficiencyModel("j", window_ns=10, gap_threshold_ns=3, flush_rows=flush)
    for info, a, ph, host in job:
        model.begin_report(info)
        model.add_host(host)
        if one_call:
            model.add_interleaved(a, ph, step)
        else:
            _calls(model, a, ph, step)
        model.end_report()
    return model


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=sliced_jobs(), step=st.integers(0, 5), flush=st.integers(1, 9),
       block=st.integers(1, 12), twin=st.integers(0, 8))
def test_one_call_books_what_separate_calls_book(  # type: ignore[no-untyped-def]
        job, step: int, flush: int, block: int, twin: int) -> None:
    """Any batch size, flush size and block size; with a report captured twice (repeats),
    so the earlier reports' stream spans are looked up and the new ones added in order."""
    if twin < len(job):
        info, a, ph, host = job[twin]
        again = (msgspec.structs.replace(info, report_id=info.report_id + ".again"), a, ph,
                 host)
        job = sorted([*job, again], key=lambda r: (r[0].origin_wall_ns + r[0].start_ns,
                                                   r[0].report_id))
    separate = _fed(job, step, flush, one_call=False)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(intake, "BLOCK_ROWS", block)
        together = _fed(job, step, flush, one_call=True)
    assert encode_partial(together.partial()) == encode_partial(separate.partial())
    assert msgspec.json.encode(together.state()) == msgspec.json.encode(separate.state())
    assert [bytes(d.streams) for d in together._devices] == [
        bytes(d.streams) for d in separate._devices]


def test_plan_is_feed_interleaveds_order() -> None:
    assert plan_segments(5, [0, 2, 2], 2) == [(-1, 0), (0, 2), (-1, 1), (-1, 2), (2, 4),
                                              (4, 5)]
    assert plan_segments(0, [0], 3) == [(-1, 0)]
    assert plan_segments(3, [], 10) == [(0, 3)]


def test_out_of_order_activity_is_refused() -> None:
    info, a, _, _ = _one_report()[0]
    model = EfficiencyModel("j", window_ns=10)
    model.begin_report(info)
    with pytest.raises(ValueError, match="non-decreasing start order"):
        model.add_interleaved(a[::-1], None)


def _one_report() -> list[Report]:
    info = report("r", "h0", 100, 0, [0], 0, 50, phase_names=["step"])
    a = acts([(1, 5, 0, 0, C), (3, 9, 0, 1, C)])
    return [(info, a, phases([]), np.zeros(0, dtype=HOST_DTYPE))]
