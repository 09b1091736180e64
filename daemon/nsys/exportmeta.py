"""What an export says about itself (``ExportMeta``: metadata, clock anchor, trusted times) and
its PROCESSES rows, as read by ``Export``.
"""

from __future__ import annotations

from typing import Final

import msgspec

__all__ = ["I64_MAX", "I64_MIN", "ExportMeta", "ProcessRow"]

I64_MIN: Final = -(2**63)
I64_MAX: Final = 2**63 - 1


class ProcessRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One row of PROCESSES."""

    global_pid: int
    pid: int
    name: str = ""


class ExportMeta(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What an export says about itself, and how its session clock maps to wall time.

    ``wall_ns = session_ns + wall_offset_ns``; the session starts at ``session_start_ns`` on
    the export's clock, which is wall time ``utcEpochNs``. With ``systemClockNs`` (2025+) the
    timestamps are on the system clock and the session starts at ``systemClockNs``; otherwise
    they count from the session start (0), as in every export before 2025 and in the Nsight
    Systems GUI. A ``systemClockNs`` later than the bulk of the events (their sampled median,
    by more than 1 s) is not on the events' clock (seen in a 2026.1 WSL export: 515396 s vs
    events at 1.3 s) and is ignored. With no ``utcEpochNs`` at all, wall time is the
    export's own clock.
    """

    path: str
    product_version: str
    schema_version: str
    metadata_table: str | None
    export_complete: bool
    hostname: str
    utc_epoch_ns: int | None
    system_clock_ns: int | None
    first_ns: int
    last_ns: int
    wall_offset_ns: int
    #: how wall_offset_ns was derived: "system_clock", "session_start" or "none"
    clock_anchor: str = "system_clock"
    #: where the session starts on the export's clock (time 0 of the Nsight Systems GUI)
    session_start_ns: int = 0
    #: the times trusted on the export's clock (``Export.time_bound``); rows outside are
    #: dropped, counted per kind (``kinds.bounds``)
    bound_lo_ns: int = I64_MIN
    bound_hi_ns: int = I64_MAX

    def notes(self) -> list[str]:
        """What a reader of this export's summary should know about the export itself."""
        if self.clock_anchor == "session_start" and self.system_clock_ns is not None:
            return ["session start clock (systemClockNs) is not the events' clock: timestamps "
                    "taken as counting from the session start (utcEpochNs), so alignment with "
                    "other nodes' reports is less exact"]
        return []
