"""Opening exports read-only: metadata, clock anchors, names, plan, and every way to fail."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

from prvstream.daemon.kinds.registry import TABLE_KINDS
from prvstream.daemon.kinds.sql import wrap_i4 as wrap
from prvstream.daemon.nsys import tables
from prvstream.daemon.nsys.export import Export, open_export, process_of
from prvstream.sinks.errors import NotAnExport, UnsupportedSchema
from tests.conftest import make_db, real_export_params, real_exports

#: facts about the real exports, checked by hand with sqlite3
EXPECTED = {
    "nsys2022.2_saxpy_mpi_rank0_a100": dict(
        metadata_table="EXPORT_META_DATA", hostname="nid001608", sysclock=False, gpu=True,
        product="2022.2.1.31", schema="2.9.1"),
    "nsys2022.2cap_2024.5exp_cloverleaf_a100": dict(
        metadata_table="META_DATA_EXPORT", hostname="nid008553", sysclock=False, gpu=True,
        product="2024.5.1.113", schema="3.13.2"),
    "nsys2026.1_torch_tiny_rtx3080": dict(
        metadata_table="META_DATA_EXPORT", hostname="DESKTOP-KBEMEQS", sysclock=True,
        gpu=True, product="2026.1.1.204", schema="3.24.14", anchor="session_start"),
    "nsys2026.2_fastvideo_2gpu_noTARGETGPU_h100": dict(
        metadata_table="META_DATA_EXPORT", hostname="modal", sysclock=True, gpu=False,
        product="2026.2.1.210", schema="3.25.0"),
    "nsys2026.2_torchrun2gpu_nccl_nvtx_h100": dict(
        metadata_table="META_DATA_EXPORT", hostname="modal", sysclock=True, gpu=False,
        product="2026.2.1.210", schema="3.25.0"),
}


def _digest(path: Path) -> tuple[int, int, str]:
    st = path.stat()
    return st.st_mtime_ns, st.st_size, hashlib.sha256(path.read_bytes()).hexdigest()


# -- real exports ------------------------------------------------------------------------------
@pytest.mark.parametrize("path", real_export_params())
def test_real_export_is_read_only(path: Path) -> None:
    before = _digest(path)
    beside = set(path.parent.iterdir())
    with open_export(path) as export:
        assert export.meta.first_ns > 0
        export.plan()
        for kind in tables.available_kinds(export):
            for _ in tables.stream(export, kind, 4096):
                pass
        with pytest.raises(sqlite3.OperationalError):
            export.connection.execute("CREATE TABLE prvstream_probe (x)")
    assert _digest(path) == before
    assert set(path.parent.iterdir()) == beside  # no -journal, -wal or -shm left behind


@pytest.mark.parametrize("path", real_export_params())
def test_real_export_meta(path: Path) -> None:
    want = EXPECTED[path.stem]
    with open_export(path) as export:
        meta = export.meta
        assert meta.path == str(path.resolve())
        assert meta.metadata_table == want["metadata_table"]
        assert meta.hostname == want["hostname"]
        assert meta.product_version == want["product"]
        assert meta.schema_version == want["schema"]
        assert meta.export_complete
        assert (meta.system_clock_ns is not None) == want["sysclock"]
        assert export.has("TARGET_INFO_GPU") == want["gpu"]
        assert meta.utc_epoch_ns is not None and meta.utc_epoch_ns > 1_600_000_000 * 10**9
        assert 0 < meta.first_ns < meta.last_ns
        assert meta.clock_anchor == want.get(
            "anchor", "system_clock" if want["sysclock"] else "session_start")
        if meta.clock_anchor == "system_clock":
            assert meta.system_clock_ns is not None
            assert meta.wall_offset_ns == meta.utc_epoch_ns - meta.system_clock_ns
            assert meta.session_start_ns == meta.system_clock_ns
        else:  # timestamps count from the session start
            assert meta.wall_offset_ns == meta.utc_epoch_ns
            assert meta.session_start_ns == 0
        # the session starts at utcEpochNs, before the first event
        assert meta.session_start_ns + meta.wall_offset_ns == meta.utc_epoch_ns
        assert meta.session_start_ns <= meta.first_ns
        # the wall clock of the first event is within a day after the session start
        assert 0 <= meta.first_ns + meta.wall_offset_ns - meta.utc_epoch_ns < 86_400 * 10**9


@pytest.mark.parametrize("path", real_export_params())
def test_real_time_range_matches_streams(path: Path) -> None:
    with open_export(path) as export:
        lo, hi = None, None
        for kind in tables.available_kinds(export):
            for chunk in tables.stream(export, kind, 8192):
                top = max(int(chunk["start"].max()), int(chunk["end"].max()))
                lo = int(chunk["start"][0]) if lo is None else min(lo, int(chunk["start"][0]))
                hi = top if hi is None else max(hi, top)
        assert (export.meta.first_ns, export.meta.last_ns) == (lo, hi)


@pytest.mark.parametrize("path", real_export_params())
def test_real_schema_probe(path: Path) -> None:
    with open_export(path) as export:
        con = export.connection
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert set(export.tables) == names
        assert export.has("StringIds", "value")
        assert not export.has("StringIds", "no_such_column")
        assert not export.has("NO_SUCH_TABLE")
        assert export.tables["CUPTI_ACTIVITY_KIND_KERNEL"][:2] == ["start", "end"]


@pytest.mark.parametrize("path", real_export_params())
def test_real_names_resolve(path: Path) -> None:
    with open_export(path) as export:
        plan = export.plan()
        names = export.strings(v for v in plan.values["kernel"])
        assert names and all(names.values())
        for v in plan.values["kernel"]:
            assert export.string(v) == names[v]
        assert all(export.string(v) for v in plan.values.get("runtime", []))
        assert all(export.string(v) for v in plan.values.get("nvtx", []))
        assert export.string(-1) == ""
        procs = export.processes()
        for gpid in plan.processes:
            assert gpid in procs
            assert procs[gpid].pid == (gpid >> 24) & 0xFFFFFF
        # the names of the processes with activity, read alone, are those of the whole table
        assert export.process_names([*plan.processes, *plan.processes, -5]) == {
            g: procs[g].name for g in plan.processes}
        tnames = export.thread_names()
        assert tnames and all(isinstance(v, str) for v in tnames.values())
        # every thread the plan found belongs to a process of the plan
        assert {process_of(g) for g in plan.threads} <= set(plan.processes)


def test_real_domains_and_streams(real_data_dir: Path) -> None:
    with open_export(real_data_dir / "nsys2022.2_saxpy_mpi_rank0_a100.sqlite") as export:
        assert export.nvtx_domains() == {1: "MPI"}
        assert export.mpi_ranks() == {}
    with open_export(real_data_dir / "nsys2022.2cap_2024.5exp_cloverleaf_a100.sqlite") as ex:
        # a sync row with no stream (UINT32_MAX) becomes stream -1
        assert (ex.plan().streams[0][2]) == -1
    name = "nsys2026.2_torchrun2gpu_nccl_nvtx_h100.sqlite"
    with open_export(real_data_dir / name) as export:
        plan = export.plan()
        assert len(plan.processes) == 2
        assert {d for _, d, _ in plan.streams} == {0, 1}
        assert any(export.string(v).startswith("nccl") for v in plan.values["kernel"])


@pytest.mark.parametrize("path", real_export_params())
def test_real_plan_counts(path: Path) -> None:
    with open_export(path) as export:
        plan = export.plan()
        con = export.connection
        for kind in tables.available_kinds(export):
            want = 0
            for src in export.sources(kind):
                where = f" WHERE {src.where}" if src.where else ""
                want += con.execute(f'SELECT COUNT(*) FROM "{src.table}"{where}').fetchone()[0]
            assert plan.counts[kind] == want, kind
        assert set(plan.counts) == set(tables.available_kinds(export))
        for kind, values in plan.values.items():
            assert values == sorted(set(values)), kind
        if "kernel" in plan.counts:
            assert plan.values["kernel"] == [v for (v,) in con.execute(
                "SELECT DISTINCT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY 1")]
        assert plan.threads == sorted(set(plan.threads))
        assert plan.streams == sorted(set(plan.streams))


# -- inputs that are not exports ---------------------------------------------------------------
def _truncated(src: Path, dst: Path) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: len(data) // 2 + 100])
    return dst


BAD_INPUTS = [
    pytest.param(lambda d: (d / "notes.sqlite").write_text("hello, not a database\n" * 20),
                 "not an SQLite", id="text-file"),
    pytest.param(lambda d: (d / "random.sqlite").write_bytes(os.urandom(8192)),
                 "not an SQLite", id="random-bytes"),
    pytest.param(lambda d: (d / "empty.sqlite").write_bytes(b""), "empty", id="zero-bytes"),
]


@pytest.mark.parametrize(("write", "reason"), BAD_INPUTS)
def test_garbage_is_not_an_export(tmp_path: Path, write: object, reason: str) -> None:
    write(tmp_path)  # type: ignore[operator]
    (path,) = tmp_path.iterdir()
    with pytest.raises(NotAnExport, match=reason) as exc:
        open_export(path)
    assert str(path) in str(exc.value)


def test_truncated_copy_is_not_an_export(tmp_path: Path, real_data_dir: Path) -> None:
    src = real_data_dir / "nsys2022.2cap_2024.5exp_cloverleaf_a100.sqlite"
    before = _digest(src)
    path = _truncated(src, tmp_path / "cut.sqlite")
    with pytest.raises(NotAnExport, match="truncated") as exc:
        open_export(path)
    assert str(path) in str(exc.value)
    assert _digest(src) == before


def test_truncated_on_page_boundary(tmp_path: Path, real_data_dir: Path) -> None:
    src = real_data_dir / "nsys2026.2_torchrun2gpu_nccl_nvtx_h100.sqlite"
    data = src.read_bytes()
    path = tmp_path / "cut.sqlite"
    path.write_bytes(data[: 4096 * 100])
    with pytest.raises(NotAnExport, match="truncated"):
        open_export(path)


def test_empty_sqlite_is_not_an_export(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite"
    sqlite3.connect(path).close()
    path.write_bytes(b"")  # sqlite3 leaves a zero-byte file until the first write
    con = sqlite3.connect(path)
    con.execute("PRAGMA user_version = 1")
    con.commit()
    con.close()
    with pytest.raises(NotAnExport, match="without Nsight Systems tables") as exc:
        open_export(path)
    assert str(path) in str(exc.value)


def test_foreign_sqlite_is_not_an_export(tmp_path: Path) -> None:
    path = make_db(tmp_path / "shop.sqlite", {
        "customers": (["id", "name"], [(1, "ada")]),
        "orders": (["id", "start", "end"], [(1, 2, 3)]),
    })
    with pytest.raises(NotAnExport, match="without Nsight Systems tables") as exc:
        open_export(path)
    assert str(path) in str(exc.value)


def test_export_without_data_is_unsupported(tmp_path: Path) -> None:
    path = make_db(tmp_path / "idle.sqlite", {
        "StringIds": (["id INTEGER PRIMARY KEY", "value"], [(1, "x")]),
        "META_DATA_EXPORT": (["name", "value"], [("EXPORT_TIME", "0.1 sec")]),
        "CUPTI_ACTIVITY_KIND_KERNEL": (["start", "end", "globalPid"], []),
        "NVTX_EVENTS": (["start", "end", "eventType", "domainId", "text", "globalTid"],
                        [(5, None, 75, 1, "dom", 1 << 24)]),
    })
    with pytest.raises(UnsupportedSchema) as exc:
        open_export(path)
    assert str(path) in str(exc.value)


def test_missing_file_is_not_an_export(tmp_path: Path) -> None:
    with pytest.raises(NotAnExport, match="cannot read"):
        open_export(tmp_path / "absent.sqlite")


# -- synthetic exports: the optional parts -----------------------------------------------------
G = (281474976710656 | (100 << 24))  # host 1, pid 100


def _synthetic(path: Path, *, sysclock: bool = True, metadata: str | None = "META_DATA_EXPORT",
               final: bool = True) -> Path:
    session = ["utcEpochNs", "utcTime", "localTime"] + (["systemClockNs"] if sysclock else [])
    srow: tuple[object, ...] = (1_700_000_000_000_000_000, "t", "t") + \
        ((900,) if sysclock else ())
    spec: dict[str, tuple[Sequence[str], Sequence[tuple[object, ...]]]] = {
        "StringIds": (["id INTEGER PRIMARY KEY", "value"],
                      [(1, "cudaLaunchKernel"), (2, "k"), (3, "MPI_Send"), (4, "main"),
                       (5, "ranged")]),
        "TARGET_INFO_SESSION_START_TIME": (session, [srow]),
        "TARGET_INFO_CUDA_DEVICE": (["gpuId", "cudaId", "pid", "uuid"], [(0, 0, 100, "u")]),
        "TARGET_INFO_SYSTEM_ENV": (["globalVid", "devStateName", "name", "nameEnum", "value"],
                                   [(0, "x", "Hostname", 619, "nodeA")]),
        "PROCESSES": (["globalPid", "pid", "name"], [(G, 100, "app")]),
        "ThreadNames": (["nameId", "priority", "globalTid"], [(4, 10, G | 101)]),
        "CUPTI_ACTIVITY_KIND_RUNTIME": (
            ["start", "end", "globalTid", "correlationId", "nameId"],
            [(1000, 1100, G | 101, 7, 1)]),
        "CUPTI_ACTIVITY_KIND_KERNEL": (
            ["start", "end", "deviceId", "streamId", "correlationId", "globalPid",
             "shortName", "demangledName"],  # no geometry columns at all
            [(1200, 1500, 0, 4294967295, 7, G, 2, 2)]),
        "NVTX_EVENTS": (
            ["start", "end", "eventType", "rangeId", "text", "globalTid", "textId",
             "domainId"],
            [(950, None, 75, None, "mydomain", G | 101, None, 3),
             (990, None, 34, None, "a mark", G | 101, None, 0),
             (1000, 2000, 59, None, None, G | 101, 5, 3),
             (1010, None, 59, None, "open range", G | 101, None, 0),
             (1020, 1030, 60, 9, "inline", G | 102, None, 0),
             (1040, 1050, 39, None, "thread name", G | 101, None, 0)]),
        "MPI_RANKS": (["globalTid", "rank"], [(G | 101, 3)]),
        "MPI_P2P_EVENTS": (["start", "end", "globalTid", "textId", "tag"],
                           [(1600, 1700, G | 101, 3, 0)]),
        "MPI_COLLECTIVES_EVENTS": (["start", "end", "globalTid", "textId"],
                                   [(1650, 1660, G | 101, 3)]),
        "MPI_NOT_EVENTS_TABLE": (["x"], [(1,)]),
        "GPU_METRICS": (["timestamp", "typeId", "metricId", "value"],
                        [(1300, (7 << 8) | 1, 2, 50), (1250, 0, 3, 7)]),
        "TARGET_INFO_GPU_METRICS": (["typeId", "sourceId", "typeName", "metricId",
                                     "metricName"], [(0, 0, "x", 2, "SM Active"),
                                                     (0, 0, "x", 3, "DRAM Read")]),
        "CUDA_GRAPH_EVENTS": (["start", "end", "globalTid", "nameId", "graphId"],
                              [(1400, 1410, G | 101, 1, 42)]),
        "CUPTI_ACTIVITY_KIND_OPENACC_LAUNCH": (["start", "end", "globalTid", "eventKind"],
                                               [(1420, 1430, G | 101, 12)]),
    }
    if metadata is not None:
        rows = [("EXPORT_PRODUCT_VERSION", "2099.1"), ("EXPORT_SCHEMA_VERSION", "9.9.9"),
                ("EXPORT_HOST", "exporter")] + ([("EXPORT_TIME", "1 sec")] if final else [])
        spec[metadata] = (["name", "value"], rows)
    return make_db(path, spec)


def test_synthetic_export_names_and_objects(tmp_path: Path) -> None:
    with open_export(_synthetic(tmp_path / "s.sqlite")) as export:
        meta = export.meta
        assert meta.hostname == "nodeA"
        assert meta.product_version == "2099.1" and meta.schema_version == "9.9.9"
        assert meta.export_complete
        assert (meta.first_ns, meta.last_ns) == (990, 2000)
        assert meta.wall_offset_ns == 1_700_000_000_000_000_000 - 900
        assert export.nvtx_domains() == {3: "mydomain"}
        assert export.mpi_ranks() == {G: 3}
        assert export.gpu_metric_names() == {2: "SM Active", 3: "DRAM Read"}
        assert export.thread_names() == {G | 101: "main"}
        assert export.processes()[G].name == "app"
        assert export.process_names([G, G + 1]) == {G: "app"}
        assert export.process_names([]) == {}
        assert [s.table for s in export.sources("mpi")] == ["MPI_COLLECTIVES_EVENTS",
                                                           "MPI_P2P_EVENTS"]


def test_synthetic_plan(tmp_path: Path) -> None:
    with open_export(_synthetic(tmp_path / "s.sqlite")) as export:
        plan = export.plan()
        assert plan.streams == [(G, 0, -1)]
        assert plan.threads == [G | 101, G | 102]
        assert plan.threads_by_process == {G: [G | 101, G | 102]}
        assert plan.processes == [G]
        assert plan.counts == {"kernel": 1, "runtime": 1, "nvtx": 4, "mpi": 2, "graph": 1,
                               "openacc": 1, "gpu_metrics": 2}
        nvtx = plan.values["nvtx"]
        assert sorted(export.string(v) for v in nvtx) == ["a mark", "inline", "open range",
                                                          "ranged"]
        assert all(v < -1 for v in nvtx if v != 5)
        inline = sorted((v for v in nvtx if v < -1), reverse=True)  # -2, -3, ...: text order
        assert [export.string(v) for v in inline] == sorted(export.string(v) for v in inline)
        assert plan.values["nvtx_domain"] == [0, 3]
        assert plan.values["mpi"] == [3]
        assert plan.values["graph"] == [1]
        assert plan.values["openacc"] == [12]
        assert plan.values["gpu_metrics"] == [2, 3]
        assert plan.gpu_metrics == [(0, 3), (1, 2)]


@pytest.mark.parametrize("ids", [
    pytest.param([(0, 4294967295), (None, None), ((1 << 40) + 3, -5),
                  ((1 << 63) - 1 - (1 << 31), 0), (-(1 << 63), 2147483648)], id="integers"),
    pytest.param([(0, 4294967295), (1.0, 2), ("7", 3), (2.5, None)], id="not-integers"),
    pytest.param([(0, 1), ((1 << 63) - 1, 0)], id="sum-past-int64"),
])
def test_stream_keys_are_the_wrapped_distinct(tmp_path: Path, ids: list[tuple[object, object]]
                                              ) -> None:
    """The plan's GPU stream keys (bare columns, wrapped in Python) are the DISTINCT of the
    int32-wrapping SQL, whatever the stored values."""
    path = _synthetic(tmp_path / "s.sqlite")
    with sqlite3.connect(path) as con:
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, "
                        "correlationId, globalPid, shortName, demangledName) "
                        "VALUES (1300, 1400, ?, ?, 8, ?, 2, 2)", [(d, s, G) for d, s in ids])
        want = {(int(g), int(d), int(s)) for g, d, s in con.execute(
            f"SELECT DISTINCT COALESCE(globalPid, -1), {wrap('COALESCE(deviceId, -1)')}, "
            f"{wrap('COALESCE(streamId, -1)')} FROM CUPTI_ACTIVITY_KIND_KERNEL")}
    con.close()
    with open_export(path) as export:
        assert export.plan().streams == sorted(want)


@pytest.mark.parametrize(("sysclock", "metadata", "final", "complete", "host"), [
    pytest.param(True, "META_DATA_EXPORT", True, True, "nodeA", id="new"),
    pytest.param(False, "EXPORT_META_DATA", True, True, "nodeA", id="old-table"),
    pytest.param(False, "META_DATA_EXPORT", False, False, "nodeA", id="no-export-time"),
    pytest.param(False, None, False, True, "nodeA", id="no-metadata"),
])
def test_synthetic_meta_variants(tmp_path: Path, sysclock: bool, metadata: str | None,
                                 final: bool, complete: bool, host: str) -> None:
    path = _synthetic(tmp_path / "s.sqlite", sysclock=sysclock, metadata=metadata, final=final)
    with open_export(path) as export:
        meta = export.meta
        assert meta.metadata_table == metadata
        assert meta.export_complete is complete
        assert meta.hostname == host
        utc = 1_700_000_000_000_000_000
        assert meta.wall_offset_ns == (utc - 900 if sysclock else utc)
        assert meta.clock_anchor == ("system_clock" if sysclock else "session_start")


def test_hostname_fallbacks(tmp_path: Path) -> None:
    path = _synthetic(tmp_path / "s.sqlite")
    con = sqlite3.connect(path)
    con.execute("DELETE FROM TARGET_INFO_SYSTEM_ENV")
    con.execute("DELETE FROM TARGET_INFO_SESSION_START_TIME")
    con.commit()
    con.close()
    with open_export(path) as export:
        assert export.meta.hostname == "exporter"
        assert export.meta.utc_epoch_ns is None
        assert export.meta.wall_offset_ns == 0
        assert export.meta.clock_anchor == "none"
    con = sqlite3.connect(path)
    con.execute("DELETE FROM META_DATA_EXPORT")
    con.commit()
    con.close()
    with open_export(path) as export:
        assert export.meta.hostname == "unknown"


def test_strings_batches_and_cache(tmp_path: Path) -> None:
    path = tmp_path / "many.sqlite"
    n = 1234
    make_db(path, {
        "StringIds": (["id INTEGER PRIMARY KEY", "value"], [(i, f"s{i}") for i in range(n)]),
        "OSRT_API": (["start", "end", "globalTid", "nameId"], [(1, 2, G | 1, 0)]),
    })
    with open_export(path) as export:
        got = export.strings(range(-1, n + 5))
        assert got[-1] == "" and got[n + 4] == ""
        assert all(got[i] == f"s{i}" for i in range(n))
        assert export.string(77) == "s77"
        assert isinstance(export, Export)


def test_system_clock_off_the_event_clock_is_ignored(tmp_path: Path) -> None:
    path = _synthetic(tmp_path / "s.sqlite")
    con = sqlite3.connect(path)
    con.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET systemClockNs = 515396806359142")
    con.commit()
    con.close()
    with open_export(path) as export:
        meta = export.meta
        assert meta.system_clock_ns == 515396806359142
        assert meta.clock_anchor == "session_start"
        assert meta.wall_offset_ns == 1_700_000_000_000_000_000


def test_paths_with_uri_characters_open_read_only(tmp_path: Path) -> None:
    """'#' and '?' in a path must not cut the SQLite URI (and drop mode=ro)."""
    found = [p for p in real_exports() if "torch_tiny" in p.name]
    if not found:
        pytest.skip("real exports not available")
    odd = tmp_path / "job#1?x" / "a.sqlite"
    odd.parent.mkdir()
    shutil.copy(found[0], odd)
    before = odd.read_bytes()
    with open_export(odd) as export:
        assert export.meta.hostname == "DESKTOP-KBEMEQS"
    assert odd.read_bytes() == before
    assert not (tmp_path / "job").exists()


@pytest.mark.parametrize("path", real_export_params())
def test_every_tables_facts_in_one_statement_are_each_tables_own(path: Path) -> None:
    """The rows and time range of every data table, read in one statement, are those each
    table's own statement gives (hostile values still go to the bounded per-table query)."""
    together = open_export(path)
    alone = open_export(path)
    try:
        together.nonempty_kinds()
        for kind in TABLE_KINDS:
            for src in alone.sources(kind):
                assert alone._source_facts(src) == together._source_facts(src), src.table
        assert alone._facts == together._facts
    finally:
        together.close()
        alone.close()


def test_reads_share_one_transaction_per_connection(tmp_path: Path) -> None:
    """Every statement of a connection runs in one read transaction (one shared lock and one
    check of the file, not one per statement), reopened with the connection: a writer is
    refused while it is open and admitted once it is closed."""
    path = _synthetic(tmp_path / "s.sqlite")
    with open_export(path) as export:
        export.plan()
        assert export.connection.in_transaction
        writer = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                writer.execute("CREATE TABLE held (a)")
            export.close()
            writer.execute("CREATE TABLE admitted (a)")
            export.reopen()
            assert export.connection.in_transaction
            assert export.has("held") is False
            assert list(export.rows("SELECT COUNT(*) FROM sqlite_master WHERE name = 'held'")) \
                == [(0,)]
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                writer.execute("CREATE TABLE held (a)")
        finally:
            writer.close()


@pytest.mark.parametrize("path", real_export_params())
def test_time_ranges_scanned_behind_planning_are_the_same(path: Path) -> None:
    """``scan_facts_behind``: kinds from one row a table while the scan runs, then the same
    kinds, counts, plan and metadata as the scan in line gives."""
    with open_export(path) as inline:
        want = (inline.nonempty_kinds(), inline.plan().counts, inline.meta)
    with open_export(path) as behind:
        behind.scan_facts_behind()
        kinds = behind.nonempty_kinds()
        got = (kinds, behind.plan().counts, behind.meta)
        assert behind._facts_job is None  # the metadata waited for the scan
    assert got == want


@pytest.mark.parametrize("wanted", [
    range(0, 200),  # dense: one range of ids
    range(0, 60_000, 97),  # sparse: lists of ids, in batches
    [5, 6, 7, 2**40, 9],  # one far id: a list
    [3, 4, 50, 51, 52, 53, 60],  # a range with most of its ids unwanted
])
def test_strings_by_range_or_list_are_the_table_s(tmp_path: Path, wanted: range | list[int]
                                                  ) -> None:
    """Whether looked up by one range or by lists of ids, every wanted id gets its text
    (absent ones "") and no unwanted id is taken."""
    path = tmp_path / "ids.sqlite"
    table = {i: f"t{i}" for i in range(0, 60_000, 3)} | {2**40: "far", 50: None}
    make_db(path, {
        "StringIds": (["id INTEGER PRIMARY KEY", "value"], list(table.items())),
        "OSRT_API": (["start", "end", "globalTid", "nameId"], [(1, 2, G | 1, 0)]),
    })
    with open_export(path) as export:
        got = export.strings(wanted)
        assert got == {i: table.get(i) or "" for i in wanted}
        assert export._strings.keys() - {-1} == set(wanted)
