"""NVTX planning: threads, domains, inline texts and text ids, each from its own DISTINCT scan,
against what one DISTINCT over every column gives (the planning of before, as the oracle), for
any mix of inline texts (not UTF-8, numbers, BLOBs, repeats), text ids and NULLs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prvstream.daemon.nsys.export import open_export
from tests.conftest import make_db

G = 281474976710656 | (100 << 24)  # host 1, pid 100

#: an NVTX row's text: inline (text, not UTF-8 bytes, a number, a BLOB) or none
texts = st.one_of(st.none(), st.sampled_from(["a", "b", "step 1", "é"]), st.text(max_size=6),
                  st.binary(min_size=1, max_size=4).map(lambda b: ("bytes", b)),
                  st.integers(-3, 3), st.binary(max_size=3).map(sqlite3.Binary))
rows_st = st.lists(st.tuples(texts, st.one_of(st.none(), st.integers(0, 4)),
                             st.integers(1, 3), st.sampled_from([0, 2, None]),
                             st.sampled_from([34, 59, 60, 75])), min_size=1, max_size=30)


def _export(path: Path, rows: list[tuple[object, int | None, int, int | None, int]]) -> Path:
    rows = [*rows, ("a", None, 1, 0, 59)]  # one range at least: something to convert
    table = []
    for i, (text, text_id, thread, domain, event) in enumerate(rows):
        raw = text[1] if isinstance(text, tuple) else text
        table.append((10 * i, 10 * i + 5, event, raw, G | thread, text_id, domain))
    path = make_db(path, {
        "StringIds": (["id INTEGER PRIMARY KEY", "value"], [(k, f"s{k}") for k in range(5)]),
        "NVTX_EVENTS": (["start", "end", "eventType", "text", "globalTid", "textId",
                         "domainId"], table)})
    con = sqlite3.connect(path)  # bytes stored as TEXT: often not UTF-8
    for i, (text, *_) in enumerate(rows):
        if isinstance(text, tuple):
            con.execute("UPDATE NVTX_EVENTS SET text = CAST(text AS TEXT) WHERE start = ?",
                        (10 * i,))
    con.commit()
    con.close()
    return path


def _oracle(path: Path) -> tuple[set[int], set[int], dict[str, int], set[int]]:
    """Threads, domains, inline ids and the nvtx values, from one DISTINCT over every column
    read with the replacing decoder."""
    con = sqlite3.connect(path)
    con.text_factory = lambda raw: raw.decode("utf-8", "replace")
    found = con.execute(
        "SELECT DISTINCT COALESCE(globalTid, -1), COALESCE(textId, -1), CASE WHEN textId IS "
        "NULL THEN text END, COALESCE(domainId, 0) FROM NVTX_EVENTS WHERE eventType IN "
        "(34, 59, 60)").fetchall()
    con.close()
    inline = sorted({str(t) for _, _, t, _ in found if t is not None})
    ids = {t: -2 - k for k, t in enumerate(inline)}
    values = {ids[str(t)] if t is not None else int(v) for _, v, t, _ in found}
    return {int(g) for g, *_ in found}, {int(d) for *_, d in found}, ids, values


def _planned(path: Path) -> tuple[set[int], set[int], dict[str, int], set[int]]:
    with open_export(path) as export:
        plan = export.plan(kinds=["nvtx", "kernel"])
        ids = export.inline_ids()
        return (set(plan.threads), set(plan.values.get("nvtx_domain", [])), dict(ids),
                set(plan.values.get("nvtx", [])))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=rows_st)
def test_the_plan_sees_what_one_distinct_over_every_column_sees(
        tmp_path_factory: pytest.TempPathFactory,
        rows: list[tuple[object, int | None, int, int | None, int]]) -> None:
    path = _export(tmp_path_factory.mktemp("nvtx") / "n.sqlite", rows)
    threads, domains, ids, values = _oracle(path)
    got = _planned(path)
    assert got == (threads, domains, ids, values)


def test_texts_not_utf8_are_read_with_replacement_and_the_decoder_is_kept(
        tmp_path: Path) -> None:
    path = _export(tmp_path / "n.sqlite", [(("bytes", b"k\xc3("), None, 1, 0, 59),
                                           ("fine", None, 1, 0, 59), (7, None, 1, 0, 59)])
    with open_export(path) as export:
        decode = export._con.text_factory
        sql = "SELECT DISTINCT text FROM NVTX_EVENTS ORDER BY start"
        assert export.texts(sql) == ["k\ufffd(", "fine", "7", "a"]
        assert export._con.text_factory is decode
        assert export.texts("SELECT text FROM NVTX_EVENTS WHERE start = 10") == ["fine"]
        assert export._con.text_factory is decode
        with pytest.raises(sqlite3.OperationalError):
            export.texts("SELECT nothing FROM NVTX_EVENTS")
        assert export._con.text_factory is decode
