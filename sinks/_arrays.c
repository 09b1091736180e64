/* ``np.unique(values, return_inverse=True)`` of a 1-d integer array with few distinct values,
 * in two passes and no sort of the values; and a table's per-name count, sum, least, greatest
 * and byte sum in one pass (``base.table_rows``).
 *
 * unique_inverse(values, uniq, inverse) -> int
 *   values:   a 1-d array of signed integers (1, 2, 4 or 8 bytes) or unsigned ones (1, 2 or 4
 *             bytes), native byte order, any stride (a structured array's field)
 *   uniq:     writable C-contiguous buffer of FEW values of ``values``' type: the distinct
 *             values, ascending, are written to its front
 *   inverse:  writable int64 buffer of len(values) values: each value's index in ``uniq``
 *   returns   the number of distinct values; -1 (``inverse`` unspecified) when there are more
 *             than FEW (the caller asks numpy then), -2 when the type is not one of those
 *
 * group_stats(inverse, values, nbytes, count, total, lo, hi, size) -> int
 *   inverse:  C-contiguous int64 buffer of n group indices, each in [0, m)
 *   values:   C-contiguous int64 buffer of the n rows' values; nbytes: another one, or None
 *   count, total, lo, hi, size: writable int64 buffers of m groups, set: the rows of each
 *             group, the sum, least and greatest of their values (INT64_MAX and INT64_MIN
 *             where none), the sum of their nbytes (0 without); sums wrap as numpy's do
 *   returns   0; -1 (the buffers unspecified) when a group index lies outside [0, m)
 *
 * arrays.py's and base.py's numpy code give the same arrays; the tests compare them.
 */
#include "native.h"
#include <stdint.h>
#include <string.h>

#define FEW 64

/* values spanning fewer than this many integers are ranked through a table */
#define SPAN 4096

/* index of the first of ``n`` ascending values that is >= v */
static inline Py_ssize_t lower(const int64_t *sorted, Py_ssize_t n, int64_t v) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (sorted[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* factor_<TYPE>: the distinct values (ascending, at most FEW) into ``seen``, then every
 * value's index into ``inverse``; returns the count, or -1 past FEW. Values within SPAN of
 * the least are ranked through a table; others by insertion into ``seen`` and binary search. */
#define FACTOR(TYPE)                                                                        \
    static Py_ssize_t factor_##TYPE(const char *base, Py_ssize_t n, Py_ssize_t stride,     \
                                    int64_t *seen, int64_t *inverse) {                     \
        TYPE v, least, most;                                                               \
        memcpy(&least, base, sizeof least);                                                \
        most = least;                                                                      \
        for (Py_ssize_t i = 1; i < n; i++) {                                               \
            memcpy(&v, base + i * stride, sizeof v);                                       \
            if (v < least) least = v;                                                      \
            if (v > most) most = v;                                                        \
        }                                                                                  \
        Py_ssize_t count = 0;                                                              \
        if ((uint64_t)(int64_t)most - (uint64_t)(int64_t)least < SPAN) {                   \
            int16_t rank[SPAN];                                                            \
            const Py_ssize_t span = (Py_ssize_t)((int64_t)most - (int64_t)least) + 1;     \
            memset(rank, 0, (size_t)span * sizeof rank[0]);                                \
            for (Py_ssize_t i = 0; i < n; i++) {                                           \
                memcpy(&v, base + i * stride, sizeof v);                                   \
                rank[(int64_t)v - (int64_t)least] = 1;                                     \
            }                                                                              \
            for (Py_ssize_t k = 0; k < span; k++) {                                        \
                if (!rank[k]) continue;                                                    \
                if (count == FEW) return -1;                                               \
                seen[count] = (int64_t)least + k;                                          \
                rank[k] = (int16_t)count++;                                                \
            }                                                                              \
            for (Py_ssize_t i = 0; i < n; i++) {                                           \
                memcpy(&v, base + i * stride, sizeof v);                                   \
                inverse[i] = rank[(int64_t)v - (int64_t)least];                            \
            }                                                                              \
            return count;                                                                  \
        }                                                                                  \
        int64_t last = 0;                                                                  \
        for (Py_ssize_t i = 0; i < n; i++) {                                               \
            memcpy(&v, base + i * stride, sizeof v);                                       \
            if (count && (int64_t)v == last) continue; /* runs of one value are common */  \
            last = (int64_t)v;                                                             \
            const Py_ssize_t at = lower(seen, count, last);                                \
            if (at < count && seen[at] == last) continue;                                  \
            if (count == FEW) return -1;                                                   \
            memmove(seen + at + 1, seen + at, (size_t)(count - at) * sizeof(int64_t));     \
            seen[at] = last;                                                               \
            count++;                                                                       \
        }                                                                                  \
        Py_ssize_t index = 0;                                                              \
        last = seen[0];                                                                    \
        for (Py_ssize_t i = 0; i < n; i++) {                                               \
            memcpy(&v, base + i * stride, sizeof v);                                       \
            if ((int64_t)v != last) {                                                      \
                last = (int64_t)v;                                                         \
                index = lower(seen, count, last);                                          \
            }                                                                              \
            inverse[i] = index;                                                            \
        }                                                                                  \
        return count;                                                                      \
    }

FACTOR(int8_t)
FACTOR(uint8_t)
FACTOR(int16_t)
FACTOR(uint16_t)
FACTOR(int32_t)
FACTOR(uint32_t)
FACTOR(int64_t)

static Py_ssize_t factor(const char *base, Py_ssize_t n, Py_ssize_t stride, Py_ssize_t size,
                         int is_signed, int64_t *seen, int64_t *inverse) {
    switch (size) {
    case 1: return (is_signed ? factor_int8_t : factor_uint8_t)(base, n, stride, seen, inverse);
    case 2: return (is_signed ? factor_int16_t : factor_uint16_t)(base, n, stride, seen, inverse);
    case 4: return (is_signed ? factor_int32_t : factor_uint32_t)(base, n, stride, seen, inverse);
    default: return factor_int64_t(base, n, stride, seen, inverse);
    }
}

/* the item size and signedness of a buffer format ("l", "<i"...), or 0 when not handled */
static Py_ssize_t integer_format(const char *format, Py_ssize_t itemsize, int *is_signed) {
    if (!format) return 0;
    if (*format == '@' || *format == '=') format++;
#if PY_LITTLE_ENDIAN
    else if (*format == '<') format++;
#else
    else if (*format == '>') format++;
#endif
    if (!*format || format[1] || !strchr("bBhHiIlLqQ", *format)) return 0;
    *is_signed = *format >= 'a';
    if (!*is_signed && itemsize == 8) return 0; /* uint64 does not fit an int64 */
    return itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8 ? itemsize : 0;
}

static PyObject *unique_inverse(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_buffer uniq, inverse, values;
    (void)self;
    if (!PyArg_ParseTuple(args, "Ow*w*", &obj, &uniq, &inverse)) return NULL;
    if (PyObject_GetBuffer(obj, &values, PyBUF_RECORDS_RO) < 0) {
        PyBuffer_Release(&uniq);
        PyBuffer_Release(&inverse);
        return NULL;
    }
    PyObject *result = NULL;
    int is_signed = 0;
    const Py_ssize_t size = integer_format(values.format, values.itemsize, &is_signed);
    const Py_ssize_t n = values.ndim == 1 ? values.shape[0] : 0;
    if (values.ndim != 1 || !size || !n) {
        result = PyLong_FromLong(-2);
        goto done;
    }
    if (uniq.len != FEW * size || inverse.len != n * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_Format(PyExc_ValueError, "uniq must hold %d values of the values' type and "
                     "inverse one int64 a value", FEW);
        goto done;
    }
    int64_t seen[FEW];
    Py_ssize_t count = factor(values.buf, n, values.strides[0], size, is_signed, seen,
                              inverse.buf);
    for (Py_ssize_t i = 0; i < count; i++) { /* back to the values' own type */
        char *to = (char *)uniq.buf + i * size;
        const int64_t v = seen[i];
        switch (size) {
        case 1: { int8_t w = (int8_t)v; memcpy(to, &w, 1); break; }
        case 2: { int16_t w = (int16_t)v; memcpy(to, &w, 2); break; }
        case 4: { int32_t w = (int32_t)v; memcpy(to, &w, 4); break; }
        default: memcpy(to, &v, 8);
        }
    }
    result = PyLong_FromSsize_t(count);
done:
    PyBuffer_Release(&values);
    PyBuffer_Release(&uniq);
    PyBuffer_Release(&inverse);
    return result;
}

static int sized(Py_buffer *b, Py_ssize_t n, const char *what) {
    if (b->len != n * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_Format(PyExc_ValueError, "%s must hold %zd int64 values", what, n);
        return -1;
    }
    return 0;
}

static PyObject *group_stats(PyObject *self, PyObject *args) {
    Py_buffer inv, val, nb = {0}, count, total, lo, hi, size;
    PyObject *nbytes;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*Ow*w*w*w*w*", &inv, &val, &nbytes, &count, &total, &lo,
                          &hi, &size)) {
        return NULL;
    }
    PyObject *result = NULL;
    int have_nb = 0;
    const Py_ssize_t n = inv.len / (Py_ssize_t)sizeof(int64_t);
    const Py_ssize_t m = count.len / (Py_ssize_t)sizeof(int64_t);
    if (nbytes != Py_None) {
        if (PyObject_GetBuffer(nbytes, &nb, PyBUF_SIMPLE) < 0) goto done;
        have_nb = 1;
    }
    if (sized(&inv, n, "inverse") || sized(&val, n, "values")
        || (have_nb && sized(&nb, n, "nbytes")) || sized(&count, m, "count")
        || sized(&total, m, "total") || sized(&lo, m, "lo") || sized(&hi, m, "hi")
        || sized(&size, m, "size")) {
        goto done;
    }
    const int64_t *g = inv.buf, *v = val.buf, *b = have_nb ? nb.buf : NULL;
    int64_t *c = count.buf, *t = total.buf, *l = lo.buf, *h = hi.buf, *z = size.buf;
    for (Py_ssize_t k = 0; k < m; k++) {
        c[k] = t[k] = z[k] = 0;
        l[k] = INT64_MAX;
        h[k] = INT64_MIN;
    }
    int bad = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t k = g[i];
        if (k < 0 || k >= m) {
            bad = 1;
            break;
        }
        const int64_t x = v[i];
        c[k]++;
        t[k] = (int64_t)((uint64_t)t[k] + (uint64_t)x);
        if (x < l[k]) l[k] = x;
        if (x > h[k]) h[k] = x;
        if (b) z[k] = (int64_t)((uint64_t)z[k] + (uint64_t)b[i]);
    }
    result = PyLong_FromLong(bad ? -1 : 0);
done:
    if (have_nb) PyBuffer_Release(&nb);
    PyBuffer_Release(&inv);
    PyBuffer_Release(&val);
    PyBuffer_Release(&count);
    PyBuffer_Release(&total);
    PyBuffer_Release(&lo);
    PyBuffer_Release(&hi);
    PyBuffer_Release(&size);
    return result;
}

static PyMethodDef arrays_methods[] = {
    {"unique_inverse", unique_inverse, METH_VARARGS,
     "unique_inverse(values, uniq, inverse) -> int"},
    {"group_stats", group_stats, METH_VARARGS,
     "group_stats(inverse, values, nbytes, count, total, lo, hi, size) -> int"},
    {NULL, NULL, 0, NULL},
};

PRVSTREAM_MODULE(_arrays, "Distinct values and inverse, and group sums, of small integer arrays.",
                 arrays_methods)
