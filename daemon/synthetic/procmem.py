"""Peak memory of a measured command and the processes it starts (its reader), for benchmarks.

A ``TreeSampler`` watches the command and its descendants while they run and keeps each one's
peak (``VmHWM``), so a benchmark can report the sum of their peaks: an upper bound of the
memory the conversion held at any moment. ``wait4``'s ``ru_maxrss`` is no measure of a child:
Linux folds the hiwater of the memory a process had before ``exec`` into it, and a child
spawned with ``vfork`` had its parent's (a benchmark script holding numpy reported 86 MiB for
a 35 MiB conversion); it is used only for a command too short to be sampled.
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

    def __init__(self, pid: int, interval: float = 0.02, *, root: bool = False) -> None:
        self.pid = pid
        self.interval = interval
        #: sample ``pid`` itself too (its peak is ``root_peak``, not in ``peaks``)
        self.root = root
        self.root_peak = 0
        self.peaks: dict[int, int] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            if self.root and _execed(self.pid):
                self.root_peak = max(self.root_peak, peak_kib(self.pid) or 0)
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
    processes it started, KiB (the sum of their sampled peaks), and whether it timed out.
    Sets ``proc.returncode`` (-9 on a timeout)."""
    helpers = TreeSampler(proc.pid, root=True)
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
    others = helpers.stop()
    own = helpers.root_peak or usage.ru_maxrss  # never sampled: ru_maxrss is all there is
    return own + others, timed_out
