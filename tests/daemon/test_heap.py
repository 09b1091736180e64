"""The C heap's trimming: freed memory is kept for the next report (no page faults again) and
returned once a big report has streamed, and the user's own malloc tuning is left alone."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from prvstream.daemon import heap

_FAULTS = """
import resource, sys
from prvstream.daemon import heap
tuned = heap.keep_freed_memory() if sys.argv[1] == "1" else False
import numpy as np
np.ones(1 << 18)  # numpy's own first allocations
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    held = [np.ones(1 << 13) for _ in range(64)]  # 64 KiB blocks, 4 MiB: touched, then freed
    del held
print(int(tuned), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _run(tune: bool, **env: str) -> tuple[bool, int]:
    clean = {k: v for k, v in os.environ.items()
             if k not in heap.MALLOC_ENV and k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", _FAULTS, "1" if tune else "0"],
                         env={**clean, **env}, capture_output=True, text=True, check=True)
    tuned, faults = out.stdout.splitlines()[-1].split()
    return tuned == "1", int(faults)


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="the heap is tuned with glibc's mallopt only")
def test_freed_memory_is_reused_without_faults() -> None:
    tuned, faults = _run(True)
    assert tuned
    # glibc's default thresholds, held fixed: glibc raises them by itself once the process
    # frees a large mapped block, so that the untuned faults would depend on what the
    # process (its imports) allocated before
    untuned, faults_before = _run(False, MALLOC_TRIM_THRESHOLD_="131072",
                                  MALLOC_MMAP_THRESHOLD_="131072")
    assert not untuned
    # 100 rounds of 1,024 pages: faulted in again each round without the tuning (the heap's
    # top was returned), once with it
    assert faults_before >= 50 * 1024
    assert faults < 2 * 1024


def test_the_users_malloc_tuning_is_left_alone() -> None:
    tuned, _ = _run(True, MALLOC_TOP_PAD_="131072")
    assert not tuned


#: the probes' start: tune the heap with the function named by argv[2] when argv[1] is "1"
#: (``tuned``), then numpy and ``anon()``, the process's anonymous resident KiB
_PROBE = """
import sys
from pathlib import Path
from prvstream.daemon import heap
tuned = getattr(heap, sys.argv[2])() if sys.argv[1] == "1" else False
import numpy as np

def anon():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
"""


def _probe(script: str, tune: str | None) -> list[int]:
    """Run ``_PROBE`` + ``script`` in a process of its own, with glibc's own malloc policy
    where ``tune`` is None (the environment's malloc settings dropped); its last line's ints."""
    clean = {k: v for k, v in os.environ.items()
             if k not in heap.MALLOC_ENV and k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", _PROBE + script, "0" if tune is None else "1",
                          tune or "-"], env=clean, capture_output=True, text=True, check=True)
    return [int(x) for x in out.stdout.splitlines()[-1].split()]


_RELEASE = """
held = [np.ones(1 << 16) for _ in range(64)]  # 512 KiB blocks from the heap: 32 MiB touched
del held[::2]  # half of it free, in holes the heap's top cannot give back
before = anon()
small = heap.release_freed(heap.RELEASE_ROWS - 1)
unchanged = anon()
big = heap.release_freed(heap.RELEASE_ROWS)
print(int(tuned), int(small), int(big), before - unchanged, before - anon())
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="the heap is tuned with glibc's mallopt only")
@pytest.mark.parametrize("tune", [True, False])
def test_a_big_report_returns_the_heaps_free_pages_once_it_has_streamed(tune: bool) -> None:
    """Only where this process tuned the heap (elsewhere glibc trims by itself), and only for
    a report of at least ``RELEASE_ROWS`` rows: the free holes' pages go back (16 MiB of them
    here), the blocks still in use stay."""
    tuned, small, big, kept_kib, returned_kib = _probe(
        _RELEASE, "keep_freed_memory" if tune else None)
    assert tuned == tune
    assert not small
    assert kept_kib < 1024
    assert big == tune
    assert (returned_kib > 12 * 1024) if tune else (returned_kib < 1024)


_MAPPED = """
big = np.ones(1 << 18)  # 2 MiB, mapped: freeing it raises glibc's own threshold past 512 KiB
del big
held = [np.ones(1 << 16) for _ in range(64)]  # 512 KiB blocks: 32 MiB touched
before = anon()
del held[::2]  # half of them freed, between the others
print(int(tuned), before - anon())
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="the heap is tuned with glibc's mallopt only")
@pytest.mark.parametrize("tune", [True, False])
def test_the_daemon_returns_the_large_blocks_it_frees(tune: bool) -> None:
    """With ``tune_daemon_heap`` (the daemon) a freed block of 512 KiB goes back to the system
    even after a larger one was freed; with glibc's own policy it stays, a hole in the heap."""
    tuned, returned_kib = _probe(_MAPPED, "tune_daemon_heap" if tune else None)
    assert tuned == tune
    assert (returned_kib > 12 * 1024) if tune else (returned_kib < 4 * 1024)


def test_the_daemon_leaves_the_users_malloc_tuning_alone() -> None:
    out = subprocess.run([sys.executable, "-c", "from prvstream.daemon import heap; "
                          "print(int(heap.tune_daemon_heap()))"],
                         env={**os.environ, "MALLOC_ARENA_MAX": "2"}, capture_output=True,
                         text=True, check=True)
    assert out.stdout.split()[-1] == "0"
