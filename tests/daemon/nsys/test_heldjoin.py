"""The comm arrows joined from a small export's held rows (``heldjoin``) are SQLite's rows in
SQLite's order, or not given at all."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from prvstream.daemon.nsys import heldjoin, heldrows, tables
from prvstream.daemon.nsys.export import open_export
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from tests.conftest import make_db, real_exports

G = 281474976710656 | (100 << 24)
#: an id that may be NULL or shared (several calls, several operations per call)
CORR = st.one_of(st.none(), st.integers(-1, 6))
PID = st.one_of(st.none(), st.sampled_from([G, G | 1 << 24]))
I4 = st.one_of(st.none(), st.integers(-2, 2), st.integers(2**32 - 1, 2**32 + 1))
GPU = st.tuples(st.integers(0, 50), PID, I4, I4, CORR,
                st.one_of(st.none(), st.integers(-1, 9), st.just(2**62)))
API = st.tuples(st.integers(0, 50), st.one_of(st.none(), st.sampled_from(
    [G | 1, G | 2, (G | 1 << 24) | 3])), CORR)


def _export(path: Path, gpu: dict[str, list[tuple[object, ...]]],
            api: list[tuple[object, ...]]) -> Path:
    spec = {
        "StringIds": (["id INTEGER PRIMARY KEY", "value"], [(0, "s0")]),
        "CUPTI_ACTIVITY_KIND_RUNTIME": (
            ["start", "end", "globalTid", "nameId", "correlationId"],
            [(s, s + 1, g, 0, c) for s, g, c in api]),
    }
    for table, rows in gpu.items():
        cols = ["start", "end", "globalPid", "deviceId", "streamId", "shortName",
                "correlationId", "bytes", "copyKind"]
        spec[table] = (cols, [(s, s + 1, g, d, st_, 0, c, b, 1) for s, g, d, st_, c, b in rows])
    return make_db(path, spec)


def _agree(path: Path, chunk_rows: int) -> bool:
    """``comm_chunks`` from the held rows equals the stream SQLite reads, where it answers;
    whether it answered."""
    with open_export(path) as export:
        kinds = tables.available_kinds(export)
        early = heldrows.read_early(export, kinds, 10**6, chunk_rows)
        assert early is not None
        joined = heldjoin.comm_chunks(export, early, chunk_rows)
        read = list(tables.stream(export, "comm", chunk_rows))
    if joined is None:
        return False
    assert [len(c) for c in joined] == [len(c) for c in read]
    for mine, theirs in zip(joined, read, strict=True):
        assert mine.dtype == theirs.dtype and mine.tobytes() == theirs.tobytes()
    return True


@settings(max_examples=60, deadline=None)
@given(kernels=st.lists(GPU, min_size=1, max_size=12), copies=st.lists(GPU, max_size=6),
       sets=st.lists(GPU, max_size=4), api=st.lists(API, max_size=14),
       chunk_rows=st.sampled_from([3, 512]))
def test_the_held_join_gives_sqlites_rows_or_nothing(
        kernels: list[tuple[object, ...]], copies: list[tuple[object, ...]],
        sets: list[tuple[object, ...]], api: list[tuple[object, ...]],
        chunk_rows: int) -> None:
    """NULL and negative ids and sizes, ids shared by several calls and operations, calls and
    operations of other processes, arrows sent at one instant, values past int32."""
    gpu = {"CUPTI_ACTIVITY_KIND_KERNEL": kernels}
    if copies:
        gpu["CUPTI_ACTIVITY_KIND_MEMCPY"] = copies
    if sets:
        gpu["CUPTI_ACTIVITY_KIND_MEMSET"] = sets
    with tempfile.TemporaryDirectory() as tmp:
        _agree(_export(Path(tmp) / "j.sqlite", gpu, api), chunk_rows)


def test_the_held_join_answers_for_generated_and_real_exports(tmp_path: Path) -> None:
    paths = [p for v in ("2022.2", "2024.5", "2026.2") for p in write_job(
        tmp_path / v, SynthSpec(ranks=1, steps=1, layers=2, nsys_version=v))]
    for path in paths:
        assert _agree(path, 512)
    for real in real_exports():
        with open_export(real) as export:
            small = sum(export.count_rows(t) for t in (
                "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL")) < 20_000
        if small:
            _agree(real, 4096)


def test_shared_send_times_are_left_to_sqlite(tmp_path: Path) -> None:
    """Two kernels of one launch: their arrows' order is SQLite's to give."""
    path = _export(tmp_path / "t.sqlite",
                   {"CUPTI_ACTIVITY_KIND_KERNEL": [(5, G, 0, 1, 1, 0), (4, G, 0, 2, 1, 0)]},
                   [(1, G | 1, 1)])
    assert not _agree(path, 512)
    path = _export(tmp_path / "u.sqlite",
                   {"CUPTI_ACTIVITY_KIND_KERNEL": [(5, G, 0, 1, 1, 0), (4, G, 0, 2, 2, 0)]},
                   [(1, G | 1, 1), (2, G | 1, 2)])
    assert _agree(path, 512)
