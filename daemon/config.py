"""One typed settings object, read from TOML, overridden by ``PRVSTREAM_*`` variables and flags.

Precedence, lowest first: defaults, the TOML file (``--config``), environment variables
(``PRVSTREAM_CHUNK_ROWS=...``), command-line flags. Validation happens once, at start-up, and
a bad value raises ``ConfigError`` naming the offending key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from prvstream.daemon.kinds.names import ALL_KINDS
from prvstream.daemon.stream.ranks import DEFAULT_RANK_PATTERN
from prvstream.sinks.errors import ConfigError
from prvstream.sinks.logger import get_logger

__all__ = [
    "ALL_KINDS",
    "FLAGS",
    "USER_KINDS",
    "Settings",
    "default_state_dir",
    "load_settings",
    "parse_kinds",
    "user_kind",
]

log = get_logger(__name__)


#: what people call a kind where it differs from the internal name: Paraver communication
#: records are "links" (arrows) in everything a user reads; "communication" means time
_USER_NAMES = {"comm": "links"}
_INTERNAL = {v: k for k, v in _USER_NAMES.items()}

#: the kinds as ``--trace`` and ``PRVSTREAM_KINDS`` spell them
USER_KINDS: tuple[str, ...] = tuple(_USER_NAMES.get(k, k) for k in ALL_KINDS)

#: the command-line flag that sets each setting (settings without one: file and environment)
FLAGS: dict[str, str] = {
    "chunk_rows": "--chunk-rows", "fan_in": "--fan-in", "kinds": "--trace", "poll": "--poll",
    "settle": "--settle", "idle_finalize": "--idle-finalize", "workers": "--workers",
    "state_dir": "--state", "out_dir": "--out", "log_level": "--log-level",
    "log_json": "--log-json", "dask": "--dask", "expect_ranks": "--expect",
}

LogLevel = Literal["debug", "info", "warning", "error"]


def user_kind(kind: str) -> str:
    """The name a person reads for an internal kind (``comm`` -> ``links``)."""
    return _USER_NAMES.get(kind, kind)


def parse_kinds(text: str | list[str]) -> list[str]:
    """``kernel,links,...`` (or a list) as internal kind names; raise ``ConfigError`` listing
    the valid names for an unknown one (``comm`` is accepted for ``links``)."""
    names = text.split(",") if isinstance(text, str) else [str(k) for k in text]
    kinds: list[str] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        kind = _INTERNAL.get(name, name)
        if kind not in ALL_KINDS:
            raise ConfigError(f"unknown data kind {name!r}; choose from {', '.join(USER_KINDS)}")
        if kind not in kinds:
            kinds.append(kind)
    return kinds


def default_state_dir() -> str:
    """Where journals live: ``$STATE_DIRECTORY`` (systemd), ``$XDG_STATE_HOME``, or ~/.local."""
    if systemd_dir := os.environ.get("STATE_DIRECTORY"):
        return systemd_dir.split(":")[0]
    if xdg := os.environ.get("XDG_STATE_HOME"):
        return str(Path(xdg) / "prvstream")
    return str(Path.home() / ".local" / "state" / "prvstream")


class Settings(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Every knob prvstream has. New fields always get a default."""

    #: rows fetched from SQLite per chunk (memory per table stream is O(chunk_rows))
    chunk_rows: int = 2048
    #: most sorted runs merged at once; more inputs are merged in several passes
    fan_in: int = 16
    #: data kinds to convert (empty: every kind present in the export)
    kinds: list[str] = msgspec.field(default_factory=list)
    #: polling interval in seconds for network file systems; 0 uses native events (inotify)
    poll: float = 0.0
    #: an export must stop changing for this long before it is taken
    settle: float = 5.0
    #: finalize a job when no report arrived for this long (seconds; 0 disables)
    idle_finalize: float = 900.0
    #: converter workers
    workers: int = 2
    #: files looked at for readiness at once, whatever the number waiting (0: max(4, 2 x
    #: workers)); a flood of files waits in a queue of a few numbers each
    readiness_checkers: int = 0
    #: files of one job checked or ready for the trace at once, beside a group being committed
    #: (itself at most this many reports); a flood's other files wait as their path text only
    #: (memory flat in the flood)
    readiness_ahead: int = 512
    #: per-job journals (local disk, never the shared file system)
    state_dir: str = msgspec.field(default_factory=default_state_dir)
    #: outputs go to DIR/<job relative to its root>/ instead of <job>/prvstream/
    out_dir: str = ""
    #: the live trace origin is the first report's start minus this many seconds
    skew_allowance: float = 60.0
    #: efficiency window length in seconds
    window: float = 10.0
    #: NVTX ranges whose name matches this regular expression are efficiency phases
    phase_pattern: str = r"(?i)^((train_)?(step|iteration|iter)\b|ProfilerStep#\d+$)"
    #: GPU idle gaps longer than this (ns) are counted as gaps in the summaries
    gap_threshold_ns: int = 1_000_000
    #: summary.json keeps the latest this many windows and instances of each phase name
    #: (summary.jsonl keeps everything)
    summary_recent: int = 64
    #: write report.html (``prvstream report``) beside the summaries at every commit; it is
    #: always written when a job is finalized
    report_html: bool = False
    #: names each top-N table of the summary shows (kernels, NCCL, memcpy, NVTX), then "other"
    summary_top: int = 20
    #: NCCL kernels in the efficiency model: "communication" (as BSC's BasicAnalysis) or
    #: "useful" work (as TALP's CUPTI backend); recorded in every summary record
    nccl_as: Literal["communication", "useful"] = "communication"
    #: ranks every job is expected to have (0: no expectation); a job's ``prvstream.expect``
    #: file overrides it; ``status.json`` then lists the ``missing_ranks``
    expect_ranks: int = 0
    #: a report's rank when its MPI tables do not give one: the first group of this regular
    #: expression that matches its file name (``ranks.DEFAULT_RANK_PATTERN``); "" turns it off
    rank_pattern: str = DEFAULT_RANK_PATTERN
    #: bytes reserved for the .prv header so that it can be rewritten in place
    header_capacity: int = 4096
    #: unset: warning for commands a person runs, info for the daemon
    log_level: LogLevel | None = None
    #: unset: readable for commands a person runs; the daemon writes JSON under systemd or
    #: when stderr is not a terminal
    log_json: bool | None = None
    #: read exports in a reader process beside the converter (two cores; same bytes) when the
    #: compiled row filler is there (``PRVSTREAM_READER=0`` turns it off)
    reader: bool = True
    #: use the Python record formatter and row filler even where the C ones were built (for
    #: comparisons; ``PRVSTREAM_PURE_PYTHON=1``)
    pure_python: bool = False
    #: read a kind of one table in storage order through a bounded reorder buffer where its
    #: start bounds allow, instead of SQLite's sort (same bytes; ``PRVSTREAM_PRESORT=0``
    #: turns it off, for comparisons)
    presort: bool = True
    #: run per-report work on Dask: ``local[:N]``, ``inproc[:N]``, ``tcp://HOST:PORT`` or a
    #: scheduler file ("" = in this process; ``distributed`` is then never imported)
    dask: str = ""

    def __post_init__(self) -> None:
        checks: list[tuple[str, bool, str]] = [
            ("chunk_rows", self.chunk_rows >= 1, "must be at least 1"),
            ("fan_in", self.fan_in >= 2, "must be at least 2"),
            ("poll", self.poll >= 0, "must be 0 (native events) or a positive interval"),
            ("settle", self.settle >= 0, "must not be negative"),
            ("idle_finalize", self.idle_finalize >= 0, "must not be negative"),
            ("workers", self.workers >= 1, "must be at least 1"),
            ("readiness_checkers", self.readiness_checkers >= 0,
             "must be 0 (max(4, 2 x workers)) or a count"),
            ("readiness_ahead", self.readiness_ahead >= 1, "must be at least 1"),
            ("skew_allowance", self.skew_allowance >= 0, "must not be negative"),
            ("window", self.window > 0, "must be positive"),
            ("gap_threshold_ns", self.gap_threshold_ns >= 0, "must not be negative"),
            ("summary_recent", self.summary_recent >= 1, "must be at least 1"),
            ("summary_top", self.summary_top >= 1, "must be at least 1"),
            ("header_capacity", self.header_capacity >= 256, "must be at least 256 bytes"),
            ("expect_ranks", self.expect_ranks >= 0, "must be 0 (no expectation) or a count"),
        ]
        for key, ok, why in checks:
            if not ok:
                raise _BadValue(key, why, getattr(self, key))
        if self.rank_pattern:
            try:
                groups = re.compile(self.rank_pattern).groups
            except re.error as exc:
                raise _BadValue("rank_pattern", f"is not a regular expression ({exc})",
                                self.rank_pattern) from None
            if groups < 1:
                raise _BadValue("rank_pattern", "needs a (group) around the rank's digits",
                                self.rank_pattern)
        if self.dask:
            from prvstream.daemon.scale.cluster import parse_spec  # no Dask import

            parse_spec(self.dask)
        unknown = sorted(set(self.kinds) - set(ALL_KINDS))
        if unknown:
            raise _BadValue("kinds", f"names unknown data kinds; choose from "
                            f"{', '.join(USER_KINDS)}", unknown)


class _BadValue(ConfigError):
    """A setting out of range; ``load_settings`` says where the value came from."""

    def __init__(self, key: str, why: str, value: object) -> None:
        super().__init__(f"setting {key!r} {why} (got {value!r})")
        self.key, self.why, self.value = key, why, value


#: the settings' names, in their order (``__struct_fields__``: ``msgspec.structs.fields``
#: would resolve every annotation of ``Settings`` at import, which ``msgspec.convert`` does
#: again for itself at the first load)
_FIELDS: tuple[str, ...] = Settings.__struct_fields__


#: on/off settings, and the environment values that mean off (anything else means on)
_SWITCHES = frozenset({"reader", "pure_python", "presort"})
_OFF = frozenset({"", "0", "no", "off", "false"})


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """``PRVSTREAM_<FIELD>`` variables, parsed as TOML values where they parse, else strings."""
    found: dict[str, Any] = {}
    for name in _FIELDS:
        raw = environ.get(f"PRVSTREAM_{name.upper()}")
        if raw is None:
            continue
        if name == "kinds":
            found[name] = raw  # checked by parse_kinds in load_settings
            continue
        if name in _SWITCHES:  # PRVSTREAM_READER=0, PRVSTREAM_PURE_PYTHON=1 and their kin
            found[name] = raw.strip().lower() not in _OFF
            continue
        import tomllib  # only for such a value (its import is a start-up cost)

        try:
            found[name] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            found[name] = raw
    return found


#: msgspec's type names in the words of a person writing a value
_EXPECTED = {"float": "a number", "int": "a whole number", "bool": "true or false",
             "str": "text in quotes (in the config file)", "array": "a list"}


def _where(key: str, origin: str, value: object) -> str:
    """Where a value came from, as the person wrote it."""
    if origin == "flag":
        return FLAGS.get(key, key)
    if origin == "env":
        return f"PRVSTREAM_{key.upper()}={value}"
    return f"{key} = {value!r} in {origin}"


def _describe(exc: msgspec.ValidationError, origins: Mapping[str, str],
              merged: Mapping[str, Any]) -> str:
    """A msgspec validation message in the user's words, naming the flag or variable."""
    text = str(exc)
    match = re.search(r"at `\$\.(\w+)", text)
    if match is None:
        return f"invalid configuration: {text}"
    key = match.group(1)
    want = re.match(r"Expected `([^`]+)`", text)
    why = text.split(" - at ")[0]
    if want is not None:
        types = [_EXPECTED.get(t.strip(), t.strip()) for t in want.group(1).split("|")
                 if t.strip() != "null"]
        why = "must be " + " or ".join(types)
    return f"{_where(key, origins.get(key, 'default'), merged.get(key))}: {why}"



def load_settings(config_file: str | os.PathLike[str] | None = None,
                  overrides: Mapping[str, Any] | None = None,
                  environ: Mapping[str, str] | None = None) -> Settings:
    """Build and validate the settings; raise ``ConfigError`` naming the bad key."""
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    if config_file is not None:
        import tomllib  # only with a config file (its import is a start-up cost)

        path = Path(config_file)
        try:
            with path.open("rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError as exc:
            raise ConfigError(f"config file {path} does not exist; pass an existing file") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
        # accept both a flat file and a [prvstream] table
        from_file = data.get("prvstream", data)
        merged.update(from_file)
        origins.update(dict.fromkeys(from_file, f"config file {path}"))
    from_env = _env_overrides(os.environ if environ is None else environ)
    merged.update(from_env)
    origins.update(dict.fromkeys(from_env, "env"))
    from_flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    merged.update(from_flags)
    origins.update(dict.fromkeys(from_flags, "flag"))
    unknown = sorted(set(merged) - set(_FIELDS))
    if unknown:
        raise ConfigError(
            f"unknown setting(s) {unknown} in {origins.get(unknown[0], 'the settings')}; "
            f"known settings are {', '.join(sorted(_FIELDS))}"
        )
    if "kinds" in merged:
        try:
            merged["kinds"] = parse_kinds(merged["kinds"])
        except ConfigError as exc:
            where = _where("kinds", origins["kinds"], merged["kinds"])
            raise ConfigError(f"{where}: {exc}") from None
    try:
        return msgspec.convert(merged, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(_describe(exc, origins, merged)) from exc
    except _BadValue as exc:
        where = _where(exc.key, origins.get(exc.key, "default"), merged.get(exc.key))
        raise ConfigError(f"{where}: {exc.why}") from exc
