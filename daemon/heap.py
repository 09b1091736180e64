"""The C heap's trimming and arenas, set once per process: glibc returns freed memory to the
system so eagerly that every small report faulted its pages in again (issue 11's per-report
cost); the .prv writer's thread shares the heap. A big report's freed memory is returned once,
when its streaming ends (``release_freed``). The daemon instead maps its large blocks and
keeps one arena (``tune_daemon_heap``): what a long-lived process frees must not stay resident.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import Final

from prvstream.sinks.logger import get_logger

__all__ = ["DAEMON_MMAP_BYTES", "MALLOC_ENV", "RELEASE_ROWS", "keep_freed_memory",
           "release_freed", "tune_daemon_heap"]

log = get_logger(__name__)

#: glibc's ``mallopt`` parameters (malloc.h)
_M_TRIM_THRESHOLD: Final = -1
_M_TOP_PAD: Final = -2
_M_MMAP_THRESHOLD: Final = -3
_M_ARENA_MAX: Final = -8
#: free memory kept at the top of the heap before it is returned (glibc: 128 KiB, raised
#: up to 32 MiB as large blocks are freed)
TRIM_BYTES: Final = 32 << 20
#: blocks from this size on get pages of their own, unmapped when freed (glibc: 128 KiB at
#: first); below it they come from the heap, whose freed pages are reused without a fault
MMAP_BYTES: Final = 4 << 20
#: extra heap asked for at each growth (glibc: 128 KiB)
PAD_BYTES: Final = 4 << 20
#: arenas: one, so that the .prv writer's thread (``PrvWriter(behind=True)``) allocates its
#: text from the heap the conversion frees into instead of an arena of its own (1M rows,
#: three runs each: 0.9 MiB less peak; its few allocations a batch make the lock cheap)
ARENAS: Final = 1
#: the user's own tuning, which is left alone
MALLOC_ENV: Final = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_THRESHOLD_",
                     "MALLOC_ARENA_MAX")

#: the daemon's blocks from this size on get pages of their own, returned whole when freed
#: (glibc's first threshold, held fixed): glibc raises its threshold to the size of each
#: mapped block freed, after which the model's growing columns, the packed rows and each
#: commit's buffers came from the heap and left holes in it that stayed resident (10,000 tiny
#: reports: 13.6 MiB free inside the heap at the end)
DAEMON_MMAP_BYTES: Final = 128 << 10

#: a report of at least this many rows returns the heap's free pages when its streaming ends
#: (``release_freed``): the end of a report builds its summary records as Python objects,
#: which take pages of their own while the heap's free holes stay resident (10M rows: the
#: converter's peak was at the end, 3 MiB above the streaming's)
RELEASE_ROWS: Final = 1 << 20

_done = False
#: ``malloc_trim`` where this process tuned the heap (None: it did not)
_trim: Callable[[int], int] | None = None


def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt``, or None where the environment tunes malloc itself or the C library
    is not glibc (its own policy stays)."""
    if any(os.environ.get(name) for name in MALLOC_ENV) or "malloc" in os.environ.get(
            "GLIBC_TUNABLES", ""):
        return None
    try:  # the C library the interpreter is linked with (find_library would run ldconfig)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt


def tune_daemon_heap() -> bool:
    """For the daemon (glibc only; not when the environment tunes malloc itself): blocks of
    ``DAEMON_MMAP_BYTES`` and more always get pages of their own, so that what a long-lived
    process frees of them is returned instead of staying resident as holes in the heap, and
    its threads (the event loop's, the appends' workers, the .prv writer's) share one arena,
    so that what one frees is reused by the others instead of staying free in its own (10,000
    tiny reports: 6.2 MiB free inside the heaps at the end with an arena a thread, 3.7 with
    one). Returns whether the heap was tuned."""
    mallopt = _mallopt()
    done = mallopt is not None and all(mallopt(param, value) == 1 for param, value in (
        (_M_MMAP_THRESHOLD, DAEMON_MMAP_BYTES), (_M_ARENA_MAX, ARENAS)))
    log.debug("daemon_heap_tuned", done=done, mmap_bytes=DAEMON_MMAP_BYTES, arenas=ARENAS)
    return done


def keep_freed_memory() -> bool:
    """Keep up to ``TRIM_BYTES`` of freed memory for the next report instead of returning it
    page by page (once; glibc only; not when the environment tunes malloc itself). Returns
    whether the heap was tuned by this call."""
    global _done, _trim
    if _done:
        return False
    _done = True
    mallopt = _mallopt()
    if mallopt is None:
        return False
    done = all(mallopt(param, value) == 1 for param, value in (
        (_M_TRIM_THRESHOLD, TRIM_BYTES), (_M_MMAP_THRESHOLD, MMAP_BYTES),
        (_M_TOP_PAD, PAD_BYTES), (_M_ARENA_MAX, ARENAS)))
    if done:
        trim = ctypes.CDLL(None).malloc_trim
        trim.argtypes = (ctypes.c_size_t,)
        trim.restype = ctypes.c_int
        _trim = trim
    log.debug("heap_tuned", done=done, trim_bytes=TRIM_BYTES, mmap_bytes=MMAP_BYTES,
              pad_bytes=PAD_BYTES, arenas=ARENAS)
    return done


def release_freed(rows: int) -> bool:
    """Return the heap's free pages to the system once a report of ``rows`` rows has streamed,
    when this process tuned the heap (``keep_freed_memory``) and the report holds at least
    ``RELEASE_ROWS`` rows: what it freed would otherwise stay resident beside what its end
    builds. Returns whether the heap was trimmed."""
    if _trim is None or rows < RELEASE_ROWS:
        return False
    _trim(0)
    log.debug("heap_released", rows=rows)
    return True
