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
