"""Peak memory of the processes a measured command starts (its reader process), for benchmarks.

``wait4`` reports a command's own peak RSS, folded with its children's by ``max``, not sum. A
``TreeSampler`` watches the command's descendants while it runs and keeps each one's peak
(``VmHWM``), so a benchmark can report the command's peak plus its helpers' peaks: an upper
bound of the memory the conversion held at any moment.
"""

from __future__ import annotations

import threading
from pathlib import Path

__all__ = ["TreeSampler", "descendants", "peak_kib"]


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


class TreeSampler:
    """Samples the peaks of ``pid``'s descendants every ``interval`` seconds until ``stop``."""

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
                kib = peak_kib(child)
                if kib is not None and kib > self.peaks.get(child, 0):
                    self.peaks[child] = kib
            self._done.wait(self.interval)

    def stop(self) -> int:
        """Stop sampling; the sum of the descendants' peaks, KiB."""
        self._done.set()
        self._thread.join()
        return sum(self.peaks.values())
