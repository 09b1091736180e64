"""Dask cluster specs (``local[:N]``, ``inproc[:N]``, ``tcp://HOST:PORT``, a scheduler file)
and the one client a prvstream process holds per spec.

``distributed`` is imported only here, and only when a cluster is asked for.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from prvstream.sinks.errors import ConfigError, PrvstreamError
from prvstream.sinks.logger import get_logger

__all__ = ["ClusterSpec", "close_clients", "get_client", "parse_spec", "worker_count"]

log = get_logger(__name__)

_LOCK = threading.Lock()
#: spec text -> (client, cluster started for it or None)
_CLIENTS: dict[str, tuple[Any, Any]] = {}


@dataclass(frozen=True)
class ClusterSpec:
    """A parsed ``--dask`` value."""

    kind: Literal["local", "inproc", "address", "file"]
    #: worker processes (local) or threads (inproc); 0: one per CPU
    workers: int = 0
    #: scheduler address or scheduler file path
    target: str = ""


def parse_spec(text: str) -> ClusterSpec:
    """Parse ``--dask``/``PRVSTREAM_DASK``; raise ``ConfigError`` saying what is accepted."""
    spec = text.strip()
    for kind in ("local", "inproc"):
        if spec == kind or spec.startswith(kind + ":"):
            count = spec[len(kind) + 1:] if ":" in spec else "0"
            if not count.isdigit():
                raise ConfigError(f"setting 'dask' {text!r}: the worker count after "
                                  f"'{kind}:' must be a whole number, e.g. {kind}:4")
            return ClusterSpec(kind, int(count))  # type: ignore[arg-type,unused-ignore]
    if "://" in spec:
        return ClusterSpec("address", target=spec)
    if spec and (spec.endswith(".json") or os.path.sep in spec or Path(spec).exists()):
        return ClusterSpec("file", target=spec)
    raise ConfigError(
        f"setting 'dask' {text!r} is not a cluster: use local[:N] (start N worker processes "
        "here), tcp://HOST:PORT (a running scheduler) or the path of a scheduler file")


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise PrvstreamError(
            "--dask needs the 'distributed' package: pip install distributed in prvstream's "
            "environment (or pip install '.[dask]' in the prvstream checkout)") from exc
    return distributed


def _start(spec: ClusterSpec) -> tuple[Any, Any]:
    distributed = _import_distributed()
    logging.getLogger("distributed").setLevel(logging.WARNING)  # our events say what happens
    if spec.kind in ("local", "inproc"):
        workers = spec.workers or os.cpu_count() or 1
        processes = spec.kind == "local"
        cluster = distributed.LocalCluster(
            n_workers=workers if processes else 1,
            threads_per_worker=1 if processes else workers,
            processes=processes, dashboard_address=":0", silence_logs=logging.WARNING,
        )
        return distributed.Client(cluster, set_as_default=False), cluster
    if spec.kind == "file":
        path = Path(spec.target)
        if not path.is_file():
            raise ConfigError(f"setting 'dask': scheduler file {path} does not exist; start "
                              "the scheduler with --scheduler-file first, or pass its address")
        return distributed.Client(scheduler_file=str(path), set_as_default=False), None
    try:
        return distributed.Client(spec.target, set_as_default=False, timeout="30s"), None
    except OSError as exc:
        raise PrvstreamError(f"cannot reach the Dask scheduler at {spec.target} ({exc}); "
                             "start it (dask scheduler) or check the address") from exc


def get_client(text: str) -> Any:
    """The client for ``text`` (a ``--dask`` spec), started or attached on first use."""
    with _LOCK:
        found = _CLIENTS.get(text)
        if found is None:
            spec = parse_spec(text)
            found = _start(spec)
            _CLIENTS[text] = found
            if len(_CLIENTS) == 1:
                atexit.register(close_clients)
            log.info("dask_connected", spec=text,
                     workers=len(found[0].scheduler_info().get("workers", {})))
        return found[0]


def worker_count(client: Any) -> int:
    """Workers (threads) the cluster has now (at least 1)."""
    workers = client.scheduler_info().get("workers", {})
    return max(1, sum(int(w.get("nthreads", 1)) for w in workers.values()))


def close_clients() -> None:
    """Close every client and the clusters started for them."""
    with _LOCK:
        items = list(_CLIENTS.values())
        _CLIENTS.clear()
    for client, cluster in items:
        client.close()
        if cluster is not None:
            cluster.close()
