"""What appending a report to a live trace ends in: its result, or why it stopped."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from prvstream.sinks.errors import PrvstreamError

__all__ = ["AppendInterrupted", "AppendResult", "DuplicateReport", "MemberFailed", "_OrderBroken"]


@dataclass
class AppendResult:
    """What appending one report did."""

    report: str
    records: int
    rows: Counter[str]
    compacted: bool
    seconds: float
    prv_length: int


class DuplicateReport(PrvstreamError):
    """The report's content is already in the trace under another name."""

    def __init__(self, message: str, *, of: str) -> None:
        super().__init__(message)
        self.of = of


class MemberFailed(Exception):
    """A report of a group commit failed (its cause is ``__cause__``); the group was rolled
    back. The reports before it (``at`` of them) appended without fault: they can go again as
    a group, and the failed one alone, to meet its own fate."""

    def __init__(self, at: int, report: str) -> None:
        super().__init__(f"report {at} of the group ({report}) failed")
        self.at = at
        self.report = report


class AppendInterrupted(Exception):
    """The service is stopping: the block in progress was rolled back."""


class _OrderBroken(Exception):
    """A block would put a thread's records before its earlier ones: compaction needed."""
