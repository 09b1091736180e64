"""The optional C extensions: each one's guarded import, and the one switch that sends every
caller to its Python fallback (``Settings.pure_python``, for comparisons).

Each extension gives one function; a module that has one declares it with
``OptionalExtension`` and asks ``ext.use(pure)`` for the function before each call. A built
module that lacks its function was built from older sources: the caller gets the fallback and
``error`` says to rebuild (a start-up crash would take the whole service down for it).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["OptionalExtension", "prefer_python", "registered"]

_REGISTERED: list[OptionalExtension] = []

#: use the Python fallbacks even where the C extensions were built
_prefer_python = False


class OptionalExtension:
    """One compiled function from an optional extension module (``None`` where it was not
    built, or cannot be used on this machine)."""

    def __init__(self, module: str, function: str, what: str, *,
                 little_endian: bool = False) -> None:
        self.module = module
        self.what = what
        self.function: Callable[..., Any] | None = None
        #: the built module's file (a child process may load it by path)
        self.file: str | None = None
        self.error: str | None = None
        try:
            if little_endian and sys.byteorder != "little":
                raise ImportError("its packed layouts assume a little-endian machine")
            loaded = importlib.import_module(module)
        except ImportError as exc:  # pragma: no cover - depends on the build
            self.error = str(exc)
        else:
            self.function = getattr(loaded, function, None)
            if self.function is None:
                self.error = (f"{loaded.__file__} has no {function}(): it was built from older "
                              f"sources; rebuild it (pip install -e . in a checkout, or "
                              f"reinstall prvstream)")
            else:
                self.file = loaded.__file__
        _REGISTERED.append(self)

    def built(self) -> bool:
        """True when the extension was built and loads."""
        return self.function is not None

    def compiled(self) -> bool:
        """True when the compiled function is in use."""
        return self.function is not None and not _prefer_python

    def use(self, pure: bool = False) -> Callable[..., Any] | None:
        """The compiled function, or ``None`` when the caller should run its fallback
        (``pure`` asks for the fallback for this one call)."""
        return None if pure or _prefer_python else self.function


def prefer_python(flag: bool) -> None:
    """Run every Python fallback even where C is available; set from the settings."""
    global _prefer_python
    _prefer_python = flag


def registered() -> tuple[OptionalExtension, ...]:
    """The extensions declared by the modules imported so far, in import order."""
    return tuple(_REGISTERED)
