"""The data kinds prvstream converts, in one place: config, planning, reading, conversion,
the .pcf and the docs all read this registry. Adding a kind: one module with a ``SPEC``, its
name in ``names.ALL_KINDS``, its test, and a row in docs/mapping.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Final

from prvstream.daemon.kinds.base import KindSpec, Names, ValueGroup
from prvstream.daemon.kinds.names import ALL_KINDS
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv

__all__ = [
    "ALL_KINDS",
    "KINDS",
    "TABLE_KINDS",
    "event_types",
    "get",
    "has_cuda",
    "plan_value_groups",
    "to_convert",
    "value_group",
    "value_label",
]

log = get_logger(__name__)



def _load(name: str) -> KindSpec:
    spec = getattr(importlib.import_module(f"prvstream.daemon.kinds.{name}"), "SPEC", None)
    if not isinstance(spec, KindSpec) or spec.name != name:  # pragma: no cover - coding error
        raise RuntimeError(f"module prvstream.daemon.kinds.{name} has no SPEC named {name!r}")
    return spec


#: every kind by name, in the order they are listed, planned and streamed
KINDS: Final[dict[str, KindSpec]] = {name: _load(name) for name in ALL_KINDS}
#: kinds read from tables of their own (the others are derived: joins)
TABLE_KINDS: Final[tuple[str, ...]] = tuple(k for k, s in KINDS.items() if not s.derived)

_GROUPS: Final[dict[str, ValueGroup]] = {
    g.name: g for s in KINDS.values() for g in s.value_groups.values()}

if len({s.rank for s in KINDS.values()}) != len(KINDS):  # pragma: no cover - a coding error
    raise RuntimeError("two data kinds share a record rank")


def get(kind: str) -> KindSpec:
    """The spec of ``kind``; ``ValueError`` naming the known kinds for an unknown one."""
    found = KINDS.get(kind)
    if found is None:
        raise ValueError(f"unknown data kind {kind!r}; known: {', '.join(ALL_KINDS)}")
    return found


def to_convert(present: Iterable[str], wanted: Iterable[str] | None = None) -> list[str]:
    """The kinds to convert: table kinds with rows (``present``), then derived kinds whose
    inputs are present; only those in ``wanted`` when given (empty or None: all)."""
    have = set(present)
    want = set(wanted or ()) or set(ALL_KINDS)
    tables = [k for k in TABLE_KINDS if k in have and k in want]
    derived = [k for k, s in KINDS.items()
               if s.available is not None and s.available(have) and k in want]
    return tables + derived


def has_cuda(present: Iterable[str]) -> bool:
    """Whether any kind present is CUDA activity (a report without any is not converted)."""
    return any(KINDS[k].cuda for k in present if k in KINDS)


def plan_value_groups(kinds: Iterable[str]) -> dict[str, ValueGroup]:
    """Plan value key -> value group, for the converted ``kinds`` (and groups read always)."""
    converted = set(kinds)
    return {key: group for name, spec in KINDS.items() for key, group in
            spec.value_groups.items() if name in converted or group.always}


def value_group(name: str) -> ValueGroup:
    return _GROUPS[name]


def value_label(names: Names, group: str, sid: int) -> str:
    """The label of value ``sid`` of value group ``group``."""
    return _GROUPS[group].label(names, sid)


def event_types(values: Mapping[str, list[str]]) -> list[pv.EventTypeSpec]:
    """The .pcf blocks of a trace from its numbering's labels by value group (every kind
    contributes its blocks at its positions)."""
    blocks = [b for spec in KINDS.values() for b in spec.pcf(values)]
    return [spec for _, spec in sorted(blocks, key=lambda b: b[0])]
