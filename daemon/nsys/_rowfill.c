/* Copy SQLite result rows (a list of tuples of ints) into a numpy structured array's memory.
 *
 * fill_rows(rows, out, itemsize, offsets, sizes) -> None
 *   rows:     list of tuples, as Cursor.fetchmany returns them; only the first len(offsets)
 *             items of each tuple are read
 *   out:      writable C-contiguous buffer of len(rows) * itemsize bytes
 *   offsets:  tuple of byte offsets of the columns inside one item
 *   sizes:    tuple of 4 or 8 per column (little-endian int32 or int64 on this machine)
 *
 * A value that is not an int raises TypeError, one out of its column's range OverflowError,
 * naming the row and column. The numpy fallback in rowfill.py fills the same bytes.
 */
#include "layout.h"
#include <stdint.h>
#include <string.h>

static PyObject *fill_rows(PyObject *self, PyObject *args) {
    PyObject *rows, *offsets, *sizes;
    Py_buffer out;
    Py_ssize_t itemsize;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!w*nO!O!", &PyList_Type, &rows, &out, &itemsize,
                          &PyTuple_Type, &offsets, &PyTuple_Type, &sizes)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t ncols = PyTuple_GET_SIZE(offsets);
    Py_ssize_t nrows = PyList_GET_SIZE(rows);
    Py_ssize_t off[MAX_COLUMNS];
    int wide[MAX_COLUMNS];
    if (parse_layout(offsets, sizes, itemsize, off, wide) < 0) goto done;
    if (out.len != nrows * itemsize) {
        PyErr_SetString(PyExc_ValueError, "out must hold len(rows) * itemsize bytes");
        goto done;
    }
    char *base = (char *)out.buf;
    for (Py_ssize_t i = 0; i < nrows; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) < ncols) {
            PyErr_Format(PyExc_TypeError, "row %zd is not a tuple of %zd values", i, ncols);
            goto done;
        }
        char *item = base + i * itemsize;
        for (Py_ssize_t j = 0; j < ncols; j++) {
            PyObject *v = PyTuple_GET_ITEM(row, j);
            if (!PyLong_Check(v)) {
                PyErr_Format(PyExc_TypeError, "row %zd column %zd holds a %.50s, not an int",
                             i, j, Py_TYPE(v)->tp_name);
                goto done;
            }
            int overflow = 0;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow || (!wide[j] && (x < INT32_MIN || x > INT32_MAX))) {
                PyErr_Format(PyExc_OverflowError, "row %zd column %zd is out of range", i, j);
                goto done;
            }
            if (wide[j]) {
                int64_t w = (int64_t)x;
                memcpy(item + off[j], &w, 8);
            } else {
                int32_t w = (int32_t)x;
                memcpy(item + off[j], &w, 4);
            }
        }
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&out);
    return result;
}

PRVSTREAM_ONE_FUNCTION_MODULE(_rowfill, "SQLite rows into numpy structured arrays.", fill_rows,
                              "fill_rows(rows, out, itemsize, offsets, sizes) -> None")
