"""``prvstream convert``: batch conversion of exports into one trace, its summaries and a closing
line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from prvstream.daemon import heap, stages
from prvstream.daemon.config import Settings, user_kind
from prvstream.daemon.kinds.bounds import hostile_text
from prvstream.daemon.nsys import sqlitemode
from prvstream.daemon.stream.batch import FLUSH_ROWS, convert
from prvstream.daemon.stream.outputs import claim, resolve_output
from prvstream.daemon.stream.trace import ConvertResult
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.errors import OutputConflict
from prvstream.sinks.files import atomic_write
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary import verdict
from prvstream.sinks.summary.records import RecordHead

if TYPE_CHECKING:
    from prvstream.daemon.progress import TerminalProgress

__all__ = ["closing_block", "run"]

log = get_logger(__name__)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _records_line(result: ConvertResult, prv: Path) -> str:
    """``N records = a kernel + b links + ...``: per-kind Paraver records that add up."""
    parts = " + ".join(f"{n:,} {user_kind(k)}" for k, n in
                       sorted(result.kind_records.items(), key=lambda kv: (-kv[1], kv[0])) if n)
    if parts and result.repeated:
        parts += f" - {result.repeated:,} repeated by overlapping reports"
    skipped = f" ({_plural(len(result.failed), 'input')} skipped)" if result.failed else ""
    return (f"prvstream: {_plural(len(result.reports), 'report')}{skipped} -> {prv}: "
            f"{_plural(result.records, 'record')}" + (f" = {parts}" if parts else "")
            + f"; span {result.end_time / 1e9:.3f} s, converted in {result.seconds:.2f} s")


def _verdict_text(head: RecordHead) -> str:
    """The summary's verdict: the dominant loss and the device that causes it."""
    text = verdict(head.metrics, head.span_ns, head)
    return " ".join(text.removeprefix("verdict: ").split())


def closing_block(result: ConvertResult, state: RecordHead, out: Path,
                  timings: str | None = None) -> str:
    """What ``convert`` prints on success: the records, the efficiency and where things are
    (``state``: the summary's head, ``EfficiencyModel.head``), and with ``timings``
    (``convert --timings``) where the time went."""
    m = state.metrics
    prv, summary = f"{out}.prv", f"{out}.summary.json"
    lines = [
        _records_line(result, Path(prv)),
        f"  efficiency  PE {100 * m.parallel_efficiency:.1f}% = LB "
        f"{100 * m.load_balance:.1f}% x CE {100 * m.communication_efficiency:.1f}% x OE "
        f"{100 * m.orchestration_efficiency:.1f}% over "
        f"{_plural(len(state.devices), 'GPU')}",
        f"  verdict     {_verdict_text(state)}",
        f"  files       {out}.prv/.pcf/.row (wxparaver {prv}); {summary}(l) "
        f"(prvstream summary {summary})",
    ]
    if result.hostile:
        lines.append(f"  hostile     rows outside the session or ending before they start "
                     f"(docs/reliability.md): {hostile_text(result.hostile)}")
    if state.notes:
        lines.append(f"  notes       {_plural(len(state.notes), 'note')} about the inputs: "
                     f"prvstream summary {summary}")
    if timings is not None:
        lines.append(f"  timings     {timings}")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, settings: Settings) -> int:
    """``prvstream convert``."""
    heap.keep_freed_memory()  # many reports one after another: keep their freed pages
    library = sqlitemode.unlocked()
    if library is not None:
        log.debug("sqlite_unlocked", library=library)
    out = resolve_output(args.output, args.inputs, force=getattr(args, "force", False))
    progress = None
    if sys.stderr.isatty() and not args.no_progress and not args.quiet:
        from prvstream.daemon.progress import TerminalProgress  # on a terminal only

        progress = TerminalProgress("converting")
    model = EfficiencyModel(out.name, window_ns=int(settings.window * 1e9),
                            flush_rows=FLUSH_ROWS, gap_threshold_ns=settings.gap_threshold_ns,
                            recent=settings.summary_recent,
                            nccl_as=settings.nccl_as, top=settings.summary_top)
    history = out.with_name(out.name + ".summary.jsonl")
    try:
        claim(out)  # before writing: a run cut short may be rerun over its own files
        return _convert_into(args, settings, out, model, progress, history)
    except OSError as exc:  # the output side: one line, never a traceback
        where = exc.filename or out.parent
        raise OutputConflict(f"cannot write {where}: {exc.strerror or exc}; free space, fix "
                             "the permissions, or choose another -o") from exc


def _convert_into(args: argparse.Namespace, settings: Settings, out: Path,
                  model: EfficiencyModel, progress: TerminalProgress | None, history: Path) -> int:
    try:
        if settings.dask:
            from prvstream.daemon.scale.cluster import get_client
            from prvstream.daemon.scale.convert import convert_dask

            result = convert_dask(get_client(settings.dask), args.inputs, out, settings,
                                  model=model, progress=progress, summary_jsonl=history)
        else:
            result = convert(args.inputs, out, settings, model=model, progress=progress,
                             summary_jsonl=history, helper=True, sync_dir=False,
                             retire_reader=True)
    finally:
        if progress is not None:
            progress.close()
    summary_path = out.with_name(out.name + ".summary.json")
    # ``encode_record(model.state())``, spliced from the kept records' bytes instead of
    # decoded and encoded again; its directory's fsync also makes the trace's and the
    # history's renames there durable
    atomic_write(summary_path, model.state_json())
    stages.mark("synced")
    result.outputs += [str(summary_path), str(history)]
    if not args.quiet:
        clock = stages.current()
        sys.stdout.write(closing_block(result, model.head(), out,
                                       None if clock is None else clock.line()))
    return 1 if result.failed else 0
