"""A big record's metrics from int64 columns are the floats the lists give: ``job_metrics_of``
and ``single_metrics`` against ``job_metrics`` (values past the exact range included, where
the columns are handed back as lists), and a record's rank groups made in numpy
(``_Columns.rank_grouped`` and ``groups``) against groups made one device at a time by
``DeviceTable.group_key``, ``group_order`` and ``job_metrics``."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.efficiency import metrics
from prvstream.sinks.efficiency.devices import DeviceTable
from prvstream.sinks.efficiency.parts import COMM, USEFUL
from prvstream.sinks.efficiency.views import _Columns
from prvstream.sinks.summary import encoded
from prvstream.sinks.summary.records import GroupRow

#: ns values: mostly small, some equal to the span, some past float64's exact integers
_NS = st.one_of(st.integers(0, 10**6), st.integers(0, 2**53 + 10), st.just(0))
_SPAN = st.one_of(st.integers(-5, 10**6), st.integers(0, 2**53), st.just(0))


@st.composite
def _devices(draw: st.DrawFn, max_size: int = 40) -> tuple[list[int], list[int], list[int], int]:
    span = draw(_SPAN)
    n = draw(st.integers(0, max_size))
    useful = draw(st.lists(_NS, min_size=n, max_size=n))
    comm = draw(st.lists(_NS, min_size=n, max_size=n))
    # captured: the whole span (the plain metrics) or each device its own (shares)
    same = draw(st.booleans())
    captured = [span] * n if same else draw(st.lists(st.one_of(_NS, st.just(span)),
                                                     min_size=n, max_size=n))
    return useful, comm, captured, span


def _col(values: list[int]) -> np.ndarray:
    return np.array(values, np.int64)


@settings(max_examples=300, deadline=None)
@given(devices=_devices())
def test_columns_give_the_lists_metrics(devices: tuple[list[int], list[int], list[int], int]
                                        ) -> None:
    useful, comm, captured, span = devices
    got = metrics.job_metrics_of(_col(useful), _col(comm), span, _col(captured))
    assert got == metrics.job_metrics(useful, comm, span, captured)


@settings(max_examples=300, deadline=None)
@given(devices=_devices())
def test_single_devices_give_their_own_metrics(
        devices: tuple[list[int], list[int], list[int], int]) -> None:
    useful, comm, captured, span = devices
    u, c, t = _col(useful), _col(comm), _col(captured)
    if not metrics.exact_columns(span, u, c, t):
        return  # the record then makes each group's metrics from lists
    cols = metrics.single_metrics(u, c, span, t)
    for j in range(len(useful)):
        alone = metrics.job_metrics([useful[j]], [comm[j]], span, [captured[j]])
        assert [float(col[j]) for col in cols] == [
            alone.load_balance, alone.communication_efficiency,
            alone.orchestration_efficiency, alone.parallel_efficiency]


def test_exact_columns_refuses_what_could_round_or_overflow() -> None:
    small = _col([1, 2, 3])
    assert metrics.exact_columns(10, small)
    assert not metrics.exact_columns(2**52, small)
    assert not metrics.exact_columns(10, _col([2**52]))
    assert not metrics.exact_columns(10, _col([-1]))
    many = np.full(4096, 2**51, np.int64)  # each exact, but 4,096 of them overflow a sum
    assert not metrics.exact_columns(10, many)


def _reference_groups(table: DeviceTable, gids: list[int], values: np.ndarray,
                      captured: np.ndarray, span: int) -> list[GroupRow]:
    rows: dict[str, list[int]] = {}
    for j, gid in enumerate(gids):
        rows.setdefault(table.group_key(gid), []).append(j)
    out = []
    for name in sorted(rows, key=metrics.group_order):
        at = rows[name]
        u = [int(values[j, USEFUL]) for j in at]
        c = [int(values[j, COMM]) for j in at]
        out.append(GroupRow(name=name, devices=len(at), useful_ns=sum(u), comm_ns=sum(c),
                            metrics=metrics.job_metrics(u, c, span,
                                                        [int(captured[j]) for j in at])))
    return out


@settings(max_examples=40, deadline=None)
@given(data=st.data(), n=st.integers(encoded.ROWS_AT_ONCE + 1, 700),
       span=st.one_of(st.integers(0, 10**6), st.just(2**53)))
def test_big_records_rank_groups_are_the_one_by_one_groups(data: st.DataObject, n: int,
                                                           span: int) -> None:
    table = DeviceTable()
    for i in range(n):
        # ranks repeat (several devices a rank), some devices have none (host:pid groups)
        rank = data.draw(st.one_of(st.none(), st.integers(-3, n // 3)), label="rank")
        table.add(f"node{i % 7}", i % 4, rank, (f"node{i % 7}", 100 + i % 11), (i, f"r{i}"))
    gids = data.draw(st.permutations(range(n)), label="order")
    cols = _Columns(n, table)
    values = np.array(data.draw(st.lists(st.lists(st.integers(0, 10**6), min_size=2,
                                                  max_size=2), min_size=n, max_size=n)),
                      np.int64)
    cols.values[:, USEFUL], cols.values[:, COMM] = values[:, 0], values[:, 1]
    captured = data.draw(st.lists(st.one_of(st.just(span), st.integers(0, 10**6)),
                                  min_size=n, max_size=n))
    cols.captured[:] = captured
    cols.gids.extend(gids)
    got = list(cols.groups(cols.rank_grouped(), span))
    want = _reference_groups(table, gids, cols.values, cols.captured, span)
    assert len(got) == len(want)
    assert b"".join(encoded.encode_rows(got)) == b"".join(encoded.encode_rows(want))
