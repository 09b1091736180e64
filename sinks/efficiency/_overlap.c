/* The efficiency model's interval loops: how much of each phase occurrence a set of intervals
 * covers, without a pieces x occurrences matrix, and a device's segments between interval
 * boundaries, in one pass instead of numpy's sorts and running sums.
 *
 * overlaps(lo, hi, starts, ends, count, total, clip) -> None
 *   lo, hi:        C-contiguous int64 buffers of n intervals [lo, hi)
 *   starts, ends:  C-contiguous int64 buffers of m occurrences [start, end)
 *   count, total:  writable int64 buffers of m values, added to
 *   clip:          1: per occurrence j, total[j] += sum of max(0, min(hi, end) - max(lo, start))
 *                     and count[j] += the intervals where that is > 0;
 *                  0: over the intervals "hit" (start < hi and end > lo), total[j] +=
 *                     min(hi, end) - max(lo, start) and count[j] += 1.
 *
 *
 * segments(s, e, c, lo, hi, edges, comp, nccl, total) -> int
 *   s, e:          C-contiguous int64 buffers of n >= 1 intervals [s, e)
 *   c:             C-contiguous int8 buffer of their n categories (0 compute, 1 NCCL, 2 other)
 *   edges:         writable int64 buffer of 2n + 2 values; comp, nccl, total: of 2n + 1
 *   Returns m, the segments: edges[0..m] their bounds (lo first, hi last), and per segment
 *   the running count of compute intervals, NCCL intervals and of all of them (parts.py's
 *   ``segments``); -1 (nothing written that counts) when a category is outside 0..2 (rows
 *   an earlier report holds: the numpy code counts those).
 *
 * The numpy references in overlap.py and parts.py give the same integers; the tests compare
 * them.
 */
#include "native.h"
#include <stdint.h>
#include <string.h>

static void sweep(const int64_t *lo, const int64_t *hi, Py_ssize_t n, const int64_t *st,
                  const int64_t *en, Py_ssize_t m, int64_t *count, int64_t *total, int clip) {
    for (Py_ssize_t j = 0; j < m; j++) {
        const int64_t a = st[j], b = en[j];
        int64_t c = 0, t = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            const int64_t x = hi[i] < b ? hi[i] : b;
            const int64_t y = lo[i] > a ? lo[i] : a;
            if (clip) {
                if (x > y) {
                    c++;
                    t += x - y;
                }
            } else if (a < hi[i] && b > lo[i]) {
                c++;
                t += x - y;
            }
        }
        count[j] += c;
        total[j] += t;
    }
}

static int check(Py_buffer *b, Py_ssize_t n, const char *what) {
    if (b->len != n * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_Format(PyExc_ValueError, "%s must hold %zd int64 values", what, n);
        return -1;
    }
    return 0;
}

static PyObject *overlaps(PyObject *self, PyObject *args) {
    Py_buffer lo, hi, st, en, count, total;
    int clip;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*w*p", &lo, &hi, &st, &en, &count, &total, &clip)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = lo.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t m = st.len / (Py_ssize_t)sizeof(int64_t);
    if (check(&lo, n, "lo") == 0 && check(&hi, n, "hi") == 0 && check(&st, m, "starts") == 0
        && check(&en, m, "ends") == 0 && check(&count, m, "count") == 0
        && check(&total, m, "total") == 0) {
        if (n * m >= (1 << 16)) { /* large enough to let the writer thread run meanwhile */
            Py_BEGIN_ALLOW_THREADS
            sweep(lo.buf, hi.buf, n, st.buf, en.buf, m, count.buf, total.buf, clip);
            Py_END_ALLOW_THREADS
        } else {
            sweep(lo.buf, hi.buf, n, st.buf, en.buf, m, count.buf, total.buf, clip);
        }
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&lo);
    PyBuffer_Release(&hi);
    PyBuffer_Release(&st);
    PyBuffer_Release(&en);
    PyBuffer_Release(&count);
    PyBuffer_Release(&total);
    return result;
}

typedef struct {
    int64_t t;
    int8_t c;
} event_t;

/* np.clip's value: min(max(v, lo), hi) */
static inline int64_t clip(int64_t v, int64_t lo, int64_t hi) {
    const int64_t up = v < lo ? lo : v;
    return up > hi ? hi : up;
}

/* an event of the right run goes first when its time is strictly less */
#define EARLIER(ctx, right, left) ((right).t < (left).t)
/* merge_runs: a merge sort by time of runs already found (native.h) */
PRVSTREAM_MERGE_RUNS(merge_runs, event_t, int, EARLIER)

/* times (clipped to [lo, hi]: only which clipped time an event has counts) and categories
 * as events sorted by time, ties in any order (only the counts after every event of one
 * time are read). A device's intervals come in start order and end nearly in order: an
 * insertion sort, unless it would move more than a few rows a row (then a merge sort of the
 * input's runs). tmp: room for n events, bounds for n + 1 run starts */
static void sorted_events(const int64_t *t, const int8_t *c, Py_ssize_t n, int64_t lo,
                          int64_t hi, event_t *out, event_t *tmp, Py_ssize_t *bounds) {
    Py_ssize_t moves = 0, budget = 4 * n + 64;
    for (Py_ssize_t i = 0; i < n; i++) {
        event_t x = {clip(t[i], lo, hi), c[i]};
        Py_ssize_t j = i;
        if (moves <= budget) {
            for (; j > 0 && out[j - 1].t > x.t; j--) out[j] = out[j - 1];
            moves += i - j;
        }
        out[j] = x;
    }
    if (moves > budget) { /* unsorted enough: sort the clipped times by their runs */
        Py_ssize_t runs = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            out[i].t = clip(t[i], lo, hi);
            out[i].c = c[i];
            if (!i || out[i].t < out[i - 1].t) bounds[runs++] = i;
        }
        bounds[runs] = n;
        merge_runs(out, n, tmp, bounds, runs, 0);
    }
}

/* the boundaries' walk: both event lists in (clipped) time order; per distinct time, the
 * counts after every event at it */
static Py_ssize_t walk(const event_t *st, const event_t *en, Py_ssize_t n, int64_t lo,
                       int64_t hi, int64_t *edges, int64_t *comp, int64_t *nccl,
                       int64_t *total) {
    Py_ssize_t i = 0, j = 0, m = 0;
    int64_t k_all = 0, k_comp = 0, k_nccl = 0;
    const int64_t first = st[0].t < en[0].t ? st[0].t : en[0].t;
    if (first > lo) { /* nothing starts at lo: an empty first segment */
        edges[0] = lo;
        comp[0] = nccl[0] = total[0] = 0;
        m = 1;
    }
    while (i < n || j < n) {
        const int64_t a = i < n ? st[i].t : INT64_MAX;
        const int64_t b = j < n ? en[j].t : INT64_MAX;
        const int64_t v = a < b ? a : b;
        for (; i < n && st[i].t == v; i++) {
            k_all++;
            k_comp += st[i].c == 0;
            k_nccl += st[i].c == 1;
        }
        for (; j < n && en[j].t == v; j++) {
            k_all--;
            k_comp -= en[j].c == 0;
            k_nccl -= en[j].c == 1;
        }
        edges[m] = v;
        comp[m] = k_comp;
        nccl[m] = k_nccl;
        total[m] = k_all;
        m++;
    }
    if (edges[m - 1] == hi) m--; /* boundaries at hi close the last segment */
    if (!m) { /* every boundary at lo == hi */
        edges[0] = lo;
        comp[0] = nccl[0] = total[0] = 0;
        m = 1;
    }
    edges[m] = hi;
    return m;
}

static PyObject *segments(PyObject *self, PyObject *args) {
    Py_buffer s, e, c, edges, comp, nccl, total;
    long long lo, hi;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*y*LLw*w*w*w*", &s, &e, &c, &lo, &hi, &edges, &comp,
                          &nccl, &total)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = s.len / (Py_ssize_t)sizeof(int64_t);
    if (n < 1) {
        PyErr_SetString(PyExc_ValueError, "segments needs at least one interval");
    } else if (check(&s, n, "s") == 0 && check(&e, n, "e") == 0
               && check(&edges, 2 * n + 2, "edges") == 0 && check(&comp, 2 * n + 1, "comp") == 0
               && check(&nccl, 2 * n + 1, "nccl") == 0 && check(&total, 2 * n + 1, "total") == 0) {
        if (c.len != n) {
            PyErr_Format(PyExc_ValueError, "c must hold %zd int8 values", n);
        } else {
            const int8_t *cat = c.buf;
            int plain = 1;
            for (Py_ssize_t i = 0; i < n; i++) plain &= cat[i] >= 0 && cat[i] <= 2;
            Py_ssize_t m = -1;
            event_t *ev = plain ? PyMem_RawMalloc((size_t)(3 * n) * sizeof(event_t)) : NULL;
            Py_ssize_t *bounds = plain ? PyMem_RawMalloc((size_t)(n + 1) * sizeof(Py_ssize_t))
                                       : NULL;
            if (plain && (!ev || !bounds)) {
                PyErr_NoMemory();
            } else {
                if (plain) {
                    sorted_events(s.buf, cat, n, lo, hi, ev, ev + 2 * n, bounds);
                    sorted_events(e.buf, cat, n, lo, hi, ev + n, ev + 2 * n, bounds);
                    m = walk(ev, ev + n, n, lo, hi, edges.buf, comp.buf, nccl.buf, total.buf);
                }
                result = PyLong_FromSsize_t(m);
            }
            PyMem_RawFree(ev);
            PyMem_RawFree(bounds);
        }
    }
    PyBuffer_Release(&s);
    PyBuffer_Release(&e);
    PyBuffer_Release(&c);
    PyBuffer_Release(&edges);
    PyBuffer_Release(&comp);
    PyBuffer_Release(&nccl);
    PyBuffer_Release(&total);
    return result;
}

static PyMethodDef overlap_methods[] = {
    {"overlaps", overlaps, METH_VARARGS,
     "overlaps(lo, hi, starts, ends, count, total, clip) -> None"},
    {"segments", segments, METH_VARARGS,
     "segments(s, e, c, lo, hi, edges, comp, nccl, total) -> int"},
    {NULL, NULL, 0, NULL},
};

PRVSTREAM_MODULE(_overlap, "The efficiency model's interval loops.", overlap_methods)
