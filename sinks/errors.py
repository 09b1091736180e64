"""The exception hierarchy shared by every prvstream module.

Every error a user can meet is a ``PrvstreamError``; its message says what happened and what to
do. The command line maps these to exit statuses; library code only raises.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ExportChanged",
    "ExportIncomplete",
    "JournalCorrupt",
    "NotAnExport",
    "OutputConflict",
    "OutputLocked",
    "OverlappingStates",
    "PrvstreamError",
    "StateDirUnusable",
    "UnsupportedSchema",
]


class PrvstreamError(Exception):
    """Base class of every error prvstream raises on purpose."""

    #: exit status the command line uses for this error
    exit_status: int = 1


class ConfigError(PrvstreamError):
    """A setting is missing, of the wrong type or out of range (names the offending key)."""

    exit_status = 2


class NotAnExport(PrvstreamError):
    """The file is not an Nsight Systems SQLite export (not SQLite, corrupt, or foreign)."""


class ExportChanged(NotAnExport):
    """The file at the export's path changed (replaced, or written to) while prvstream read
    it: nothing read from it is kept; read it again once it is stable."""


class ExportIncomplete(PrvstreamError):
    """The export is still being written (journal beside it, no final metadata, truncated)."""


class UnsupportedSchema(PrvstreamError):
    """The export is valid SQLite but holds nothing prvstream can convert (no GPU/CUDA data)."""


class JournalCorrupt(PrvstreamError):
    """A job's journal cannot be decoded; the message says which file to move aside."""


class OutputConflict(PrvstreamError):
    """An output path exists and was not created by prvstream, or is a symlink."""


class OutputLocked(OutputConflict):
    """Another prvstream process holds the lock of an output directory (one writer each)."""


class StateDirUnusable(PrvstreamError):
    """The daemon's own state directory (journals) cannot be written: it cannot go on."""

    exit_status = 3


class OverlappingStates(PrvstreamError, ValueError):
    """Partial efficiency states of overlapping capture ranges of one process: merging them
    would count the time both hold twice (the message names the process)."""
