"""Configure structlog once, at the entry point: console on a TTY, JSON lines otherwise."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from prvstream.sinks.logger import set_threshold

__all__ = ["configure_logging"]

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


def configure_logging(level: str = "info", *, json: bool | None = None,
                      stream: TextIO | None = None) -> None:
    """Route structlog events to ``stream`` (stderr by default).

    ``json=None`` picks the console renderer when the stream is a TTY and JSON lines otherwise
    (journald, files, pipes). Events below ``level`` are dropped before structlog is imported,
    and structlog is configured at the first event that passes (it costs more to import than
    a small conversion).
    """
    out = stream if stream is not None else sys.stderr
    if json is None:
        json = not (hasattr(out, "isatty") and out.isatty())
    set_threshold(_LEVELS[level], lambda: _configure(_LEVELS[level], bool(json), out))


def _configure(level: int, json: bool, out: TextIO) -> None:
    import structlog

    renderer: Any
    if json:
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
