"""Where ``convert`` writes: ``-o OUT`` as a base name, ``-o DIR/`` (or an existing directory)
as ``DIR/<name>.*``; never over a file prvstream did not write (``--force`` to allow it), and
every problem with the output said in one line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from prvstream.sinks.errors import OutputConflict
from prvstream.sinks.files import atomic_write
from prvstream.sinks.logger import get_logger

__all__ = ["OUTPUT_SUFFIXES", "WRITTEN_LIST", "claim", "resolve_output"]

log = get_logger(__name__)

#: every file ``convert OUT`` writes, by suffix of the base name
OUTPUT_SUFFIXES = (".prv", ".pcf", ".row", ".summary.json", ".summary.jsonl")
#: hidden list, in an output directory, of the files ``convert`` wrote there
WRITTEN_LIST = ".prvstream-outputs"


def _name_for(inputs: Sequence[str]) -> str:
    """The base name inside an output directory: the single input's name, else ``trace``."""
    if len(inputs) == 1:
        p = Path(inputs[0].rstrip("/") or "/")
        name = p.name if p.is_dir() else p.stem
        if name and name not in (".", ".."):
            return name
    return "trace"


def resolve_output(raw: str, inputs: Sequence[str], *, force: bool = False) -> Path:
    """The base path ``OUT`` (``OUT.prv`` ...) of ``-o raw``, its directory created; raises
    ``OutputConflict`` (one line) when it cannot be written or would overwrite a file
    prvstream did not write (unless ``force``)."""
    path = Path(raw)
    if raw.endswith(os.sep) or path.is_dir():
        out = path / _name_for(inputs)
    else:
        out = path
        for suffix in (".prv", ".pcf", ".row"):
            if out.name.endswith(suffix):
                out = out.with_name(out.name[: -len(suffix)])
    parent = out.parent
    if parent.exists() and not parent.is_dir():
        raise OutputConflict(f"cannot write {out}.prv: {parent} is not a directory; choose "
                             "another -o")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputConflict(f"cannot create the output directory {parent}: "
                             f"{exc.strerror or exc}; choose another -o") from exc
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputConflict(f"cannot write in {parent} (permission denied or read-only); "
                             "choose another -o")
    written = _written(parent)
    for suffix in OUTPUT_SUFFIXES:
        target = out.with_name(out.name + suffix)
        if target.is_symlink():
            raise OutputConflict(f"{target} is a symlink; prvstream never writes through "
                                 "one: remove it or choose another -o")
        if target.exists() and target.name not in written and not force:
            raise OutputConflict(f"{target} exists and was not written by prvstream; move "
                                 "it away, choose another -o, or pass --force to replace it")
    return out


def _written(folder: Path) -> set[str]:
    try:
        return {n for n in (folder / WRITTEN_LIST).read_text().splitlines() if n}
    except (OSError, UnicodeDecodeError):
        return set()


def claim(out: Path) -> None:
    """Record ``out``'s files as written by prvstream (so that a rerun may replace them); a
    list that holds them already is left as it is (a rerun writes nothing here)."""
    written = _written(out.parent)
    names = written | {out.name + s for s in OUTPUT_SUFFIXES}
    if names == written:
        return
    atomic_write(out.parent / WRITTEN_LIST, "".join(f"{n}\n" for n in sorted(names)))
