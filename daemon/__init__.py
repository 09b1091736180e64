"""prvstream's service side: discovery, readiness, export reading, merging, state and the daemon."""

from __future__ import annotations

__all__ = ["__version__"]

#: the package version (pyproject.toml reads it from here)
__version__ = "0.1.0"
