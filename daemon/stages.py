"""A conversion's wall clock by stage, for ``convert --timings``: where a run's time went, from
the process's start to its outputs made durable.

The stages are marked where they end (``mark``): ``loaded`` (the interpreter and the command's
modules, numpy's included), ``planned`` (every report opened and planned), ``written`` (the
last record written) and ``synced`` (the outputs and the summary renamed and fsynced). The
time the converter spent waiting for its reader process is counted apart (``waited``), as
part of converting. Nothing is measured unless a clock was started (``start``): a mark is
then one global look-up.
"""

from __future__ import annotations

import os
import time

__all__ = ["STAGES", "StageClock", "current", "mark", "process_started", "start", "stop",
           "waited"]

#: (mark, what the time up to it was spent on), in the order a conversion passes them
STAGES = (("loaded", "start-up"), ("planned", "planning"), ("written", "converting"),
          ("synced", "writing out"))


class StageClock:
    """Marks (``time.perf_counter`` seconds) of one conversion's stages."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.marks: dict[str, float] = {}
        #: seconds spent waiting for the reader process's answers
        self.reader_wait = 0.0

    def seconds(self) -> list[tuple[str, float]]:
        """(stage, seconds) of every stage up to the last mark, in order; stages whose marks
        were not reached (a Dask conversion plans and converts on its workers) are named
        together with the next one reached."""
        out: list[tuple[str, float]] = []
        last = self.started
        pending: list[str] = []
        for name, stage in STAGES:
            pending.append(stage)
            at = self.marks.get(name)
            if at is not None:
                out.append((" and ".join(pending), max(0.0, at - last)))
                last, pending = at, []
        return out

    def total(self) -> float:
        """Seconds from the start to the last mark."""
        return max(self.marks.values(), default=self.started) - self.started

    def line(self) -> str:
        """The stages as ``convert`` prints them."""
        parts = []
        for stage, seconds in self.seconds():
            text = f"{stage} {seconds:.3f} s"
            if stage.endswith("converting") and self.reader_wait:
                text += f" (waiting for the reader {self.reader_wait:.3f} s)"
            parts.append(text)
        return f"{', '.join(parts)}; {self.total():.3f} s in all"


_clock: StageClock | None = None


def process_started() -> float:
    """When this process started, on ``time.perf_counter``'s clock: from ``/proc`` (to the
    kernel's clock tick, 10 ms), or now where that cannot be read."""
    now = time.perf_counter()
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
        age = uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return now
    return now - max(0.0, age)


def start(started: float | None = None) -> StageClock:
    """Start measuring this process's conversion (from ``started``; default: the process's
    start)."""
    global _clock
    _clock = StageClock(process_started() if started is None else started)
    return _clock


def stop() -> None:
    """Stop measuring (``mark`` and ``waited`` do nothing again)."""
    global _clock
    _clock = None


def current() -> StageClock | None:
    """The clock being kept, if any."""
    return _clock


def mark(name: str) -> None:
    """The stage ``name`` (one of ``STAGES``' marks) ends now; the first mark of a name
    counts."""
    if _clock is not None:
        _clock.marks.setdefault(name, time.perf_counter())


def waited(seconds: float) -> None:
    """``seconds`` more spent waiting for the reader process."""
    if _clock is not None:
        _clock.reader_wait += seconds
