"""Fetched SQLite rows (lists of int tuples) into numpy structured arrays.

``np.array(rows, dtype)`` discovers the nesting of every tuple before it converts; the compiled
``_rowfill`` copies each value straight into place, several times faster. Without the compiled
module (or on a big-endian machine) numpy does the same job and gives the same array.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from prvstream.daemon.nsys.readerstart import ROW_FILLER, SQL_ROWS

__all__ = ["ROW_FILLER", "SQL_ROWS", "Layout", "field_layout", "field_offset", "rows_to_array",
           "sql_borrow"]


def sql_borrow() -> Callable[..., Any] | None:
    """The compiled reader's ``borrow`` (an open ``sqlite3.Connection`` read through without
    a second connection), where ``SQL_ROWS`` is in use (the same module); else None."""
    if SQL_ROWS.use() is None:
        return None
    found: Callable[..., Any] | None = getattr(sys.modules.get(SQL_ROWS.module), "borrow", None)
    return found

#: where each fetched value goes: (byte offsets, sizes), one pair per value
Layout = tuple[tuple[int, ...], tuple[int, ...]]

_LAYOUT: dict[np.dtype, Layout] = {}
_FALLBACK: dict[tuple[np.dtype, Layout], np.dtype] = {}


def field_offset(dtype: np.dtype, name: str) -> int:
    """Byte offset of field ``name`` inside one item of ``dtype``."""
    fields = dtype.fields
    if fields is None or name not in fields:
        raise ValueError(f"{dtype} has no field {name!r}")
    return int(fields[name][1])


def field_layout(dtype: np.dtype) -> Layout:
    """One fetched value per field of ``dtype``, in field order."""
    found = _LAYOUT.get(dtype)
    if found is None:
        names = dtype.names or ()
        for name in names:
            sub = dtype[name]
            if sub.kind != "i" or sub.itemsize not in (4, 8) or sub.byteorder == ">":
                raise ValueError(f"field {name!r} of {dtype} is not a little-endian int32/64")
        found = (tuple(field_offset(dtype, n) for n in names),
                 tuple(int(dtype[n].itemsize) for n in names))
        _LAYOUT[dtype] = found
    return found


def rows_to_array(rows: Sequence[tuple[object, ...]], dtype: np.dtype,
                  layout: Layout | None = None, *, pure: bool = False) -> np.ndarray:
    """An array of ``dtype`` (integer fields only) from the first values of each row.

    ``layout`` says where each value goes (default: one value per field). An 8-byte value may
    cover two adjacent int32 fields: SQL that packs ``(a & 0xFFFFFFFF) | (b << 32)`` fills
    both at once, with fewer Python objects per row.
    Rows may carry extra trailing values, which are ignored. The C filler raises
    ``TypeError`` for a value that is not an int (numpy's fallback raises ``ValueError`` for a
    non-numeric text and truncates a float) and ``OverflowError`` for one too large for its
    field.
    """
    offsets, sizes = layout or field_layout(dtype)
    c_fill = ROW_FILLER.use(pure)
    if c_fill is not None and isinstance(rows, list):
        out = np.empty(len(rows), dtype=dtype)
        c_fill(rows, out, dtype.itemsize, offsets, sizes)
        return out
    width = len(offsets)
    if rows and len(rows[0]) != width:
        rows = [r[:width] for r in rows]
    key = (dtype, (offsets, sizes))
    fetched = _FALLBACK.get(key)
    if fetched is None:
        fetched = _FALLBACK[key] = np.dtype({
            "names": [f"v{i}" for i in range(width)],
            "formats": ["<i8" if size == 8 else "<i4" for size in sizes],
            "offsets": list(offsets), "itemsize": dtype.itemsize})
    return np.array(rows, dtype=fetched).view(dtype)
