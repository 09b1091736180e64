"""Configure logging once, at the entry point, for the command's audience.

A person running ``convert``/``summary``/... reads short ``prvstream: warning: ...`` lines; the
daemon (``watch``) writes JSON lines for journald and log collectors, readable lines on a TTY.
structlog itself is imported and configured only at the first event that passes the level.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any, TextIO

from prvstream.sinks.logger import set_threshold

__all__ = ["configure_logging", "human_line", "wants_json"]

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}

#: the level a command logs at unless --log-level (or PRVSTREAM_LOG_LEVEL) says otherwise:
#: a person sees warnings they should act on; a service records what it does
_DEFAULT_LEVEL = {False: "warning", True: "info"}


def _isatty(stream: TextIO) -> bool:
    return hasattr(stream, "isatty") and stream.isatty()


def wants_json(stream: TextIO, *, service: bool, forced: bool | None,
               environ: Mapping[str, str] | None = None) -> bool:
    """JSON lines or readable lines: ``forced`` (``--log-json``) wins; a person's command is
    readable; the daemon is JSON under systemd (``JOURNAL_STREAM``/``INVOCATION_ID``) or when
    its stderr is not a terminal."""
    if forced is not None:
        return forced
    if not service:
        return False
    env = os.environ if environ is None else environ
    if env.get("JOURNAL_STREAM") or env.get("INVOCATION_ID"):
        return True
    return not _isatty(stream)


def human_line(_: Any, method: str, event_dict: MutableMapping[str, Any]) -> str:
    """``prvstream: warning: <what happened>``: one line for a person.

    An event may carry ``message`` (a sentence for people, the keys are then for JSON readers
    only); otherwise its name is spelled out with spaces, followed by its keys.
    """
    level = str(event_dict.pop("level", method))
    event = str(event_dict.pop("event", ""))
    event_dict.pop("timestamp", None)
    exc = event_dict.pop("exception", None)
    message = event_dict.pop("message", None)
    head = f"prvstream: {level}: " if level in ("warning", "error", "critical") else "prvstream: "
    if message:
        line = head + str(message)
    else:
        extra = ", ".join(f"{k}={v}" for k, v in event_dict.items())
        line = head + event.replace("_", " ") + (f" ({extra})" if extra else "")
    return line + (f"\n{exc}" if exc else "")


def configure_logging(level: str | None = None, *, json: bool | None = None,
                      stream: TextIO | None = None, service: bool = False) -> bool:
    """Route log events to ``stream`` (stderr by default); return whether they are JSON.

    ``service`` marks the daemon; ``level=None`` is the audience's default (warning for a
    person, info for the daemon); ``json=None`` picks the format with ``wants_json``. Events
    below the level are dropped before structlog is imported, and structlog is configured at
    the first event that passes (it costs more to import than a small conversion).
    """
    out = stream if stream is not None else sys.stderr
    as_json = wants_json(out, service=service, forced=json)
    threshold = _LEVELS[level or _DEFAULT_LEVEL[service]]
    set_threshold(threshold, lambda: _configure(threshold, as_json, service, out))
    return as_json


def _configure(level: int, as_json: bool, service: bool, out: TextIO) -> None:
    import structlog

    renderer: Any
    if as_json:
        renderer = structlog.processors.JSONRenderer()
    elif service:
        renderer = structlog.dev.ConsoleRenderer(colors=_isatty(out))
    else:
        renderer = human_line
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
    ]
    if as_json or service:
        processors.append(structlog.processors.TimeStamper(fmt="iso", utc=True))
    processors += [structlog.processors.format_exc_info, renderer]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
