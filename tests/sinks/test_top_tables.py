"""Top-N tables: a chunk's rows added and the top ``n`` names with their ``other`` row, held
against the definitions written plainly (fold row by row; sort every name by total, then name)
for any names, repeats, totals (ties, past 2**63) and ``n``."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.sinks.base import TableRows
from prvstream.sinks.efficiency.tables import Tables, _fold

names = st.sampled_from(["a", "b", "c", "other", "k<int>", "é", "z"]) | st.text(max_size=3)
values = st.integers(0, 5) | st.integers(0, 2**62)
chunks = st.lists(st.lists(st.tuples(names, values, values, values, values, values),
                           max_size=12), min_size=1, max_size=5)


def _rows(table: str, rows: list[tuple[str, int, int, int, int, int]]) -> TableRows:
    cols = list(zip(*rows, strict=True)) if rows else [(), (), (), (), (), ()]
    return TableRows(table, list(cols[0]),
                     *(np.array(c, dtype=np.int64) for c in cols[1:]))


def _plain(chunks: list[list[tuple[str, int, int, int, int, int]]]
           ) -> dict[str, list[int]]:
    table: dict[str, list[int]] = {}
    for rows in chunks:
        for name, *row in rows:
            table[name] = _fold(table[name], row) if name in table else list(row)
    return table


def _plain_top(rows: dict[str, list[int]], n: int) -> list[tuple[str, list[int]]]:
    order = sorted(rows, key=lambda k: (-rows[k][1], k))
    shown = [(k, rows[k]) for k in order[:n] if k != "other"]
    keys = {k for k, _ in shown}
    rest = [rows[k] for k in order if k not in keys]
    if rest:
        acc = rest[0]
        for v in rest[1:]:
            acc = _fold(acc, v)
        shown.append(("other", acc))
    return shown


@settings(max_examples=200, deadline=None)
@given(chunks=chunks, n=st.integers(0, 8))
def test_added_rows_and_their_top_are_the_plain_definitions(
        chunks: list[list[tuple[str, int, int, int, int, int]]], n: int) -> None:
    tables = Tables()
    for rows in chunks:
        tables.add(_rows("nvtx", rows))
    want = _plain(chunks)
    assert tables.data.get("nvtx", {}) == want
    top = tables.top(n).get("nvtx", [])
    assert [(r.name, [r.count, r.total_ns, r.min_ns, r.max_ns, r.bytes]) for r in top] == \
        _plain_top(want, n)


def test_big_totals_are_summed_exactly_into_other() -> None:
    tables = Tables()
    big = 2**62
    tables.add(_rows("kernels", [("a", 1, big, 1, big, 0), ("b", 1, big, 2, big, 0),
                                 ("c", 1, big, 3, big, 0)]))
    (first, other) = tables.top(1)["kernels"]
    assert first.name == "a" and other.name == "other"
    assert other.total_ns == 2 * big and other.count == 2 and other.min_ns == 2
