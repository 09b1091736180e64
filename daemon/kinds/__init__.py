"""The data kinds: one module per kind (tables, columns, SQL, plan scan, converter, value groups,
.pcf blocks, efficiency role), named in ``names`` and collected by ``registry``. Kinds import
only ``sinks``; ``nsys`` and ``stream`` read the registry.
"""

from __future__ import annotations

__all__: list[str] = []
