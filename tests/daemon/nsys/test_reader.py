"""The reader process: same chunks and bytes as in-process reading, clear errors, recovery."""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from prvstream.daemon.config import load_settings
from prvstream.daemon.nsys import reader, readerstart, sources, tables
from prvstream.daemon.nsys.export import open_export
from prvstream.daemon.stream.batch import convert
from prvstream.daemon.synthetic.synth import SynthSpec, write_job
from prvstream.sinks.errors import NotAnExport, PrvstreamError
from tests.conftest import make_db, osrt_export_with_wrecked_pages

pytestmark = pytest.mark.skipif(not reader.enabled(),
                                reason="the reader process needs the compiled row filler")

G = 7 << 24


@pytest.fixture(autouse=True)
def small_reports_use_the_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """These exports are tiny; real conversions read reports this small in-process."""
    monkeypatch.setattr(sources, "_READER_MIN_ROWS", 0)


@pytest.fixture
def job(tmp_path: Path) -> list[Path]:
    return write_job(tmp_path / "job", SynthSpec(ranks=2, steps=3, seed=5))


def _read(lease: reader.ReaderLease, export_path: Path, kind: str, chunk: int) -> np.ndarray:
    with open_export(export_path) as export:
        sql = tables.select_sql(export, kind)
    assert sql is not None
    parts = list(lease.stream(sql, tables.DTYPES[kind], tables.LAYOUTS[kind], chunk, kind))
    return np.concatenate(parts) if parts else np.empty(0, tables.DTYPES[kind])


@pytest.mark.parametrize("chunk", [1, 7, 1000, 4096])
def test_chunks_equal_in_process_streams(job: list[Path], chunk: int) -> None:
    """Also chunks the reader fetches in several pieces (``FETCH_ROWS`` rows at a time)."""
    path = job[0]
    lease = reader.lease(path)
    assert lease is not None
    try:
        with open_export(path) as export:
            for kind in tables.available_kinds(export):
                if kind == "nvtx":
                    continue
                expected = np.concatenate(list(tables.stream(export, kind, chunk)))
                got = _read(lease, path, kind, chunk)
                assert got.dtype == expected.dtype
                assert got.tobytes() == expected.tobytes(), kind
    finally:
        lease.release()


def test_conversion_bytes_do_not_depend_on_the_reader(job: list[Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(None, {})
    convert([str(p) for p in job], tmp_path / "with", settings)
    off = load_settings(None, {}, environ={"PRVSTREAM_READER": "0"})  # the variable still works
    assert not off.reader
    monkeypatch.setattr(reader, "lease", lambda path: pytest.fail("the reader was used"))
    convert([str(p) for p in job], tmp_path / "without", off)
    for suffix in (".prv", ".pcf", ".row"):
        assert (tmp_path / f"with{suffix}").read_bytes() == \
            (tmp_path / f"without{suffix}").read_bytes()


def test_small_reports_are_read_in_process(job: list[Path],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from prvstream.daemon.stream.pipeline import prepare

    monkeypatch.setattr(sources, "_READER_MIN_ROWS", 50_000)
    rep = prepare(job[0], None, prefetch_rows=16)
    try:
        assert isinstance(rep.source, sources.InProcessSource)
    finally:
        rep.close()


def test_one_report_at_a_time(job: list[Path]) -> None:
    first = reader.lease(job[0])
    assert first is not None
    try:
        assert reader.lease(job[1]) is None  # busy: the caller reads in-process
    finally:
        first.release()
    second = reader.lease(job[1])
    assert second is not None
    second.release()


def test_abandoned_streams_leave_the_reader_usable(job: list[Path]) -> None:
    lease = reader.lease(job[0])
    assert lease is not None
    with open_export(job[0]) as export:
        sqls = {k: tables.select_sql(export, k) for k in ("kernel", "runtime")}
    streams = [lease.stream(sql or "", tables.DTYPES[k], tables.LAYOUTS[k], 5, k)
               for k, sql in sqls.items()]
    next(streams[0])
    next(streams[1])  # both have a chunk requested ahead
    lease.release()  # without reading on
    again = reader.lease(job[0])
    assert again is not None
    try:
        with open_export(job[0]) as export:
            expected = np.concatenate(list(tables.stream(export, "kernel", 64)))
        assert _read(again, job[0], "kernel", 64).tobytes() == expected.tobytes()
    finally:
        again.release()


def test_inline_texts_read_by_the_reader_get_the_in_process_ids(tmp_path: Path) -> None:
    """Inline NVTX texts (invalid UTF-8, a BLOB, a number, repeats across chunks) get the
    ids an in-process read gives them, also texts the plan did not number (the next free
    ids, in the order they are met) and rows with a textId."""
    rows = [(i, i + 5, 59, f"t{i % 3}" if i % 4 else None, G | 1, None if i % 4 else 1, 0)
            for i in range(1, 40)]
    rows += [(50, 60, 59, b"bad \xff utf-8", G | 1, None, 0), (51, 61, 59, 7, G | 1, None, 0),
             (52, 62, 59, sqlite3.Binary(b"blob"), G | 1, None, 0),
             (53, 63, 34, "mark", G | 2, None, 0)]
    path = make_db(tmp_path / "nvtx.sqlite", {
        "StringIds": (["id INTEGER PRIMARY KEY", "value"], [(1, "known")]),
        "NVTX_EVENTS": (["start", "end", "eventType", "text", "globalTid", "textId",
                         "domainId"], rows)})
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET text = CAST(text AS TEXT) WHERE start = 50")
    con.commit()
    con.close()
    got = []
    for via_reader in (False, True):
        with open_export(path) as export:
            export.number_inline_texts(["t1", "mark"])  # as if the plan had seen only these
            source = sources.open_source(export, ["nvtx"], 7, {"nvtx": 10**6},
                                         use_reader=via_reader)
            assert isinstance(source, sources.ReaderSource) == via_reader
            try:
                chunks = list(source.chunks("nvtx"))
            finally:
                source.close()
            texts = {i: export.string(i) for i in set(np.concatenate(chunks)["text"].tolist())}
            got.append((b"".join(c.tobytes() for c in chunks), texts))
    assert got[0] == got[1]
    assert {"t0", "t1", "t2", "known", "7", "mark", "bad \ufffd utf-8"} <= set(got[0][1].values())


def test_text_in_an_integer_column_is_not_an_export(tmp_path: Path) -> None:
    path = make_db(tmp_path / "bad.sqlite", {
        "StringIds": (["id INTEGER PRIMARY KEY", "value"], [(1, "f")]),
        "OSRT_API": (["start", "end", "globalTid", "nameId"],
                     [(10, 20, G | 1, 1), (30, 40, "oops", 1)]),
    })
    lease = reader.lease(path)
    assert lease is not None
    try:
        with pytest.raises(NotAnExport, match=r"bad\.sqlite: the osrt rows hold a value"):
            _read(lease, path, "osrt", 10)
    finally:
        lease.release()


def test_damaged_pages_are_not_an_export(tmp_path: Path) -> None:
    path = osrt_export_with_wrecked_pages(tmp_path / "big.sqlite")
    with open_export(path) as export:
        sql = tables.select_sql(export, "osrt")
    lease = reader.lease(path)
    assert lease is not None and sql is not None
    try:
        with pytest.raises(NotAnExport, match="damaged or was truncated"):
            list(lease.stream(sql, tables.DTYPES["osrt"], tables.LAYOUTS["osrt"], 1000, "osrt"))
    finally:
        lease.release()


def test_a_killed_reader_is_an_error_then_replaced(job: list[Path]) -> None:
    lease = reader.lease(job[0])
    assert lease is not None
    with open_export(job[0]) as export:
        sql = tables.select_sql(export, "runtime")
    assert sql is not None
    stream = lease.stream(sql, tables.DTYPES["runtime"], tables.LAYOUTS["runtime"], 3, "runtime")
    next(stream)
    assert reader._reader is not None
    os.kill(reader._reader.pid, signal.SIGKILL)
    with pytest.raises(PrvstreamError, match="reader process failed"):
        for _ in stream:
            pass
    lease.release()
    again = reader.lease(job[0])  # a new child
    assert again is not None
    try:
        assert len(_read(again, job[0], "runtime", 100))
    finally:
        again.release()


def test_a_batch_lets_its_reader_go_after_its_last_report(job: list[Path],
                                                          tmp_path: Path) -> None:
    """``retire_reader``: the reader quits once the last report has streamed (the outputs are
    the same); ``shutdown`` reaps it, and a later lease starts another."""
    settings = load_settings(None, {})
    convert([str(p) for p in job], tmp_path / "kept", settings)
    kept = reader._reader
    assert kept is not None and kept.alive
    convert([str(p) for p in job], tmp_path / "let_go", settings, retire_reader=True)
    assert reader._reader is kept and kept.retired and not kept.alive
    for suffix in (".prv", ".pcf", ".row"):
        assert (tmp_path / f"kept{suffix}").read_bytes() == \
            (tmp_path / f"let_go{suffix}").read_bytes()
    again = reader.lease(job[0])  # a new child, the retired one reaped
    assert again is not None and reader._reader is not kept
    again.release()
    assert kept._proc.poll() == 0
    reader.shutdown()
    assert reader._reader is None


def test_one_report_prefetched_at_planning_gives_the_same_bytes(
        job: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A single input starts its reads in the reader while it is planned."""
    convert([str(job[0])], tmp_path / "with", load_settings(None, {}))
    monkeypatch.setattr(reader, "lease", lambda path: pytest.fail("the reader was used"))
    convert([str(job[0])], tmp_path / "without", load_settings(None, {"reader": False}))
    for suffix in (".prv", ".pcf", ".row"):
        assert (tmp_path / f"with{suffix}").read_bytes() == \
            (tmp_path / f"without{suffix}").read_bytes()


def test_a_prefetched_report_closed_unread_frees_the_reader(job: list[Path]) -> None:
    from prvstream.daemon.stream.pipeline import prepare

    rep = prepare(job[0], None, prefetch_rows=16)
    assert isinstance(rep.source, sources.ReaderSource)
    assert reader.lease(job[1]) is None
    rep.close()
    again = reader.lease(job[1])
    assert again is not None
    again.release()


def test_the_join_driver_s_bounds_are_read_once(job: list[Path],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The comm join reads the API table's block bounds (its floors) in this process; the API
    table's own stream then sends their window with it, which the child takes instead of
    reading the same bounds again: the same window, the same chunks as in-process."""
    from prvstream.daemon.nsys.storage_order import reorder_window

    sent: list[dict[str, object]] = []
    send = reader.ReaderProcess.send

    def keep(self: reader.ReaderProcess, request: dict[str, object]) -> None:
        sent.append(request)
        send(self, request)

    monkeypatch.setattr(reader.ReaderProcess, "send", keep)
    path, chunk = job[0], 16
    with open_export(path) as export:
        kinds = ["comm", "runtime"]
        source = sources.open_source(export, kinds, chunk)
        assert isinstance(source, sources.ReaderSource)
        try:
            got = {kind: np.concatenate(list(source.chunks(kind))) for kind in kinds}
        finally:
            source.close()
        scan = tables.scan_plan(export, "runtime")
        assert scan is not None
        window = export.known_window(*scan[1:])
        assert window == reorder_window(export.connection, *scan[1:]) > 0
        presorts = [p for r in sent if r.get("op") == "open"
                    and isinstance(p := r.get("presort"), dict)]
        assert [p.get("window") for p in presorts if p["table"] == scan[1]] == [window]
        for kind in kinds:
            expected = np.concatenate(list(tables.stream(export, kind, chunk)))
            assert got[kind].tobytes() == expected.tobytes(), kind


def test_a_large_single_report_starts_the_reader_before_it_is_planned(
        job: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """``prestart_reader``: a report streamed alone from a file of ``PRESTART_BYTES`` or
    more starts the reader before its export opens, and its stream leases that one; a smaller
    file, or the reader switched off, starts none early."""
    from prvstream.daemon.stream import pipeline

    reader.shutdown()
    size = job[0].stat().st_size
    started: list[int] = []
    real_open = pipeline.open_export

    def opening(path: Path) -> object:
        started.append(reader._reader.pid if reader._reader is not None else 0)
        return real_open(path)

    monkeypatch.setattr(pipeline, "open_export", opening)
    for limit, use in ((size + 1, True), (size, False)):
        monkeypatch.setattr(readerstart, "PRESTART_BYTES", limit)
        pipeline.prepare(job[0], None, prefetch_rows=16, use_reader=use).close()
        reader.shutdown()  # the stream's own lease started one after the export opened
    assert started == [0, 0]
    monkeypatch.setattr(readerstart, "PRESTART_BYTES", size)
    rep = pipeline.prepare(job[0], None, prefetch_rows=16)
    try:
        assert started[-1] != 0 and reader._reader is not None
        assert reader._reader.pid == started[-1]  # the one leased for the stream
        assert isinstance(rep.source, sources.ReaderSource)
    finally:
        rep.close()
        reader.shutdown()


_EARLY_DRIVER = """
import subprocess, sys
from prvstream.daemon.nsys import readerstart
readerstart.PRESTART_BYTES = 0  # the test's export is small: start the reader for any
starts = []
real = subprocess.Popen.__init__
def init(self, args, *rest, **kw):
    starts.append((" ".join(map(str, args)), "numpy" in sys.modules))
    real(self, args, *rest, **kw)
subprocess.Popen.__init__ = init
from prvstream.daemon.cli.main import main
sys.argv = ["prvstream", "convert", *sys.argv[1:]]
status = main()
print(repr(starts))
sys.exit(status)
"""


def test_a_conversion_starts_its_reader_before_numpy_loads(tmp_path: Path) -> None:
    """The console's conversion of one large export (60k rows: the reader reads it) starts
    the reader process before numpy and the converter's modules load
    (``readerstart.start_early``), streams through that one child (no second start), and
    writes what an in-process read writes."""
    import ast
    import subprocess
    import sys

    from prvstream.daemon.synthetic.synth import steps_for_rows

    export = write_job(tmp_path / "big", SynthSpec(ranks=1, steps=steps_for_rows(60_000),
                                                   seed=3))[0]
    out = tmp_path / "early"
    proc = subprocess.run([sys.executable, "-c", _EARLY_DRIVER, str(export), "-o", str(out),
                           "-q"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    starts = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    children = [numpy_loaded for cmd, numpy_loaded in starts if "_readerchild.py" in cmd]
    assert children == [False]
    convert([str(export)], tmp_path / "inproc", load_settings(None, {"reader": False}, {}))
    for ext in (".prv", ".pcf", ".row"):
        assert out.with_suffix(ext).read_bytes() == (tmp_path / "inproc").with_suffix(
            ext).read_bytes()


def test_start_early_only_for_one_large_export_with_the_reader_on(
        job: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    size = job[0].stat().st_size
    monkeypatch.setattr(readerstart, "PRESTART_BYTES", size)
    assert not readerstart.start_early([str(job[0]), str(job[1])], True)
    assert not readerstart.start_early([str(job[0])], False)
    assert not readerstart.start_early([str(job[0].parent)], True)
    assert not readerstart.start_early([str(tmp_path / "missing.sqlite")], True)
    monkeypatch.setattr(readerstart, "PRESTART_BYTES", size + 1)
    assert not readerstart.start_early([str(job[0])], True)
    assert readerstart.take() is None
    monkeypatch.setattr(readerstart, "PRESTART_BYTES", size)
    assert readerstart.start_early([str(job[0])], True)
    assert not readerstart.start_early([str(job[0])], True)  # one at a time
    child = readerstart.take()
    assert child is not None and child.poll() is None
    readerstart._close(child)  # what exit does with a child no conversion took
    assert child.poll() is not None
