"""How far from start order an export's tables are stored: what a rowid-order scan must reorder.

For every table with a ``start`` (or ``timestamp``) column: rows, descents (adjacent pairs in
rowid order whose start goes down), inversions (pairs out of order, counted by a merge sort),
the largest displacement (rows a row arrives after its place in start order: the reorder
window a rowid-order scan needs), the largest lag in time (how far a row's start lies below the
largest start read before it) and whether SQLite's ``ORDER BY start`` puts rows of equal start
in rowid order.

Usage: ``python tests/bench/disorder.py EXPORT... [--json OUT]`` (default: the real exports and
two synthetic ones).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
from pathlib import Path

import numpy as np
from _benchlib import real_data_dir, synth_export

__all__ = ["disorder", "main"]


def _inversions(values: np.ndarray) -> int:
    """Pairs i < j with values[i] > values[j] (merge sort, numpy per level)."""
    a = values.astype(np.int64, copy=True)
    n = len(a)
    total = 0
    width = 1
    while width < n:
        for lo in range(0, n - width, 2 * width):
            left = a[lo:lo + width]
            right = a[lo + width:lo + 2 * width]
            # for each right element: left elements greater than it
            total += int((len(left) - np.searchsorted(left, right, side="right")).sum())
            a[lo:lo + len(left) + len(right)] = np.sort(np.concatenate([left, right]),
                                                         kind="stable")
        width *= 2
    return total


def disorder(path: Path) -> list[dict[str, object]]:
    """One entry per time-keyed table of the export (empty tables left out)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    out: list[dict[str, object]] = []
    try:
        names = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        for name in names:
            cols = {r[1] for r in con.execute(f'PRAGMA table_info("{name}")')}
            key = "start" if "start" in cols else "timestamp" if "timestamp" in cols else None
            if key is None:
                continue
            rows = con.execute(f'SELECT rowid, {key} FROM "{name}" WHERE {key} IS NOT NULL '
                               "ORDER BY rowid").fetchall()
            if not rows:
                continue
            start = np.array([r[1] for r in rows], dtype=np.int64)
            rowid = np.array([r[0] for r in rows], dtype=np.int64)
            order = np.argsort(start, kind="stable")  # start order, ties in rowid order
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            late = np.arange(len(order)) - rank  # rows a row arrives after its place
            lag = np.maximum.accumulate(start) - start
            by_sql = [r[0] for r in con.execute(
                f'SELECT rowid FROM "{name}" WHERE {key} IS NOT NULL ORDER BY {key}')]
            out.append({
                "table": name, "rows": len(rows),
                "descents": int((start[1:] < start[:-1]).sum()),
                "inversions": _inversions(start),
                "max_displacement": int(late.max()),
                "max_lag_ns": int(lag.max()),
                "sql_ties_in_rowid_order": bool(np.array_equal(rowid[order],
                                                               np.array(by_sql))),
            })
    finally:
        con.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("exports", nargs="*", type=Path)
    parser.add_argument("--rows", type=int, default=200_000,
                        help="size of the synthetic exports measured by default")
    parser.add_argument("--json", help="also write the results as JSON here")
    args = parser.parse_args()
    results: dict[str, list[dict[str, object]]] = {}
    with tempfile.TemporaryDirectory(prefix="prvstream-disorder-") as tmp:
        exports = list(args.exports)
        if not exports:
            exports = sorted(real_data_dir().glob("*.sqlite"))
            exports.append(synth_export(Path(tmp) / "synth.sqlite", args.rows, "2026.2"))
            from gen_pipeline import write_export as pipeline_export

            exports.append(pipeline_export(Path(tmp) / "pipeline.sqlite", args.rows))
        print("| export | table | rows | descents | inversions | max displacement (rows) | "
              "max lag (µs) | SQL ties in rowid order |")
        print("|---|---|---:|---:|---:|---:|---:|---|")
        for path in exports:
            results[path.name] = disorder(path)
            for t in results[path.name]:
                print(f"| {path.stem} | {t['table']} | {t['rows']:,} | {t['descents']:,} | "
                      f"{t['inversions']:,} | {t['max_displacement']:,} | "
                      f"{int(t['max_lag_ns']) / 1e3:,.1f} | "  # type: ignore[call-overload]
                      f"{'yes' if t['sql_ties_in_rowid_order'] else 'no'} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
