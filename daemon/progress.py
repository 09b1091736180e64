"""A progress line on a terminal for long conversions and finalizes: done / total, rate, ETA."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["TerminalProgress"]


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds + 0.5))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class TerminalProgress:
    """``progress(done, total)`` callback drawing one line on ``stream`` (at most 5 a second):
    a bar, done / total ``unit``, the rate and the time left at that rate."""

    def __init__(self, label: str, unit: str = "rows", stream: TextIO | None = None) -> None:
        self.label = label
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.monotonic()
        self.last = 0.0

    def line(self, done: int, total: int, now: float) -> str:
        """The text shown for ``done`` of ``total`` at ``now`` (monotonic seconds)."""
        frac = min(done / total, 1.0) if total else 0.0
        width = 24
        elapsed = max(now - self.started, 1e-9)
        rate = done / elapsed
        eta = _clock((total - done) / rate) if rate > 0 and total > done else "0:00"
        return (f"{self.label} [{'#' * int(frac * width):<{width}}] {100 * frac:5.1f}%  "
                f"{done:,}/{total:,} {self.unit}  {rate:,.0f} {self.unit}/s  "
                f"elapsed {_clock(elapsed)}  left {eta}")

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < 0.2 and done < total:
            return
        self.last = now
        self.stream.write("\r" + self.line(done, total, now) + "\033[K")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\r\033[K")
        self.stream.flush()
