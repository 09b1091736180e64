"""Load a Paraver cfg with paramedir on a trace and measure the view it computes.

paramedir writes a cfg's histogram, or its last window when it has none. To compare views
across traces of different thread layouts, each cfg is loaded without its histograms (a copy
in the work folder), so paramedir writes the timeline of the cfg's last window: rows of
(object, begin, duration, value). The measure of a view is the time with a non-zero value and
the duration-weighted value sum, both added over all rows: neither depends on how many threads
carry the zeros, nor on where each trace puts time 0.
"""

from __future__ import annotations

import math
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["View", "load_view", "timeline_only"]

_ANALYZER = re.compile(r"^< NEW ANALYZER2D >.*?(?=^< NEW |\Z)", re.M | re.S)
_TIMEOUT = 600.0


@dataclass(frozen=True)
class View:
    """What paramedir computed for one cfg on one trace (``aborted``: none of the cfg's
    event types occur in the trace)."""

    nonzero_ns: float
    weighted: float
    rows: int
    aborted: bool = False

    def agrees(self, other: View, rel: float = 1e-9) -> bool:
        if self.aborted or other.aborted:
            return self.aborted == other.aborted
        return (math.isclose(self.nonzero_ns, other.nonzero_ns, rel_tol=rel, abs_tol=1.0)
                and math.isclose(self.weighted, other.weighted, rel_tol=rel, abs_tol=1.0))


def timeline_only(cfg: Path, work: Path) -> Path:
    """A copy of ``cfg`` without histograms, with its windows in nanoseconds."""
    text = _ANALYZER.sub("", cfg.read_text(errors="replace"))
    text = re.sub(r"^window_units .*$", "window_units Nanoseconds", text, flags=re.M)
    out = work / cfg.name
    out.write_text(text)
    return out


def load_view(paramedir: str, prv: Path, cfg: Path, work: Path) -> View:
    """Run ``paramedir -npr PRV CFG OUT`` (the histogram-less copy) and measure its output."""
    work.mkdir(parents=True, exist_ok=True)
    plain = timeline_only(cfg, work)
    out = work / f"{cfg.stem}.{prv.stem}.csv"
    out.unlink(missing_ok=True)
    done = subprocess.run([paramedir, "-npr", str(prv), str(plain), str(out)], cwd=work,
                          capture_output=True, text=True, timeout=_TIMEOUT)
    if "File creation aborted" in done.stdout:
        return View(0.0, 0.0, 0, aborted=True)
    if done.stderr.strip() or not out.exists():
        raise RuntimeError(f"paramedir on {prv.name} with {cfg.name} failed: "
                           f"{(done.stderr or done.stdout).strip()[-300:]}")
    nonzero = weighted = 0.0
    rows = 0
    for line in out.read_text(errors="replace").splitlines():
        parts = line.split("\t")
        if line.startswith("#") or len(parts) < 4:
            continue
        try:
            duration, value = float(parts[2]), float(parts[3])
        except ValueError:
            continue
        rows += 1
        if value != 0.0:
            nonzero += duration
            weighted += duration * value
    return View(nonzero, weighted, rows)
