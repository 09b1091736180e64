"""SQL pieces the kinds' queries are built from: quoting, int32 wrapping, packed int32 pairs."""

from __future__ import annotations

import numpy as np

from prvstream.sinks.logger import get_logger

__all__ = ["fetch_groups", "pack_i4_pair", "quote_identifier", "wrap_i4"]

log = get_logger(__name__)


def wrap_i4(expr: str) -> str:
    """SQL wrapping an integer into int32 two's complement (CUPTI's UINT32_MAX becomes -1)."""
    return f"((({expr}) + 2147483648) & 4294967295) - 2147483648"


def pack_i4_pair(lo: str, hi: str) -> str:
    """SQL packing two int32 values into one int64, low half first: read back over two
    adjacent int32 fields of a little-endian structured array (``nsys.rowfill``)."""
    return f"(({lo}) & 4294967295) | (({hi}) << 32)"


def quote_identifier(name: str) -> str:
    """Quote an SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _offset(dtype: np.dtype, name: str) -> int:
    fields = dtype.fields
    assert fields is not None
    return int(fields[name][1])


def fetch_groups(dtype: np.dtype) -> tuple[tuple[str, ...], ...]:
    """Fields fetched together: two adjacent int32 fields travel as one packed int64."""
    names = dtype.names or ()
    out: list[tuple[str, ...]] = []
    i = 0
    while i < len(names):
        a = names[i]
        if i + 1 < len(names) and dtype[a].itemsize == 4:
            b = names[i + 1]
            if dtype[b].itemsize == 4 and _offset(dtype, b) == _offset(dtype, a) + 4:
                out.append((a, b))
                i += 2
                continue
        out.append((a,))
        i += 1
    return tuple(out)
