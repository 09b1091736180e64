"""The rooms' arrows point one way: service -> live -> stream -> nsys -> kinds, sinks below all;
sinks never import the daemon; only cli/main.py imports a command module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: lowest first: a room may import itself and the rooms before it
ORDER = ["kinds", "nsys", "stream", "live", "service"]
#: scale-out is a side room the live trace and the service call into when --dask asks
SIDE = {"live": {"scale"}, "service": {"scale"}}


def _imports(path: Path) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names]
    return found


def test_daemon_rooms_import_only_downwards() -> None:
    wrong = set()
    for path in (ROOT / "daemon").rglob("*.py"):
        rel = path.relative_to(ROOT / "daemon")
        room = rel.parts[0] if len(rel.parts) > 1 else ""
        if room not in ORDER:
            continue
        allowed = set(ORDER[: ORDER.index(room) + 1]) | SIDE.get(room, set())
        for module in _imports(path):
            parts = module.split(".")
            if parts[:2] != ["prvstream", "daemon"] or len(parts) < 3:
                continue
            target = parts[2]
            if target in {*ORDER, "cli", "scale", "synthetic"} and target not in allowed:
                wrong.add((rel.as_posix(), module))
    assert wrong == set()


def test_only_the_entry_point_imports_command_modules() -> None:
    wrong = []
    for path in [*(ROOT / "daemon").rglob("*.py"), *(ROOT / "sinks").rglob("*.py")]:
        if path == ROOT / "daemon" / "cli" / "main.py":
            continue
        for module in _imports(path):
            if module.startswith("prvstream.daemon.cli.") and module != "prvstream.daemon.cli.main":
                wrong.append((path.relative_to(ROOT).as_posix(), module))
    assert wrong == []
