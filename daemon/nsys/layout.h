/* The layout of fetched values shared by the row filler (_rowfill.c) and the SQLite row
 * reader (_sqlrows.c): where each value of a row goes inside one item.
 */
#ifndef PRVSTREAM_LAYOUT_H
#define PRVSTREAM_LAYOUT_H

#include "native.h"

#define MAX_COLUMNS 64

/* offsets and sizes (tuples, one 4 or 8 each) of the values inside an item of itemsize bytes
   into off and wide (8-byte values); 0, or -1 with a ValueError set */
static int parse_layout(PyObject *offsets, PyObject *sizes, Py_ssize_t itemsize,
                        Py_ssize_t *off, int *wide) {
    Py_ssize_t ncols = PyTuple_GET_SIZE(offsets);
    if (ncols > MAX_COLUMNS || PyTuple_GET_SIZE(sizes) != ncols || itemsize <= 0) {
        PyErr_SetString(PyExc_ValueError, "one size per offset, a positive itemsize");
        return -1;
    }
    for (Py_ssize_t j = 0; j < ncols; j++) {
        Py_ssize_t size = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, j));
        off[j] = PyLong_AsSsize_t(PyTuple_GET_ITEM(offsets, j));
        if (PyErr_Occurred()) return -1;
        if ((size != 4 && size != 8) || off[j] < 0 || off[j] + size > itemsize) {
            PyErr_SetString(PyExc_ValueError, "each column is 4 or 8 bytes inside the item");
            return -1;
        }
        wide[j] = size == 8;
    }
    return 0;
}

#endif
