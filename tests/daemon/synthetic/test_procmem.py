"""procmem: the peaks of a command's descendants are found and summed."""

from __future__ import annotations

import os
import subprocess
import sys

from prvstream.daemon.synthetic.procmem import TreeSampler, descendants, peak_kib, wait_with_peak


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
    assert (peak_kib(os.getpid()) or 0) > 0
    assert peak_kib(2**22 + 12345) is None
    assert all(isinstance(p, int) for p in descendants(os.getpid()))


def test_wait_with_peak_sums_a_grandchild_and_sets_the_exit_status() -> None:
    script = ("import subprocess, sys; "
              "subprocess.run([sys.executable, '-c', "
              "'b = bytearray(40 * 1024 * 1024); import time; time.sleep(0.6)']); "
              "sys.exit(3)")
    proc = subprocess.Popen([sys.executable, "-c", script])
    peak, timed_out = wait_with_peak(proc, timeout=30)
    assert not timed_out and proc.returncode == 3
    assert peak >= 40 * 1024  # the grandchild's 40 MiB buffer is counted


def test_wait_with_peak_kills_at_the_timeout() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    _, timed_out = wait_with_peak(proc, timeout=0.3)
    assert timed_out and proc.returncode == -9
