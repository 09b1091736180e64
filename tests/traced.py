"""Bytes a piece of code leaves allocated, as ``tracemalloc`` sees them (memory tests)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["collector_paused", "held_by"]

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


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with Python's cyclic garbage collector off, so that a traced peak is the
    same on every run: when the collector runs depends on everything the test process
    allocated before (other tests), and a run in the middle of the body moves the peak."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
