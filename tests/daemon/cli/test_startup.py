"""Start-up stays light: what ``--version`` and a small conversion import (never timed here;
the times are in docs/benchmarks.md)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prvstream.daemon import config
from prvstream.daemon.cli import main as cli_main

#: runs the command line in a fresh interpreter and prints the modules it imported
_PROBE = """
import json, sys
from prvstream.daemon.cli.main import main
status = main(sys.argv[1:])
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def _imported(*argv: str) -> tuple[int, set[str]]:
    status, modules = _modules(*argv)
    return status, {m.split(".")[0] for m in modules}


def _modules(*argv: str) -> tuple[int, set[str]]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True,
                          text=True, timeout=120, check=False)
    last = proc.stdout.strip().splitlines()[-1]
    found = json.loads(last)
    return found["status"], set(found["modules"])


def test_version_imports_no_third_party_package() -> None:
    status, top = _imported("--version")
    assert status == 0
    assert not top & {"numpy", "structlog", "msgspec", "anyio", "asyncio", "watchdog"}


def test_small_convert_imports_neither_structlog_nor_the_daemon_stack(
        real_data_dir: Path, tmp_path: Path) -> None:
    export = real_data_dir / "nsys2026.1_torch_tiny_rtx3080.sqlite"
    status, top = _imported("convert", str(export), "-o", str(tmp_path / "out"),
                            "--no-progress", "--log-level", "error")
    assert status == 0
    assert (tmp_path / "out.prv").stat().st_size > 0
    assert "numpy" in top  # the probe saw the conversion's imports
    assert not top & {"structlog", "anyio", "asyncio", "watchdog"}


def test_small_convert_that_warns_still_leaves_structlog_out(real_data_dir: Path,
                                                             tmp_path: Path) -> None:
    """torch tiny holds no memset rows: asking for them prints a warning line, written
    without structlog (a person's readable lines need none of it)."""
    export = real_data_dir / "nsys2026.1_torch_tiny_rtx3080.sqlite"
    status, top = _imported("convert", str(export), "-o", str(tmp_path / "out"),
                            "--no-progress", "--trace", "kernel,memcpy,memset,runtime,comm")
    assert status == 0
    assert "numpy" in top
    assert not top & {"structlog", "anyio", "asyncio", "watchdog", "logging"}


def test_small_convert_skips_masked_arrays_and_toml(real_data_dir: Path,
                                                   tmp_path: Path) -> None:
    """numpy.ma (np.unique's plain form imports it) and tomllib (only a config file or a
    PRVSTREAM_ value needs it) are start-up costs a conversion does without."""
    export = real_data_dir / "nsys2022.2cap_2024.5exp_cloverleaf_a100.sqlite"
    status, modules = _modules("convert", str(export), "-o", str(tmp_path / "out"),
                               "--no-progress", "--log-level", "error")
    assert status == 0
    assert "numpy" in modules and "prvstream.sinks.efficiency.model" in modules
    assert not modules & {"numpy.ma", "tomllib"}


#: what a conversion of a small export must not load: the daemon's stack, Dask, the HTML
#: report, the other subcommands, ``.nsys-rep`` export and the reader process (``subprocess``:
#: only inputs large enough for the reader, or reports to export, start a process), the
#: summary's plot and Prometheus file, the efficiency model's mergeable partial state,
#: dataclasses (the core's record types are msgspec Structs: a class costs 20 us, not 0.5 ms),
#: the batch helper process's machinery (``stream.helper`` with ``signal``: only a batch
#: of many reports forks one), the in-order replay of several reports (``stream.spool``) and
#: the terminal's progress line (``progress``: on a terminal only), ``tempfile`` with
#: ``random`` (the scratch files are made without it: ``sinks.scratch.unnamed_file``),
#: ``shutil`` with the compression modules it loads (argparse's help width comes from
#: ``cli.main._terminal_columns``), ``traceback`` (a log line with an exception only) and
#: ``unicodedata`` (a label that is not printable only)
_NOT_ON_THE_CONVERT_PATH = (
    "asyncio", "anyio", "aiofiles", "watchdog", "structlog", "distributed", "dask", "html",
    "subprocess", "dataclasses", "tomllib", "numpy.ma", "signal",
    "prvstream.daemon.stream.helper", "prvstream.daemon.stream.spool",
    "prvstream.daemon.progress", "tempfile", "random", "shutil", "bz2", "lzma", "traceback",
    "unicodedata",
    "prvstream.daemon.live", "prvstream.daemon.service", "prvstream.daemon.scale",
    "prvstream.daemon.synthetic", "prvstream.sinks.report", "prvstream.daemon.nsys.reader",
    "prvstream.daemon.nsys.exporter", "prvstream.daemon.nsys.locate",
    "prvstream.sinks.summary.plot", "prvstream.sinks.summary.prom",
    "prvstream.sinks.summary.timeline", "prvstream.sinks.efficiency.partial",
    *(f"prvstream.daemon.cli.{c}" for c in cli_main._HANDLERS if c != "convert"),
)


def test_small_convert_loads_only_the_conversion(real_data_dir: Path, tmp_path: Path) -> None:
    """The modules a conversion of each small real export loads (``-X importtime`` says what
    they cost; docs/benchmarks.md has the times)."""
    for name in ("nsys2026.1_torch_tiny_rtx3080.sqlite",
                 "nsys2022.2cap_2024.5exp_cloverleaf_a100.sqlite"):
        out = tmp_path / name
        status, modules = _modules("convert", str(real_data_dir / name), "-o", str(out),
                                   "--no-progress", "--quiet")
        assert status == 0 and (tmp_path / f"{name}.prv").stat().st_size > 0
        assert "prvstream.daemon.cli.convert" in modules  # the probe saw the conversion
        loaded = sorted(m for m in modules
                        if any(m == n or m.startswith(f"{n}.") for n in _NOT_ON_THE_CONVERT_PATH))
        assert not loaded, f"{name}: the conversion loaded {loaded}"


def test_a_command_builds_only_its_own_parser() -> None:
    """Every subcommand parses the same with its parser alone as with the whole command line
    (what ``cli`` builds: the other nine parsers are start-up a run does without)."""
    assert set(cli_main._PARSERS) == set(cli_main._HANDLERS)
    assert cli_main._wanted(["convert", "x", "-o", "y"]) == ["convert"]
    assert cli_main._wanted(["--version"]) == []
    assert cli_main._wanted(["--help"]) is None and cli_main._wanted([]) is None
    whole = cli_main.build_parser()
    for argv in (["convert", "a.sqlite", "b", "-o", "out", "--trace", "kernel,links", "-q"],
                 ["watch", "/r", "--poll", "2", "--once"], ["summary", "s.json", "--view", "nvtx"],
                 ["finalize", "job"], ["report", "job", "-o", "x.html"], ["doctor"],
                 ["synth", "d", "--ranks", "3"], ["demo"], ["bench", "--rows", "10"],
                 ["completion", "zsh"]):
        own = cli_main.build_parser(cli_main._wanted(argv))
        assert vars(own.parse_args(argv)) == vars(whole.parse_args(argv)), argv


_GC_PROBE = """
import gc, json, sys
from prvstream.daemon.cli.main import main
status = main()  # the console script's call: the process is prvstream's
hidden = "typing_extensions" not in sys.modules
import typing_extensions  # a later import works as usual
import inspect, textwrap
import numpy as np
restored = (inspect.cleandoc(" a\\n  b") == "a\\nb" and textwrap.dedent("  a\\n  b") == "a\\nb"
            and inspect.signature(np.ndarray.sum) is not None)
print(json.dumps({"status": status, "enabled": gc.isenabled(), "frozen": gc.get_freeze_count(),
                  "hidden": hidden, "restored": restored}))
"""


def test_start_up_objects_leave_the_collector(real_data_dir: Path, tmp_path: Path) -> None:
    """The console script pauses the garbage collector while the command's modules load and
    freezes what they made (the collector's passes over it were 3% of a small conversion);
    the collector runs again for the conversion. A call from Python leaves it alone. msgspec
    loads without ``typing_extensions`` (on Python 3.11 and later it takes the same objects
    from ``typing``), which the process can still import afterwards; numpy loads without
    cleaning its docstrings, and ``inspect.cleandoc`` and ``textwrap.dedent`` are the real
    ones afterwards."""
    export = str(real_data_dir / "nsys2026.1_torch_tiny_rtx3080.sqlite")
    argv = ["convert", export, "-o", str(tmp_path / "out"), "--no-progress", "--quiet"]
    proc = subprocess.run([sys.executable, "-c", _GC_PROBE, *argv], capture_output=True,
                          text=True, timeout=120, check=True)
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["status"] == 0 and found["enabled"] and found["hidden"] and found["restored"]
    assert found["frozen"] > 10_000  # the modules' objects, numpy's and msgspec's among them
    frozen = gc.get_freeze_count()
    assert cli_main.main([*argv[:3], str(tmp_path / "again"), *argv[4:]]) == 0
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_the_console_script_ends_a_conversion_with_its_status_and_whole_output(
        real_data_dir: Path, tmp_path: Path) -> None:
    """After a conversion the console script ends without the interpreter's teardown
    (``os._exit``): the closing block still reaches the pipe whole, the outputs are in place
    and the status is the conversion's, 1 for a failed input."""
    export = real_data_dir / "nsys2026.1_torch_tiny_rtx3080.sqlite"
    command = [sys.executable, "-m", "prvstream.daemon", "convert", "--no-progress", "-o"]
    proc = subprocess.run([*command, str(tmp_path / "out"), str(export)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("prvstream: 1 report") and lines[-1].startswith("  notes")
    assert (tmp_path / "out.summary.json").stat().st_size > 0
    failed = subprocess.run([*command, str(tmp_path / "two"), str(tmp_path / "none.sqlite")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert failed.returncode == 1 and "none.sqlite" in failed.stderr


_BLAS_PROBE = """
import os, sys
from prvstream.daemon.cli.main import main
main(["--version"])
print(os.environ.get("OPENBLAS_NUM_THREADS"))
"""


def test_numpy_blas_starts_one_thread_unless_the_user_chose() -> None:
    """numpy's BLAS would start a thread per core on import (CPU a small conversion does not
    need: prvstream does no linear algebra); a value the user set is kept."""
    for given, expected in ((None, "1"), ("3", "3")):
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
        if given is not None:
            env["OPENBLAS_NUM_THREADS"] = given
        proc = subprocess.run([sys.executable, "-c", _BLAS_PROBE], capture_output=True,
                              text=True, timeout=120, check=True, env=env)
        assert proc.stdout.strip().splitlines()[-1] == expected


def test_trace_help_lists_every_kind() -> None:
    assert cli_main._KINDS == config.USER_KINDS


def test_help_shows_the_built_in_defaults() -> None:
    defaults = config.Settings()
    for key, value in cli_main._DEFAULTS.items():
        if key != "state_dir":
            assert getattr(defaults, key) == value, key
    assert "STATE_DIRECTORY" in cli_main._DEFAULTS["state_dir"]  # type: ignore[operator]


#: numpy refuses to load while the docstring cleaners are swapped (as a numpy whose loading
#: needed them would); ``_load_numpy`` must still leave it loaded and the cleaners restored
_NEEDS_CLEANERS = """
import importlib.abc, inspect, sys, textwrap
real = (inspect.cleandoc, textwrap.dedent)

class NeedsCleaners(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "numpy._core" and textwrap.dedent is not real[1]:
            raise ImportError("this numpy needs textwrap.dedent as it loads")
        return None

sys.meta_path.insert(0, NeedsCleaners())
from prvstream.daemon.cli.main import _load_numpy
_load_numpy()
import numpy
print(numpy.add(1, 2), (inspect.cleandoc, textwrap.dedent) == real)
"""


def test_numpy_loads_even_where_it_needs_its_docstring_cleaners() -> None:
    proc = subprocess.run([sys.executable, "-c", _NEEDS_CLEANERS], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3", "True"], proc.stdout


#: numpy loaded as the console script loads it: ``numpy._typing`` (static types only) is not
#: loaded for it, and is the real module when the process imports it afterwards
_TYPING_PROBE = """
import sys
from prvstream.daemon.cli.main import _load_numpy
_load_numpy()
import numpy
skipped = "numpy._typing" not in sys.modules and not hasattr(numpy, "_typing")
solved = numpy.linalg.eig(numpy.diag([2.0, 3.0])).eigenvalues.tolist()
import numpy.typing
real = numpy.typing.NDArray is not numpy.ndarray and numpy.typing.NDArray[numpy.float64]
print(skipped, solved, bool(real))
"""


def test_numpy_loads_without_its_typing_module() -> None:
    proc = subprocess.run([sys.executable, "-c", _TYPING_PROBE], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "[2.0,", "3.0]", "True"], proc.stdout


#: a numpy that takes more than ``NDArray`` from ``numpy._typing`` as it loads (as another
#: version might) gets the real module's (numpy's core cannot load twice in a process)
_NEEDS_TYPING = """
import importlib.abc, sys

class NeedsTyping(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "numpy.linalg":
            typing_module = sys.modules.get("numpy._typing")
            if typing_module is not None:
                assert typing_module.ArrayLike is sys.modules["numpy._typing"].ArrayLike
        return None

sys.meta_path.insert(0, NeedsTyping())
from prvstream.daemon.cli.main import _load_numpy
_load_numpy()
import numpy, numpy.typing
print(numpy.add(1, 2), numpy.typing.ArrayLike is sys.modules["numpy._typing"].ArrayLike)
"""


def test_numpy_loads_even_where_it_needs_more_of_its_typing_module() -> None:
    proc = subprocess.run([sys.executable, "-c", _NEEDS_TYPING], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3", "True"], proc.stdout


def test_help_width_is_the_one_shutil_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_terminal_columns`` answers as ``shutil.get_terminal_size`` does (``COLUMNS``, the
    terminal, then 80), so help text wraps where argparse's own formatter wraps it."""
    import argparse
    import shutil

    for columns in ("57", "0", "-3", "wide", None):
        if columns is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", columns)
        assert cli_main._terminal_columns() == shutil.get_terminal_size().columns, columns
        ours = cli_main._HelpFormatter("prvstream")
        assert ours._width == argparse.HelpFormatter("prvstream")._width, columns
    assert cli_main._HelpFormatter("prvstream", width=40)._width == 40
