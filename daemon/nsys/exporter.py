"""Running ``nsys export --type sqlite`` on an ``.nsys-rep`` report, for batch conversion and
the watcher alike: written under a hidden name and renamed into place when complete.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from prvstream.sinks.errors import ExportIncomplete
from prvstream.sinks.logger import get_logger

__all__ = ["export_with_nsys", "nsys_executable"]

log = get_logger(__name__)

#: siblings SQLite leaves while a transaction is open
_BUSY_SUFFIXES = ("-journal", "-wal")


def nsys_executable() -> str | None:
    """The ``nsys`` found on PATH, or ``None``."""
    return shutil.which("nsys")


def export_with_nsys(rep: Path, dest: Path | None = None, *, nsys: str | None = None,
                     timeout: float | None = 3600.0) -> Path:
    """Run ``nsys export --type sqlite`` on ``rep``; return the finished ``.sqlite`` path.

    Writes to a hidden temporary name beside ``dest`` (default: ``rep`` with the suffix
    ``.sqlite``) and renames it into place, so that watchers never see a half-written export.
    Raises ``ExportIncomplete`` when nsys is not on PATH or the export fails.
    """
    rep = Path(rep)
    exe = nsys or nsys_executable()
    if exe is None:
        raise ExportIncomplete(
            f"{rep} is an .nsys-rep report and nsys is not on PATH: export it with "
            f"'nsys export --type sqlite {rep}' or install Nsight Systems so that prvstream can")
    target = Path(dest) if dest is not None else rep.with_suffix(".sqlite")
    tmp = target.with_name(f".{target.stem}.{os.getpid()}.partial.sqlite")
    cmd = [exe, "export", "--type", "sqlite", "--force-overwrite", "true",
           "--output", str(tmp), str(rep)]
    log.info("nsys_export_started", report=str(rep), output=str(target))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _unlink_quietly(tmp)
        raise ExportIncomplete(
            f"'nsys export' of {rep} did not finish ({exc}); run it by hand: "
            f"nsys export --type sqlite {rep}") from exc
    if proc.returncode != 0 or not tmp.is_file():
        _unlink_quietly(tmp)
        detail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ExportIncomplete(
            f"'nsys export' of {rep} failed (status {proc.returncode}: {detail[0]}); "
            f"check the report with 'nsys stats {rep}' or export it by hand")
    for suffix in _BUSY_SUFFIXES:
        _unlink_quietly(Path(f"{tmp}{suffix}"))
    os.replace(tmp, target)
    log.info("nsys_export_done", report=str(rep), output=str(target))
    return target


def _unlink_quietly(path: Path) -> None:
    path.unlink(missing_ok=True)
