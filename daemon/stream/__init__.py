"""The streaming core: records, bounded merges, object and value numbering, one report's pipeline
and batch conversion.
"""

from __future__ import annotations

__all__: list[str] = []
