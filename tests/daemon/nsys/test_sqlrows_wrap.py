"""The compiled row reader's int32 wrapping (``_sqlrows`` fill's ``wraps``) gives the bytes,
statuses and messages of the same query wrapping and packing in SQL (``kinds.sql``)."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.kinds.sql import pack_i4_pair, wrap_i4
from prvstream.daemon.nsys import rowfill

pytestmark = pytest.mark.skipif(not rowfill.SQL_ROWS.compiled(),
                                reason="the compiled SQLite row reader was not built")

_TEXT = st.one_of(st.sampled_from(["", "7", " 12 ", "-3x", "1.5", "1e300", "-1e19", "0x10",
                                   "9223372036854775807", "9223372036854775808", "abc",
                                   "-2147483649", "4294967295", "nan", "inf"]),
                  st.text(max_size=6))
_VALUE = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1),
                   st.integers(-(2**32) - 2, 2**32 + 1),
                   st.integers(2**63 - 2**31 - 2, 2**63 - 1),
                   st.floats(allow_nan=False), _TEXT, st.binary(max_size=4))
#: the columns' declared types: their affinities convert values as a real export's would
_COLUMNS = ("a INTEGER", "b REAL", "c", "d TEXT")


def _answers(path: Path, sql: str, itemsize: int, layout: tuple[tuple[int, ...], ...],
             chunk: int) -> list[tuple[int, bytes]]:
    db: Any = rowfill.SQL_ROWS.function(f"file:{path}?mode=ro", [])
    query = db.query(sql)
    out: list[tuple[int, bytes]] = []
    while True:
        status, payload = query.fill(chunk, itemsize, *layout)
        out.append((status, bytes(payload) if status == 0 else payload.encode()))
        if status != 0 or not payload:
            return out


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(_VALUE, _VALUE, _VALUE, _VALUE), max_size=30), st.integers(1, 7))
def test_wrapping_in_c_gives_the_sql_wrapping(rows: list[tuple[object, ...]],
                                              chunk: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.sqlite"
        con = sqlite3.connect(path)
        con.execute(f"CREATE TABLE t (k INTEGER PRIMARY KEY, {', '.join(_COLUMNS)})")
        con.executemany("INSERT INTO t (a, b, c, d) VALUES (?, ?, ?, ?)", rows)
        con.commit()
        con.close()
        # c without a default: a NULL wrapped is NULL, which the reader refuses
        bare = [f"COALESCE({c[0]}, -1)" if c[0] != "c" else "c" for c in _COLUMNS]
        # the SQL form: a and b packed into one int64, c wrapped alone, d bare
        in_sql = (f"SELECT {pack_i4_pair(wrap_i4(bare[0]), wrap_i4(bare[1]))}, "
                  f"{wrap_i4(bare[2])}, {bare[3]} FROM t ORDER BY k")
        in_c = f"SELECT {', '.join(bare)} FROM t ORDER BY k"
        want = _answers(path, in_sql, 16, ((0, 8, 12), (8, 4, 4)), chunk)
        got = _answers(path, in_c, 16, ((0, 4, 8, 12), (4, 4, 4, 4), (1, 1, 1, 0),
                                        (0, 0, 1, 2)), chunk)
        assert got == want


def test_a_real_exports_statements_read_unwrapped_give_the_same_rows(
        real_data_dir: Path) -> None:
    """Each kind read from one table, and each comm join part, read in the unwrapped form
    gives the bytes of its SQL form (and the join parts do get that form)."""
    from prvstream.daemon.kinds import registry
    from prvstream.daemon.nsys import tables
    from prvstream.daemon.nsys.export import open_export

    path = real_data_dir / "nsys2026.1_torch_tiny_rtx3080.sqlite"
    export = open_export(path)
    try:
        cases: list[tuple[str, tuple[tuple[int, ...], ...], tables.UnwrappedStatements,
                          int]] = []
        for kind in tables.available_kinds(export):
            found = tables.unwrapped_statements(export, kind)
            if found is not None:
                cases.append((tables.select_sql(export, kind) or "", tables.LAYOUTS[kind],
                              found, registry.get(kind).dtype.itemsize))
        spec = registry.get("comm")
        assert spec.scan_parts is not None
        parts = spec.scan_parts(export)
        assert parts is not None
        wide = np.dtype([*spec.dtype.descr, ("rowid", "<i8")])
        for part in parts[1]:
            found = tables.unwrapped_part(part, wide)
            assert found is not None
            cases.append((part, tables.fetch_layout(wide), found, wide.itemsize))
        assert len(cases) >= 5  # kernel, memcpy, memset (sync) and the join's parts
        for sql, layout, found, itemsize in cases:
            want = _answers(path, sql, itemsize, layout, 4096)
            got = _answers(path, found.sql, itemsize,
                           (found.offsets, found.sizes, found.wraps, found.names), 4096)
            assert got == want
            assert len(want[0][1]) > 0
    finally:
        export.close()
