/* The record merge's sorts in C, by the full sort key (time, object, order: three int64
 * columns compared as signed integers, left to right), and the activity router's split of
 * held rows at the merge horizon, with the GIL released.
 *
 * sort_order(keys, order) -> None
 *   keys:   C-contiguous (n, 3) int64 buffer
 *   order:  writable int64 buffer of n values: the stable full-key order of the rows
 *           (a natural merge sort: a presorted batch is one run, checked in one pass)
 *
 * gather(parts, keys, fields, width, tmpl) -> None
 *   parts:  a sequence of (keys, fields, width, tmpl, index) tuples: a part's rows and the
 *           indices of the rows to take, each part's taken rows in full-key order
 *   keys, fields, tmpl: writable (m, 3) int64, (m, width) int64 and m int16 buffers, m the
 *           indices' total: the taken rows of every part merged in full-key order (ties:
 *           the earlier part first), a part's fields zero-padded to ``width``
 *
 * ready_rows(parts, itemsize, horizon, out) -> int
 *   parts:  a sequence of buffers of packed rows of ``itemsize`` bytes, each row's first 8
 *           bytes its start (a little-endian int64)
 *   horizon: rows that start before it are ready (None: every row)
 *   out:    writable buffer of every part's rows: the ready rows first, stably sorted by
 *           start, then the others in their order; returns the number of ready rows
 *
 * merge.py's numpy versions (``_sort_order``, ``_gather``) and ready.py's give the same
 * arrays; the tests compare them.
 */
#include "native.h"
#include <stdint.h>
#include <string.h>

/* a < b in full-key order */
static inline int key_less(const int64_t *a, const int64_t *b) {
    if (a[0] != b[0]) return a[0] < b[0];
    if (a[1] != b[1]) return a[1] < b[1];
    return a[2] < b[2];
}

/* a < b comparing the first ``cols`` columns (1 or 3) */
static inline int less_by(const int64_t *a, const int64_t *b, int cols) {
    return cols == 1 ? a[0] < b[0] : key_less(a, b);
}

/* the rows a sort compares: ``cols`` int64 columns a row */
typedef struct {
    const int64_t *keys;
    int cols;
} rows_t;

/* the right run's row goes first only when strictly less: stable */
#define ROW_LESS(ctx, right, left)                                                         \
    less_by((ctx)->keys + (ctx)->cols * (right), (ctx)->keys + (ctx)->cols * (left), (ctx)->cols)
/* merge_rows: the row indices' runs merged (native.h) */
PRVSTREAM_MERGE_RUNS(merge_rows, int64_t, const rows_t *, ROW_LESS)

/* Stable sort of the row indices 0..n-1 by the rows of ``cols`` int64 columns (1: one value
 * a row, 3: the full key): ascending runs found, then merged pairwise (left run first on
 * ties) between ``order`` and ``tmp`` until one run is left. */
static void merge_sort(const int64_t *keys, int cols, Py_ssize_t n, int64_t *order,
                       int64_t *tmp, Py_ssize_t *bounds) {
    Py_ssize_t runs = 0;
    for (Py_ssize_t i = 0; i < n; i++) order[i] = i;
    bounds[runs++] = 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        if (less_by(keys + cols * i, keys + cols * (i - 1), cols)) bounds[runs++] = i;
    }
    bounds[runs] = n;
    const rows_t rows = {keys, cols};
    merge_rows(order, n, tmp, bounds, runs, &rows);
}

static PyObject *sort_order(PyObject *self, PyObject *args) {
    Py_buffer keys, order;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*w*", &keys, &order)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = order.len / (Py_ssize_t)sizeof(int64_t);
    int64_t *tmp = NULL;
    Py_ssize_t *bounds = NULL;
    if (order.len != n * (Py_ssize_t)sizeof(int64_t)
        || keys.len != 3 * n * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "keys must be (n, 3) int64 and order n int64 values");
        goto done;
    }
    tmp = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    bounds = PyMem_Malloc((size_t)(n + 2) * sizeof(Py_ssize_t));
    if (!tmp || !bounds) {
        PyErr_NoMemory();
        goto done;
    }
    if (n) {
        Py_BEGIN_ALLOW_THREADS
        merge_sort(keys.buf, 3, n, order.buf, tmp, bounds);
        Py_END_ALLOW_THREADS
    }
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(tmp);
    PyMem_Free(bounds);
    PyBuffer_Release(&keys);
    PyBuffer_Release(&order);
    return result;
}

/* one part of a gather: its buffers and where its next taken row is */
typedef struct {
    Py_buffer keys, fields, tmpl, index;
    Py_ssize_t width, rows, taken, next;
} part_t;

static void release_parts(part_t *p, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++) {
        PyBuffer_Release(&p[i].keys);
        PyBuffer_Release(&p[i].fields);
        PyBuffer_Release(&p[i].tmpl);
        PyBuffer_Release(&p[i].index);
    }
}

/* Check one part's shapes and indices (every index in range). */
static int check_part(part_t *p, Py_ssize_t width) {
    p->rows = p->keys.len / (Py_ssize_t)(3 * sizeof(int64_t));
    p->taken = p->index.len / (Py_ssize_t)sizeof(int64_t);
    if (p->keys.len != p->rows * 3 * (Py_ssize_t)sizeof(int64_t) || p->width < 0
        || p->width > width || p->fields.len != p->rows * p->width * (Py_ssize_t)sizeof(int64_t)
        || p->tmpl.len != p->rows * (Py_ssize_t)sizeof(int16_t)
        || p->index.len != p->taken * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "a part's keys, fields, width, tmpl or index do not "
                                          "agree in shape");
        return -1;
    }
    const int64_t *index = p->index.buf;
    for (Py_ssize_t i = 0; i < p->taken; i++) {
        if (index[i] < 0 || index[i] >= p->rows) {
            PyErr_SetString(PyExc_IndexError, "a part's index is out of range");
            return -1;
        }
    }
    return 0;
}

/* the part's current head row's key */
static inline const int64_t *head(const part_t *p) {
    return (const int64_t *)p->keys.buf + 3 * ((const int64_t *)p->index.buf)[p->next];
}

/* heap order: smaller head key first, the earlier part on equal keys */
static inline int before(const part_t *parts, Py_ssize_t a, Py_ssize_t b) {
    const int64_t *ka = head(&parts[a]), *kb = head(&parts[b]);
    if (key_less(ka, kb)) return 1;
    if (key_less(kb, ka)) return 0;
    return a < b;
}

static void sift_down(const part_t *parts, Py_ssize_t *heap, Py_ssize_t size, Py_ssize_t at) {
    for (;;) {
        Py_ssize_t least = at, l = 2 * at + 1, r = l + 1;
        if (l < size && before(parts, heap[l], heap[least])) least = l;
        if (r < size && before(parts, heap[r], heap[least])) least = r;
        if (least == at) return;
        Py_ssize_t swap = heap[at];
        heap[at] = heap[least];
        heap[least] = swap;
        at = least;
    }
}

/* Copy part p's next row to output row ``row`` and advance it. */
static inline void take(part_t *p, Py_ssize_t row, int64_t *keys, int64_t *fields,
                        Py_ssize_t width, int16_t *tmpl) {
    const Py_ssize_t src = (Py_ssize_t)((const int64_t *)p->index.buf)[p->next++];
    memcpy(keys + 3 * row, (const int64_t *)p->keys.buf + 3 * src, 3 * sizeof(int64_t));
    int64_t *to = fields + row * width;
    memcpy(to, (const int64_t *)p->fields.buf + src * p->width,
           (size_t)p->width * sizeof(int64_t));
    if (p->width < width) memset(to + p->width, 0, (size_t)(width - p->width) * sizeof(int64_t));
    tmpl[row] = ((const int16_t *)p->tmpl.buf)[src];
}

static void kway(part_t *parts, Py_ssize_t count, Py_ssize_t *heap, int64_t *keys,
                 int64_t *fields, Py_ssize_t width, int16_t *tmpl) {
    Py_ssize_t size = 0, row = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (parts[i].taken) heap[size++] = i;
    }
    for (Py_ssize_t i = size / 2; i-- > 0;) sift_down(parts, heap, size, i);
    while (size > 1) {
        part_t *p = &parts[heap[0]];
        /* take from the least part while it stays before the second least */
        Py_ssize_t second = size == 2 || before(parts, heap[1], heap[2]) ? heap[1] : heap[2];
        do {
            take(p, row++, keys, fields, width, tmpl);
        } while (p->next < p->taken && before(parts, heap[0], second));
        if (p->next == p->taken) heap[0] = heap[--size];
        sift_down(parts, heap, size, 0);
    }
    if (size == 1) {
        part_t *p = &parts[heap[0]];
        while (p->next < p->taken) take(p, row++, keys, fields, width, tmpl);
    }
}

static PyObject *gather(PyObject *self, PyObject *args) {
    PyObject *seq;
    Py_buffer keys, fields, tmpl;
    Py_ssize_t width;
    (void)self;
    if (!PyArg_ParseTuple(args, "Ow*w*nw*", &seq, &keys, &fields, &width, &tmpl)) return NULL;
    PyObject *result = NULL, *fast = PySequence_Fast(seq, "parts must be a sequence");
    part_t *parts = NULL;
    Py_ssize_t *heap = NULL, filled = 0, count = 0, total = 0;
    if (!fast) goto done;
    count = PySequence_Fast_GET_SIZE(fast);
    parts = PyMem_Calloc((size_t)(count ? count : 1), sizeof(part_t));
    heap = PyMem_Malloc((size_t)(count ? count : 1) * sizeof(Py_ssize_t));
    if (!parts || !heap) {
        PyErr_NoMemory();
        goto done;
    }
    if (width < 0) {
        PyErr_SetString(PyExc_ValueError, "width must not be negative");
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        part_t *p = &parts[i];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "y*y*ny*y*;a part is (keys, "
                              "fields, width, tmpl, index)", &p->keys, &p->fields, &p->width,
                              &p->tmpl, &p->index)) {
            goto done;
        }
        filled++;
        if (check_part(p, width) < 0) goto done;
        total += p->taken;
    }
    if (keys.len != total * 3 * (Py_ssize_t)sizeof(int64_t)
        || fields.len != total * width * (Py_ssize_t)sizeof(int64_t)
        || tmpl.len != total * (Py_ssize_t)sizeof(int16_t)) {
        PyErr_SetString(PyExc_ValueError, "the outputs must hold the indices' total of rows");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    kway(parts, count, heap, keys.buf, fields.buf, width, tmpl.buf);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    if (parts) release_parts(parts, filled);
    PyMem_Free(parts);
    PyMem_Free(heap);
    Py_XDECREF(fast);
    PyBuffer_Release(&keys);
    PyBuffer_Release(&fields);
    PyBuffer_Release(&tmpl);
    return result;
}

/* The ready rows (start < horizon, or all when ``all``) of the parts into ``out``, sorted
 * stably by start, then the other rows in their order; returns the ready count, or -1 when
 * memory ran out. */
static Py_ssize_t split_rows(const Py_buffer *parts, Py_ssize_t count, Py_ssize_t itemsize,
                             int all, int64_t horizon, char *out, Py_ssize_t total) {
    const size_t n = (size_t)(total ? total : 1);
    int64_t *starts = malloc(n * sizeof(int64_t)), *order = malloc(n * sizeof(int64_t));
    int64_t *tmp = malloc(n * sizeof(int64_t));
    const char **from = malloc(n * sizeof(char *));
    Py_ssize_t *bounds = malloc((n + 2) * sizeof(Py_ssize_t));
    Py_ssize_t ready = -1;
    if (starts && order && tmp && from && bounds) {
        Py_ssize_t later;
        ready = 0;
        for (Py_ssize_t p = 0; p < count; p++) { /* the ready rows: starts, where */
            const char *row = parts[p].buf, *end = row + parts[p].len;
            for (; row < end; row += itemsize) {
                int64_t start;
                memcpy(&start, row, sizeof start);
                if (all || start < horizon) {
                    starts[ready] = start;
                    from[ready++] = row;
                }
            }
        }
        later = ready;
        for (Py_ssize_t p = 0; p < count && later < total; p++) { /* the rest, in order */
            const char *row = parts[p].buf, *end = row + parts[p].len;
            for (; row < end; row += itemsize) {
                int64_t start;
                memcpy(&start, row, sizeof start);
                if (!(all || start < horizon)) memcpy(out + later++ * itemsize, row,
                                                      (size_t)itemsize);
            }
        }
        merge_sort(starts, 1, ready, order, tmp, bounds);
        for (Py_ssize_t r = 0; r < ready; r++) {
            memcpy(out + r * itemsize, from[order[r]], (size_t)itemsize);
        }
    }
    free(starts);
    free(order);
    free(tmp);
    free(from);
    free(bounds);
    return ready;
}

static PyObject *ready_rows(PyObject *self, PyObject *args) {
    PyObject *seq, *limit;
    Py_ssize_t itemsize;
    Py_buffer out;
    (void)self;
    if (!PyArg_ParseTuple(args, "OnOw*", &seq, &itemsize, &limit, &out)) return NULL;
    PyObject *result = NULL, *fast = PySequence_Fast(seq, "parts must be a sequence");
    Py_buffer *parts = NULL;
    Py_ssize_t count = 0, filled = 0, total = 0;
    long long horizon = 0;
    int all = limit == Py_None;
    if (!fast) goto done;
    if (!all) {
        horizon = PyLong_AsLongLong(limit);
        if (horizon == -1 && PyErr_Occurred()) goto done;
    }
    if (itemsize < (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "rows must be at least 8 bytes (their start)");
        goto done;
    }
    count = PySequence_Fast_GET_SIZE(fast);
    parts = PyMem_Calloc((size_t)(count ? count : 1), sizeof(Py_buffer));
    if (!parts) {
        PyErr_NoMemory();
        goto done;
    }
    for (; filled < count; filled++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, filled), &parts[filled],
                               PyBUF_C_CONTIGUOUS) < 0) {
            goto done;
        }
        if (parts[filled].len % itemsize) {
            filled++;
            PyErr_SetString(PyExc_ValueError, "a part is not a whole number of rows");
            goto done;
        }
        total += parts[filled].len / itemsize;
    }
    if (out.len != total * itemsize) {
        PyErr_SetString(PyExc_ValueError, "out must hold every part's rows");
        goto done;
    }
    Py_ssize_t ready;
    Py_BEGIN_ALLOW_THREADS
    ready = split_rows(parts, count, itemsize, all, (int64_t)horizon, out.buf, total);
    Py_END_ALLOW_THREADS
    result = ready < 0 ? PyErr_NoMemory() : PyLong_FromSsize_t(ready);
done:
    for (Py_ssize_t i = 0; i < filled; i++) PyBuffer_Release(&parts[i]);
    PyMem_Free(parts);
    Py_XDECREF(fast);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"sort_order", sort_order, METH_VARARGS, "sort_order(keys, order) -> None"},
    {"gather", gather, METH_VARARGS, "gather(parts, keys, fields, width, tmpl) -> None"},
    {"ready_rows", ready_rows, METH_VARARGS, "ready_rows(parts, itemsize, horizon, out) -> int"},
    {NULL, NULL, 0, NULL},
};

PRVSTREAM_MODULE(_merge, "The record merge's sorts by full key, the router's split.", methods)
