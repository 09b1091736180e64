"""Crash-safe whole-file writes: replace atomically, never through a link, modes by umask."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from prvstream.sinks.errors import OutputConflict
from prvstream.sinks.files import (
    atomic_write,
    atomic_write_all,
    exclusive_file,
    fsync_all,
    fsync_dir,
    output_mode,
)


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


def test_atomic_write_all_syncs_together_and_cleans_up_on_error(tmp_path: Path) -> None:
    """Several files (and a descriptor the caller renames itself) fsynced at once, then
    renamed; a failed fsync leaves neither a temporary nor a replaced file behind."""
    other = tmp_path / ".prv.tmp"
    with open(other, "wb") as fh:
        fh.write(b"body")
        atomic_write_all([(tmp_path / "t.pcf", "pcf"), (tmp_path / "t.row", [b"r", b"ow"])],
                         also=[fh.fileno()])
    assert (tmp_path / "t.pcf").read_text() == "pcf"
    assert (tmp_path / "t.row").read_bytes() == b"row"
    read_end, write_end = os.pipe()  # a pipe cannot be fsynced: EINVAL
    try:
        with pytest.raises(OSError):
            atomic_write_all([(tmp_path / "t.pcf", "new"), (tmp_path / "u.row", "x")],
                             also=[read_end])
    finally:
        os.close(read_end)
        os.close(write_end)
    assert (tmp_path / "t.pcf").read_text() == "pcf"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".prv.tmp", "t.pcf", "t.row"]
    fsync_all([])  # nothing to do


def test_meanwhile_runs_before_the_renames_and_its_error_wins(tmp_path: Path) -> None:
    """``meanwhile`` runs once, while the files are fsynced and before they are renamed; what
    it raises is raised after the fsyncs end, leaving no temporary and no renamed file."""
    seen: list[list[str]] = []
    atomic_write_all([(tmp_path / "t.pcf", "pcf")],
                     meanwhile=lambda: seen.append(sorted(p.name for p in tmp_path.iterdir())))
    assert seen == [[f".t.pcf.{os.getpid()}.tmp"]]
    assert (tmp_path / "t.pcf").read_text() == "pcf"

    def fail() -> None:
        raise KeyError("summary")

    with pytest.raises(KeyError):
        atomic_write_all([(tmp_path / "u.row", "row")], meanwhile=fail)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.pcf"]
    calls: list[int] = []
    fsync_all([], meanwhile=lambda: calls.append(1))
    assert calls == [1]


def test_exclusive_files_are_new_private_and_never_through_a_link(tmp_path: Path) -> None:
    made = [exclusive_file(tmp_path, ".out.prv.", ".tmp") for _ in range(3)]
    for fd, name in made:
        os.close(fd)
        path = Path(name)
        assert path.parent == tmp_path and path.name.startswith(".out.prv.")
        assert path.suffix == ".tmp" and path.stat().st_mode & 0o777 == 0o600
    assert len({name for _, name in made}) == 3
