"""Paraver record templates, and formatting of numeric records into text.

Records travel through the merge as numbers (a template id and up to ``WIDTH`` integer
fields) and become text only when written, so that no Python object is made per record. The
compiled ``_fastfmt`` module formats a whole batch at C speed; where it could not be built,
a pure-Python formatter gives the same bytes (the tests compare the two). ``write_records``
formats and writes to a file descriptor in one call, without the GIL where C is in use;
``RecordThread`` does so in a C thread that never takes the GIL.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import numpy as np

from prvstream.sinks.logger import get_logger
from prvstream.sinks.native import OptionalExtension

__all__ = ["FORMATTER", "THREAD", "WIDTH", "WRITER", "RecordThread", "format_records", "template",
           "text_slices", "write_records"]

log = get_logger(__name__)

#: most integer fields one record line holds (a communication has 12)
WIDTH = 16

_TEMPLATES: list[tuple[bytes, ...]] = []
_FORMATS: list[str] = []
_INDEX: dict[str, int] = {}

#: the compiled formatter (optional: built when a C compiler was there)
FORMATTER = OptionalExtension("prvstream.sinks.paraver._fastfmt", "format_records",
                              "record formatter")
#: the same text written straight to a file descriptor (built with the formatter)
WRITER = OptionalExtension("prvstream.sinks.paraver._fastfmt", "write_records", "record writer")
#: ``write_records`` in a C thread of its own (built with the formatter)
THREAD = OptionalExtension("prvstream.sinks.paraver._fastfmt", "Behind", "record writer thread")


def template(fmt: str) -> int:
    """Register a line format with ``%d`` fields (newline added); return its id."""
    found = _INDEX.get(fmt)
    if found is not None:
        return found
    parts = fmt.split("%d")
    if len(parts) - 1 > WIDTH or re.search(r"%[^d]", fmt):
        raise ValueError(f"template {fmt!r} must hold at most {WIDTH} %d fields and no other")
    literals = (*(p.encode() for p in parts[:-1]), (parts[-1] + "\n").encode())
    _TEMPLATES.append(literals)
    _FORMATS.append(fmt + "\n")
    _INDEX[fmt] = len(_TEMPLATES) - 1
    if len(_TEMPLATES) > np.iinfo(np.int16).max:
        raise ValueError("too many record templates")
    return _INDEX[fmt]


def format_records(fields: np.ndarray, tmpl: np.ndarray, *, pure: bool = False) -> bytes:
    """The text of records (``fields``: int64 (n, w), w at least each template's field count;
    ``tmpl``: int16 (n)), in order."""
    if not len(tmpl):
        return b""
    fields = np.ascontiguousarray(fields, dtype=np.int64)
    tmpl = np.ascontiguousarray(tmpl, dtype=np.int16)
    c_format = FORMATTER.use(pure)
    if c_format is not None:
        return bytes(c_format(_TEMPLATES, fields, fields.shape[1], tmpl))
    return _format_python(fields, tmpl)


#: records made into text at a time (the Python fallback; a write through a file object): a
#: merged batch's whole text would be up to 2.5 MiB; the C ``write_records`` fills 256 KiB
TEXT_RECORDS = 2048


def text_slices(fields: np.ndarray, tmpl: np.ndarray, *, pure: bool = False,
                ) -> Iterator[bytes]:
    """The text of records (as ``format_records``), ``TEXT_RECORDS`` records at a time."""
    for lo in range(0, len(tmpl), TEXT_RECORDS):
        yield format_records(fields[lo:lo + TEXT_RECORDS], tmpl[lo:lo + TEXT_RECORDS],
                             pure=pure)


def write_records(fd: int, fields: np.ndarray, tmpl: np.ndarray, *, pure: bool = False) -> int:
    """Write the text of records (as ``format_records``) to the file descriptor ``fd`` at its
    offset; return the bytes written. C formats into a fixed buffer and writes it without the
    GIL; Python formats ``TEXT_RECORDS`` records at a time."""
    if not len(tmpl):
        return 0
    fields = np.ascontiguousarray(fields, dtype=np.int64)
    tmpl = np.ascontiguousarray(tmpl, dtype=np.int16)
    c_write = WRITER.use(pure)
    if c_write is not None:
        return int(c_write(fd, _TEMPLATES, fields, fields.shape[1], tmpl))
    written = 0
    for piece in text_slices(fields, tmpl, pure=True):
        text = memoryview(piece)
        while text:
            put = os.write(fd, text)
            text, written = text[put:], written + put
    return written


def _format_python(fields: np.ndarray, tmpl: np.ndarray) -> bytes:
    lines: list[str] = [""] * len(tmpl)
    for t in np.unique(tmpl, return_counts=True)[0].tolist():  # counts: no numpy.ma
        idx = np.flatnonzero(tmpl == t)
        fmt = _FORMATS[t]
        k = len(_TEMPLATES[t]) - 1
        rows = fields[idx, :k].tolist()
        for i, row in zip(idx.tolist(), rows, strict=True):
            lines[i] = fmt % tuple(row)
    return "".join(lines).encode()


class RecordThread:
    """``write_records`` to ``fd`` by a C thread that never takes the GIL: ``write`` hands a
    batch over and returns while fewer than two wait or are being written (the caller must
    not change its arrays after); the batches are written in order. A write error is raised
    by the next ``write``, by ``flush`` or by ``close``. Only where ``THREAD.compiled()``."""

    def __init__(self, fd: int) -> None:
        cls = THREAD.use()
        if cls is None:
            raise RuntimeError("the compiled record writer thread is not in use")
        self._c: Any = cls(fd)

    def write(self, fields: np.ndarray, tmpl: np.ndarray) -> None:
        if len(tmpl):
            fields = np.ascontiguousarray(fields, dtype=np.int64)
            self._c.write(_TEMPLATES, fields, fields.shape[1],
                          np.ascontiguousarray(tmpl, dtype=np.int16))

    def flush(self) -> None:
        """Wait until every batch handed over is written."""
        self._c.flush()

    def close(self, drop: bool = False) -> None:
        """End the thread after the batches handed over (``drop``: without writing those
        not begun, and without raising). Idempotent."""
        self._c.close(drop)
