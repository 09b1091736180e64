"""The scratch file every spill uses: appends land whole (short writes continued), come back
by offset in slices, and nothing is left on disk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from prvstream.sinks import scratch
from prvstream.sinks.scratch import ScratchFile


def test_short_writes_are_continued_and_pieces_read_back_by_offset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.pwrite
    monkeypatch.setattr(scratch.os, "pwrite", lambda fd, data, at: real(fd, data[:3], at))
    monkeypatch.setattr(scratch, "READ_BYTES", 4)
    file = ScratchFile("test-", tmp_path)
    first = file.append([b"hello ", memoryview(b"world")])
    second = file.append([b"", b"again"])
    assert first == (0, 11) and second == (11, 5) and file.end == 16
    assert b"".join(file.read_slices(*first)) == b"hello world"
    assert list(file.read_slices(*second)) == [b"agai", b"n"]
    assert list(tmp_path.iterdir()) == []  # unlinked from the start
    file.clear()
    assert file.end == 0 and file.append([b"x"]) == (0, 1)
    file.close()
    assert file.end == 0


def test_reading_past_the_end_is_an_error(tmp_path: Path) -> None:
    file = ScratchFile("test-", tmp_path)
    file.append([b"abc"])
    with pytest.raises(OSError, match="ends early"):
        list(file.read_slices(1, 5))


@pytest.mark.parametrize("where", ["dir", "missing", "file", "unset"])
def test_unnamed_files_go_where_tempfile_would_put_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Without ``tempfile`` loaded (or its directory chosen) an unnamed scratch file goes to
    the directory ``tempfile.gettempdir`` picks: TMPDIR where it is a writable directory,
    else the next candidate; a directory chosen in ``tempfile`` is used as it is."""
    import tempfile

    (tmp_path / "file").write_text("x")
    target = {"dir": tmp_path, "missing": tmp_path / "missing", "file": tmp_path / "file"}
    for name in ("TMPDIR", "TEMP", "TMP"):
        monkeypatch.delenv(name, raising=False)
    if where != "unset":
        monkeypatch.setenv("TMPDIR", str(target[where]))
    monkeypatch.setattr(tempfile, "tempdir", None)
    with scratch.unnamed_file("test-") as fh:
        made = os.readlink(f"/proc/self/fd/{fh.fileno()}")
        fh.write(b"data")
        fh.seek(0)
        assert fh.read() == b"data"
    assert os.path.dirname(made) == tempfile.gettempdir()  # also chooses it, and keeps it
    assert list(tmp_path.iterdir()) == [tmp_path / "file"]  # unnamed from the start
    elsewhere = tmp_path / "chosen"
    elsewhere.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(elsewhere))
    with scratch.unnamed_file("test-") as fh:
        assert os.path.dirname(os.readlink(f"/proc/self/fd/{fh.fileno()}")) == str(elsewhere)
