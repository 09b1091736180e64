"""NVTX marks, start/end and push/pop ranges (NVTX_EVENTS): begin/end events per thread and
domain (an inner range's end restores the enclosing range's value); ranges whose name matches
the phase pattern are efficiency phases.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

import numpy as np

from prvstream.daemon.kinds import nesting
from prvstream.daemon.kinds.base import (
    I4,
    I8,
    ChunkResult,
    KindSource,
    KindSpec,
    Names,
    PcfBlocks,
    PlanScan,
    Schema,
    ValueGroup,
)
from prvstream.daemon.kinds.context import ReportContext, process_of
from prvstream.daemon.kinds.intervals import LINE_EVENT, end_prio, process_indices
from prvstream.daemon.kinds.runtime import CPU_COLUMNS, CPU_FIELDS
from prvstream.daemon.kinds.sql import quote_identifier as q
from prvstream.sinks.arrays import unique_inverse
from prvstream.sinks.base import PHASE_DTYPE, table_detail
from prvstream.sinks.logger import get_logger
from prvstream.sinks.paraver import format as pv
from prvstream.sinks.paraver.records import PRIO_BEGIN, RecordBatch, event_lines, make_keys

__all__ = [
    "NVTX_DOMAIN_CREATE",
    "NVTX_KINDS",
    "NVTX_MARK",
    "NVTX_PUSH_POP",
    "NVTX_START_END",
    "NVTX_WHERE",
    "SPEC",
    "convert",
    "inline_text_sql",
    "nvtx_type",
]

log = get_logger(__name__)

#: NVTX_EVENTS.eventType values we convert (from ENUM_NSYS_EVENT_TYPE, stable since 2020)
NVTX_MARK: Final = 34
NVTX_PUSH_POP: Final = 59
NVTX_START_END: Final = 60
NVTX_DOMAIN_CREATE: Final = 75
NVTX_KINDS: Final = (NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END)
NVTX_WHERE: Final = "eventType IN (34, 59, 60)"

RANK = 6


def _text_label(names: Names, sid: int) -> str:
    return pv.sanitize_label(names.string(sid))  # negative ids are interned inline texts


def _domain_label(names: Names, sid: int) -> str:
    return names.nvtx_domains().get(sid, f"domain {sid}")


def _text_labels(names: Names, sids: list[int]) -> list[str]:
    return pv.sanitize_many([names.string(sid) for sid in sids])


GROUP = ValueGroup("nvtx", label=_text_label, labels=_text_labels)
DOMAIN_GROUP = ValueGroup("nvtx_domain", label=_domain_label, string_ids=False, always=True,
                          skip=frozenset({0}))


def nvtx_type(domain_k: int) -> int:
    """Event type of push/pop ranges of the k-th domain (0: the default domain)."""
    return pv.EV_NVTX_PUSHPOP_BASE + 100 * domain_k


def inline_text_sql(schema: Schema, table: str) -> str:
    """The text of rows that carry it inline (no textId), else NULL."""
    if schema.has(table, "text"):
        return "CASE WHEN textId IS NULL THEN text END" if schema.has(table, "textId") \
            else "text"
    return "NULL"


def convert(ctx: ReportContext, chunk: np.ndarray) -> ChunkResult:
    """NVTX marks, start/end and nested push/pop ranges (per thread and domain)."""
    # parents before children when they start together
    chunk = chunk[np.lexsort((-chunk["end"], chunk["start"]))]
    start = chunk["start"] + ctx.offset
    raw_end = chunk["end"]
    end = np.where(raw_end >= 0, raw_end + ctx.offset, ctx.end_rel)
    end = np.maximum(end, start)
    task, thread = ctx.cpu_objects(chunk["gtid"])
    value, labels, inverse = ctx.values("nvtx", chunk["text"])
    etype_col = chunk["event_type"]
    domains = chunk["domain"]
    dom_type: dict[int, int] = {}
    uniq_domains, dom_inverse = unique_inverse(domains)
    for d in uniq_domains.tolist():
        k = 0 if d == 0 else ctx.value_id(
            "nvtx_domain", ctx.nvtx_domain_names.get(d, f"domain {d}"))
        dom_type[d] = nvtx_type(k)
    etype = np.array([dom_type[d] for d in uniq_domains.tolist()], dtype=np.int64)[dom_inverse]
    etype = np.where(etype_col == NVTX_START_END, pv.EV_NVTX_STARTEND, etype)
    etype = np.where(etype_col == NVTX_MARK, pv.EV_NVTX_MARK, etype)
    # value restored at each range's end: the innermost enclosing push/pop range still open
    restore = np.zeros(len(chunk), dtype=np.int64)
    pushpop = (etype_col == NVTX_PUSH_POP).nonzero()[0]
    if len(pushpop):  # per thread and domain, each in start order (a stable sort)
        gt, dl = chunk["gtid"][pushpop], domains[pushpop]
        order = np.lexsort((dl, gt))
        gt, dl, rows = gt[order], dl[order], pushpop[order]
        cuts = ((gt[1:] != gt[:-1]) | (dl[1:] != dl[:-1])).nonzero()[0] + 1
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(rows)], strict=True):
            r = rows[a:b]
            restore[r] = nesting.restore(ctx.nvtx_stack(int(gt[a]), int(dl[a])), start[r],
                                         end[r], value[r])
    ranges = (etype_col != NVTX_MARK).nonzero()[0]
    seq = ctx.next_seq("nvtx", len(chunk))
    rank = RANK * 4 + LINE_EVENT
    begin = event_lines(task, thread, start, (etype, value))
    parts = [begin.batch(make_keys(start, PRIO_BEGIN, task, thread, rank, ctx.report_index,
                                   seq))]
    if len(ranges):
        r = ranges
        finish = event_lines(task[r], thread[r], end[r], (etype[r], restore[r]))
        parts.append(finish.batch(
            make_keys(end[r], end_prio(start[r], end[r]), task[r], thread[r], rank,
                      ctx.report_index, seq[r])))
    tables = [table_detail("nvtx", labels, inverse[ranges], start[ranges],
                           process_indices(ctx, process_of(chunk["gtid"][ranges])),
                           end[ranges] - start[ranges])] if len(ranges) else None
    return ChunkResult(RecordBatch.concat(parts), phases=_phases(ctx, chunk, start, end, labels,
                                                                 inverse), rows=len(chunk),
                       tables=tables)


def _phases(ctx: ReportContext, chunk: np.ndarray, start: np.ndarray, end: np.ndarray,
            labels: list[str], inverse: np.ndarray) -> np.ndarray | None:
    """The ranges (not marks) whose name matches the phase pattern."""
    pattern = re.compile(ctx.phase_pattern)  # once a process: re's cache keeps it
    matching = [bool(pattern.search(lab)) for lab in labels]
    if not any(matching):
        return None
    sel = (np.array(matching, dtype=bool)[inverse]
           & (chunk["event_type"] != NVTX_MARK)).nonzero()[0]
    if not len(sel):
        return None
    phases = np.empty(len(sel), dtype=PHASE_DTYPE)
    phases["start"] = start[sel]
    phases["end"] = end[sel]
    phases["process"] = process_indices(ctx, process_of(chunk["gtid"][sel]))
    phases["name"] = [ctx.phase_id(labels[j]) for j in inverse[sel].tolist()]
    return phases


def _plan(scan: PlanScan, src: KindSource) -> None:
    """Threads and domains in one DISTINCT scan (read always: ``DOMAIN_GROUP``); when NVTX is
    converted, its inline texts (interned) and its text ids in one DISTINCT scan each: an
    export whose ranges carry their names inline has about as many distinct texts as rows, and
    one DISTINCT over every column together was a Python tuple per row."""
    t, where = q(src.table), src.where
    for g, dom in scan.rows(f"SELECT DISTINCT {scan.col(src.table, 'globalTid')}, "
                            f"{scan.col(src.table, 'domainId', '0')} FROM {t} WHERE {where}"):
        scan.thread(int(g))  # type: ignore[call-overload]
        scan.see("nvtx_domain", int(dom))  # type: ignore[call-overload]
    scan.count("nvtx", scan.count_rows(src.table, where))
    if not scan.values_wanted:
        return
    inline = inline_text_sql(scan.schema, src.table)
    if inline != "NULL":
        texts = scan.texts(f"SELECT DISTINCT {inline} FROM {t} WHERE {where} "
                           f"AND ({inline}) IS NOT NULL")
        ids = scan.intern_texts(texts)
        scan.see_all("nvtx", [ids[text] for text in texts])
    for (v,) in scan.rows(f"SELECT DISTINCT {scan.col(src.table, 'textId')} FROM {t} "
                          f"WHERE {where} AND ({inline}) IS NULL"):
        scan.see("nvtx", int(v))  # type: ignore[call-overload]


def _pcf(values: Mapping[str, list[str]]) -> PcfBlocks:
    if "nvtx" not in values:
        return []
    # type labels as nsys2prv writes them
    domains = ["default", *values.get("nvtx_domain", [])]
    types = [(nvtx_type(k), f"NVTX pushpop ranges {d} domain") for k, d in enumerate(domains)]
    types += [(pv.EV_NVTX_STARTEND, "NVTX startend ranges"), (pv.EV_NVTX_MARK, "NVTX mark")]
    labels = {i + 1: lab for i, lab in enumerate(values["nvtx"])}
    return [(80, pv.EventTypeSpec(types, labels))]


SPEC = KindSpec(
    name="nvtx",
    title="NVTX marks and ranges",
    rank=RANK,
    dtype=np.dtype([*CPU_FIELDS, ("event_type", I4), ("domain", I8), ("text", I8),
                    ("range_id", I8)]),
    columns=(*CPU_COLUMNS, ("eventType", "event_type"), ("domainId", "domain"),
             ("textId", "text"), ("rangeId", "range_id")),
    tables=(KindSource("NVTX_EVENTS", where=NVTX_WHERE),),
    defaults={"domain": "0"},
    extra_select=lambda schema, table: [f"{inline_text_sql(schema, table)} AS inline_text"],
    inline_text="text",
    convert=convert,
    plan=_plan,
    value_groups={"nvtx": GROUP, "nvtx_domain": DOMAIN_GROUP},
    pcf=_pcf,
    efficiency="phases",
    open_end=True,
)
