"""Bytes a piece of code leaves allocated, as ``tracemalloc`` sees them (memory tests)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import TypeVar

__all__ = ["held_by"]

T = TypeVar("T")


def held_by(build: Callable[[], T]) -> tuple[T, int]:
    """What ``build`` returns and the traced bytes still allocated after it (its result's)."""
    tracemalloc.start(1)
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        out = build()
        gc.collect()
        return out, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
