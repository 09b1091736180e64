"""The process-wide switches the settings hold, applied in one place: the pure-Python record
formatter, row filler, record keys, merge sorts, value factorizer, group sums, phase overlaps
and sweep segments, and one log event when the optional C extensions are missing (the Python
fallback, slower, is then in use).
"""

from __future__ import annotations

from prvstream.daemon.config import Settings
from prvstream.sinks import native
from prvstream.sinks.logger import get_logger
from prvstream.sinks.native import OptionalExtension

__all__ = ["apply", "extensions"]

log = get_logger(__name__)

_reported = False


def extensions() -> tuple[OptionalExtension, ...]:
    """Every optional C extension (importing the modules that declare them: numpy comes too,
    so only once a command runs)."""
    from prvstream.daemon.kinds import nesting  # noqa: F401 - each import declares one
    from prvstream.daemon.nsys import rowfill  # noqa: F401
    from prvstream.daemon.stream import merge, ready  # noqa: F401
    from prvstream.sinks import arrays  # noqa: F401
    from prvstream.sinks.efficiency import overlap, parts  # noqa: F401
    from prvstream.sinks.paraver import fastfmt, records  # noqa: F401

    return native.registered()


def apply(settings: Settings) -> None:
    """Set the switches from ``settings`` (the command line and the API call this)."""
    global _reported
    found = extensions()
    native.prefer_python(settings.pure_python)
    missing = [ext.what for ext in found if not ext.built()]
    if missing and not _reported:
        _reported = True
        log.info("python_fallback_in_use", missing=missing,
                 message="the optional C extensions were not built: prvstream uses its Python "
                         "fallback (same bytes, slower, no reader process); reinstall with a "
                         "C compiler present to get them")
