"""``costfit.fit_costs``: the four wall times of ``bench --scale many`` split into start-up, a
fixed cost per report and a cost per record on each path."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prvstream.daemon.synthetic.costfit import fit_costs

seconds = st.floats(min_value=1e-3, max_value=10.0)
per_record = st.floats(min_value=1e-8, max_value=1e-5)


@given(startup=seconds, fixed=st.floats(min_value=1e-5, max_value=0.1), many=per_record,
       one=per_record, reports=st.integers(2, 5000), lean_each=st.integers(1, 500),
       extra_each=st.integers(1, 5000), one_records=st.integers(1, 10_000_000))
def test_the_fit_recovers_the_costs_the_times_were_made_of(
        startup: float, fixed: float, many: float, one: float, reports: int, lean_each: int,
        extra_each: int, one_records: int) -> None:
    lean_records = reports * lean_each
    many_records = reports * (lean_each + extra_each)
    fit = fit_costs(
        reports=reports,
        many_s=startup + reports * fixed + many_records * many, many_records=many_records,
        lean_s=startup + reports * fixed + lean_records * many, lean_records=lean_records,
        single_s=startup + fixed + lean_each * many,
        one_s=startup + one_records * one, one_records=one_records)
    assert math.isclose(fit.startup_s, startup, rel_tol=1e-6, abs_tol=1e-9)
    assert math.isclose(fit.fixed_s_per_report, fixed, rel_tol=1e-6, abs_tol=1e-9)
    assert math.isclose(fit.s_per_record_many, many, rel_tol=1e-6)
    assert math.isclose(fit.s_per_record_one, one, rel_tol=1e-6, abs_tol=1e-12)


@given(startup=seconds, fixed=st.floats(min_value=1e-5, max_value=0.1), many=per_record,
       one=per_record, reports=st.integers(2, 5000))
def test_the_allowed_fixed_cost_is_where_the_ratio_is_two(
        startup: float, fixed: float, many: float, one: float, reports: int) -> None:
    many_records, lean_records, one_records = reports * 1600, reports * 250, reports * 1600
    one_s = startup + one_records * one
    fit = fit_costs(
        reports=reports,
        many_s=startup + reports * fixed + many_records * many, many_records=many_records,
        lean_s=startup + reports * fixed + lean_records * many, lean_records=lean_records,
        single_s=startup + fixed + 250 * many, one_s=one_s, one_records=one_records)
    at_allowed = fit.startup_s + reports * fit.fixed_s_allowed + many_records * many
    assert math.isclose(at_allowed / one_s * one_records / many_records, 2.0, rel_tol=1e-6)


def test_the_measured_round_gives_its_split() -> None:
    # the twenty-third round's medians (400 reports of 1,583 and of 263 records, one of
    # 263 alone, and one export of 634,385 records): per record the same on both paths,
    # the excess a fixed cost per report
    fit = fit_costs(reports=400, many_s=1.518, many_records=633_200, lean_s=1.18,
                    lean_records=105_200, single_s=0.135, one_s=0.48, one_records=634_385)
    assert fit.s_per_record_many == pytest.approx(0.64e-6, rel=0.01)
    assert fit.fixed_s_per_report == pytest.approx(2.45e-3, rel=0.01)
    assert fit.fixed_s_allowed < fit.fixed_s_per_report


@pytest.mark.parametrize(("reports", "lean_records"), [(1, 100), (400, 633_200)])
def test_a_fit_needs_two_reports_and_two_sizes(reports: int, lean_records: int) -> None:
    with pytest.raises(ValueError, match="two reports"):
        fit_costs(reports=reports, many_s=1.5, many_records=633_200, lean_s=1.2,
                  lean_records=lean_records, single_s=0.13, one_s=0.48, one_records=634_385)
