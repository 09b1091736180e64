"""A real ``prvstream watch`` process for end-to-end tests and benchmarks: start it, read its
JSON-lines log, wait (always with a deadline) for its files, and stop or kill it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prvstream.daemon.live.journal import JobJournal, journal_path

__all__ = [
    "DaemonDied",
    "DaemonProcess",
    "job_status",
    "load_journal",
    "place_atomically",
    "run_cli",
    "wait_for",
]


class DaemonDied(AssertionError):
    """The daemon exited while a test was waiting on it."""


def _clean_env() -> dict[str, str]:
    """The test's environment without prvstream or systemd settings, unbuffered output."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PRVSTREAM_") and k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_cli(*args: str, cwd: Path, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run ``prvstream ARGS`` in a child process; return its result (not checked)."""
    return subprocess.run([sys.executable, "-m", "prvstream.daemon", *args], cwd=cwd,
                          env=_clean_env(), capture_output=True, text=True, timeout=timeout,
                          check=False)


class DaemonProcess:
    """``prvstream watch ROOTS --state STATE --settle S --idle-finalize 0 --log-json ...``.

    Every (re)start logs to its own file ``<log_dir>/daemon.<n>.jsonl``; :meth:`events` reads
    them all, in order. Use as a context manager or call :meth:`close` to make sure the
    process is gone.
    """

    def __init__(self, roots: Sequence[Path], state: Path, log_dir: Path, *,
                 settle: float = 0.2, extra: Sequence[str] = (),
                 prefix: Sequence[str] = ()) -> None:
        self.roots = [str(r) for r in roots]
        #: a command the daemon runs under (e.g. ``setpriv`` to drop root)
        self.prefix = list(prefix)
        self.state = state
        self.log_dir = log_dir
        self.settle = settle
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.logs: list[Path] = []
        log_dir.mkdir(parents=True, exist_ok=True)

    # -- life cycle --------------------------------------------------------------------------
    def argv(self) -> list[str]:
        return [*self.prefix, sys.executable, "-m", "prvstream.daemon", "watch", *self.roots,
                "--state", str(self.state), "--settle", str(self.settle),
                "--idle-finalize", "0", "--log-json", *self.extra]

    def start(self, *, ready_timeout: float = 20.0) -> DaemonProcess:
        """Start the daemon and wait until it logs ``service_ready`` (or ``once`` work)."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.starts += 1
        log = self.log_dir / f"daemon.{self.starts}.jsonl"
        self.logs.append(log)
        with log.open("wb") as out:
            self.proc = subprocess.Popen(self.argv(), stdout=out, stderr=subprocess.STDOUT,
                                         env=_clean_env(), cwd=self.log_dir)
        if "--once" not in self.extra:
            self.wait_event("service_ready", timeout=ready_timeout, run=self.starts)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, and reap."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM; return the exit status (the process is killed if it does not exit)."""
        assert self.proc is not None
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"daemon did not exit within {timeout} s of SIGTERM\n{self.tail()}") from None

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"daemon did not exit within {timeout} s\n{self.tail()}") from None

    def close(self) -> None:
        self.kill()

    def __enter__(self) -> DaemonProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- logs --------------------------------------------------------------------------------
    def events(self, run: int | None = None) -> list[dict[str, Any]]:
        """Every JSON log event so far (of one start with ``run``, 1-based)."""
        found: list[dict[str, Any]] = []
        logs = self.logs if run is None else self.logs[run - 1: run]
        for log in logs:
            try:
                text = log.read_text(errors="replace")
            except FileNotFoundError:
                continue
            for line in text.splitlines():
                if line.startswith("{"):
                    try:
                        found.append(json.loads(line))
                    except json.JSONDecodeError:
                        continue  # the line being written right now
        return found

    def named(self, event: str, run: int | None = None, **match: Any) -> list[dict[str, Any]]:
        return [e for e in self.events(run) if e.get("event") == event
                and all(e.get(k) == v for k, v in match.items())]

    def wait_event(self, event: str, *, count: int = 1, timeout: float = 20.0,
                   run: int | None = None, **match: Any) -> list[dict[str, Any]]:
        wait_for(lambda: len(self.named(event, run, **match)) >= count, timeout,
                 f"{count} x {event} {match or ''}", self)
        return self.named(event, run, **match)

    def tail(self, lines: int = 40) -> str:
        if not self.logs:
            return "(no daemon log)"
        text = "\n".join(
            log.read_text(errors="replace") for log in self.logs if log.exists())
        return "daemon log (last lines):\n" + "\n".join(text.splitlines()[-lines:])


def wait_for(condition: Callable[[], bool], timeout: float, what: str,
             daemon: DaemonProcess | None = None, every: float = 0.05) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` s (or when the daemon died)."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        if daemon is not None and daemon.proc is not None and not daemon.alive() \
                and "--once" not in daemon.extra:
            if condition():
                return
            raise DaemonDied(f"daemon exited ({daemon.proc.returncode}) while waiting for "
                             f"{what}\n{daemon.tail()}")
        if time.monotonic() >= deadline:
            tail = daemon.tail() if daemon is not None else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{tail}")
        time.sleep(every)


def job_status(job: Path) -> dict[str, Any]:
    """``JOB/prvstream/status.json`` ({} while absent)."""
    try:
        found: dict[str, Any] = json.loads((job / "prvstream" / "status.json").read_bytes())
    except FileNotFoundError:
        return {}
    return found


def load_journal(state: Path, job: Path) -> JobJournal | None:
    return JobJournal.load(journal_path(state, os.path.realpath(job)))


def place_atomically(src: Path, dest: Path) -> Path:
    """Copy ``src`` to a ``.tmp`` name beside ``dest``, then rename it into place."""
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.copyfile(src, tmp)
    os.rename(tmp, dest)
    return dest
