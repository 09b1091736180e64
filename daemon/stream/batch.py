"""Batch conversion (``prvstream convert``): a set of exports -> one globally sorted trace
and its summaries.

Reports are planned first (objects and first appearances, one aggregate scan per table), so
that ids are canonical and the output depends only on the set of reports, never on their order
on the command line. Then every report streams its tables in time order and a bounded-fan-in
k-way merge writes one globally sorted ``.prv``; ``.pcf`` and ``.row`` follow from the ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from prvstream.daemon import stages
from prvstream.daemon.config import Settings, user_kind
from prvstream.daemon.kinds import registry
from prvstream.daemon.nsys.heldrows import RowSpill
from prvstream.daemon.stream.dedupe import shares_processes
from prvstream.daemon.stream.pipeline import PreparedReport, ReportObjects, objects_of
from prvstream.daemon.stream.planned import HelperDiverged, RemoteReport, plan_one, use_helper
from prvstream.daemon.stream.trace import ConvertResult, write_trace
from prvstream.sinks.base import Sink
from prvstream.sinks.efficiency import EfficiencyModel
from prvstream.sinks.errors import NotAnExport, PrvstreamError, UnsupportedSchema
from prvstream.sinks.logger import get_logger
from prvstream.sinks.summary import SummaryWriter

if TYPE_CHECKING:
    from prvstream.daemon.stream.helper import BatchHelper
    from prvstream.daemon.stream.spool import InOrderReplay

__all__ = ["FLUSH_ROWS", "SummaryHistory", "convert", "expand_inputs"]

log = get_logger(__name__)

#: activity rows the efficiency model of a conversion buffers before it sweeps them (its
#: results do not depend on it; a sweep's temporaries grow with it): 8,192 held the
#: converter's peak 1.7 MiB higher at 1M rows (docs/benchmarks.md, "Memory at 10M rows")
FLUSH_ROWS = 4096


def _exported(rep: Path) -> Path:
    """The ``.sqlite`` of a ``.nsys-rep``: beside it already, or exported with nsys."""
    target = rep.with_suffix(".sqlite")
    if target.exists():
        return target
    from prvstream.daemon.nsys.exporter import export_with_nsys  # subprocess, shutil

    return export_with_nsys(rep, target)


def expand_inputs(inputs: Iterable[str]) -> tuple[list[Path], list[tuple[str, str]]]:
    """Files, directories (every export inside, by the daemon's discovery rules in
    :mod:`prvstream.daemon.nsys.locate`: outputs, hidden and temporary files excluded) and
    .nsys-rep files."""
    found: list[Path] = []
    failed: list[tuple[str, str]] = []
    for raw in inputs:
        path = Path(raw)
        if path.is_dir():
            from prvstream.daemon.nsys.locate import scan_once

            hits = []
            for cand in scan_once([path]):
                if cand.kind == "done":  # a job-end marker, not an export
                    continue
                try:
                    hits.append(_exported(cand.path) if cand.kind == "nsys-rep" else cand.path)
                except PrvstreamError as exc:
                    failed.append((str(cand.path), str(exc)))
            if not hits:
                failed.append((raw, "directory holds no .sqlite export"))
            found.extend(hits)
        elif not path.exists():
            failed.append((raw, "no such file"))
        elif not path.is_file():  # a FIFO would block the open, a device never end
            failed.append((raw, "not a regular file (a FIFO, device or socket); pass the "
                                ".sqlite export itself"))
        elif path.suffix == ".nsys-rep":
            try:
                found.append(_exported(path))
            except PrvstreamError as exc:
                failed.append((raw, str(exc)))
        else:
            found.append(path)
    resolved = {p.resolve(): p for p in found}
    return [resolved[r] for r in sorted(resolved, key=str)], failed


def _check_requested(reports: Sequence[PreparedReport | RemoteReport], wanted: list[str]
                     ) -> None:
    """Raise when no input holds any kind ``--trace`` asked for; warn for each asked-for
    kind no input holds (the trace is still useful without it)."""
    found = {k for rep in reports for k in rep.kinds}
    # with the derived kinds their inputs give (links join API calls to the GPU work)
    held = set(registry.to_convert({k for rep in reports
                                    for k, n in rep.counts.items() if n}))
    names = ", ".join(user_kind(k) for k in sorted(held)) or "nothing prvstream converts"
    absent = [user_kind(k) for k in wanted if k not in found]
    if not found:
        raise UnsupportedSchema(
            f"no input holds {' or '.join(absent)} data (asked for with --trace); the inputs "
            f"hold {names}: choose from those, or profile with nsys --trace including it")
    for kind in absent:
        log.warning("kind_absent", kind=kind,
                    message=f"no input holds {kind} data (asked for with --trace); converted "
                            f"the rest")


def _share_devices(reports: Sequence[PreparedReport], remote: Sequence[RemoteReport]
                   ) -> bool:
    """Whether a GPU (host, device) has activity in a report of each side."""
    def devices(objects: ReportObjects) -> set[tuple[str, int]]:
        return {(host, key[1]) for host, _, _, _, threads in objects for key in threads
                if key[0] == 1}

    mine: set[tuple[str, int]] = set()
    for rep in reports:
        mine |= devices(objects_of(rep))
    return any(not mine.isdisjoint(devices(r.objects)) for r in remote)


def _absorb(model: EfficiencyModel, helper: BatchHelper, last_report: str) -> None:
    """The helper's model state taken into ``model`` (``partial.absorb``), the batch's last
    report in canonical order named last; where it cannot be exact, the batch is converted
    again in one process."""
    from prvstream.sinks.efficiency.partial import absorb

    state, windows = helper.group_state()
    try:
        absorb(model, state, windows, last_report)
    except ValueError as exc:
        raise HelperDiverged(f"the helper's model state: {exc}") from exc


class SummaryHistory:
    """A conversion's summary records, streamed to a hidden ``.part`` file beside
    ``summary_jsonl`` and renamed into place by ``commit``; without a path they are dropped."""

    def __init__(self, summary_jsonl: Path | None) -> None:
        self.target = summary_jsonl
        self.writer: SummaryWriter | None = None
        if summary_jsonl is not None:
            part = summary_jsonl.with_name(f".{summary_jsonl.name}.part")
            part.unlink(missing_ok=True)
            self.writer = SummaryWriter(part)

    def publish_updates(self, model: EfficiencyModel) -> None:
        """Write (or drop) the model's pending records, one slice at a time."""
        if self.writer is None:
            model.discard_updates()
        else:
            self.writer.append_bytes(model.iter_update_bytes())

    def commit(self, *, sync_dir: bool = True) -> None:
        """Rename the records into place (``sync_dir=False``: the caller fsyncs the
        directory)."""
        if self.writer is not None and self.target is not None:
            self.writer.publish(self.target, sync_dir=sync_dir)
            self.writer = None

    def abandon(self) -> None:
        """Remove the records of a conversion that did not commit (no-op after ``commit``)."""
        if self.writer is not None:
            self.writer.path.unlink(missing_ok=True)
            self.writer = None


def convert(inputs: Iterable[str], out: Path, settings: Settings,
            model: EfficiencyModel | None = None,
            progress: Callable[[int, int], None] | None = None,
            summary_jsonl: Path | None = None, *, helper: bool = False,
            sync_dir: bool = True, retire_reader: bool = False) -> ConvertResult:
    """Expand, plan and convert; bad inputs are reported and skipped, the rest converted.

    With ``model``, every report's GPU activity is spooled during the one pass over its
    tables and replayed into the efficiency model in canonical report order, each report as
    soon as it and every report before it have streamed (``spool.InOrderReplay``: a small
    report's feed stays in memory, at most ``fan_in`` ended ones wait at a time). The
    reports are committed together, so they make one summary update (a group commit,
    ``EfficiencyModel.hold_updates``): its records stream into ``summary_jsonl`` (else they
    are dropped), built once whatever the number of reports.

    ``helper``: a batch of many reports gives the later part of its inputs to a forked
    helper process (``stream.helper``: the second core), with the same outputs; where the
    helper cannot give them (it failed, or ids grew while converting), the batch is
    converted again in one process.

    ``sync_dir=False``: the outputs are renamed into ``out``'s directory without fsyncing it;
    the caller does, after renaming its own files there, before it reports them written.
    ``retire_reader``: the process converts nothing after (``write_trace``).
    """
    paths, failed = expand_inputs(inputs)
    if helper and use_helper(paths, settings):
        import copy  # only here: a batch with a helper

        fresh = copy.deepcopy(model)  # nothing fed yet: what a second attempt starts from
        try:
            return _convert_paths(paths, list(failed), out, settings, model, progress,
                                  summary_jsonl, helped=True, sync_dir=sync_dir,
                                  retire_reader=retire_reader)
        except HelperDiverged as exc:
            log.warning("helper_diverged", reason=str(exc),
                        message=f"converting in one process: {exc}")
            if model is not None and fresh is not None:
                vars(model).clear()
                vars(model).update(vars(fresh))
    return _convert_paths(paths, failed, out, settings, model, progress, summary_jsonl,
                          helped=False, sync_dir=sync_dir, retire_reader=retire_reader)


def _convert_paths(paths: list[Path], failed: list[tuple[str, str]], out: Path,
                   settings: Settings, model: EfficiencyModel | None,
                   progress: Callable[[int, int], None] | None, summary_jsonl: Path | None,
                   *, helped: bool, sync_dir: bool = True,
                   retire_reader: bool = False) -> ConvertResult:
    # several reports: a small one is read once, while planned, and streams from the spill
    spill = RowSpill() if len(paths) > 1 else None
    helper = None
    mine = paths
    try:
        if helped:  # the helper's process machinery loads only for such a batch
            from prvstream.daemon.stream.helper import OWN_SHARE, BatchHelper

            mine = paths[: int(len(paths) * OWN_SHARE)]
            helper = BatchHelper.start(paths[len(mine):], settings, len(paths), model)
        return _convert(paths, mine, failed, out, settings, model, progress, summary_jsonl,
                        spill, helper, sync_dir, retire_reader)
    finally:
        if helper is not None:
            helper.close()
        if spill is not None:
            spill.close()


def _convert(paths: list[Path], mine: list[Path], failed: list[tuple[str, str]], out: Path,
             settings: Settings, model: EfficiencyModel | None,
             progress: Callable[[int, int], None] | None, summary_jsonl: Path | None,
             spill: RowSpill | None, helper: BatchHelper | None,
             sync_dir: bool = True, retire_reader: bool = False) -> ConvertResult:
    reports: list[PreparedReport] = []
    for path in mine:
        try:
            reports.append(plan_one(path, settings, spill, len(paths)))
        except PrvstreamError as exc:
            failed.append((str(path), str(exc)))
    remote: list[RemoteReport] = []
    if helper is not None:
        remote, unplanned = helper.planned()
        failed.extend(unplanned)
        if shares_processes({(h, p) for h, p, *_ in objects} for objects in [
                *(objects_of(rep) for rep in reports), *(r.objects for r in remote)]):
            raise HelperDiverged("reports share processes (their repeated records are "
                                 "dropped by one merge)")
    everything: list[PreparedReport | RemoteReport] = [*reports, *remote]
    if not everything and len(failed) == 1:  # one input refused: its reason is the one line
        path_text, reason = failed[0]
        raise NotAnExport(reason if Path(path_text).name in reason else f"{path_text}: {reason}")
    for path_text, reason in failed:
        log.error("input_rejected", path=path_text, reason=reason,
                  message=f"skipped {path_text}: {reason}")
    if not everything:
        raise NotAnExport(f"none of the {len(failed)} input(s) could be converted "
                          "(each reason is given above)")
    if settings.kinds:
        _check_requested(everything, settings.kinds)
    stages.mark("planned")
    # the model takes the reports in canonical order, each as soon as it and every report
    # before it have streamed (they end in about that order: the merge opens them so)
    ordered = sorted(everything, key=lambda r: r.sort_key)
    # with a helper whose reports share no device with ours, it feeds them into a model of
    # its own, whose state ours absorbs at the end (the model's work split over two cores)
    split = (helper is not None and model is not None and len(everything) > 1
             and not _share_devices(reports, remote))
    fed = [r for r in ordered if isinstance(r, PreparedReport)] if split else ordered
    replay: InOrderReplay | None = None
    if model is not None and len(everything) > 1:
        # the replay's module loads for a batch of several reports only
        from prvstream.daemon.stream.spool import InOrderReplay

        replay = InOrderReplay(model, [r.path for r in fed], settings.fan_in)
    if helper is not None and replay is not None:
        helper.models = split
        if not split:
            helper.on_fed = replay.arrived

    def spool_for(rep: PreparedReport) -> Sink | None:
        if replay is None:
            return model  # one report streams alone: feed the model directly
        return replay.spool(rep.path)

    history = SummaryHistory(summary_jsonl if model is not None else None)

    def summarize() -> None:  # while the trace's files are fsynced (write_trace)
        if model is not None and replay is not None:
            replay.finish()
            if split and helper is not None:
                _absorb(model, helper, ordered[-1].path.name)
            model.release_updates()
        if model is not None:
            history.publish_updates(model)

    try:
        if model is not None and replay is not None:
            model.hold_updates()  # converted together: one update (issue 11)
        result = write_trace(reports, out, settings, progress=progress,
                             sink_for=spool_for if model is not None else None, helper=helper,
                             sync_dir=sync_dir, meanwhile=summarize,
                             retire_reader=retire_reader)
        history.commit(sync_dir=sync_dir)
    finally:
        history.abandon()
        for rep in reports:
            rep.close()
        if replay is not None:
            replay.discard()
    result.failed = failed
    return result
