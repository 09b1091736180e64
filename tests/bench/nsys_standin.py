"""A minimal stand-in for the ``nsys`` binary, enough for nsys2prv to run without Nsight Systems.

NOT Nsight Systems. It implements only the two calls nsys2prv 0.5.8 makes:

- ``nsys export -t sqlite ... REPORT``: links ``<stem>.sqlite`` found beside REPORT into the
  working directory (where nsys2prv looks for it); it cannot read ``.nsys-rep`` files.
- ``nsys stats -r cuda_api_trace --timeunit nsec -f csv -o BASE [--filter-nvtx=R] FILE.sqlite``:
  writes ``BASE_cuda_api_trace.csv`` with the columns of nsys's ``cuda_api_trace`` report
  (``Start (ns),Duration (ns),Name,Result,CorrID,Pid,Tid,T-Pri,Thread Name``), one row per
  ``CUPTI_ACTIVITY_KIND_RUNTIME`` row in start order; API names lose their ``_vNNNNN`` suffix
  as in nsys's report. ``--filter-nvtx`` is not supported.

Used by ``compare_nsys2prv.py``, which puts it on nsys2prv's PATH as ``nsys``.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import sqlite3
import sys
from pathlib import Path

_VERSION_SUFFIX = re.compile(r"_v\d+$")


def _export(args: list[str]) -> int:
    report = Path(args[-1]).resolve()
    source = report.with_suffix(".sqlite")
    target = Path.cwd() / source.name
    if not source.exists():
        sys.stderr.write(f"nsys stand-in: no {source.name} beside {report}; it cannot export "
                         ".nsys-rep files\n")
        return 1
    if not target.exists():
        target.symlink_to(source)
    return 0


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _cuda_api_trace(db: str, out: Path) -> None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    thread_join = ""
    thread_cols = "NULL, NULL"
    if "ThreadNames" in tables:
        # one name per thread (the last one nsys recorded)
        thread_join = ("LEFT JOIN (SELECT globalTid, max(priority) AS pri, max(nameId) AS nid "
                       "FROM ThreadNames GROUP BY globalTid) AS tn ON tn.globalTid = r.globalTid "
                       "LEFT JOIN StringIds AS tname ON tname.id = tn.nid")
        thread_cols = "tn.pri, tname.value"
    query = (f"SELECT r.start, r.end - r.start, s.value, r.returnValue, r.correlationId, "
             f"(r.globalTid >> 24) & 16777215, r.globalTid & 16777215, {thread_cols} "
             f"FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r LEFT JOIN StringIds AS s ON s.id = r.nameId "
             f"{thread_join} ORDER BY r.start")
    with open(out, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["Start (ns)", "Duration (ns)", "Name", "Result", "CorrID", "Pid", "Tid",
                         "T-Pri", "Thread Name"])
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
            for row in conn.execute(query):
                name = _VERSION_SUFFIX.sub("", row[2] or "")
                writer.writerow((row[0], row[1], name, *row[3:]))
    conn.close()


def _stats(args: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="nsys stats")
    parser.add_argument("-r", "--report", required=True)
    parser.add_argument("--timeunit", default="nsec")
    parser.add_argument("-f", "--format", default="csv")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--filter-nvtx")
    parser.add_argument("input")
    ns = parser.parse_args(args)
    if ns.timeunit != "nsec" or ns.format != "csv" or ns.filter_nvtx:
        sys.stderr.write("nsys stand-in: only --timeunit nsec -f csv without --filter-nvtx\n")
        return 1
    for report in ns.report.split(","):
        if report != "cuda_api_trace":
            sys.stderr.write(f"nsys stand-in: report {report} is not implemented\n")
            return 1
        _cuda_api_trace(ns.input, Path(f"{ns.output}_{report}.csv"))
    return 0


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: nsys {export|stats} ... (stand-in, see its docstring)\n")
        return 2
    if argv[0] == "export":
        return _export(argv[1:])
    if argv[0] == "stats":
        return _stats(argv[1:])
    if argv[0] in ("-v", "--version"):
        sys.stdout.write("NVIDIA Nsight Systems stand-in (not nsys)\n")
        return 0
    sys.stderr.write(f"nsys stand-in: {argv[0]} is not implemented\n")
    return 2


if __name__ == "__main__":
    os.environ.setdefault("PYTHONIOENCODING", "utf-8")
    sys.exit(main(sys.argv[1:]))
