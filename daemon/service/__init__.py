"""The service: the watch loop, discovery of exports, readiness checks and systemd notification."""

from __future__ import annotations

__all__: list[str] = []
