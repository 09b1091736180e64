"""Crash-safe whole-file writes: replace atomically, never through a link, modes by umask."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from prvstream.sinks.errors import OutputConflict
from prvstream.sinks.files import atomic_write, fsync_dir, output_mode


def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "a.pcf"
    atomic_write(target, "first")
    atomic_write(target, b"second")
    assert target.read_bytes() == b"second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pcf"]


def test_a_symlink_is_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "out.row"
    link.symlink_to(victim)
    with pytest.raises(OutputConflict, match="symlink"):
        atomic_write(link, "x")
    assert victim.read_text() == "keep"


def test_new_files_get_the_umask_mode(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        assert output_mode() == 0o640
        atomic_write(tmp_path / "s.json", "{}")
        assert (tmp_path / "s.json").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


def test_fsync_dir_tolerates_what_cannot_be_synced(tmp_path: Path) -> None:
    fsync_dir(tmp_path)
    fsync_dir(tmp_path / "missing")  # no error: best effort
