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
