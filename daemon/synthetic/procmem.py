"""Peak memory of the processes a measured command starts (its reader process), for benchmarks.

``wait4`` reports a command's own peak RSS, folded with its children's by ``max``, not sum. A
``TreeSampler`` watches the command's descendants while it runs and keeps each one's peak
(``VmHWM``), so a benchmark can report the command's peak plus its helpers' peaks: an upper
bound of the memory the conversion held at any moment.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

__all__ = ["TreeSampler", "descendants", "peak_kib", "wait_with_peak"]


def peak_kib(pid: int) -> int | None:
    """The process's peak resident set (VmHWM, KiB), or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (Linux ``/proc/PID/task/TID/children``)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            tasks = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                kids = [int(x) for x in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            found.extend(kids)
            todo.extend(kids)
    return found


def _cmdline(pid: int) -> bytes | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


def _execed(pid: int) -> bool:
    """Whether ``pid`` runs its own program: between ``fork`` (or ``vfork``) and ``exec`` a
    child still has its parent's memory and command line, and its VmHWM is the parent's peak,
    which must not be counted twice (a loaded machine makes that window long)."""
    try:
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return False
    mine = _cmdline(pid)
    return mine is not None and mine != _cmdline(ppid)


class TreeSampler:
    """Samples the peaks of ``pid``'s descendants every ``interval`` seconds until ``stop``
    (a descendant counts once it has exec'd its own program: see ``_execed``)."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.pid = pid
        self.interval = interval
        self.peaks: dict[int, int] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            for child in descendants(self.pid):
                if not _execed(child):
                    continue
                kib = peak_kib(child)
                if kib is not None and kib > self.peaks.get(child, 0):
                    self.peaks[child] = kib
            self._done.wait(self.interval)

    def stop(self) -> int:
        """Stop sampling; the sum of the descendants' peaks, KiB."""
        self._done.set()
        self._thread.join()
        return sum(self.peaks.values())


def wait_with_peak(proc: subprocess.Popen[bytes], timeout: float | None = None
                   ) -> tuple[int, bool]:
    """Wait for ``proc`` (killed after ``timeout`` seconds): the peak RSS of it and of the
    processes it started, KiB (its ``ru_maxrss`` plus their peaks), and whether it timed out.
    Sets ``proc.returncode`` (-9 on a timeout)."""
    helpers = TreeSampler(proc.pid)
    deadline = None if timeout is None else time.monotonic() + timeout
    timed_out = False
    while True:
        pid, status, usage = os.wait4(proc.pid, 0 if deadline is None else os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        if deadline is not None and time.monotonic() > deadline:
            proc.kill()
            _, _, usage = os.wait4(proc.pid, 0)
            proc.returncode, timed_out = -9, True
            break
        time.sleep(0.005)
    return usage.ru_maxrss + helpers.stop(), timed_out
