"""prvstream's service side: discovery, readiness, export reading, merging, state and the daemon."""

from __future__ import annotations

__all__: list[str] = []
