"""The reader process's command line, and a reader started early for a conversion.

Numpy-free on purpose: ``cli.main`` starts the reader for a conversion of one large export
before numpy and the converter's modules load (``start_early``), so that the child's
interpreter starts, and its first queries run, on the second core while this process imports;
``reader`` adopts that child (``take``) instead of starting one. The compiled row filler and
SQLite row reader it loads are declared here too, so that nothing here needs numpy (``rowfill``
re-exports them).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from prvstream.sinks.native import OptionalExtension

if TYPE_CHECKING:  # ``subprocess`` loads only to start a child (a small export starts none)
    import subprocess

__all__ = ["PRESTART_BYTES", "ROW_FILLER", "SQL_ROWS", "command", "enabled", "start_early",
           "take"]

#: the compiled filler (optional; its packed layouts assume a little-endian machine)
ROW_FILLER = OptionalExtension("prvstream.daemon.nsys._rowfill", "fill_rows", "row filler",
                               little_endian=True)
#: SQLite rows fetched straight into the layout in C, for the reader process (optional:
#: built where SQLite's header was there; without it the reader fetches tuples and fills)
SQL_ROWS = OptionalExtension("prvstream.daemon.nsys._sqlrows", "open", "SQLite row reader",
                             little_endian=True)

#: an export file at least this large is likely to hold the rows the reader reads from
#: (``sources._READER_MIN_ROWS``): synthetic and pipeline exports take about 55 bytes a row,
#: the real ones 100 to 400 (their other tables); a reader started for a report it does not
#: read from idles until the batch retires it
PRESTART_BYTES = 4 << 20

#: the child started by ``start_early``, until ``take`` hands it over
_early: subprocess.Popen[bytes] | None = None


def enabled() -> bool:
    """Whether the reader process can run here (``Settings.reader`` says whether to use it)."""
    return ROW_FILLER.compiled() and bool(sys.executable)


def command() -> list[str]:
    """The child's command line (``_readerchild``: an isolated interpreter without site
    packages, loading the compiled modules by path)."""
    child = str(Path(__file__).with_name("_readerchild.py"))
    return [sys.executable, "-I", "-S", child, ROW_FILLER.file or "",
            (SQL_ROWS.file or "") if SQL_ROWS.compiled() else ""]


def spawn() -> subprocess.Popen[bytes]:
    """Start a child (``OSError`` when it cannot be)."""
    import subprocess

    return subprocess.Popen(command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, close_fds=True)


def large_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a regular file of ``PRESTART_BYTES`` or more."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size >= PRESTART_BYTES


def start_early(inputs: Sequence[str], use_reader: bool) -> bool:
    """Start the reader now for a conversion of ``inputs`` when it is one export file large
    enough for the reader to read (``sources.prestart_reader``'s rule) and the reader is on
    and can run; True when one was started. A child never taken ends at exit."""
    global _early
    if _early is not None or len(inputs) != 1 or not use_reader or not enabled():
        return False
    if not large_file(inputs[0]):
        return False
    try:
        _early = spawn()
    except OSError:  # ``reader.lease`` tries again and says why
        return False
    return True


def take() -> subprocess.Popen[bytes] | None:
    """The child ``start_early`` started, if it still runs (it is then the caller's)."""
    global _early
    found, _early = _early, None
    if found is not None and found.poll() is not None:
        _close(found)
        return None
    return found


def _close(proc: subprocess.Popen[bytes]) -> None:
    import subprocess

    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@atexit.register
def _never_taken() -> None:
    """End a child that no conversion took: its input closed, it ends by itself."""
    proc = take()
    if proc is not None:
        _close(proc)
