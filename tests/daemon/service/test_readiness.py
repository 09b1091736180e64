"""Readiness: half-written, locked, truncated and random files are not taken; complete ones are."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import sys
import time
from pathlib import Path

import anyio
import pytest

from prvstream.daemon.nsys.exporter import export_with_nsys
from prvstream.daemon.service.readiness import (
    Invalid,
    NotYet,
    Ready,
    ReportIdentity,
    check_export,
    report_identity,
    wait_ready,
)
from prvstream.sinks.errors import ExportIncomplete
from tests.conftest import real_export_params

SETTLE = 0.15


def make_export(path: Path, *, final: bool = True, meta_table: str = "META_DATA_EXPORT",
                rows: int = 200) -> Path:
    """A small SQLite file shaped like an nsys export (metadata table, a kernel table)."""
    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE {meta_table} (name TEXT NOT NULL, value TEXT)")
    con.executemany(f"INSERT INTO {meta_table} VALUES (?, ?)",
                    [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
                     ("EXPORT_SCHEMA_VERSION", "3.25.0")])
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, "
                "globalPid INTEGER, shortName INTEGER)")
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?)",
                    [(i * 10, i * 10 + 5, 1 << 24, 1) for i in range(rows)])
    if final:
        con.execute(f"INSERT INTO {meta_table} VALUES ('EXPORT_TIME', '0.01 sec')")
    con.commit()
    con.close()
    return path


def test_complete_export_is_ready(tmp_path: Path) -> None:
    path = make_export(tmp_path / "rank0.sqlite")
    verdict = check_export(path)
    assert isinstance(verdict, Ready)
    assert verdict.identity == report_identity(path)


def test_old_metadata_table_name_is_accepted(tmp_path: Path) -> None:
    path = make_export(tmp_path / "old.sqlite", meta_table="EXPORT_META_DATA")
    assert isinstance(check_export(path), Ready)


def test_missing_export_time_is_not_yet(tmp_path: Path) -> None:
    path = make_export(tmp_path / "rank0.sqlite", final=False)
    verdict = check_export(path)
    assert isinstance(verdict, NotYet)
    assert "EXPORT_TIME" in verdict.reason
    assert not verdict.corrupt


def test_journal_sibling_is_not_yet(tmp_path: Path) -> None:
    path = make_export(tmp_path / "rank0.sqlite")
    (tmp_path / "rank0.sqlite-journal").write_bytes(b"")
    verdict = check_export(path)
    assert isinstance(verdict, NotYet) and "-journal" in verdict.reason


def test_open_write_transaction_is_not_yet(tmp_path: Path) -> None:
    """A writer in the middle of a transaction (real rollback journal on disk)."""
    path = make_export(tmp_path / "rank0.sqlite", final=False)
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_TIME', '1 sec')")
        writer.execute("PRAGMA cache_spill = 1")
        verdict = check_export(path)
        assert isinstance(verdict, NotYet)
        writer.execute("COMMIT")
    finally:
        writer.close()
    assert isinstance(check_export(path), Ready)


def test_truncated_file_is_corrupt(tmp_path: Path) -> None:
    path = make_export(tmp_path / "rank0.sqlite", rows=3000)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    verdict = check_export(path)
    assert isinstance(verdict, NotYet) and verdict.corrupt


@pytest.mark.parametrize("content", [
    pytest.param(os.urandom(50_000), id="random"),
    pytest.param(b"SQLite format 3\x00" + os.urandom(8192), id="bad-pages"),
])
def test_garbage_is_corrupt(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.sqlite"
    path.write_bytes(content)
    verdict = check_export(path)
    assert isinstance(verdict, NotYet) and verdict.corrupt


def test_check_never_writes_beside_the_export(tmp_path: Path) -> None:
    path = make_export(tmp_path / "rank0.sqlite")
    tmp_path.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        before = sorted(os.listdir(tmp_path))
        assert isinstance(check_export(path), Ready)
        assert sorted(os.listdir(tmp_path)) == before
    finally:
        tmp_path.chmod(stat.S_IRWXU)


@pytest.mark.parametrize("export", real_export_params())
def test_real_exports_are_ready(export: Path) -> None:
    verdict = check_export(export)
    assert isinstance(verdict, Ready), verdict


@pytest.mark.anyio
async def test_wait_ready_waits_for_the_writer_to_finish(tmp_path: Path) -> None:
    path = make_export(tmp_path / "rank0.sqlite", final=False)

    async def finish_later() -> None:
        for i in range(3):  # keep changing for a while
            await anyio.sleep(0.1)
            con = sqlite3.connect(path)
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, 1, 1, 1)", (i,))
            con.commit()
            con.close()
        con = sqlite3.connect(path)
        con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_TIME', '1 sec')")
        con.commit()
        con.close()

    t0 = time.monotonic()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(finish_later)
            verdict = await wait_ready(path, settle=SETTLE)
    assert isinstance(verdict, Ready)
    assert verdict.identity == report_identity(path)
    assert time.monotonic() - t0 >= 0.3 + SETTLE


@pytest.mark.anyio
async def test_random_bytes_become_invalid_once_stable(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(os.urandom(4096))
    t0 = time.monotonic()
    with anyio.fail_after(10):
        verdict = await wait_ready(path, settle=SETTLE, max_wait=60)
    assert isinstance(verdict, Invalid)
    assert "SQLite" in verdict.reason
    assert time.monotonic() - t0 >= SETTLE


@pytest.mark.anyio
async def test_unfinished_export_becomes_invalid_after_max_wait(tmp_path: Path) -> None:
    path = make_export(tmp_path / "rank0.sqlite", final=False)
    with anyio.fail_after(10):
        verdict = await wait_ready(path, settle=0.05, max_wait=0.5, max_delay=0.1)
    assert isinstance(verdict, Invalid)
    assert "EXPORT_TIME" in verdict.reason


@pytest.mark.anyio
async def test_wait_ready_backs_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stuck file is looked at a handful of times, not in a hot loop (a spy counts looks)."""
    import prvstream.daemon.service.readiness as readiness

    path = make_export(tmp_path / "rank0.sqlite", final=False)
    looks = 0

    def counting(p: Path, root: Path | None = None) -> readiness.Verdict:
        nonlocal looks
        looks += 1
        return check_export(p, root)

    monkeypatch.setattr(readiness, "check_export", counting)
    with anyio.fail_after(10):
        await wait_ready(path, settle=0.02, max_wait=1.0, first_delay=0.02, max_delay=0.2)
    assert 3 <= looks <= 12


@pytest.mark.anyio
async def test_a_hung_check_is_abandoned_after_its_time_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check stuck in the kernel (a dead mount) costs a retry, never a stuck waiter."""
    import threading

    import prvstream.daemon.service.readiness as readiness

    path = make_export(tmp_path / "rank0.sqlite", final=True)
    release = threading.Event()

    def hung(p: Path, root: Path | None = None) -> readiness.Verdict:
        release.wait(10)
        return check_export(p, root)

    monkeypatch.setattr(readiness, "check_export", hung)
    try:
        with anyio.fail_after(5):
            verdict = await wait_ready(path, settle=0.02, max_wait=1.0, first_delay=0.02,
                                       check_limit=0.2)
    finally:
        release.set()
    assert isinstance(verdict, readiness.Invalid)
    assert "longer than" in verdict.reason


@pytest.mark.anyio
async def test_vanished_file_is_gone(tmp_path: Path) -> None:
    path = make_export(tmp_path / "rank0.sqlite", final=False)

    async def delete_later() -> None:
        await anyio.sleep(0.1)
        path.unlink()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(delete_later)
            verdict = await wait_ready(path, settle=SETTLE, max_wait=60)
    assert isinstance(verdict, Invalid) and verdict.gone


def test_synthetic_export_is_ready(tmp_path: Path) -> None:
    """An export written by prvstream's own synth (the real nsys schema) passes."""
    from prvstream.daemon.synthetic.synth import SynthSpec, write_export

    path = tmp_path / "rank0.sqlite"
    write_export(path, SynthSpec(ranks=1, steps=2), 0)
    assert isinstance(check_export(path), Ready)


def test_identity_changes_with_content(tmp_path: Path) -> None:
    path = make_export(tmp_path / "rank0.sqlite")
    first = report_identity(path)
    assert isinstance(first, ReportIdentity) and len(first.head_sha256) == 64
    assert report_identity(path) == first
    con = sqlite3.connect(path)
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1, 2, 3, 4)")
    con.commit()
    con.close()
    assert report_identity(path) != first


def test_nsys_rep_without_nsys_says_what_to_do(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    rep = tmp_path / "rank0.nsys-rep"
    rep.write_bytes(b"opaque")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ExportIncomplete, match="nsys export --type sqlite"):
        export_with_nsys(rep)


def _fake_nsys(bin_dir: Path, source: Path, status: int = 0) -> Path:
    """An ``nsys`` stand-in: copies ``source`` to the ``--output`` it is given."""
    bin_dir.mkdir()
    exe = bin_dir / "nsys"
    exe.write_text(
        f"#!{sys.executable}\n"
        "import shutil, sys\n"
        "args = sys.argv[1:]\n"
        "assert args[:3] == ['export', '--type', 'sqlite'], args\n"
        f"if {status}:\n"
        "    sys.stderr.write('boom\\n'); sys.exit(" + str(status) + ")\n"
        f"shutil.copyfile({str(source)!r}, args[args.index('--output') + 1])\n"
    )
    exe.chmod(0o755)
    return exe


def test_export_with_nsys_renames_into_place(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    source = make_export(tmp_path / "source.sqlite")
    job = tmp_path / "job"
    job.mkdir()
    rep = job / "rank0.nsys-rep"
    rep.write_bytes(b"opaque")
    _fake_nsys(tmp_path / "bin", source)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    out = export_with_nsys(rep)
    assert out == job / "rank0.sqlite"
    assert isinstance(check_export(out), Ready)
    assert sorted(p.name for p in job.iterdir()) == ["rank0.nsys-rep", "rank0.sqlite"]


def test_export_with_nsys_failure_leaves_nothing(tmp_path: Path) -> None:
    source = make_export(tmp_path / "source.sqlite")
    rep = tmp_path / "job.nsys-rep"
    rep.write_bytes(b"opaque")
    exe = _fake_nsys(tmp_path / "bin", source, status=3)
    with pytest.raises(ExportIncomplete, match="status 3: boom"):
        export_with_nsys(rep, nsys=str(exe))
    assert not list(tmp_path.glob("*.sqlite*")) or [p.name for p in tmp_path.glob("*.sqlite*")] \
        == ["source.sqlite"]
    assert shutil.which("nsys", path=str(tmp_path / "bin"))
