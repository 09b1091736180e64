"""Per-kind table streams: exact rows, time order, bounded chunks, NULLs as -1."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.kinds import registry
from prvstream.daemon.nsys import tables
from prvstream.daemon.nsys.export import Export, open_export
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from prvstream.sinks.errors import NotAnExport
from tests.conftest import make_db, osrt_export_with_wrecked_pages, real_export_params


def _count(export: Export, kind: str) -> int:
    total = 0
    for src in export.sources(kind):
        where = f" WHERE {src.where}" if src.where else ""
        total += export.connection.execute(
            f'SELECT COUNT(*) FROM "{src.table}"{where}').fetchone()[0]
    return total


def _read(export: Export, kind: str, chunk_rows: int) -> np.ndarray:
    chunks = list(tables.stream(export, kind, chunk_rows))
    assert all(0 < len(c) <= chunk_rows for c in chunks)
    assert all(c.dtype == tables.DTYPES[kind] for c in chunks)
    if not chunks:
        return np.empty(0, dtype=tables.DTYPES[kind])
    return np.concatenate(chunks)


@pytest.mark.parametrize("path", real_export_params())
@pytest.mark.parametrize("chunk_rows", [1000, 65536])
def test_real_streams_exact_and_ordered(path: Path, chunk_rows: int) -> None:
    with open_export(path) as export:
        kinds = tables.available_kinds(export)
        assert "kernel" in kinds and "runtime" in kinds
        plan = export.plan()
        for kind in kinds:
            rows = _read(export, kind, chunk_rows)
            assert len(rows) == _count(export, kind) == plan.counts[kind], kind
            assert np.all(np.diff(rows["start"]) >= 0), kind
            assert rows["start"].min() >= export.meta.first_ns
            assert rows["end"].max() <= export.meta.last_ns


@pytest.mark.parametrize("path", real_export_params())
def test_real_kernel_fields_match_sql(path: Path) -> None:
    with open_export(path) as export:
        rows = _read(export, "kernel", 4096)
        con = export.connection
        want = con.execute(
            "SELECT start, end, globalPid, deviceId, correlationId, shortName, "
            "gridX, blockX, registersPerThread, staticSharedMemory, dynamicSharedMemory "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
        got = sorted(zip(*(rows[f].tolist() for f in (
            "start", "end", "gpid", "device", "corr", "name", "grid_x", "block_x",
            "registers", "smem_static", "smem_dynamic")), strict=True))
        assert got == sorted(want)
        assert set(rows["stream"].tolist()) <= {s for _, _, s in export.plan().streams}


@pytest.mark.parametrize("path", real_export_params())
def test_real_nvtx_texts_resolve(path: Path) -> None:
    with open_export(path) as export:
        if "nvtx" not in tables.available_kinds(export):
            pytest.skip("no NVTX in this export")
        rows = _read(export, "nvtx", 5000)
        assert set(rows["event_type"].tolist()) <= {34, 59, 60}
        texts = export.strings(rows["text"].tolist())
        assert all(texts.values())
        inline = rows["text"][rows["text"] < 0]
        n_inline = export.connection.execute(
            "SELECT COUNT(*) FROM NVTX_EVENTS WHERE textId IS NULL AND eventType IN "
            "(34, 59, 60)").fetchone()[0]
        assert len(inline) == n_inline
        assert not np.any(rows["text"] == -1)
        # the same text always gets the same id
        first = export.string(int(inline[0])) if len(inline) else None
        if first is not None:
            assert export.intern_inline(first) == int(inline[0])


def test_real_sync_without_stream_is_minus_one(real_data_dir: Path) -> None:
    with open_export(real_data_dir / "nsys2022.2cap_2024.5exp_cloverleaf_a100.sqlite") as ex:
        rows = _read(ex, "sync", 500)
        raw = ex.connection.execute(
            "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION "
            "WHERE streamId = 4294967295").fetchone()[0]
        assert raw > 0
        assert int((rows["stream"] == -1).sum()) == raw


def test_unknown_kind_and_bad_chunk(real_data_dir: Path) -> None:
    with open_export(real_data_dir / "nsys2026.1_torch_tiny_rtx3080.sqlite") as export:
        with pytest.raises(ValueError, match="unknown data kind"):
            list(tables.stream(export, "bogus", 10))
        with pytest.raises(ValueError, match="chunk_rows"):
            list(tables.stream(export, "kernel", 0))
        assert list(tables.stream(export, "mpi", 10)) == []
        assert tables.select_sql(export, "openacc") is None


# -- synthetic exports ------------------------------------------------------------------------
G = 281474976710656 | (100 << 24)


def _synthetic(path: Path) -> Path:
    return make_db(path, {
        "StringIds": (["id INTEGER PRIMARY KEY", "value"], [(1, "api"), (2, "kern"), (3, "m")]),
        "CUPTI_ACTIVITY_KIND_KERNEL": (  # old schema: no geometry, no demangled name
            ["start", "end", "deviceId", "streamId", "correlationId", "globalPid",
             "shortName"], [(30, 40, 0, 7, 1, G, 2), (10, 20, 1, 4294967295, None, G, 2)]),
        "CUPTI_ACTIVITY_KIND_MEMSET": (
            ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "value",
             "bytes"], [(5, 6, 0, 7, 2, G, 255, 1024)]),
        "CUPTI_ACTIVITY_KIND_MEMCPY": (
            ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes",
             "copyKind"], [(7, 9, 0, 7, 3, G, 4096, 1)]),
        "NVTX_EVENTS": (
            ["start", "end", "eventType", "rangeId", "text", "globalTid", "textId",
             "domainId"],
            [(1, None, 34, None, "mark", G | 1, None, None),
             (2, 50, 59, None, None, G | 1, 3, 0),
             (3, None, 59, None, "open", G | 1, None, 2),
             (4, 8, 60, 17, "mark", G | 2, None, 0),
             (5, None, 75, None, "domain", G | 1, None, 2)]),
        "MPI_P2P_EVENTS": (["start", "end", "globalTid", "textId"], [(25, 26, G | 1, 3)]),
        "MPI_OTHER_EVENTS": (["start", "end", "globalTid", "textId"], [(24, 27, G | 1, 1)]),
        "CUDA_GRAPH_NODE_EVENTS": (["start", "end", "globalTid", "graphId"],
                                   [(11, 12, G | 1, 99)]),
        "CUPTI_ACTIVITY_KIND_OPENACC_DATA": (["start", "end", "globalTid", "eventKind"],
                                             [(13, 14, G | 1, 6)]),
        "GPU_METRICS": (["timestamp", "typeId", "metricId", "value"],
                        [(40, 1, 5, 3), (35, 0, 5, 2.0)]),
    })


def test_synthetic_every_kind(tmp_path: Path) -> None:
    with open_export(_synthetic(tmp_path / "s.sqlite")) as export:
        assert tables.available_kinds(export) == [
            "kernel", "memcpy", "memset", "nvtx", "mpi", "graph", "openacc", "gpu_metrics"]
        k = _read(export, "kernel", 1)
        assert k["start"].tolist() == [10, 30]
        assert k["stream"].tolist() == [-1, 7]
        assert k["corr"].tolist() == [-1, 1]
        assert k["grid_x"].tolist() == [-1, -1]
        m = _read(export, "memset", 4)
        assert (int(m["bytes"][0]), int(m["value"][0])) == (1024, 255)
        c = _read(export, "memcpy", 4)
        assert (int(c["bytes"][0]), int(c["copy_kind"][0])) == (4096, 1)
        n = _read(export, "nvtx", 2)
        assert n["start"].tolist() == [1, 2, 3, 4]
        assert n["end"].tolist() == [-1, 50, -1, 8]
        assert n["domain"].tolist() == [0, 0, 2, 0]
        assert n["range_id"].tolist() == [-1, -1, -1, 17]
        assert [export.string(int(t)) for t in n["text"]] == ["mark", "m", "open", "mark"]
        assert n["text"][0] == n["text"][3] < -1
        mpi = _read(export, "mpi", 1)
        assert mpi["start"].tolist() == [24, 25] and mpi["name"].tolist() == [1, 3]
        g = _read(export, "graph", 5)
        assert g["name"].tolist() == [99]
        acc = _read(export, "openacc", 5)
        assert acc["name"].tolist() == [6]
        gm = _read(export, "gpu_metrics", 5)
        assert gm.tolist() == [(35, 35, 0, 5, 2), (40, 40, 1, 5, 3)]


def test_damaged_table_raises_not_an_export(tmp_path: Path) -> None:
    path = osrt_export_with_wrecked_pages(tmp_path / "big.sqlite")
    with pytest.raises(NotAnExport) as exc, open_export(path) as export:
        for _ in tables.stream(export, "osrt", 1000):
            pass
    assert str(path) in str(exc.value)


ROW = st.tuples(st.integers(0, 10**12), st.integers(0, 10**6), st.integers(0, 3),
                st.one_of(st.none(), st.integers(0, 2**32 - 1), st.just(2**32 - 1)),
                st.integers(1, 9))


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(ROW, min_size=1, max_size=300), chunk_rows=st.integers(1, 400))
def test_any_chunk_size_gives_the_same_rows(rows: list[tuple[int, int, int, int | None, int]],
                                            chunk_rows: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = make_db(Path(tmp) / "h.sqlite", {
            "StringIds": (["id INTEGER PRIMARY KEY", "value"], [(i, str(i)) for i in range(10)]),
            "CUPTI_ACTIVITY_KIND_MEMCPY": (
                ["start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                 "bytes", "copyKind"],
                [(s, s + d, dev, stream, None, G, d, kind) for s, d, dev, stream, kind in rows]),
        })
        with open_export(path) as export:
            whole = _read(export, "memcpy", 10**6)
            parts = _read(export, "memcpy", chunk_rows)
    assert len(whole) == len(rows)
    assert np.array_equal(whole, parts)
    assert np.all(np.diff(parts["start"]) >= 0)
    def i4(v: int | None) -> int:
        return -1 if v is None else (v + 2**31) % 2**32 - 2**31

    want = sorted((s, s + d, dev, i4(stream), kind) for s, d, dev, stream, kind in rows)
    got = sorted(zip(parts["start"].tolist(), parts["end"].tolist(), parts["device"].tolist(),
                     parts["stream"].tolist(), parts["copy_kind"].tolist(), strict=True))
    assert got == want
    assert set(parts["corr"].tolist()) == {-1}


def test_statements_are_built_once_per_schema(tmp_path: Path) -> None:
    """Exports of one nsys version share a kind's statements (built from the schema alone);
    another version's exports get their own, each what the kind builds for it."""
    paths = [*write_job(tmp_path / "a", SynthSpec(ranks=2, steps=1, nsys_version="2022.2")),
             *write_job(tmp_path / "b", SynthSpec(ranks=1, steps=1, nsys_version="2026.2"))]
    exports = [open_export(p) for p in paths]
    try:
        a1, a2, b = exports
        assert a1.schema_key == a2.schema_key != b.schema_key
        for export in exports:
            for kind in registry.ALL_KINDS:
                assert tables.select_sql(export, kind) == registry.get(kind).select_sql(export)
        assert tables.select_sql(a1, "kernel") is tables.select_sql(a2, "kernel")
    finally:
        for export in exports:
            export.close()


def test_enumeration_columns_are_read_when_asked_for(real_data_dir: Path) -> None:
    """An export's tables are all listed at once; an enumeration's columns (``ENUM_*``: no
    kind reads them) cost their PRAGMA only when asked for, and read the same."""
    import sqlite3

    from prvstream.daemon.nsys import exportbase

    exportbase._SCHEMAS.clear()  # columns another test asked for would be known already
    path = real_data_dir / "nsys2022.2cap_2024.5exp_cloverleaf_a100.sqlite"
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = [n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = "
                                           "'table' ORDER BY name")]
        columns = {n: [r[1] for r in con.execute(f'PRAGMA table_info("{n}")')] for n in names}
    finally:
        con.close()
    statements: list[str] = []
    with open_export(path) as export:
        export.connection.set_trace_callback(statements.append)
        assert list(export.tables) == names and len(export.tables) == len(names)
        assert export.has("CUPTI_ACTIVITY_KIND_KERNEL", "shortName") and not statements
        assert export.has("ENUM_CUDA_MEMCPY_OPER", "name")
        assert statements == ['PRAGMA table_info("ENUM_CUDA_MEMCPY_OPER")']
        assert dict(export.tables) == columns
        assert "NO_SUCH_TABLE" not in export.tables and not export.has("NO_SUCH_TABLE")
