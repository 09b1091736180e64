"""One typed settings object, read from TOML, overridden by ``PRVSTREAM_*`` variables and flags.

Precedence, lowest first: defaults, the TOML file (``--config``), environment variables
(``PRVSTREAM_CHUNK_ROWS=...``), command-line flags. Validation happens once, at start-up, and
a bad value raises ``ConfigError`` naming the offending key.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from prvstream.daemon.kinds.names import ALL_KINDS
from prvstream.sinks.errors import ConfigError
from prvstream.sinks.logger import get_logger

__all__ = ["ALL_KINDS", "Settings", "default_state_dir", "load_settings"]

log = get_logger(__name__)


LogLevel = Literal["debug", "info", "warning", "error"]


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
    #: per-job journals (local disk, never the shared file system)
    state_dir: str = msgspec.field(default_factory=default_state_dir)
    #: outputs go to DIR/<job relative to its root>/ instead of <job>/prvstream/
    out_dir: str = ""
    #: the live trace origin is the first report's start minus this many seconds
    skew_allowance: float = 60.0
    #: efficiency window length in seconds
    window: float = 10.0
    #: NVTX ranges whose name matches this regular expression are efficiency phases
    phase_pattern: str = r"(?i)^(train_)?(step|iteration|iter)\b"
    #: GPU idle gaps longer than this (ns) are counted as gaps in the summaries
    gap_threshold_ns: int = 1_000_000
    #: summary.json keeps the latest this many windows and instances of each phase name
    #: (summary.jsonl keeps everything)
    summary_recent: int = 64
    #: bytes reserved for the .prv header so that it can be rewritten in place
    header_capacity: int = 4096
    log_level: LogLevel = "info"
    log_json: bool | None = None
    #: where ``prvstream summary --prom-file`` style output goes for the daemon ("" = off)
    prom_file: str = ""

    def __post_init__(self) -> None:
        checks: list[tuple[str, bool, str]] = [
            ("chunk_rows", self.chunk_rows >= 1, "must be at least 1"),
            ("fan_in", self.fan_in >= 2, "must be at least 2"),
            ("poll", self.poll >= 0, "must be 0 (native events) or a positive interval"),
            ("settle", self.settle >= 0, "must not be negative"),
            ("idle_finalize", self.idle_finalize >= 0, "must not be negative"),
            ("workers", self.workers >= 1, "must be at least 1"),
            ("skew_allowance", self.skew_allowance >= 0, "must not be negative"),
            ("window", self.window > 0, "must be positive"),
            ("gap_threshold_ns", self.gap_threshold_ns >= 0, "must not be negative"),
            ("summary_recent", self.summary_recent >= 1, "must be at least 1"),
            ("header_capacity", self.header_capacity >= 256, "must be at least 256 bytes"),
        ]
        for key, ok, why in checks:
            if not ok:
                raise ConfigError(f"setting {key!r} {why} (got {getattr(self, key)!r})")
        unknown = sorted(set(self.kinds) - set(ALL_KINDS))
        if unknown:
            raise ConfigError(
                f"setting 'kinds' names unknown data kinds {unknown}; choose from {list(ALL_KINDS)}"
            )


_FIELDS = {f.name: f for f in msgspec.structs.fields(Settings)}


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """``PRVSTREAM_<FIELD>`` variables, parsed as TOML values where they parse, else strings."""
    found: dict[str, Any] = {}
    for name in _FIELDS:
        raw = environ.get(f"PRVSTREAM_{name.upper()}")
        if raw is None:
            continue
        if name == "kinds":
            found[name] = [k.strip() for k in raw.split(",") if k.strip()]
            continue
        try:
            found[name] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            found[name] = raw
    # watchfiles-style switch: PRVSTREAM_POLL=1 means "poll every second"
    return found


def load_settings(config_file: str | os.PathLike[str] | None = None,
                  overrides: Mapping[str, Any] | None = None,
                  environ: Mapping[str, str] | None = None) -> Settings:
    """Build and validate the settings; raise ``ConfigError`` naming the bad key."""
    merged: dict[str, Any] = {}
    if config_file is not None:
        path = Path(config_file)
        try:
            with path.open("rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError as exc:
            raise ConfigError(f"config file {path} does not exist; pass an existing file") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
        # accept both a flat file and a [prvstream] table
        merged.update(data.get("prvstream", data))
    merged.update(_env_overrides(os.environ if environ is None else environ))
    merged.update({k: v for k, v in (overrides or {}).items() if v is not None})
    unknown = sorted(set(merged) - set(_FIELDS))
    if unknown:
        raise ConfigError(
            f"unknown setting(s) {unknown}; known settings are {sorted(_FIELDS)}"
        )
    try:
        return msgspec.convert(merged, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from exc
