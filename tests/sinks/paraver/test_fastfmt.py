"""Records written straight to a file descriptor: the C writer against the Python one."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from prvstream.sinks.paraver import fastfmt
from prvstream.sinks.paraver.fastfmt import WIDTH, format_records, template, write_records

#: a short line, a 12-field one (a communication's) and one with every field
_FORMATS = ("1:%d:x:%d:%d", "3:" + ":".join(["%d"] * 12), "2" + ":%d" * WIDTH + ":end")

_int64 = st.integers(-(2**63), 2**63 - 1)


def _written(tmp_path: Path, fields: np.ndarray, tmpl: np.ndarray, *, pure: bool) -> bytes:
    path = tmp_path / ("pure" if pure else "c")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.write(fd, b"head\n")
        assert write_records(fd, fields, tmpl, pure=pure) == path.stat().st_size - 5
    finally:
        os.close(fd)
    return path.read_bytes()[5:]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_FORMATS) - 1),
                          st.lists(_int64, min_size=WIDTH, max_size=WIDTH)), max_size=40),
       st.integers(1, 6000))
@example([(2, [-(2**63)] * WIDTH), (1, [2**63 - 1] * WIDTH)], 6000)  # past the C buffer
def test_c_and_python_writers_write_the_same_bytes(
        tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[int, list[int]]],
        repeat: int) -> None:
    """Every int64, in every template, repeated past the C writer's 256 KiB buffer (where it
    writes and starts again): the bytes ``format_records`` makes, C or Python."""
    tmp_path = tmp_path_factory.mktemp("w")
    ids = [template(f) for f in _FORMATS]
    fields = np.array([r for _, r in rows], dtype=np.int64).reshape(len(rows), WIDTH)
    tmpl = np.array([ids[t] for t, _ in rows], dtype=np.int16)
    if len(rows) and repeat * len(rows) <= 20_000:
        fields, tmpl = np.tile(fields, (repeat, 1)), np.tile(tmpl, repeat)
    expected = format_records(fields, tmpl, pure=True)
    assert _written(tmp_path, fields, tmpl, pure=True) == expected
    assert _written(tmp_path, fields, tmpl, pure=False) == expected


def test_a_failed_write_raises_oserror(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "r", os.O_RDONLY | os.O_CREAT)
    fields = np.zeros((3, WIDTH), dtype=np.int64)
    tmpl = np.full(3, template(_FORMATS[0]), dtype=np.int16)
    try:
        for pure in (False, True) if fastfmt.FORMATTER.compiled() else (True,):
            with pytest.raises(OSError):
                write_records(fd, fields, tmpl, pure=pure)
    finally:
        os.close(fd)


def test_every_digit_count_formats_as_python_does() -> None:
    """The C formatter writes two digits a step after counting them: every length from 1 to 19
    digits (each power of ten and the number before it), both signs, and the int64 ends give
    the bytes of the Python formatter."""
    edges = [v for k in range(19) for v in (10**k - 1, 10**k, 10**k + 1)]
    values = sorted({*edges, *(-v for v in edges), 2**63 - 1, -(2**63), -(2**63) + 1})
    fields = np.array(values, dtype=np.int64).reshape(-1, 1)
    fields = np.pad(fields, ((0, -len(values) % 2), (0, 0))).reshape(-1, 2)
    tmpl = np.full(len(fields), template("7:%d::%d"), dtype=np.int16)
    expected = format_records(fields, tmpl, pure=True)
    assert expected.decode().split("\n")[0].startswith("7:")
    if fastfmt.FORMATTER.compiled():
        assert format_records(fields, tmpl) == expected
