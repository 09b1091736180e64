/* Record batches' sort keys from the key's parts, in one call.
 *
 * make_keys(keys, time, prio, task, thread, rank, report, seq) -> None
 *   keys:   writable C-contiguous (n, 3) int64 buffer
 *   time, seq: C-contiguous int64 buffers of n values
 *   prio, task, thread: an int (every record's) or a C-contiguous int64 buffer of n values
 *   rank, report: ints
 *   fills keys[:, 0] = time, keys[:, 1] = prio << 58 | task << 37 | thread << 16 | rank and
 *   keys[:, 2] = report << 40 | seq, with int64 numpy's wrapping shifts (records.py's layout);
 *   OverflowError when report << 40 does not fit an int64
 *
 * records.py's numpy code gives the same arrays; the tests compare them.
 */
#include "native.h"
#include <stdint.h>
#include <string.h>

/* one key part: a value for every record, or one per record */
typedef struct {
    Py_buffer view;
    int64_t value;
    int is_array;
} part_t;

/* ``obj`` as a key part of n values; -1 with an exception set when it is neither */
static int get_part(PyObject *obj, Py_ssize_t n, part_t *p, const char *what) {
    p->is_array = 0;
    if (PyLong_Check(obj)) {
        p->value = PyLong_AsLongLong(obj);
        return p->value == -1 && PyErr_Occurred() ? -1 : 0;
    }
    if (PyObject_GetBuffer(obj, &p->view, PyBUF_C_CONTIGUOUS) < 0) return -1;
    p->is_array = 1;
    if (p->view.len != n * (Py_ssize_t)sizeof(int64_t)) {
        PyBuffer_Release(&p->view);
        p->is_array = 0;
        PyErr_Format(PyExc_ValueError, "%s must be an int or hold one int64 a record", what);
        return -1;
    }
    return 0;
}

static inline int64_t at(const part_t *p, Py_ssize_t i) {
    return p->is_array ? ((const int64_t *)p->view.buf)[i] : p->value;
}

/* a << s as numpy's int64 shift gives it (two's complement, high bits dropped) */
static inline int64_t shl(int64_t a, int s) { return (int64_t)((uint64_t)a << s); }

static PyObject *make_keys(PyObject *self, PyObject *args) {
    Py_buffer keys, time, seq;
    PyObject *prio_obj, *task_obj, *thread_obj;
    long long rank, report;
    (void)self;
    if (!PyArg_ParseTuple(args, "w*y*OOOLLy*", &keys, &time, &prio_obj, &task_obj,
                          &thread_obj, &rank, &report, &seq)) {
        return NULL;
    }
    PyObject *result = NULL;
    part_t parts[3] = {{0}};
    int got = 0;
    const Py_ssize_t n = time.len / (Py_ssize_t)sizeof(int64_t);
    if (time.len != n * (Py_ssize_t)sizeof(int64_t) || seq.len != time.len
        || keys.len != 3 * time.len) {
        PyErr_SetString(PyExc_ValueError, "keys must be (n, 3) int64, time and seq n int64");
        goto done;
    }
    if (report < -(1LL << 23) || report >= (1LL << 23)) {
        PyErr_SetString(PyExc_OverflowError, "report << 40 does not fit an int64");
        goto done;
    }
    PyObject *objs[3] = {prio_obj, task_obj, thread_obj};
    const char *names[3] = {"prio", "task", "thread"};
    for (; got < 3; got++) {
        if (get_part(objs[got], n, &parts[got], names[got]) < 0) goto done;
    }
    {
        int64_t *out = keys.buf;
        const int64_t *t = time.buf, *q = seq.buf;
        const int64_t order = shl(report, 40);
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            out[3 * i] = t[i];
            out[3 * i + 1] = shl(at(&parts[0], i), 58) | shl(at(&parts[1], i), 37)
                             | shl(at(&parts[2], i), 16) | (int64_t)rank;
            out[3 * i + 2] = order | q[i];
        }
        Py_END_ALLOW_THREADS
    }
    result = Py_NewRef(Py_None);
done:
    for (int i = 0; i < got; i++) {
        if (parts[i].is_array) PyBuffer_Release(&parts[i].view);
    }
    PyBuffer_Release(&keys);
    PyBuffer_Release(&time);
    PyBuffer_Release(&seq);
    return result;
}

static PyMethodDef methods[] = {
    {"make_keys", make_keys, METH_VARARGS,
     "make_keys(keys, time, prio, task, thread, rank, report, seq) -> None"},
    {NULL, NULL, 0, NULL},
};

PRVSTREAM_MODULE(_records, "Record batches' sort keys.", methods)
