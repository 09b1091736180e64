/* How much of each phase occurrence a set of intervals covers, without a pieces x occurrences
 * matrix.
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
 * The numpy reference in overlap.py gives the same integers; the tests compare them.
 */
#include "native.h"
#include <stdint.h>

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

PRVSTREAM_ONE_FUNCTION_MODULE(_overlap, "Interval overlaps per phase occurrence.", overlaps,
                              "overlaps(lo, hi, starts, ends, count, total, clip) -> None")
