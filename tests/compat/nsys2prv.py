"""Run BSC's nsys2prv 0.5.8 beside the project (installed from PyPI into a cache, never vendored).

nsys2prv shells out to ``nsys``; ``tests/bench/nsys_standin.py`` stands in for it. Its
configuration files come from its sdist, unpacked into the same cache at test time. Nothing of
it is committed. The cache is ``$PRVSTREAM_COMPAT_CACHE`` (default
``~/.cache/prvstream-compat``); traces it converted are kept there by export identity, so only
the first run pays for nsys2prv's pandas start-up.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import venv
from collections.abc import Iterator
from pathlib import Path

__all__ = ["NSYS2PRV", "Unavailable", "cache_dir", "cfg_files", "convert", "prepared_input"]

NSYS2PRV = "nsys2prv==0.5.8"
STANDIN = Path(__file__).resolve().parents[1] / "bench" / "nsys_standin.py"
_PIP_TIMEOUT = 600.0
_RUN_TIMEOUT = 900.0


class Unavailable(Exception):
    """nsys2prv (or its sdist) cannot be installed or cannot read an export: the reason."""


def cache_dir() -> Path:
    path = Path(os.environ.get("PRVSTREAM_COMPAT_CACHE",
                               str(Path.home() / ".cache" / "prvstream-compat")))
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One process at a time installs, unpacks or converts into the cache (parallel test
    sessions share it)."""
    with (cache_dir() / "lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _pip(python: Path, *args: str) -> None:
    try:
        done = subprocess.run([str(python), "-m", "pip", "-q", "--disable-pip-version-check",
                               *args], capture_output=True, text=True, timeout=_PIP_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"pip {args[0]} {NSYS2PRV} failed: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise Unavailable(f"pip {args[0]} {NSYS2PRV} failed (no network to PyPI?): {tail[0]}")


def executable() -> Path:
    """The nsys2prv console script in its own venv, created on first use."""
    with _locked():
        return _executable()


def _executable() -> Path:
    where = cache_dir() / "nsys2prv-0.5.8"
    exe = where / "bin" / "nsys2prv"
    if exe.exists():
        return exe
    shutil.rmtree(where, ignore_errors=True)
    venv.create(where, with_pip=True, clear=True)
    _pip(where / "bin" / "python", "install", NSYS2PRV)
    if not exe.exists():
        raise Unavailable(f"{NSYS2PRV} installed no nsys2prv script")
    return exe


def cfg_files() -> list[Path]:
    """nsys2prv's ``cfgs/basics`` and ``cfgs/analysis`` files, from its sdist (cached)."""
    with _locked():
        return _cfg_files()


def _cfg_files() -> list[Path]:
    root = cache_dir() / "nsys2prv-0.5.8-cfgs"
    if not (root / "done").exists():
        shutil.rmtree(root, ignore_errors=True)
        download = cache_dir() / "sdist"
        download.mkdir(exist_ok=True)
        _pip(Path(sys.executable), "download", "--no-deps", "--no-binary", ":all:", "-d",
             str(download), NSYS2PRV)
        sdists = sorted(download.glob("nsys2prv-0.5.8.tar.gz"))
        if not sdists:
            raise Unavailable(f"pip download {NSYS2PRV} gave no sdist")
        with tarfile.open(sdists[0]) as tar:
            members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith(".cfg")
                       and ("/cfgs/basics/" in m.name or "/cfgs/analysis/" in m.name)]
            for m in members:
                target = root / Path(m.name).parent.name / Path(m.name).name
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(m)
                assert source is not None
                target.write_bytes(source.read())
        (root / "done").write_text("")
    return sorted(root.glob("*/*.cfg"))


def _tables(path: Path) -> set[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()


#: tables nsys2prv 0.5.8 reads without checking that they exist
_REQUIRED = {
    "META_DATA_EXPORT": "its metadata table (2022 exports call it EXPORT_META_DATA)",
    "TARGET_INFO_SYSTEM_ENV": "the host name table",
}


def prepared_input(export: Path, work: Path) -> tuple[Path, str]:
    """The file nsys2prv is given, and a note on what was supplied for it.

    nsys2prv 0.5.8 also joins ``TARGET_INFO_GPU`` (GPU names) and reads
    ``TARGET_INFO_CUDA_CONTEXT_INFO`` (which process uses which device); trimmed exports lack
    both. A copy gets the two, derived from the export's own kernel rows (GPU names empty), so
    that nsys2prv converts the same activity. Raises ``Unavailable`` for what cannot be supplied.
    """
    tables = _tables(export)
    for table, what in _REQUIRED.items():
        if table not in tables:
            raise Unavailable(f"nsys2prv 0.5.8 needs {what} ({table}); {export.name} has none")
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables and "ENUM_CUDA_MEMCPY_OPER" not in tables:
        raise Unavailable(f"nsys2prv 0.5.8 needs ENUM_CUDA_MEMCPY_OPER (2024.5+ exports); "
                          f"{export.name} has none")
    missing = [t for t in ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_CONTEXT_INFO") if t not in tables]
    if not missing:
        return export, ""
    copy = work / export.name
    shutil.copyfile(export, copy)
    copy.chmod(0o644)
    con = sqlite3.connect(copy)
    try:
        if "TARGET_INFO_GPU" in missing:
            con.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT)")
        if "TARGET_INFO_CUDA_CONTEXT_INFO" in missing:
            con.execute("CREATE TABLE TARGET_INFO_CUDA_CONTEXT_INFO AS SELECT DISTINCT "
                        "(globalPid >> 24) & 16777215 AS processId, deviceId, contextId "
                        "FROM CUPTI_ACTIVITY_KIND_KERNEL")
        con.commit()
    finally:
        con.close()
    return copy, "supplied " + " and ".join(missing)


def _identity(export: Path) -> str:
    st = export.stat()
    with export.open("rb") as fh:
        head = fh.read(1 << 20)
    return hashlib.sha256(head + f"{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]


def convert(export: Path) -> tuple[Path, str]:
    """nsys2prv's trace of ``export`` (``out.prv`` beside ``.pcf``/``.row``) and the input note.

    Runs ``nsys2prv -t cuda_api_trace[,nvtx_pushpop_trace] EXPORT out`` with the stand-in
    ``nsys`` first on PATH, in a cache folder keyed by the export's identity.
    """
    exe = executable()
    with _locked():
        return _convert(exe, export)


def _convert(exe: Path, export: Path) -> tuple[Path, str]:
    folder = cache_dir() / "traces" / f"{export.stem}-{_identity(export)}"
    prv = folder / "out.prv"
    note_file = folder / "note"
    if prv.exists() and note_file.exists():
        return prv, note_file.read_text()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    given, note = prepared_input(export, folder)
    if given == export:
        (folder / export.name).symlink_to(export.resolve())
    bindir = folder / "bin"
    bindir.mkdir()
    nsys = bindir / "nsys"
    nsys.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    nsys.chmod(0o755)
    kinds = ["cuda_api_trace"]
    if "NVTX_EVENTS" in _tables(export):
        kinds.append("nvtx_pushpop_trace")
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("NSYS_HOME", None)
    try:
        done = subprocess.run([str(exe), "-t", ",".join(kinds), export.name, "out"], cwd=folder,
                              env=env, capture_output=True, text=True, timeout=_RUN_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise Unavailable(f"nsys2prv did not finish on {export.name} in {_RUN_TIMEOUT:.0f} s"
                          ) from exc
    if done.returncode != 0 or not prv.exists():
        lines = [ln for ln in (done.stdout + done.stderr).splitlines() if "Error" in ln]
        raise Unavailable(f"nsys2prv failed on {export.name}: "
                          f"{(lines or ['no error line'])[-1][:200]}")
    note_file.write_text(note)
    return prv, note
