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


def test_a_forked_copy_that_has_not_exec_d_is_not_counted() -> None:
    """A child between fork and exec has its parent's memory (and VmHWM): it is skipped."""
    script = ("import os, time; b = bytearray(60 * 1024 * 1024); "
              "pid = os.fork()\n"
              "if pid == 0:\n    time.sleep(0.8); os._exit(0)\n"
              "os.waitpid(pid, 0)")
    proc = subprocess.Popen([sys.executable, "-c", script])
    sampler = TreeSampler(proc.pid, interval=0.01)
    proc.wait(timeout=30)
    assert sampler.stop() < 60 * 1024  # the fork's copied 60 MiB are not a second peak


def test_the_command_s_peak_is_its_own_not_its_launcher_s() -> None:
    """A launcher holding a lot of memory does not lend its peak to the command it starts."""
    ballast = bytearray(80 * 1024 * 1024)
    ballast[::4096] = b"x" * len(ballast[::4096])  # touched: resident
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    peak, _ = wait_with_peak(proc, timeout=30)
    assert peak < 60 * 1024  # a bare interpreter, not the 80 MiB launcher
    del ballast
