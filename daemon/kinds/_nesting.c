/* Push/pop ranges' restored values in one pass (nesting.py holds the Python fallback; the
 * tests compare the two).
 *
 * restore(stack, start, end, value, out) -> None
 *   stack:  list of (end, value) tuples, the ranges still open, innermost last (updated)
 *   start, end, value: C-contiguous int64 buffers of one thread's and domain's ranges in
 *           start order; out: a writable int64 buffer as long
 *   each range first closes the open ranges that end at or before its start; its out value
 *   is that of the innermost open range that ends after it (0: none); then it is opened.
 */
#include "native.h"
#include <stdint.h>

static PyObject *restore(PyObject *self, PyObject *args) {
    PyObject *stack;
    Py_buffer st, en, vl, out;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!y*y*y*w*", &PyList_Type, &stack, &st, &en, &vl, &out)) {
        return NULL;
    }
    PyObject *result = NULL;
    int64_t *ends = NULL, *vals = NULL;
    Py_ssize_t n = st.len / (Py_ssize_t)sizeof(int64_t);
    if (st.len % (Py_ssize_t)sizeof(int64_t) || en.len != st.len || vl.len != st.len ||
        out.len != st.len) {
        PyErr_SetString(PyExc_ValueError, "start, end, value and out: int64, one length");
        goto done;
    }
    Py_ssize_t depth = PyList_GET_SIZE(stack), cap = depth + n + 1;
    ends = PyMem_Malloc((size_t)cap * sizeof(int64_t));
    vals = PyMem_Malloc((size_t)cap * sizeof(int64_t));
    if (!ends || !vals) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < depth; k++) {
        PyObject *item = PyList_GET_ITEM(stack, k);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "each open range is an (end, value) tuple");
            goto done;
        }
        ends[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 0));
        vals[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 1));
        if (PyErr_Occurred()) goto done;
    }
    const int64_t *s = st.buf, *e = en.buf, *v = vl.buf;
    int64_t *o = out.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        while (depth && ends[depth - 1] <= s[i]) depth--;
        int64_t found = 0;
        for (Py_ssize_t k = depth - 1; k >= 0; k--) {
            if (ends[k] > e[i]) {
                found = vals[k];
                break;
            }
        }
        o[i] = found;
        ends[depth] = e[i];
        vals[depth] = v[i];
        depth++;
    }
    PyObject *kept = PyList_New(depth);
    if (!kept) goto done;
    for (Py_ssize_t k = 0; k < depth; k++) {
        PyObject *item = Py_BuildValue("(LL)", (long long)ends[k], (long long)vals[k]);
        if (!item) {
            Py_DECREF(kept);
            goto done;
        }
        PyList_SET_ITEM(kept, k, item);
    }
    int failed = PyList_SetSlice(stack, 0, PyList_GET_SIZE(stack), kept);
    Py_DECREF(kept);
    if (failed) goto done;
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(ends);
    PyMem_Free(vals);
    PyBuffer_Release(&st);
    PyBuffer_Release(&en);
    PyBuffer_Release(&vl);
    PyBuffer_Release(&out);
    return result;
}

PRVSTREAM_ONE_FUNCTION_MODULE(_nesting, "Push/pop ranges' restored values.", restore,
                              "restore(stack, start, end, value, out) -> None")
