"""Configure logging once, at the entry point, for the command's audience.

A person running ``convert``/``summary``/... reads short ``prvstream: warning: ...`` lines; the
daemon (``watch``) writes JSON lines for journald and log collectors, readable lines on a TTY.
structlog itself is imported and configured only at the first event that passes the level, and
never for a person's readable lines, which ``PersonsLines`` writes the way structlog would.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from types import TracebackType
from typing import Any, TextIO

from prvstream.sinks.logger import set_threshold

__all__ = ["PersonsLines", "configure_logging", "human_line", "wants_json"]

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


def _exc_info(value: Any) -> tuple[type[BaseException], BaseException,
                                    TracebackType | None] | None:
    """What an event's ``exc_info`` names: an exception, a ``sys.exc_info()`` triple, or (any
    other true value) the exception being handled now."""
    if isinstance(value, BaseException):
        return type(value), value, value.__traceback__
    if (isinstance(value, tuple) and len(value) == 3 and isinstance(value[0], type)
            and issubclass(value[0], BaseException) and isinstance(value[1], BaseException)):
        return value
    if value:
        current = sys.exc_info()
        if current[1] is not None:
            return current
    return None


class PersonsLines:
    """A person's command's log lines (``human_line``), written without importing structlog.

    The same lines structlog's chain makes of an event (its level, the event's keys, a
    ``%``-interpolated event name, ``exc_info`` rendered as a traceback under the line), so a
    small conversion that warns does not pay structlog's import (asyncio, ssl, logging).
    """

    __slots__ = ("_out",)

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def __call__(self, method: str, event: str, args: tuple[Any, ...],
                 kw: dict[str, Any]) -> None:
        if method == "exception":
            kw.setdefault("exc_info", True)
            method = "error"
        if args:
            single = len(args) == 1 and isinstance(args[0], Mapping) and args[0]
            event = event % (args[0] if single else args)
        event_dict: dict[str, Any] = {**kw, "event": event, "level": method}
        exc_info = _exc_info(event_dict.pop("exc_info", None))
        if exc_info is not None:
            import traceback  # only with an exception to show

            event_dict["exception"] = "".join(
                traceback.format_exception(*exc_info)).removesuffix("\n")
        self._out.write(human_line(None, method, event_dict) + "\n")
        self._out.flush()


def configure_logging(level: str | None = None, *, json: bool | None = None,
                      stream: TextIO | None = None, service: bool = False) -> bool:
    """Route log events to ``stream`` (stderr by default); return whether they are JSON.

    ``service`` marks the daemon; ``level=None`` is the audience's default (warning for a
    person, info for the daemon); ``json=None`` picks the format with ``wants_json``. Events
    below the level are dropped before structlog is imported; a person's readable lines are
    written by ``PersonsLines``, and for JSON or the daemon structlog is configured at the first
    event that passes (it costs more to import than a small conversion).
    """
    out = stream if stream is not None else sys.stderr
    as_json = wants_json(out, service=service, forced=json)
    threshold = _LEVELS[level or _DEFAULT_LEVEL[service]]
    if as_json or service:
        set_threshold(threshold, lambda: _configure(threshold, as_json, out))
    else:
        set_threshold(threshold, writer=PersonsLines(out))
    return as_json


def _configure(level: int, as_json: bool, out: TextIO) -> None:
    import structlog

    renderer: Any
    if as_json:
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=_isatty(out))
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        renderer,
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
