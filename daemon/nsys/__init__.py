"""Reading Nsight Systems SQLite exports: schema facts, opening and planning, ordered chunk
streams, the reader process and the row filler.
"""

from __future__ import annotations

__all__: list[str] = []
