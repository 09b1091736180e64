"""Real Dask clusters for the scale-out tests: threads in this process, and two worker
processes (module-scoped: starting a cluster takes seconds)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def inproc() -> Iterator[Any]:
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    from prvstream.daemon.scale.cluster import close_clients, get_client

    yield get_client("inproc:2")
    close_clients()


@pytest.fixture(scope="module")
def processes() -> Iterator[Any]:
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    from prvstream.daemon.scale.cluster import close_clients, get_client

    yield get_client("local:2")
    close_clients()
