"""Synthetic jobs: exports with the real schema, the quick-start demo and the benchmark command."""

from __future__ import annotations

__all__: list[str] = []
