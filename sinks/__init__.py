"""prvstream's outputs: the Paraver trace writer and the GPU efficiency summaries."""

from __future__ import annotations

__all__: list[str] = []
