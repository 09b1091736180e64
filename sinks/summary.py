"""Efficiency summary records: the JSON lines writer, readers, table view, Prometheus file, plot.

Public API (schema in docs/summary-schema.md):

- ``SummaryRecord`` one line of ``summary.jsonl`` (one view's interval: cumulative, a window,
  a phase instance or a phase name's total); ``SummaryState`` the latest, bounded state
  (``summary.json``, ``OUT.summary.json``): the cumulative record, the latest ``recent``
  windows, the latest ``recent`` instances of each phase name and one ``phase_totals`` row per
  name. ``Metrics``, ``DeviceRow``, ``GroupRow`` are their parts. ``SCHEMA_VERSION`` is what
  this code writes; ``DEFAULT_RECENT`` the default bound.
- ``SummaryWriter(path)``: ``append(record) -> committed length``, ``append_many(records)``
  (streams any iterable), ``length``, ``truncate_to(length)`` (recovery), ``write_state``.
- ``atomic_write(path, data)``, ``read_records(path, offset) -> (records, new_offset)``,
  ``iter_records(path)``, ``fold(records, state, recent=)``, ``SummaryFolder`` (the same fold
  one record at a time), ``load_summary(path) -> SummaryState``, ``encode_record``,
  ``decode_state``.
- ``verdict(metrics)``, ``render_table(state, view)``, ``prometheus_text(state)``,
  ``write_prom_file(path, state)``, ``plot_summary(state, history, png)``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal

import msgspec

from prvstream.sinks.errors import OutputConflict, PrvstreamError
from prvstream.sinks.files import atomic_write, fsync_dir
from prvstream.sinks.logger import get_logger

__all__ = [
    "DEFAULT_RECENT",
    "SCHEMA_VERSION",
    "DeviceRow",
    "GroupRow",
    "Metrics",
    "SummaryFolder",
    "SummaryRecord",
    "SummaryState",
    "SummaryWriter",
    "View",
    "decode_state",
    "encode_record",
    "fold",
    "iter_records",
    "load_summary",
    "plot_summary",
    "prometheus_text",
    "read_records",
    "render_table",
    "verdict",
    "write_prom_file",
]

log = get_logger(__name__)

#: version of the records this code writes; changes are additive (new fields with defaults),
#: so readers accept every version and ignore fields they do not know. 2: the state is bounded
#: (latest ``recent`` windows and instances per phase name) and has ``phase_totals``
SCHEMA_VERSION = 2

#: windows, and instances per phase name, that the state keeps by default
DEFAULT_RECENT = 64

View = Literal["cumulative", "window", "phase", "phase_total"]


class Metrics(msgspec.Struct, kw_only=True):
    """The POP device metrics of one interval, as fractions in [0, 1]."""

    load_balance: float
    communication_efficiency: float
    orchestration_efficiency: float
    parallel_efficiency: float


class DeviceRow(msgspec.Struct, kw_only=True):
    """One device (host + CUDA device id) over the record's interval; times in integer ns."""

    host: str
    device: int
    useful_ns: int
    comm_ns: int
    idle_ns: int
    overlap_ns: int
    #: overlap_ns / (comm_ns + overlap_ns): the part of all communication hidden under compute
    overlap_share: float = 0.0
    #: time with 0, 1, 2, 3 and 4 or more kernels running at once
    inflight_ns: list[int] = msgspec.field(default_factory=lambda: [0, 0, 0, 0, 0])
    #: idle stretches longer than the gap threshold that overlap the interval, and their time
    #: inside the interval
    gaps: int = 0
    gap_ns: int = 0
    rank: int | None = None
    pid: int = 0


class GroupRow(msgspec.Struct, kw_only=True):
    """Metrics over a subset of the devices (one host, or one rank) over the same interval."""

    name: str
    devices: int
    useful_ns: int
    comm_ns: int
    metrics: Metrics


class SummaryRecord(msgspec.Struct, kw_only=True):
    """One update of one view's interval: a line of ``summary.jsonl``."""

    schema: int
    job: str
    view: str
    #: phase name (phase and phase_total views); "" otherwise
    name: str = ""
    #: window number (start // window_ns), phase occurrence, or for phase_total the number of
    #: instances of the name so far; 0 for the cumulative view
    index: int = 0
    #: the interval, in wall-clock ns since the epoch, and its length T (phase_total: the sum
    #: of its instances' spans, from the first start to the last end)
    start_ns: int
    end_ns: int
    span_ns: int
    #: wall-clock ns of the latest data included (the end of the job's span so far); this is
    #: data time, not the time the record was written, so recomputation is byte-identical
    wall_ns: int = 0
    #: reports included so far, and the one whose arrival produced this update
    reports: int = 0
    last_report: str = ""
    metrics: Metrics
    devices: list[DeviceRow]
    hosts: list[GroupRow] = msgspec.field(default_factory=list)
    ranks: list[GroupRow] = msgspec.field(default_factory=list)
    window_ns: int = 0
    gap_threshold_ns: int = 0


class SummaryState(SummaryRecord, kw_only=True):
    """The latest state (``summary.json``): the cumulative record plus bounded recent rows."""

    #: latest record of each of the ``recent`` highest windows, by index
    windows: list[SummaryRecord] = msgspec.field(default_factory=list)
    #: latest record of each of the ``recent`` highest occurrences of every phase name, by start
    phases: list[SummaryRecord] = msgspec.field(default_factory=list)
    #: latest ``phase_total`` record of every phase name, by name
    phase_totals: list[SummaryRecord] = msgspec.field(default_factory=list)
    #: the bound applied to ``windows`` and to each name's ``phases`` (0: written before schema 2)
    recent: int = 0


_ENCODER = msgspec.json.Encoder()
#: bytes of encoded lines gathered before a write
_SLICE = 1 << 20
_RECORD_DECODER = msgspec.json.Decoder(SummaryRecord)
_STATE_DECODER = msgspec.json.Decoder(SummaryState)


def encode_record(record: SummaryRecord) -> bytes:
    """One JSON line (with its newline)."""
    return _ENCODER.encode(record) + b"\n"


def decode_state(data: bytes) -> SummaryState:
    """Decode ``summary.json`` (or a single record, read as a state without windows/phases)."""
    try:
        return _STATE_DECODER.decode(data)
    except msgspec.DecodeError as exc:
        raise PrvstreamError(f"not a prvstream summary ({exc}); pass a summary.json, "
                             f"summary.jsonl or a job directory") from exc


class SummaryWriter:
    """Append-only ``summary.jsonl`` with a committed byte length the daemon can journal."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.is_symlink():
            raise OutputConflict(f"{self.path} is a symlink; prvstream never writes through "
                                 f"symlinks, remove it or choose another output directory")
        self._length = self.path.stat().st_size if self.path.exists() else 0
        if self._length:
            with open(self.path, "rb") as fh:
                head = fh.read(16)
            if not head.startswith(b'{"schema":'):
                raise OutputConflict(f"{self.path} exists and is not a prvstream summary; "
                                     f"move it away or choose another output directory")

    @property
    def length(self) -> int:
        """Bytes of ``summary.jsonl`` written and fsynced by this writer (or found at open)."""
        return self._length

    def append(self, record: SummaryRecord) -> int:
        """Append one record, fsync, and return the new committed length in bytes."""
        return self.append_many([record])

    def append_many(self, records: Iterable[SummaryRecord]) -> int:
        """Append records with one fsync; return the new committed length in bytes.

        ``records`` may be a generator: lines are written in slices of about 1 MiB as they
        come, never all held. If it raises, the file is cut back to the committed length.
        """
        written = 0
        fh = None
        try:
            buf: list[bytes] = []
            size = 0
            for record in records:
                line = encode_record(record)
                buf.append(line)
                size += len(line)
                if size >= _SLICE:
                    fh = fh or open(self.path, "ab")  # noqa: SIM115 - closed below
                    fh.write(b"".join(buf))
                    written, buf, size = written + size, [], 0
            if buf:
                fh = fh or open(self.path, "ab")  # noqa: SIM115 - closed below
                fh.write(b"".join(buf))
                written += size
            if fh is not None:
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            if fh is not None:
                fh.truncate(self._length)
            raise
        finally:
            if fh is not None:
                fh.close()
        self._length += written
        return self._length

    def truncate_to(self, length: int) -> None:
        """Cut ``summary.jsonl`` back to a committed length (recovery after a crash)."""
        if length < 0:
            raise ValueError(f"length must not be negative, got {length}")
        if self.path.exists():
            with open(self.path, "r+b") as fh:
                fh.truncate(length)
                fh.flush()
                os.fsync(fh.fileno())
        elif length:
            raise PrvstreamError(f"{self.path} is missing but the journal says {length} bytes "
                                 f"were committed; delete the job's journal to start over")
        log.info("summary_truncated", path=str(self.path), length=length,
                 dropped=self._length - length if self._length > length else 0)
        self._length = length

    def publish(self, path: str | os.PathLike[str]) -> None:
        """Rename the (complete, fsynced) file to ``path`` atomically; never over a symlink."""
        target = Path(path)
        if target.is_symlink():
            raise OutputConflict(f"{target} is a symlink; prvstream never writes through "
                                 f"symlinks, remove it or choose another output name")
        os.replace(self.path, target)
        fsync_dir(target.parent)
        self.path = target

    @staticmethod
    def write_state(state: SummaryState, path: str | os.PathLike[str]) -> None:
        """Write ``summary.json`` (or ``OUT.summary.json``) atomically."""
        atomic_write(path, msgspec.json.format(_ENCODER.encode(state), indent=1) + b"\n")


def read_records(path: str | os.PathLike[str],
                 offset: int = 0) -> tuple[list[SummaryRecord], int]:
    """Complete lines of ``summary.jsonl`` from byte ``offset``; return them and the new offset.

    A partial last line (a writer mid-append) is left for the next call.
    """
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read()
    end = data.rfind(b"\n") + 1
    records: list[SummaryRecord] = []
    for line in data[:end].splitlines():
        if not line.strip():
            continue
        try:
            records.append(_RECORD_DECODER.decode(line))
        except msgspec.DecodeError as exc:
            raise PrvstreamError(f"{path} holds a line that is not a summary record ({exc}); "
                                 f"is it a prvstream summary.jsonl?") from exc
    return records, offset + end


def iter_records(path: str | os.PathLike[str]) -> Iterator[SummaryRecord]:
    """Complete lines of ``summary.jsonl``, one record at a time (a partial last line is not)."""
    with open(path, "rb") as fh:
        for line in fh:
            if not line.endswith(b"\n"):
                break
            if not line.strip():
                continue
            try:
                yield _RECORD_DECODER.decode(line)
            except msgspec.DecodeError as exc:
                raise PrvstreamError(f"{path} holds a line that is not a summary record "
                                     f"({exc}); is it a prvstream summary.jsonl?") from exc


class SummaryFolder:
    """``fold`` one record at a time, in memory bounded by ``recent`` x phase names.

    Keeps the latest cumulative record, the latest record of the ``recent`` highest window
    indices, of the ``recent`` highest occurrences of each phase name, and of each phase name's
    total. Keys never change rank, so the result does not depend on how records are grouped.
    Records of views it does not know (a newer writer) are ignored.
    """

    def __init__(self, state: SummaryState | None = None, recent: int = DEFAULT_RECENT) -> None:
        self.recent = max(int(recent), 1)
        self.base: SummaryRecord | None = state
        self.windows: dict[int, SummaryRecord] = {}
        self.phases: dict[str, dict[int, SummaryRecord]] = {}
        self.totals: dict[str, SummaryRecord] = {}
        if state is not None:
            for r in (*state.windows, *state.phases, *state.phase_totals):
                self.add(r)

    def add(self, record: SummaryRecord) -> None:
        """Fold one record in."""
        view = record.view
        if view == "window":
            self.windows[record.index] = record
            if len(self.windows) > 2 * self.recent:
                self._trim(self.windows)
        elif view == "phase":
            by_occ = self.phases.setdefault(record.name, {})
            by_occ[record.index] = record
            if len(by_occ) > 2 * self.recent:
                self._trim(by_occ)
        elif view == "phase_total":
            self.totals[record.name] = record
        elif view == "cumulative":
            self.base = record

    def _trim(self, rows: dict[int, SummaryRecord]) -> None:
        for key in sorted(rows)[:-self.recent]:
            del rows[key]

    def keeps(self, view: str, name: str, indices: Iterable[int]) -> set[int]:
        """Which of these window indices / occurrences of ``name`` the state would keep."""
        rows = self.windows if view == "window" else self.phases.get(name, {})
        top = sorted({*rows, *indices})[-self.recent:]
        return set(top)

    def state(self) -> SummaryState:
        """The folded state."""
        base = self.base
        if base is None:
            base = SummaryRecord(schema=SCHEMA_VERSION, job="", view="cumulative", start_ns=0,
                                 end_ns=0, span_ns=0, metrics=_zero_metrics(), devices=[])
        fields = {f: getattr(base, f) for f in SummaryRecord.__struct_fields__}
        n = self.recent
        windows = [self.windows[k] for k in sorted(self.windows)[-n:]]
        phases = [by_occ[k] for by_occ in self.phases.values() for k in sorted(by_occ)[-n:]]
        phases.sort(key=lambda r: (r.start_ns, r.name, r.index))
        return SummaryState(**fields, windows=windows, phases=phases,
                            phase_totals=[self.totals[k] for k in sorted(self.totals)],
                            recent=n)


def fold(records: Iterable[SummaryRecord], state: SummaryState | None = None, *,
         recent: int = DEFAULT_RECENT) -> SummaryState:
    """Fold records into a state: the latest cumulative record, the latest row of the
    ``recent`` highest windows and of the ``recent`` highest occurrences of each phase name,
    and the latest total of every phase name (see ``SummaryFolder``)."""
    folder = SummaryFolder(state, recent)
    for record in records:
        folder.add(record)
    return folder.state()


def _zero_metrics() -> Metrics:
    return Metrics(load_balance=0.0, communication_efficiency=0.0,
                   orchestration_efficiency=0.0, parallel_efficiency=0.0)


def load_summary(path: str | os.PathLike[str], *, recent: int = DEFAULT_RECENT,
                 ) -> tuple[SummaryState, list[SummaryRecord]]:
    """Read a ``summary.jsonl`` (folded as it is read) or a ``summary.json``; return the state
    and history: the cumulative records in file order (empty for a ``.json`` state)."""
    p = Path(path)
    if p.suffix == ".jsonl":
        folder = SummaryFolder(recent=recent)
        history: list[SummaryRecord] = []
        for record in iter_records(p):
            folder.add(record)
            if record.view == "cumulative":
                history.append(record)
        return folder.state(), history
    return decode_state(p.read_bytes()), []


# --- views ------------------------------------------------------------------------------------

_LOSSES = (("load_balance", "load imbalance", "LB"),
           ("communication_efficiency", "communication", "CE"),
           ("orchestration_efficiency", "orchestration", "OE"))


def verdict(metrics: Metrics, span_ns: int = 1) -> str:
    """One line naming the dominant loss: the smallest of LB, CE and OE."""
    if span_ns <= 0:
        return "verdict: no data yet"
    field, label, short = min(_LOSSES, key=lambda x: getattr(metrics, x[0]))
    value = getattr(metrics, field)
    if value >= 0.995:
        return "verdict: no significant loss (LB, CE, OE all above 99.5%)"
    return f"verdict: dominant loss is {label} ({short} {_pct(value)})"


def _pct(x: float) -> str:
    return f"{100.0 * x:5.1f}%"


def _secs(ns: int) -> str:
    return f"{ns / 1e9:.3f} s"


def _metric_lines(m: Metrics) -> list[str]:
    return [
        f"  parallel efficiency        {_pct(m.parallel_efficiency)}",
        f"    load balance             {_pct(m.load_balance)}",
        f"    communication eff.       {_pct(m.communication_efficiency)}",
        f"    orchestration eff.       {_pct(m.orchestration_efficiency)}",
    ]


def _device_table(record: SummaryRecord, limit: int) -> list[str]:
    t = max(record.span_ns, 1)
    rows = sorted(record.devices, key=lambda d: (d.useful_ns, d.host, d.device))
    lines = [f"  {'host':<20} {'gpu':>3} {'rank':>5} {'useful':>7} {'comm':>7} {'idle':>7} "
             f"{'hidden':>7} {'gaps':>5} {'gap time':>10}"]
    for d in rows[:limit]:
        rank = "-" if d.rank is None else str(d.rank)
        lines.append(f"  {d.host[:20]:<20} {d.device:>3} {rank:>5} {_pct(d.useful_ns / t):>7} "
                     f"{_pct(d.comm_ns / t):>7} {_pct(d.idle_ns / t):>7} "
                     f"{_pct(d.overlap_share):>7} {d.gaps:>5} {_secs(d.gap_ns):>10}")
    if len(rows) > limit:
        lines.append(f"  ... {len(rows) - limit} more devices")
    return lines


def _interval_table(rows: Sequence[SummaryRecord], phase: bool, limit: int,
                    count: str = "#") -> list[str]:
    head = f"  {'phase':<16} {count:>5}" if phase else f"  {'window start (UTC)':<22}"
    lines = [f"{head} {'span':>10} {'PE':>7} {'LB':>7} {'CE':>7} {'OE':>7} {'devices':>7}"]
    import datetime as _dt

    for r in rows[-limit:]:
        if phase:
            label = f"  {r.name[:16]:<16} {r.index:>5}"
        else:
            when = _dt.datetime.fromtimestamp(r.start_ns / 1e9, tz=_dt.UTC)
            label = f"  {when.strftime('%Y-%m-%d %H:%M:%S'):<22}"
        m = r.metrics
        lines.append(f"{label} {_secs(r.span_ns):>10} {_pct(m.parallel_efficiency):>7} "
                     f"{_pct(m.load_balance):>7} {_pct(m.communication_efficiency):>7} "
                     f"{_pct(m.orchestration_efficiency):>7} {len(r.devices):>7}")
    if len(rows) > limit:
        lines.insert(1, f"  ... {len(rows) - limit} earlier rows not shown")
    return lines


def render_table(state: SummaryState, view: str = "cumulative", limit: int = 40) -> str:
    """A readable table: metrics as percentages, devices worst first, and a verdict line."""
    lines = [f"job {state.job or '?'}: {state.reports} report(s), {len(state.devices)} "
             f"device(s), span {_secs(state.span_ns)}"]
    if view == "cumulative":
        lines.append("cumulative:")
        lines += _metric_lines(state.metrics)
        lines.append(verdict(state.metrics, state.span_ns))
        if state.devices:
            lines.append("devices (worst first; % of span; hidden = comm under compute):")
            lines += _device_table(state, limit)
        return "\n".join(lines) + "\n"
    rows = state.windows if view == "window" else state.phases
    if view == "phase" and state.phase_totals:
        lines.append("per phase name, all instances (span = sum of instance spans):")
        lines += _interval_table(state.phase_totals, True, limit, count="count")
    if not rows:
        lines.append(f"no {view} rows yet")
        return "\n".join(lines) + "\n"
    bound = f" the latest {state.recent}{' per name' if view == 'phase' else ''} are kept" \
        if state.recent else ""
    lines.append(f"per {view}:{bound}")
    lines += _interval_table(rows, view == "phase", limit)
    latest = rows[-1]
    lines.append(f"latest {view}: " + verdict(latest.metrics, latest.span_ns))
    return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(state: SummaryState) -> str:
    """Prometheus text exposition of the cumulative state (gauges, seconds for times)."""
    job = _label(state.job)
    out: list[str] = []
    for field, help_text in (
        ("parallel_efficiency", "sum(useful) / (devices * span), fraction"),
        ("load_balance", "mean(useful) / max(useful), fraction"),
        ("communication_efficiency", "max(useful) / max(useful + comm), fraction"),
        ("orchestration_efficiency", "max(useful + comm) / span, fraction"),
    ):
        name = f"prvstream_{field}"
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge",
                f'{name}{{job="{job}"}} {_num(getattr(state.metrics, field))}']
    for name, help_text, value in (
        ("prvstream_span_seconds", "length of the job's span so far", state.span_ns / 1e9),
        ("prvstream_reports", "reports included", float(state.reports)),
        ("prvstream_devices", "devices seen", float(len(state.devices))),
    ):
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge",
                f'{name}{{job="{job}"}} {_num(value)}']
    for field, help_text in (("useful", "compute kernel time"),
                             ("comm", "communication time not hidden under compute"),
                             ("idle", "time with neither"),
                             ("overlap", "communication time hidden under compute")):
        name = f"prvstream_device_{field}_seconds"
        out += [f"# HELP {name} {help_text} per device", f"# TYPE {name} gauge"]
        for d in state.devices:
            out.append(f'{name}{{job="{job}",host="{_label(d.host)}",device="{d.device}"}} '
                       f"{_num(getattr(d, field + '_ns') / 1e9)}")
    if state.phase_totals:
        for field, help_text in (
            ("parallel_efficiency", "parallel efficiency over all instances of a phase name"),
            ("load_balance", "load balance over all instances of a phase name"),
            ("communication_efficiency", "communication efficiency over all instances"),
            ("orchestration_efficiency", "orchestration efficiency over all instances"),
        ):
            name = f"prvstream_phase_{field}"
            out += [f"# HELP {name} {help_text}, fraction", f"# TYPE {name} gauge"]
            out += [f'{name}{{job="{job}",phase="{_label(r.name)}"}} '
                    f"{_num(getattr(r.metrics, field))}" for r in state.phase_totals]
        for name, help_text, attr in (
            ("prvstream_phase_instances", "instances of a phase name so far", "index"),
            ("prvstream_phase_seconds", "sum of the spans of a phase name's instances",
             "span_ns"),
        ):
            scale = 1e9 if attr == "span_ns" else 1.0
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
            out += [f'{name}{{job="{job}",phase="{_label(r.name)}"}} '
                    f"{_num(getattr(r, attr) / scale)}" for r in state.phase_totals]
    return "\n".join(out) + "\n"


def _num(x: float) -> str:
    return repr(float(x)) if math.isfinite(x) else "NaN"


def write_prom_file(path: str | os.PathLike[str], state: SummaryState) -> None:
    """Write the textfile-collector file atomically (collectors never see half a file)."""
    atomic_write(path, prometheus_text(state).encode())


def plot_summary(state: SummaryState, history: Sequence[SummaryRecord],
                 png: str | os.PathLike[str]) -> None:
    """Per-device stacked useful/comm/idle bars and the metrics over time, into a PNG.

    Needs matplotlib (``pip install 'prvstream[plot]'``); imported only here.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PrvstreamError("--plot needs matplotlib; install it with "
                             "pip install 'prvstream[plot]'") from exc
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    devs = sorted(state.devices, key=lambda d: (d.host, d.device))
    labels = [f"{d.host}:{d.device}" for d in devs]
    xs = list(range(len(devs)))
    useful = [d.useful_ns / 1e9 for d in devs]
    comm = [d.comm_ns / 1e9 for d in devs]
    idle = [d.idle_ns / 1e9 for d in devs]
    ax1.bar(xs, useful, label="useful", color="#3a7d44")
    ax1.bar(xs, comm, bottom=useful, label="communication", color="#e0a030")
    ax1.bar(xs, idle, bottom=[u + c for u, c in zip(useful, comm, strict=True)], label="idle",
            color="#bbbbbb")
    ax1.set_xticks(xs, labels, rotation=60, ha="right", fontsize=7)
    ax1.set_ylabel("seconds")
    ax1.set_ylim(0, 1.18 * max([u + c + i for u, c, i in zip(useful, comm, idle, strict=True)],
                               default=1.0) or 1.0)
    ax1.set_title(f"job {state.job}: devices")
    ax1.legend(fontsize=8, ncol=3, loc="upper center")
    series: Sequence[SummaryRecord] = state.windows or history or [state]
    t0 = min((r.start_ns for r in series), default=0)
    x = [((r.start_ns if r.view == "window" else r.end_ns) - t0) / 1e9 for r in series]
    for field, short in (("parallel_efficiency", "PE"), ("load_balance", "LB"),
                         ("communication_efficiency", "CE"),
                         ("orchestration_efficiency", "OE")):
        ax2.plot(x, [100 * getattr(r.metrics, field) for r in series], marker=".", label=short)
    ax2.set_ylim(0, 105)
    ax2.set_xlabel("seconds since start" + (" (windows)" if state.windows else ""))
    ax2.set_ylabel("%")
    ax2.set_title("metrics over time")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
