"""Overlapping capture ranges of one process, made from one generated export: each part keeps
the rows that start in its share of the CUDA runtime calls' start range, so the same activity
is in every part whose range covers it (as two overlapping captures of one process record it).
"""

from __future__ import annotations

import itertools
import shutil
import sqlite3
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from prvstream.daemon.synthetic.spec import SynthSpec
from prvstream.daemon.synthetic.synth import write_export
from tests.compat.basicanalysis import HOST_ROW

__all__ = ["cut_parts", "early_kernel_parts", "host_states", "keep_range", "one_state_at_a_time",
           "overlapping_parts"]


def keep_range(path: Path, lo: float, hi: float) -> None:
    """Keep only the rows starting in [lo, hi) of the CUDA runtime calls' start range."""
    con = sqlite3.connect(path)
    tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")
              if any(c[1] == "start" for c in con.execute(f"PRAGMA table_info({t})"))]
    first, last = con.execute(
        "SELECT MIN(start), MAX(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    a, b = first + int(lo * (last - first)), first + int(hi * (last - first)) + 1
    for t in tables:
        con.execute(f"DELETE FROM {t} WHERE start < ? OR start >= ?", (a, b))
    con.commit()
    con.close()


def overlapping_parts(folder: Path, cuts: Sequence[tuple[float, float]],
                      spec: SynthSpec | None = None, rank: int = 0) -> list[Path]:
    """One export of ``rank`` cut into parts ``rank<r>-<letter>.sqlite`` (``keep_range``)."""
    folder.mkdir(parents=True, exist_ok=True)
    whole = write_export(folder / f".whole{rank}.sqlite", spec or SynthSpec(ranks=1, steps=6),
                         rank)
    parts = cut_parts(whole, folder, cuts, rank)
    whole.unlink()
    return parts


def cut_parts(whole: Path, folder: Path, cuts: Sequence[tuple[float, float]],
              rank: int = 0) -> list[Path]:
    """Copies of ``whole`` in ``folder``, ``rank<r>-<letter>.sqlite``, each cut to one of
    ``cuts`` (``keep_range``)."""
    parts = []
    for letter, (lo, hi) in zip("abcdefgh", cuts, strict=False):
        part = folder / f"rank{rank}-{letter}.sqlite"
        shutil.copy(whole, part)
        keep_range(part, lo, hi)
        parts.append(part)
    return parts


def early_kernel_parts(folder: Path) -> tuple[Path, Path]:
    """Two capture ranges of one process whose calls do not overlap, (0, 0.5) and (0.6, 1),
    the later one holding one kernel of the earlier one's time (at 30 %, on a stream of its
    own): its span, not its calls, overlaps the earlier range's."""
    a, b = overlapping_parts(folder / "src", ((0.0, 0.5), (0.6, 1.0)))
    whole = overlapping_parts(folder / "whole", ((0.0, 1.0),))[0]
    con = sqlite3.connect(whole)
    cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    rows = con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start").fetchall()
    con.close()
    row = list(rows[len(rows) * 3 // 10])
    row[cols.index("streamId")] = 99
    con = sqlite3.connect(b)
    con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({','.join('?' * len(row))})",
                row)
    con.commit()
    con.close()
    return a, b


def host_states(out: Path) -> dict[tuple[int, int], list[tuple[int, int, int]]]:
    """(task, thread) of each host-thread row -> its state records (begin, end, state)."""
    levels: dict[str, list[str]] = defaultdict(list)
    level = ""
    for line in out.with_suffix(".row").read_text().splitlines():
        if line.startswith("LEVEL "):
            level = line.split()[1]
        elif line.strip():
            levels[level].append(line.strip())
    header = out.read_text().split("\n", 1)[0]
    counts = [int(t.split(":")[0]) for t in header.rsplit("(", 1)[1].split(")")[0].split(",")]
    objects = [(task, th) for task, n in enumerate(counts, 1) for th in range(1, n + 1)]
    host = {o for o, label in zip(objects, levels["THREAD"], strict=True) if HOST_ROW.match(label)}
    states: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
    with out.open() as fh:
        next(fh)
        for line in fh:
            f = line.split(":")
            if f[0] == "1" and (int(f[3]), int(f[4])) in host:
                states[(int(f[3]), int(f[4]))].append((int(f[5]), int(f[6]), int(f[7])))
    return states


def one_state_at_a_time(states: dict[tuple[int, int], list[tuple[int, int, int]]]) -> None:
    """Assert that no two host states of one row overlap (``host_states``; sorts them)."""
    assert states, "the export has host threads with CUDA runtime calls"
    for obj, recs in states.items():
        recs.sort()
        for (_, e0, _), (b1, _, _) in itertools.pairwise(recs):
            assert e0 <= b1, f"host states overlap on {obj}: ends {e0}, next begins {b1}"
