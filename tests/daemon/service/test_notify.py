"""sd_notify against a real AF_UNIX datagram socket, path and abstract namespace."""

from __future__ import annotations

import os
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from prvstream.daemon.service.notify import (
    notify,
    notify_ready,
    notify_status,
    notify_stopping,
    notify_watchdog,
    run_watchdog,
    watchdog_interval,
)


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    # AF_UNIX paths are limited to ~108 bytes; tmp_path can be longer
    base = Path(tempfile.gettempdir()) if len(str(tmp_path)) > 80 else tmp_path
    path = base / f"n-{uuid.uuid4().hex[:8]}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(2)
    try:
        yield sock, str(path)
    finally:
        sock.close()
        path.unlink(missing_ok=True)


def test_unset_socket_is_a_no_op() -> None:
    assert notify("READY=1", environ={}) is False
    assert notify_watchdog(environ={}) is False


def test_ready_status_watchdog_stopping(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    env = {"NOTIFY_SOCKET": path}
    assert notify_ready("watching 2 roots", environ=env)
    msg = sock.recv(4096).decode().splitlines()
    assert msg[0] == "READY=1" and f"MAINPID={os.getpid()}" in msg
    assert "STATUS=watching 2 roots" in msg
    assert notify_status("3 jobs\nlive", environ=env)
    assert sock.recv(4096) == b"STATUS=3 jobs live"
    assert notify_watchdog(environ=env)
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert notify_stopping(environ=env)
    assert sock.recv(4096) == b"STOPPING=1"


def test_abstract_namespace() -> None:
    name = f"prvstream-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(2)
    try:
        assert notify("STATUS=hi", environ={"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(100) == b"STATUS=hi"
    finally:
        sock.close()


def test_missing_socket_warns_once(tmp_path: Path) -> None:
    env = {"NOTIFY_SOCKET": str(tmp_path / "nobody")}
    with capture_logs() as logs:
        assert notify("READY=1", environ=env) is False
        assert notify("READY=1", environ=env) is False
    assert [e["event"] for e in logs] == ["sd_notify_failed"]


@pytest.mark.parametrize(("env", "expected"), [
    pytest.param({}, None, id="unset"),
    pytest.param({"WATCHDOG_USEC": "20000000"}, 10.0, id="20s"),
    pytest.param({"WATCHDOG_USEC": "junk"}, None, id="junk"),
    pytest.param({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}, None, id="other-pid"),
    pytest.param({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": str(os.getpid())}, 0.5, id="us"),
])
def test_watchdog_interval(env: dict[str, str], expected: float | None) -> None:
    assert watchdog_interval(env) == expected


@pytest.mark.anyio
async def test_run_watchdog_pings(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "40000"}
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: run_watchdog(environ=env))
            await anyio.sleep(0.1)
            tg.cancel_scope.cancel()
    sock.setblocking(False)
    pings = []
    while True:
        try:
            pings.append(sock.recv(100))
        except BlockingIOError:
            break
    assert len(pings) >= 3 and set(pings) == {b"WATCHDOG=1"}


@pytest.mark.anyio
async def test_run_watchdog_returns_when_off() -> None:
    with anyio.fail_after(1):
        await run_watchdog(environ={})
