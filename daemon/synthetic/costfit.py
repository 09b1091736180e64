"""Split a batch conversion's wall time into start-up, a fixed cost per report and a cost per
record, for ``bench --scale many`` (issue 11: N small exports at most 2x the cost per record
of one export as big).

Four whole conversions give the four unknowns of

    many reports:  t = startup + reports * fixed + records * per_record_many
    one export:    t = startup + records * per_record_one

(``startup``: the interpreter, the imports and what every conversion does once): N reports of
two sizes (same N, different rows per report) give ``per_record_many``; one of the smaller
reports alone gives ``startup + fixed``, and with the N of them ``fixed``; the big export
then gives ``per_record_one``. The fit says whether the many path's excess is per record
(its merges and run files) or per report, and what fixed cost 2x would allow.
"""

from __future__ import annotations

import msgspec

__all__ = ["CostFit", "fit_costs"]


class CostFit(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The fitted costs (seconds, per report and per record) and what 2x allows."""

    #: a conversion's own cost, whatever it converts
    startup_s: float
    #: each report's cost beyond its records, on the many path
    fixed_s_per_report: float
    #: a record's cost on the many path (every report of a batch small)
    s_per_record_many: float
    #: a record's cost in one export as big
    s_per_record_one: float
    #: the fixed cost per report at which the many reports would cost exactly 2x per record
    fixed_s_allowed: float


def fit_costs(*, reports: int, many_s: float, many_records: int, lean_s: float,
              lean_records: int, single_s: float, one_s: float, one_records: int) -> CostFit:
    """Fit ``CostFit`` from four wall times: ``reports`` exports (``many_records`` records in
    all) in ``many_s``, the same number of smaller ones (``lean_records``) in ``lean_s``, one
    of the smaller alone (``lean_records / reports`` records) in ``single_s`` and one export
    of ``one_records`` records in ``one_s``. ``ValueError`` unless there are two reports or
    more and the two batches differ in records."""
    if reports < 2 or many_records == lean_records:
        raise ValueError("a fit needs two reports or more and two batches of different records")
    per_many = (many_s - lean_s) / (many_records - lean_records)
    lean_each = lean_records / reports
    fixed = (lean_s - single_s - (lean_records - lean_each) * per_many) / (reports - 1)
    startup = single_s - fixed - lean_each * per_many
    per_one = (one_s - startup) / one_records
    # 2x per record: the many conversion at most 2 * one_s * many_records / one_records
    allowed = (2 * one_s * many_records / one_records - startup
               - many_records * per_many) / reports
    return CostFit(startup_s=startup, fixed_s_per_report=fixed, s_per_record_many=per_many,
                   s_per_record_one=per_one, fixed_s_allowed=allowed)
