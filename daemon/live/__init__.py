"""The live trace: the per-job journal, appending blocks behind a checkpoint, recovery and
finalize.
"""

from __future__ import annotations

__all__: list[str] = []
