"""A Python-level validator of Paraver traces (.prv + .pcf + .row), written for the tests.

It checks what Paraver's loader relies on: a well-formed ``_ns`` header whose objects cover
every record, integer-only record lines without trailing spaces, per-thread time order (and,
optionally, global order), event values and states that the .pcf labels, and a .row that
names every object the header declares.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

_HEADER = re.compile(
    r"^#Paraver \((?P<date>[^)]*)\):(?P<end>\d+)_ns:(?P<nn>\d+)\((?P<cpus>[\d,]+)\)"
    r":(?P<napps>\d+):(?P<ntasks>\d+)\((?P<tasks>[\d:,]+)\),(?P<ncomm>\d+) *$"
)


class TraceInvalid(AssertionError):
    """The trace breaks a rule; the message says which line and why."""


@dataclass
class TraceStats:
    """What a valid trace holds."""

    end_time: int = 0
    threads_per_task: list[int] = field(default_factory=list)
    nodes: int = 0
    states: Counter[int] = field(default_factory=Counter)
    #: (event type, value != 0) -> count
    events: Counter[tuple[int, bool]] = field(default_factory=Counter)
    comms: Counter[int] = field(default_factory=Counter)
    records: int = 0
    #: (task, thread, state) -> total duration
    state_time: Counter[tuple[int, int, int]] = field(default_factory=Counter)
    header_bytes: int = 0

    def begins(self, *types: int) -> int:
        return sum(self.events[(t, True)] for t in types)


def parse_pcf(path: Path) -> tuple[dict[int, dict[int, str]], set[int]]:
    """Event type -> labelled values, and the defined state values."""
    types: dict[int, dict[int, str]] = {}
    states: set[int] = set()
    section = ""
    current: list[int] = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line:
            if section in ("VALUES", "STATES"):
                section = ""
            continue
        if line in ("DEFAULT_OPTIONS", "DEFAULT_SEMANTIC", "STATES", "STATES_COLOR",
                    "EVENT_TYPE", "VALUES", "GRADIENT_COLOR", "GRADIENT_NAMES"):
            if line == "EVENT_TYPE":
                current = []
            section = line
            continue
        if section == "STATES":
            states.add(int(line.split()[0]))
        elif section == "EVENT_TYPE":
            parts = line.split(None, 2)
            if len(parts) < 3:
                raise TraceInvalid(f"{path}: bad EVENT_TYPE line {raw!r}")
            type_id = int(parts[1])
            current.append(type_id)
            types.setdefault(type_id, {})
        elif section == "VALUES":
            key, _, label = line.partition(" ")
            value = int(key)
            if not 0 <= value <= 2**31 - 1:
                raise TraceInvalid(f"{path}: value key {value} does not fit in int32")
            if "\n" in label or not label.strip():
                raise TraceInvalid(f"{path}: empty label for value {value}")
            for type_id in current:
                types[type_id][value] = label.strip()
    return types, states


def parse_row(path: Path) -> dict[str, list[str]]:
    levels: dict[str, list[str]] = {}
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^LEVEL (\w+) SIZE (\d+)$", lines[i])
        if m:
            n = int(m.group(2))
            levels[m.group(1)] = lines[i + 1 : i + 1 + n]
            if len(levels[m.group(1)]) != n:
                raise TraceInvalid(f"{path}: level {m.group(1)} lists fewer than {n} names")
            i += n + 1
        else:
            i += 1
    return levels


def _check_obj(stats: TraceStats, where: str, appl: int, task: int, thread: int) -> None:
    if appl != 1 or not 1 <= task <= len(stats.threads_per_task):
        raise TraceInvalid(f"{where}: unknown task {appl}.{task}")
    if not 1 <= thread <= stats.threads_per_task[task - 1]:
        raise TraceInvalid(f"{where}: unknown thread {task}.{thread}")


def validate(prv: Path, *, globally_sorted: bool = False) -> TraceStats:
    """Validate a trace; raise ``TraceInvalid`` on the first problem, return its statistics."""
    pcf = prv.with_suffix(".pcf")
    row = prv.with_suffix(".row")
    types, state_values = parse_pcf(pcf)
    levels = parse_row(row)
    stats = TraceStats()
    last_time: dict[tuple[int, int], int] = {}
    last_global = -1
    max_time = 0
    with prv.open("rb") as fh:
        header_raw = fh.readline()
        stats.header_bytes = len(header_raw)
        header = header_raw.decode().rstrip("\n")
        m = _HEADER.match(header)
        if not m:
            raise TraceInvalid(f"{prv}: bad header {header[:200]!r}")
        if header.rstrip(" ") != header and not header.rstrip(" ").endswith(",0"):
            raise TraceInvalid(f"{prv}: header padding must follow ',0'")
        stats.end_time = int(m.group("end"))
        stats.nodes = int(m.group("nn"))
        if int(m.group("napps")) != 1:
            raise TraceInvalid(f"{prv}: expected one application")
        task_specs = m.group("tasks").split(",")
        if len(task_specs) != int(m.group("ntasks")):
            raise TraceInvalid(f"{prv}: task count does not match the task list")
        for spec in task_specs:
            nthreads, node = (int(x) for x in spec.split(":"))
            if not 1 <= node <= stats.nodes:
                raise TraceInvalid(f"{prv}: task on node {node} of {stats.nodes}")
            stats.threads_per_task.append(nthreads)
        for lineno, raw in enumerate(fh, start=2):
            line = raw.decode()
            if not line.endswith("\n"):
                raise TraceInvalid(f"{prv}:{lineno}: unterminated last line")
            line = line[:-1]
            if line != line.rstrip():
                raise TraceInvalid(f"{prv}:{lineno}: trailing whitespace")
            if not line or line.startswith("#") or line.startswith("c:"):
                continue
            fields = line.split(":")
            try:
                nums = [int(x) for x in fields]
            except ValueError as exc:
                raise TraceInvalid(f"{prv}:{lineno}: non-integer field in {line!r}") from exc
            kind = nums[0]

            if kind == 1:
                if len(nums) != 8:
                    raise TraceInvalid(f"{prv}:{lineno}: state record needs 8 fields")
                _, _cpu, appl, task, thread, begin, end, state = nums
                _check_obj(stats, f"{prv}:{lineno}", appl, task, thread)
                if end < begin:
                    raise TraceInvalid(f"{prv}:{lineno}: state ends before it begins")
                if state not in state_values:
                    raise TraceInvalid(f"{prv}:{lineno}: state {state} not in the .pcf")
                stats.states[state] += 1
                stats.state_time[(task, thread, state)] += end - begin
                time, top = begin, end
            elif kind == 2:
                if len(nums) < 8 or len(nums) % 2:
                    raise TraceInvalid(f"{prv}:{lineno}: event record needs type:value pairs")
                _, _cpu, appl, task, thread, time = nums[:6]
                _check_obj(stats, f"{prv}:{lineno}", appl, task, thread)
                for etype, value in zip(nums[6::2], nums[7::2], strict=True):
                    if etype not in types:
                        raise TraceInvalid(f"{prv}:{lineno}: event type {etype} not in .pcf")
                    if value < 0:
                        raise TraceInvalid(f"{prv}:{lineno}: negative value")
                    labelled = types[etype]
                    if labelled and value and value not in labelled:
                        raise TraceInvalid(
                            f"{prv}:{lineno}: value {value} of type {etype} has no label")
                    stats.events[(etype, value != 0)] += 1
                top = time
            elif kind == 3:
                if len(nums) != 15:
                    raise TraceInvalid(f"{prv}:{lineno}: communication needs 15 fields")
                (_, _c, appl, task, thread, lsend, psend, _c2, appl2, task2, thread2, lrecv,
                 precv, _size, tag) = nums
                _check_obj(stats, f"{prv}:{lineno}", appl, task, thread)
                _check_obj(stats, f"{prv}:{lineno}", appl2, task2, thread2)
                stats.comms[tag] += 1
                time, top = lsend, max(psend, lrecv, precv)
            else:
                raise TraceInvalid(f"{prv}:{lineno}: unknown record type {kind}")
            key = (nums[3], nums[4])
            if time < last_time.get(key, 0):
                raise TraceInvalid(f"{prv}:{lineno}: time goes back on thread {key}")
            last_time[key] = time
            if globally_sorted:
                if time < last_global:
                    raise TraceInvalid(f"{prv}:{lineno}: not globally sorted")
                last_global = time
            max_time = max(max_time, top)
            stats.records += 1
    if stats.end_time != max_time:
        raise TraceInvalid(f"{prv}: header end {stats.end_time} != last record time {max_time}")
    if len(levels.get("NODE", [])) != stats.nodes:
        raise TraceInvalid(f"{row}: NODE level does not list {stats.nodes} names")
    if len(levels.get("THREAD", [])) != sum(stats.threads_per_task):
        raise TraceInvalid(f"{row}: THREAD level does not match the header")
    if "TASK" in levels and len(levels["TASK"]) != len(stats.threads_per_task):
        raise TraceInvalid(f"{row}: TASK level does not match the header")
    return stats
