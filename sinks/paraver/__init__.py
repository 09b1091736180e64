"""The Paraver sink: the trace format, record templates and their C formatter."""

from __future__ import annotations

__all__: list[str] = []
