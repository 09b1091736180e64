"""The data kinds' names in registry order; each names a module of this package with a ``SPEC``.

Free of imports beyond the logger, so that the command line lists the kinds (``--trace``
help) without loading numpy.
"""

from __future__ import annotations

from typing import Final

from prvstream.sinks.logger import get_logger

__all__ = ["ALL_KINDS"]

log = get_logger(__name__)

#: every data kind, as ``--trace`` and the ``kinds`` setting take them
ALL_KINDS: Final[tuple[str, ...]] = (
    "kernel", "memcpy", "memset", "sync", "runtime", "nvtx", "osrt", "mpi", "graph", "openacc",
    "gpu_metrics", "comm",
)
