"""procmem: the peaks of a command's descendants are found and summed."""

from __future__ import annotations

import subprocess
import sys

from prvstream.daemon.procmem import TreeSampler, descendants, peak_kib


def test_a_grandchild_peak_is_counted() -> None:
    script = ("import subprocess, sys; "
              "subprocess.run([sys.executable, '-c', "
              "'b = bytearray(40 * 1024 * 1024); import time; time.sleep(0.6)'])")
    proc = subprocess.Popen([sys.executable, "-c", script])
    sampler = TreeSampler(proc.pid, interval=0.01)
    proc.wait(timeout=30)
    total = sampler.stop()
    assert total >= 40 * 1024  # the grandchild's 40 MiB buffer
    assert len(sampler.peaks) == 1


def test_self_has_a_peak_and_no_descendants_when_alone() -> None:
    import os
    assert (peak_kib(os.getpid()) or 0) > 0
    assert peak_kib(2**22 + 12345) is None
    assert all(isinstance(p, int) for p in descendants(os.getpid()))
