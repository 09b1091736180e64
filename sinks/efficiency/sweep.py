"""The efficiency model's sweep: finalize each device's GPU activity up to a frontier and add
its measures and idle gaps to the cumulative, window and phase tables."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from prvstream.sinks.arrays import unique_inverse
from prvstream.sinks.efficiency.devices import DeviceTable, fits_int32
from prvstream.sinks.efficiency.overlap import hits
from prvstream.sinks.efficiency.parts import (
    GAP_NS,
    GAPS,
    N_MEASURES,
    Device,
    Name,
    Report,
    Sweep,
    segments,
)
from prvstream.sinks.efficiency.repeats import outside_earlier
from prvstream.sinks.efficiency.sharedrows import SharedRows
from prvstream.sinks.logger import get_logger

__all__ = ["MAX_WINDOWS", "DeviceSweep"]

log = get_logger(__name__)

#: windows kept on each side of the first one; time beyond folds into the edge window, so
#: memory never grows with the time span (7.6 days of the default 10 s windows)
MAX_WINDOWS = 1 << 16


def _indicators(n0: np.ndarray, n1: np.ndarray, n_all: np.ndarray) -> np.ndarray:
    """Per segment (running compute, NCCL and all counts), one row per measure: 1 where
    the segment counts for it (contiguous rows make the running sums cheap)."""
    comp = n0 > 0
    comm = (n_all - n0) > 0
    k = n0 + n1
    return np.stack([comp, ~comp & comm, comp & comm, k == 1, k == 2, k == 3, k >= 4]
                    ).astype(np.int64)


class DeviceSweep:
    """Sweeps each device's intervals into the tables (mixed into ``EfficiencyModel``)."""

    window_ns: int
    gap_threshold_ns: int
    _devices: DeviceTable
    _dev_windows: SharedRows
    _dev_instances: SharedRows
    _dev_totals: np.ndarray
    _dev_names: SharedRows
    _window_slots: dict[int, int]
    _names: list[Name]
    _n_instances: int
    _i_name: np.ndarray

    def _add_totals(self, gid: int, at: slice, values: np.ndarray) -> None:
        """Add ``values`` to columns ``at`` of device ``gid``'s totals: the table is int32
        until a sum does not fit, then int64 (a job of short reports keeps 36 bytes of totals
        a device, not 72: issue 11)."""
        t = self._dev_totals
        new = t[gid, at].astype(np.int64) + values
        if t.dtype != np.int64 and not fits_int32(new):
            t = self._dev_totals = t.astype(np.int64)
        t[gid, at] = new

    def _sweep_pending(self, rep: Report) -> None:
        """Finalize every device of the report up to the last start seen."""
        hi = rep.frontier
        if len(rep.pending) == 1:
            s, e, gdev, cat = rep.pending[0]
        elif rep.pending:
            s, e, gdev, cat = (np.concatenate(x) for x in zip(*rep.pending, strict=True))
        else:
            s = e = gdev = np.empty(0, np.int64)
            cat = np.empty(0, np.int8)
        rep.pending, rep.pending_rows = [], 0
        groups: dict[int, tuple[int, int]] = {}
        if len(rep.sweeps) == 1 or not len(gdev) or bool((gdev == gdev[0]).all()):
            if len(gdev):
                groups[int(gdev[0])] = (0, len(gdev))
        else:
            order = gdev.argsort(kind="stable")
            gdev, s, e, cat = gdev[order], s[order], e[order], cat[order]
            bounds = np.diff(gdev).nonzero()[0] + 1
            groups = {int(gdev[a]): (a, b) for a, b in
                      zip([0, *bounds.tolist()], [*bounds.tolist(), len(gdev)], strict=True)
                      if b > a}
        for gid, sw in rep.sweeps.items():
            if gid in groups:
                a, b = groups[gid]
                self._advance(rep, gid, sw, s[a:b], e[a:b], cat[a:b], hi, final=False)
            elif len(sw.carry_s):
                self._advance(rep, gid, sw, s[:0], e[:0], cat[:0], hi, final=False)
            else:
                sw.lo = max(sw.lo, hi)
        self._prune(rep)

    def _advance(self, rep: Report, gid: int, sw: Sweep, ns: np.ndarray, ne: np.ndarray,
                 nc: np.ndarray, hi: int, *, final: bool, report_end: int = 0) -> None:
        """Finalize device ``gid`` over [sw.lo, hi) and attribute the time to every view."""
        lo = sw.lo
        if len(sw.carry_s):
            s = np.concatenate([sw.carry_s, np.maximum(ns, lo)])
            e = np.concatenate([sw.carry_e, ne])
            c = np.concatenate([sw.carry_c, nc])
        else:
            s, e, c = np.maximum(ns, lo), ne, nc
        if hi > lo:
            if len(s):
                edges, n0, n1, n_all = segments(s, e, c, lo, hi)
            else:
                edges = np.array([lo, hi], np.int64)
                n0 = n1 = n_all = np.zeros(1, np.int64)
            length = np.diff(edges)
            if n0.ndim == 1:
                ind = _indicators(n0, n1, n_all)
            else:  # what the report adds to the earlier reports' view of the time (repeats)
                ind = _indicators(n0[0], n1[0], n_all[0]) - _indicators(n0[1], n1[1], n_all[1])
                n_all = n_all[0]
            self._attribute(rep, gid, edges, length, ind)
            self._gaps(rep, gid, sw, edges, n_all > 0)
        open_ = e > hi
        sw.carry_s, sw.carry_e, sw.carry_c = np.maximum(s[open_], hi), e[open_], c[open_]
        sw.lo = max(lo, hi)
        if not len(sw.carry_s) and sw.idle_since is None:
            sw.idle_since = sw.lo
        if final:
            if sw.idle_since is not None and report_end > sw.idle_since:
                self._add_gaps(rep, gid, np.array([sw.idle_since]), np.array([report_end]))
            sw.idle_since = None

    def _fold(self, k: np.ndarray, first: int) -> np.ndarray:
        """Windows ``k``, each replaced by the edge window when it lies more than
        ``MAX_WINDOWS`` from the model's first window (``first`` when there is none yet)."""
        origin = next(iter(self._window_slots), first)
        folded: np.ndarray = np.clip(k, origin - MAX_WINDOWS, origin + MAX_WINDOWS)
        return folded

    def _window_span(self, start: int, end: int) -> range:
        """The (folded) windows [start, end) touches."""
        w = self.window_ns
        k0, k1 = self._fold(np.array([start // w, max(end - 1, start) // w]),
                            start // w).tolist()
        return range(k0, k1 + 1)

    def _window_rows(self, dev: Device, ks: Iterable[int]) -> list[int]:
        """Slots of windows ``ks`` in the devices' window tables (created as needed)."""
        slots = []
        for k in ks:
            slot = self._window_slots.get(k)
            if slot is None:
                slot = self._window_slots[k] = len(self._window_slots)
            slots.append(slot)
        return slots

    def _attribute(self, rep: Report, gid: int, edges: np.ndarray, length: np.ndarray,
                   ind: np.ndarray) -> None:
        """Add the measures of segments [edges[i], edges[i+1]) to cumulative, windows, phases.

        ``ind`` holds one row per measure: 1 where the segment counts for it."""
        cum = np.zeros((N_MEASURES, len(length) + 1), np.int64)
        (ind * length).cumsum(axis=1, out=cum[:, 1:])
        total = cum[:, -1]
        dev = self._devices[gid]
        self._add_totals(gid, slice(0, N_MEASURES), total)
        lo, hi = int(edges[0]), int(edges[-1])

        def upto(q: np.ndarray) -> np.ndarray:
            """The measures over [lo, q) for each instant q, one row per q."""
            q = np.minimum(np.maximum(q, lo), hi)  # np.clip's value, without its wrappers
            j = np.minimum(np.maximum(edges.searchsorted(q, "right") - 1, 0), len(length) - 1)
            out: np.ndarray = (cum[:, j] + ind[:, j] * (q - edges[j])).T
            return out

        span = self._window_span(lo, hi)
        if len(span) == 1:
            slots = self._window_rows(dev, span)
            self._dev_windows.add(gid, np.array(slots, np.int64), total[None, :],
                                  slice(0, N_MEASURES))
        else:
            ks = np.arange(span.start, span.stop, dtype=np.int64)
            bounds = np.append(ks, ks[-1] + 1) * self.window_ns
            bounds[0], bounds[-1] = lo, hi  # folded edge windows take all beyond them
            per_window = np.diff(upto(bounds), axis=0)
            slots = self._window_rows(dev, ks.tolist())
            self._dev_windows.add(gid, np.array(slots, np.int64), per_window,
                                  slice(0, N_MEASURES))
        recent = rep.recent.get(dev.process)
        if recent:
            r = np.array(recent, np.int64)
            ids = r[:, 2]
            per_phase = upto(r[:, 1]) - upto(r[:, 0])
            self._dev_instances.add(gid, ids, per_phase, slice(0, N_MEASURES))
            self._dev_names.add(gid, self._i_name[ids], per_phase, slice(0, N_MEASURES))

    def _gaps(self, rep: Report, gid: int, sw: Sweep, edges: np.ndarray,
              busy: np.ndarray) -> None:
        """Close idle stretches that end inside these segments; carry the one still open."""
        idle = np.concatenate([[0], (~busy).astype(np.int8), [0]])
        d = np.diff(idle)
        starts, stops = (d == 1).nonzero()[0], (d == -1).nonzero()[0]
        g0, g1 = edges[starts], edges[np.minimum(stops, len(busy))]
        if sw.idle_since is not None:
            if busy[0]:  # the stretch open at the frontier ended right there
                g0 = np.concatenate([[sw.idle_since], g0])
                g1 = np.concatenate([[edges[0]], g1])
            else:
                g0[0] = sw.idle_since
        sw.idle_since = None
        if not busy[-1]:  # idle up to the new frontier: still open
            sw.idle_since = int(g0[-1])
            g0, g1 = g0[:-1], g1[:-1]
        self._add_gaps(rep, gid, g0, g1)

    def _add_gaps(self, rep: Report, gid: int, g0: np.ndarray, g1: np.ndarray) -> None:
        """Count the idle stretches [g0, g1) longer than the threshold in every view."""
        g0, g1 = outside_earlier(self._devices[gid], rep, gid, g0, g1)
        long_ = (g1 - g0) > self.gap_threshold_ns
        if not long_.any():
            return
        g0, g1 = g0[long_].astype(np.int64), g1[long_].astype(np.int64)
        dev = self._devices[gid]
        self._add_totals(gid, slice(GAPS, GAP_NS + 1),
                         np.array([len(g0), int((g1 - g0).sum())], np.int64))
        w = self.window_ns
        first = int(g0[0]) // w
        k0, k1 = self._fold(g0 // w, first), self._fold((g1 - 1) // w, first)
        single = k0 == k1
        ks, inv = unique_inverse(k0[single])
        counts = np.bincount(inv, minlength=len(ks))
        sums = np.bincount(inv, weights=(g1 - g0)[single], minlength=len(ks))
        slots = self._window_rows(dev, ks.tolist())
        self._dev_windows.add(gid, np.array(slots, np.int64), counts.astype(np.int64), GAPS)
        self._dev_windows.add(gid, np.array(slots, np.int64), sums.astype(np.int64), GAP_NS)
        for a, b, ka, kb in zip(g0[~single].tolist(), g1[~single].tolist(),
                                k0[~single].tolist(), k1[~single].tolist(), strict=True):
            for k in range(ka, kb + 1):
                slot = np.array(self._window_rows(dev, (k,)), np.int64)
                self._dev_windows.add(gid, slot, np.ones(1, np.int64), GAPS)
                self._dev_windows.add(gid, slot, np.array([(b if k == kb else (k + 1) * w)
                                                           - (a if k == ka else k * w)]), GAP_NS)
        recent = rep.recent.get(dev.process)
        if recent:
            r = np.array(recent, np.int64)
            ids = r[:, 2]
            n_hit, ns_hit = hits(g0, g1, r[:, 0], r[:, 1])
            self._dev_instances.add(gid, ids, n_hit, GAPS)
            self._dev_instances.add(gid, ids, ns_hit, GAP_NS)
            names = self._i_name[ids]
            self._dev_names.add(gid, names, n_hit, GAPS)
            self._dev_names.add(gid, names, ns_hit, GAP_NS)

    def _prune(self, rep: Report) -> None:
        """Forget phases that ended before every device of their process can still add time."""
        cutoff: dict[tuple[str, int], int] = {}
        for gid, sw in rep.sweeps.items():
            proc = self._devices[gid].process
            mark = sw.idle_since if sw.idle_since is not None else sw.lo
            cutoff[proc] = min(cutoff.get(proc, mark), mark)
        for proc, lst in rep.recent.items():
            limit = cutoff.get(proc)
            if limit is None:
                lst.clear()
            elif lst and min(r[1] for r in lst) <= limit:
                lst[:] = [r for r in lst if r[1] > limit]
        self._settle(rep, final=False)

    def _settle(self, rep: Report, *, final: bool) -> None:
        """Pack the phase rows of the report's devices that no longer receive time: those
        below the smallest instance still open in the device's process (all at the end)."""
        for gid in rep.sweeps:
            dev = self._devices[gid]
            lst = None if final else rep.recent.get(dev.process)
            self._dev_instances.settle(gid, min(r[2] for r in lst) if lst else None,
                                       final=final)
            if final:
                self._dev_windows.settle(gid, final=True)
                self._dev_names.settle(gid, final=True)
