"""The reader's C fetch (``_sqlrows``) gives the bytes, statuses and messages of its Python one
(``_readerchild``: ``Cursor.fetchmany`` and the row filler), chunk by chunk."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.nsys import _readerchild as child
from prvstream.daemon.nsys import rowfill

pytestmark = pytest.mark.skipif(
    not (rowfill.SQL_ROWS.compiled() and rowfill.ROW_FILLER.compiled()),
    reason="the compiled SQLite row reader or row filler was not built")

_VALUE = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31) - 2, 2**31 + 1),
                   st.sampled_from([None, 1.5, "7", b"x"]))
#: (offset, size) of the three fetched values in a 24-byte item; the padding stays zero
_LAYOUT = ((0, 8, 16), (8, 4, 8))


def _chunks(path: Path, use_c: bool, chunk: int, borrow: bool = False
            ) -> list[tuple[int, bytes]]:
    """Every answer of a stream over the table until its end or first error (``borrow``: the
    C reader on the Python connection itself, ``_sqlrows.borrow``)."""
    child.fill_rows = rowfill.ROW_FILLER.function  # type: ignore[assignment]
    uri = f"file:{path}?mode=ro"
    con, _ = child._connect(uri)
    assert con is not None
    db: Any = rowfill.SQL_ROWS.function(uri, list(child.PRAGMAS)) if use_c else None
    if borrow:
        import _sqlite3

        lend = rowfill.sql_borrow()
        assert lend is not None
        db = lend(con, _sqlite3.__file__)
    request = {"sql": "SELECT a, b, c FROM t ORDER BY k", "itemsize": 24,
               "offsets": list(_LAYOUT[0]), "sizes": list(_LAYOUT[1])}
    stream = child._open(con, request, 0, db)
    out: list[tuple[int, bytes]] = []
    try:
        while True:
            status, payload = child._next(stream, chunk)
            data = b"".join(payload) if isinstance(payload, list) else bytes(payload)
            out.append((status, data))
            if status != child.STATUS_OK or not data:
                return out
    finally:
        del stream
        con.close()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(_VALUE, _VALUE, _VALUE), max_size=40), st.integers(1, 9))
def test_the_c_fetch_gives_the_python_fetchs_answers(rows: list[tuple[object, ...]],
                                                      chunk: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.sqlite"
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE t (k, a, b, c)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)",
                        [(i, *r) for i, r in enumerate(rows)])
        con.commit()
        con.close()
        py = _chunks(path, False, chunk)
        c = _chunks(path, True, chunk)
        borrowed = _chunks(path, True, chunk, borrow=True)
    assert c == py == borrowed  # a message counts rows within the chunk (of at most FETCH_ROWS)


def test_sqlite_errors_are_the_python_fetchs(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    sqlite3.connect(path).close()
    db = rowfill.SQL_ROWS.function(f"file:{path}?mode=ro", list(child.PRAGMAS))
    with pytest.raises(RuntimeError, match="no such table: t"):
        db.query("SELECT a FROM t")


def _in_process(path: Path, kinds: list[str] | None, use_c: bool, chunk: int,
                borrow: bool = True) -> list[bytes]:
    """Every kind's chunks as ``tables.stream`` reads them in this process, by the compiled
    reader (on the export's connection, ``Export.borrowed_reader``, or without ``borrow`` on
    a second one, ``Export.row_reader``) or by the Python fetch."""
    from prvstream.daemon.nsys import tables
    from prvstream.daemon.nsys.export import open_export

    with open_export(path) as export:
        if not use_c:
            export.row_reader = lambda: None  # type: ignore[method-assign]
        if not use_c or not borrow:
            export.borrowed_reader = lambda: None  # type: ignore[method-assign]
        out = []
        for kind in kinds if kinds is not None else tables.available_kinds(export):
            out.append(b"".join(c.tobytes() for c in tables.stream(export, kind, chunk)))
            out.append(kind.encode())
        return out


def test_in_process_streams_read_by_the_c_reader_equal_the_python_fetch(
        real_data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kind of two real exports (the comm kind read through its join's parts), in
    chunks smaller and larger than a table; the reader opens for any export here."""
    from prvstream.daemon.nsys import tables

    monkeypatch.setattr(tables, "READER_ROWS", 0)
    for name in ("nsys2022.2cap_2024.5exp_cloverleaf_a100.sqlite",
                 "nsys2026.2_torchrun2gpu_nccl_nvtx_h100.sqlite"):
        for chunk in (1000, 65536):
            c = _in_process(real_data_dir / name, None, True, chunk, borrow=False)
            assert c == _in_process(real_data_dir / name, None, False, chunk), (name, chunk)


def test_in_process_c_reader_errors_are_the_python_fetchs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A text in an integer column and damaged pages: the same errors either way, by a
    second connection or on the export's own (``borrowed_reader``)."""
    from prvstream.daemon.nsys import tables
    from prvstream.sinks.errors import NotAnExport
    from tests.conftest import make_db, osrt_export_with_wrecked_pages

    monkeypatch.setattr(tables, "READER_ROWS", 0)
    bad = make_db(tmp_path / "bad.sqlite", {
        "StringIds": (["id INTEGER PRIMARY KEY", "value"], [(1, "f")]),
        "OSRT_API": (["start", "end", "globalTid", "nameId"],
                     [(10, 20, 1 << 24, 1), (30, 40, "oops", 1)]),
    })
    wrecked = osrt_export_with_wrecked_pages(tmp_path / "big.sqlite")
    for path in (bad, wrecked):
        messages = []
        for use_c, borrow in ((True, False), (True, True), (False, False)):
            with pytest.raises(NotAnExport) as caught:
                _in_process(path, ["osrt"], use_c, 1000, borrow)
            messages.append(str(caught.value))
        assert messages[0] == messages[1] == messages[2], path


def test_the_c_reader_declines_a_file_replaced_since_the_export_opened(
        real_data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second connection by path must find the file the export opened: after the path is
    given another export, ``row_reader`` declines, and the streams read the opened file's
    rows through the export's own connection."""
    import os
    import shutil

    from prvstream.daemon.nsys import tables
    from prvstream.daemon.nsys.export import open_export

    monkeypatch.setattr(tables, "READER_ROWS", 0)
    path = tmp_path / "rank.sqlite"
    shutil.copyfile(real_data_dir / "nsys2022.2cap_2024.5exp_cloverleaf_a100.sqlite", path)
    want = _in_process(path, ["kernel"], False, 65536)
    other = tmp_path / "other.sqlite"
    shutil.copyfile(real_data_dir / "nsys2026.2_torchrun2gpu_nccl_nvtx_h100.sqlite", other)
    with open_export(path) as export:
        os.replace(other, path)
        assert export.row_reader() is None
        got = [b"".join(c.tobytes() for c in tables.stream(export, "kernel", 65536)), b"kernel"]
    assert got == want
    with open_export(path) as export:  # the file as it is now: nothing replaced it since
        assert export.row_reader() is not None


def test_exports_are_read_by_the_c_reader_on_their_own_connection(
        real_data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled reader borrows the export's connection (no second one), whatever its
    rows: every kind of two real exports in chunks smaller and larger than a table, the
    bytes of the Python fetch; a stream whose export closed meanwhile fails as the Python
    fetch's does."""
    from prvstream.daemon.nsys import tables
    from prvstream.daemon.nsys.export import open_export
    from prvstream.sinks.errors import NotAnExport

    name = "nsys2022.2cap_2024.5exp_cloverleaf_a100.sqlite"
    with open_export(real_data_dir / name) as export:
        db = export.borrowed_reader()
        assert db is not None and export.borrowed_reader() is db
        export.row_reader = lambda: pytest.fail("a second connection")  # type: ignore
    for chunk in (1000, 65536):
        assert _in_process(real_data_dir / name, None, True, chunk) == \
            _in_process(real_data_dir / name, None, False, chunk), chunk
    messages = []
    for use_c in (True, False):
        with open_export(real_data_dir / name) as export:
            if not use_c:
                export.borrowed_reader = lambda: None  # type: ignore[method-assign]
            stream = tables.stream(export, "runtime", 1000)
            next(stream)
            export.close()
            with pytest.raises(NotAnExport) as caught:
                next(stream)
            messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert export.borrowed_reader() is None  # closed: nothing borrowed


def test_an_integer_column_is_read_in_c_or_left_to_the_caller(real_data_dir: Path) -> None:
    """``Export.int_column``: the rows' values in SQLite's order where every one is an
    integer; None where one is not (the caller runs its statement itself) or SQLite fails."""
    from prvstream.daemon.nsys.export import open_export

    name = "nsys2022.2cap_2024.5exp_cloverleaf_a100.sqlite"
    with open_export(real_data_dir / name) as export:
        sql = ('SELECT "start" FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid % 3 = 0 '
               'UNION ALL SELECT "end" FROM CUPTI_ACTIVITY_KIND_KERNEL')
        assert export.int_column(sql) == [v for (v,) in export.rows(sql)]
        assert export.int_column("SELECT NULL UNION ALL SELECT 1") is None
        assert export.int_column("SELECT 'x'") is None
        assert export.int_column("SELECT x FROM no_such_table") is None
        export.close()
        assert export.int_column("SELECT 1") is None
