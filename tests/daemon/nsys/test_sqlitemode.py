"""SQLite's multi-thread mode in ``convert`` processes: the same bytes as serialized SQLite,
and never switched while SQLite holds a connection."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from prvstream.daemon.nsys import sqlitemode
from prvstream.daemon.synthetic.synth import SynthSpec, write_job


def _convert(src: Path, out: Path, unlocked: bool) -> str:
    env = dict(os.environ, **{sqlitemode.MULTITHREAD_ENV: "1" if unlocked else "0"})
    done = subprocess.run([sys.executable, "-m", "prvstream.daemon", "convert", str(src), "-o",
                           str(out), "--no-progress", "--log-level", "debug"],
                          env=env, capture_output=True, text=True, timeout=120, check=True)
    return done.stderr


def test_a_convert_process_unlocked_writes_the_same_bytes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_job(src, SynthSpec(ranks=3, steps=2, seed=11))
    said = _convert(src, tmp_path / "on" / "t", True)
    if "sqlite unlocked" not in said:
        pytest.skip("this Python's SQLite is not a shared library mapped from a path")
    assert "sqlite unlocked" not in _convert(src, tmp_path / "off" / "t", False)
    for ext in (".prv", ".pcf", ".row", ".summary.json", ".summary.jsonl"):
        on = (tmp_path / "on" / f"t{ext}").read_bytes()
        assert on and on == (tmp_path / "off" / f"t{ext}").read_bytes(), ext


def test_never_switched_while_a_connection_is_open(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlitemode, "_done", False)
    con = sqlite3.connect(":memory:")
    try:
        con.execute("SELECT 1").fetchall()
        assert sqlitemode.unlock_connections() is False
    finally:
        con.close()
    assert sqlitemode.unlock_connections() is False  # once a process


_ISOLATED = """
import ctypes, importlib.util, sqlite3, sys
spec = importlib.util.spec_from_file_location("sqlitemode", sys.argv[1])
mode = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mode)
switched = mode.unlock_connections(statistics=sys.argv[2] == "keep")
con = sqlite3.connect(":memory:")
con.execute("CREATE TABLE t (x)")
con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(1000)])
total = con.execute("SELECT sum(x) FROM t").fetchone()[0]
library = mode._loaded_library()
used = -1
if library is not None:
    lib = ctypes.CDLL(library)
    lib.sqlite3_memory_used.restype = ctypes.c_int64
    used = lib.sqlite3_memory_used()
print(switched, total, used)
"""


@pytest.mark.parametrize(("unlocked", "statistics"), [(True, False), (True, True),
                                                      (False, False)])
def test_loaded_by_path_as_the_reader_process_does(unlocked: bool, statistics: bool) -> None:
    """The reader process (``python -I -S``: the standard library only) loads the module by
    path and switches its SQLite keeping the memory statistics (its soft heap limit needs
    them); without statistics SQLite counts no memory in use."""
    env = dict(os.environ, **{sqlitemode.MULTITHREAD_ENV: "1" if unlocked else "0"})
    done = subprocess.run([sys.executable, "-I", "-S", "-c", _ISOLATED, sqlitemode.__file__,
                           "keep" if statistics else "drop"],
                          env=env, capture_output=True, text=True, timeout=60, check=True)
    switched, total, used = done.stdout.split()
    assert total == str(sum(range(1000)))
    if used == "-1":
        pytest.skip("this Python's SQLite is not a shared library mapped from a path")
    assert switched == str(unlocked)
    assert (int(used) == 0) == (unlocked and not statistics)


def test_the_reader_process_keeps_the_memory_statistics() -> None:
    """Its PRAGMAS set a soft heap limit, which SQLite enforces only with the statistics."""
    from prvstream.daemon.nsys import _readerchild

    assert any("soft_heap_limit" in p for p in _readerchild.PRAGMAS)
    source = Path(_readerchild.__file__).read_text()
    assert "unlock_connections(statistics=True)" in source
