"""The process-wide switches the settings hold, applied in one place: the pure-Python record
formatter, row filler and phase overlaps, and one log event when the optional C extensions are
missing (the Python fallback, slower, is then in use).
"""

from __future__ import annotations

from prvstream.daemon.config import Settings
from prvstream.sinks.logger import get_logger

__all__ = ["apply"]

log = get_logger(__name__)

_reported = False


def apply(settings: Settings) -> None:
    """Set the switches from ``settings`` (the command line and the API call this)."""
    global _reported
    from prvstream.daemon.nsys import rowfill  # numpy: only once a command runs
    from prvstream.sinks.efficiency import overlap
    from prvstream.sinks.paraver import fastfmt

    fastfmt.prefer_python(settings.pure_python)
    rowfill.prefer_python(settings.pure_python)
    overlap.prefer_python(settings.pure_python)
    missing = [name for name, built in (("record formatter", fastfmt.built()),
                                        ("row filler", rowfill.built()),
                                        ("phase overlaps", overlap.built())) if not built]
    if missing and not _reported:
        _reported = True
        log.info("python_fallback_in_use", missing=missing,
                 message="the optional C extensions were not built: prvstream uses its Python "
                         "fallback (same bytes, slower, no reader process); reinstall with a "
                         "C compiler present to get them")
