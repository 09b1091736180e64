"""Every module's logger: structlog's, imported only when an event passes the level.

Importing structlog costs more than a small conversion (asyncio, its console renderer), so
modules take ``log = get_logger(__name__)`` from here. ``set_threshold`` (called by the entry
point's logging set-up) drops events below a level without importing structlog and defers
structlog's configuration to the first event that passes, or hands the events that pass to a
writer of its own (a person's readable lines need no structlog); until it is called, every
event goes to structlog as it is configured (library use, tests).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["EventWriter", "Logger", "get_logger", "reset", "set_threshold"]

#: takes an event that passed the level instead of structlog:
#: ``(method, event, positional args, key/values)``
EventWriter = Callable[[str, str, tuple[Any, ...], dict[str, Any]], None]

#: structlog's numeric levels of the methods prvstream calls
_LEVEL = {"debug": 10, "info": 20, "warning": 30, "error": 40, "exception": 40,
          "critical": 50}

_threshold = 0
_before_first: Callable[[], None] | None = None
_writer: EventWriter | None = None


def set_threshold(level: int, before_first: Callable[[], None] | None = None, *,
                  writer: EventWriter | None = None) -> None:
    """Drop events below ``level``; run ``before_first`` (e.g. ``structlog.configure``) once,
    before the first event that is not dropped. With ``writer``, the events that pass go to it
    and structlog is never imported."""
    global _threshold, _before_first, _writer
    _threshold, _before_first, _writer = level, before_first, writer


def reset() -> None:
    """Forget ``set_threshold``: every event goes to structlog again."""
    set_threshold(0, None)


class Logger:
    """A structlog logger bound to a module name, created at its first event."""

    __slots__ = ("_name", "_real")

    def __init__(self, name: str | None) -> None:
        self._name = name
        self._real: Any = None

    def _emit(self, method: str, event: str, args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        if _LEVEL[method] < _threshold:
            return None
        if _writer is not None:
            _writer(method, event, args, kw)
            return None
        global _before_first
        if _before_first is not None:
            hook, _before_first = _before_first, None
            hook()
        if self._real is None:
            import structlog

            self._real = structlog.get_logger(self._name)
        return getattr(self._real, method)(event, *args, **kw)

    def debug(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._emit("debug", event, args, kw)

    def info(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._emit("info", event, args, kw)

    def warning(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._emit("warning", event, args, kw)

    def error(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._emit("error", event, args, kw)

    def exception(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._emit("exception", event, args, kw)

    def critical(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._emit("critical", event, args, kw)


def get_logger(name: str | None = None) -> Logger:
    """The logger of module ``name`` (``structlog.get_logger(name)`` at its first event)."""
    return Logger(name)
