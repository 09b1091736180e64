"""``prvstream summary``: show a job's GPU efficiency summary, once or following it live.

The target is a job directory (``JOB/prvstream/summary.jsonl``, ``JOB/summary.jsonl``, or the
``summary.json`` beside them), a ``summary.jsonl``, a ``summary.json`` or a convert
``OUT.summary.json`` (or ``OUT.summary.jsonl``). ``--follow`` re-reads new lines like
``tail -f`` until Ctrl-C. ``--view phase`` shows each phase name's total over all its
instances, then the latest instances.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TextIO

import msgspec

from prvstream.daemon.config import Settings
from prvstream.daemon.nsys.sqlite import SQLITE_MAGIC
from prvstream.sinks.errors import PrvstreamError
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary import (
    SummaryRecord,
    SummaryState,
    decode_state,
    fold,
    load_summary,
    plot_summary,
    read_records,
    render_table,
    write_prom_file,
)
from prvstream.sinks.summary.timeline import timeline
from prvstream.sinks.summary.topn import TABLE_VIEWS, render_top, top_json, top_rows

__all__ = ["missing_ranks_warning", "resolve_target", "run"]

log = get_logger(__name__)

_TAIL = 256

_CANDIDATES = ("prvstream/summary.jsonl", "summary.jsonl", "prvstream/summary.json",
               "summary.json")




def _not_a_summary(p: Path) -> None:
    """Raise a message that says what to do when ``p`` is an export, not a summary."""
    if p.suffix == ".nsys-rep":
        raise PrvstreamError(f"{p} is an Nsight Systems report, not a summary: run "
                             f"`prvstream convert {p} -o OUT` first, then "
                             "`prvstream summary OUT.summary.json`")
    try:
        with open(p, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError:
        return
    if head == SQLITE_MAGIC:
        raise PrvstreamError(f"{p} is an export, not a summary: run `prvstream convert {p} "
                             "-o OUT` first, then `prvstream summary OUT.summary.json`")


def resolve_target(target: str | os.PathLike[str], *, must_exist: bool = True) -> Path:
    """The summary file a JOB|SUMMARY argument names.

    For a directory without a summary yet, ``must_exist=False`` returns where the daemon will
    write ``summary.jsonl`` (for ``--follow``).
    """
    p = Path(target)
    if p.is_dir():
        for rel in _CANDIDATES:
            if (p / rel).is_file():
                return p / rel
        if not must_exist:
            return p / _CANDIDATES[0]
        raise PrvstreamError(f"no summary in {p} (looked for {', '.join(_CANDIDATES)}); is "
                             f"the daemon watching this job, or pass --follow to wait for it")
    if p.is_file():
        _not_a_summary(p)
        return p
    if not must_exist:
        return p
    raise PrvstreamError(f"{p} does not exist; pass a job directory, a summary.jsonl or a "
                         f"summary.json")


def _latest(state: SummaryState, view: str) -> SummaryRecord | None:
    if view == "window":
        return state.windows[-1] if state.windows else None
    if view == "phase":
        return state.phases[-1] if state.phases else None
    if not state.span_ns and not state.devices:
        return None
    fields = {f: getattr(state, f) for f in SummaryRecord.__struct_fields__}
    return SummaryRecord(**fields)


def _json_line(record: SummaryRecord | None) -> str:
    return (msgspec.json.encode(record).decode() if record is not None else "null") + "\n"


def _outputs(args: argparse.Namespace, state: SummaryState,
             history: list[SummaryRecord]) -> None:
    if args.prom_file:
        write_prom_file(args.prom_file, state)
    if args.plot:
        _plot(state, history, args.plot)


def _plot(state: SummaryState, history: list[SummaryRecord], png: str) -> None:
    """Draw the PNG and say where (on stderr: stdout may carry JSON)."""
    plot_summary(state, history, png)
    tl = timeline(state, history)
    sys.stderr.write(f"plot written to {Path(png).resolve()} (metrics over {tl.label}, "
                     f"x in {tl.unit})\n")


class _Follower:
    """Incremental reader of a growing summary.jsonl (or a replaced summary.json)."""

    def __init__(self, path: Path, recent: int) -> None:
        self.path = path
        self.recent = recent
        self.offset = 0
        self.stamp: tuple[int, int, int] | None = None
        self.state: SummaryState | None = None
        self.history: list[SummaryRecord] = []
        #: the last bytes consumed, to notice a file that was cut back and grew again
        self.tail = b""

    def _read_tail(self) -> bytes:
        start = max(self.offset - _TAIL, 0)
        with open(self.path, "rb") as fh:
            fh.seek(start)
            return fh.read(self.offset - start)

    def _tail_matches(self) -> bool:
        return not self.offset or self._read_tail() == self.tail

    def poll(self) -> list[SummaryRecord]:
        """New records since the last poll (a changed summary.json counts as one)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return []
        if self.path.suffix != ".jsonl":
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            if stamp == self.stamp:
                return []
            self.stamp = stamp
            self.state = decode_state(self.path.read_bytes())
            return [_latest(self.state, "cumulative") or self.state]
        if st.st_size < self.offset or not self._tail_matches():
            # truncated (daemon recovery), perhaps already regrown: start over
            log.info("summary_truncated_rereading", path=str(self.path))
            self.offset, self.state, self.history = 0, None, []
        if st.st_size == self.offset:
            return []
        records: list[SummaryRecord]
        records, self.offset = read_records(self.path, self.offset)
        self.tail = self._read_tail()
        if records:
            self.state = fold(records, self.state, recent=self.recent)
            self.history += [r for r in records if r.view == "cumulative"]
        return records


#: missing rank numbers the warning names before "..."
_FIRST_MISSING = 8


def missing_ranks_warning(summary: Path) -> str:
    """One line when the ``status.json`` beside ``summary`` lists missing ranks, else ""."""
    try:
        status = msgspec.json.decode((summary.parent / "status.json").read_bytes())
    except (OSError, msgspec.DecodeError):
        return ""
    missing = status.get("missing_ranks") if isinstance(status, dict) else None
    expected = status.get("expected_ranks") if isinstance(status, dict) else None
    if not missing or not isinstance(missing, list):
        return ""
    first = ", ".join(str(r) for r in missing[:_FIRST_MISSING])
    more = ", ..." if len(missing) > _FIRST_MISSING else ""
    return (f"warning: {len(missing)} of {expected} expected ranks missing (no report yet): "
            f"{first}{more}\n")


def run(args: argparse.Namespace, settings: Settings, out: TextIO | None = None) -> int:
    """Print the summary; with ``--follow`` keep printing updates until interrupted."""
    stream = out if out is not None else sys.stdout
    view: str = args.view
    if not args.follow:
        path = resolve_target(args.target)
        sys.stderr.write(missing_ranks_warning(path))
        state, history = load_summary(path, recent=settings.summary_recent)
        if view in TABLE_VIEWS:
            top, phase = getattr(args, "top", None), getattr(args, "phase", None)
            rows = top_rows(state, view, top, phase)
            stream.write(msgspec.json.encode(top_json(rows, view)).decode() + "\n"
                         if args.json else render_top(state, view, top, phase))
        elif args.json:
            stream.write(_json_line(_latest(state, view)))
        else:
            stream.write(render_table(state, view))
        _outputs(args, state, history)
        return 0
    path = resolve_target(args.target, must_exist=False)
    follower = _Follower(path, settings.summary_recent)
    views = {view, "phase_total"} if view == "phase" else {view}
    tty = hasattr(stream, "isatty") and stream.isatty()
    interval = max(float(args.interval), 0.01)
    log.debug("summary_follow", path=str(path), view=view)
    if not path.exists():
        sys.stderr.write(f"prvstream: waiting for {path} to appear (is the daemon watching "
                         f"this job?); Ctrl-C to stop\n")
        sys.stderr.flush()
    warned = ""
    try:
        while True:
            if not follower.path.is_file() and Path(args.target).is_dir():
                # the job directory (perhaps created since) names its summary once written
                follower.path = resolve_target(args.target, must_exist=False)
            new = follower.poll()
            relevant = [r for r in new if r.view in views or follower.path.suffix != ".jsonl"]
            if relevant and follower.state is not None:
                if args.json:
                    for r in relevant:
                        stream.write(_json_line(r if r.view in views
                                                else _latest(follower.state, view)))
                elif tty:
                    stream.write("\x1b[H\x1b[2J" + render_table(follower.state, view))
                else:
                    stream.write(render_table(follower.state, view) + "\n")
                stream.flush()
                warning = missing_ranks_warning(follower.path)
                if warning != warned:  # once per change, not once per update
                    warned = warning
                    sys.stderr.write(warning)
                    sys.stderr.flush()
                if args.prom_file:
                    write_prom_file(args.prom_file, follower.state)
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    if args.plot and follower.state is not None:
        _plot(follower.state, follower.history, args.plot)
    return 0
