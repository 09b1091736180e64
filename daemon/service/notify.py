"""systemd's ``sd_notify`` protocol in plain Python: READY, STATUS, WATCHDOG and STOPPING.

Every call is a no-op returning ``False`` when ``$NOTIFY_SOCKET`` is unset (not under systemd).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import anyio

from prvstream.sinks.logger import get_logger

__all__ = [
    "notify",
    "notify_ready",
    "notify_status",
    "notify_stopping",
    "notify_watchdog",
    "run_watchdog",
    "watchdog_interval",
]

log = get_logger(__name__)

_warned: set[str] = set()


def _socket_address(raw: str) -> str | bytes:
    """``@name`` is Linux's abstract namespace (a leading NUL byte); anything else a path."""
    if raw.startswith("@"):
        return b"\0" + raw[1:].encode()
    return raw


def notify(*lines: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``lines`` (e.g. ``"READY=1"``, ``"STATUS=..."``) as one datagram to systemd.

    Returns ``True`` when the message was sent, ``False`` when there is no ``$NOTIFY_SOCKET``
    or sending failed (logged once per socket; the service keeps running).
    """
    env = os.environ if environ is None else environ
    raw = env.get("NOTIFY_SOCKET", "")
    if not raw or not lines:
        return False
    message = "\n".join(lines).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(_socket_address(raw))
            sock.sendall(message)
    except OSError as exc:
        if raw not in _warned:
            _warned.add(raw)
            log.warning("sd_notify_failed", socket=raw, error=str(exc))
        return False
    return True


def notify_ready(status: str | None = None, *, environ: Mapping[str, str] | None = None) -> bool:
    """Tell systemd start-up is done (``Type=notify`` units stay "activating" until then)."""
    lines = ["READY=1", f"MAINPID={os.getpid()}"]
    if status:
        lines.append(f"STATUS={_one_line(status)}")
    return notify(*lines, environ=environ)


def notify_status(status: str, *, environ: Mapping[str, str] | None = None) -> bool:
    """Free-form status shown by ``systemctl status``."""
    return notify(f"STATUS={_one_line(status)}", environ=environ)


def notify_watchdog(*, environ: Mapping[str, str] | None = None) -> bool:
    """Keep-alive ping for ``WatchdogSec=``."""
    return notify("WATCHDOG=1", environ=environ)


def notify_stopping(status: str | None = None, *, environ: Mapping[str, str] | None = None) -> bool:
    """Tell systemd a clean shutdown has begun."""
    lines = ["STOPPING=1"]
    if status:
        lines.append(f"STATUS={_one_line(status)}")
    return notify(*lines, environ=environ)


def watchdog_interval(environ: Mapping[str, str] | None = None) -> float | None:
    """Seconds between watchdog pings (half of ``$WATCHDOG_USEC``), or ``None`` when off.

    Honours ``$WATCHDOG_PID``: when set to another process, the watchdog is not ours.
    """
    env = os.environ if environ is None else environ
    raw = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None
    try:
        usec = int(raw)
    except ValueError:
        return None
    if usec <= 0:
        return None
    return usec / 2 / 1_000_000


async def run_watchdog(interval: float | None = None, *,
                       environ: Mapping[str, str] | None = None) -> None:
    """Ping the watchdog forever (a task for the service's task group); returns if it is off.

    Runs on the event loop on purpose: when the loop is stuck, the pings stop and systemd
    restarts the service.
    """
    every = watchdog_interval(environ) if interval is None else interval
    if every is None or every <= 0:
        return
    while True:
        notify_watchdog(environ=environ)
        await anyio.sleep(every)


def _one_line(text: str) -> str:
    return " ".join(text.split())
