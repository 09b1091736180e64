"""A job's flow for ``status.json`` and the logs: backlog, lag of the oldest waiting report,
and the rate reports and records land at (over the last minute)."""

from __future__ import annotations

import collections
import os
import time
from dataclasses import dataclass, field

__all__ = ["JobFlow"]

#: the rates cover this many seconds
_WINDOW_S = 60.0


@dataclass
class JobFlow:
    """When each waiting report became ready (by its path's text), and when recent ones
    landed."""

    _ready: dict[str, float] = field(default_factory=dict)
    _landed: collections.deque[tuple[float, int]] = field(default_factory=collections.deque)

    def ready(self, path: str | os.PathLike[str], now: float | None = None) -> None:
        self._ready.setdefault(os.fspath(path), time.monotonic() if now is None else now)

    def landed(self, path: str | os.PathLike[str], records: int, now: float | None = None
               ) -> None:
        """``path`` is in the trace (or will never be: ``records`` 0 and set aside)."""
        now = time.monotonic() if now is None else now
        self.gone(path)
        if records:
            self._landed.append((now, records))

    def gone(self, path: str | os.PathLike[str]) -> None:
        self._ready.pop(os.fspath(path), None)
        if not self._ready:  # a drained flood's table goes with it (a dict never shrinks)
            self._ready = {}

    def snapshot(self, now: float | None = None) -> dict[str, float | int]:
        """backlog, lag_s (age of the oldest waiting report), reports_per_min, records_per_s."""
        now = time.monotonic() if now is None else now
        while self._landed and now - self._landed[0][0] > _WINDOW_S:
            self._landed.popleft()
        span = min(_WINDOW_S, max(now - self._landed[0][0], 1.0)) if self._landed else 1.0
        oldest = min(list(self._ready.values()), default=now)  # written by the writer thread
        return {"backlog": len(self._ready), "lag_s": round(now - oldest, 2),
                "reports_per_min": round(60 * len(self._landed) / span, 1),
                "records_per_s": round(sum(n for _, n in list(self._landed)) / span, 1)}
