"""The ``prvstream`` command line: the parser (``main``) and one small module per subcommand."""

from __future__ import annotations

__all__: list[str] = []
