"""Configure structlog once, at the entry point: console on a TTY, JSON lines otherwise."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

__all__ = ["configure_logging"]

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def configure_logging(level: str = "info", *, json: bool | None = None,
                      stream: TextIO | None = None) -> None:
    """Route structlog events to ``stream`` (stderr by default).

    ``json=None`` picks the console renderer when the stream is a TTY and JSON lines otherwise
    (journald, files, pipes).
    """
    out = stream if stream is not None else sys.stderr
    if json is None:
        json = not (hasattr(out, "isatty") and out.isatty())
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
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
