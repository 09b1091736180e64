/* Format numeric Paraver records into text, without one Python object per record.
 *
 * format_records(templates, fields, width, tmpl) -> bytes
 *   templates: list of tuples of bytes; template t with k fields has k + 1 literals and
 *              its line is lit[0] f0 lit[1] f1 ... f(k-1) lit[k]
 *   fields:    C-contiguous int64 buffer of n * width values (row-major)
 *   tmpl:      C-contiguous int16 buffer of n template ids
 *
 * The pure-Python fallback in fastfmt.py produces the same bytes; the tests compare them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_ssize_t nlit;        /* number of literals = fields + 1 */
    const char **lit;       /* literal pointers */
    Py_ssize_t *len;        /* literal lengths */
    Py_ssize_t total;       /* sum of literal lengths */
} template_t;

static char *put_int(char *out, int64_t v) {
    char tmp[24];
    int n = 0;
    uint64_t u;
    if (v < 0) {
        *out++ = '-';
        u = (uint64_t)(-(v + 1)) + 1u;
    } else {
        u = (uint64_t)v;
    }
    do {
        tmp[n++] = (char)('0' + (u % 10u));
        u /= 10u;
    } while (u);
    while (n) {
        *out++ = tmp[--n];
    }
    return out;
}

static Py_ssize_t int_len(int64_t v) {
    /* characters put_int writes for v */
    Py_ssize_t n = 1;
    uint64_t u;
    if (v < 0) {
        n++;
        u = (uint64_t)(-(v + 1)) + 1u;
    } else {
        u = (uint64_t)v;
    }
    while (u >= 10u) {
        u /= 10u;
        n++;
    }
    return n;
}

static void free_templates(template_t *t, Py_ssize_t count) {
    if (!t) return;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyMem_Free((void *)t[i].lit);
        PyMem_Free(t[i].len);
    }
    PyMem_Free(t);
}

static PyObject *format_records(PyObject *self, PyObject *args) {
    PyObject *templates;
    Py_buffer fields, tmpl;
    Py_ssize_t width;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!y*ny*", &PyList_Type, &templates, &fields, &width, &tmpl)) {
        return NULL;
    }
    PyObject *result = NULL;
    template_t *tp = NULL;
    Py_ssize_t ntemplates = PyList_GET_SIZE(templates);
    Py_ssize_t n = tmpl.len / (Py_ssize_t)sizeof(int16_t);
    if (width <= 0 || fields.len != n * width * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "fields must hold len(tmpl) * width int64 values");
        goto done;
    }
    tp = PyMem_Calloc((size_t)(ntemplates ? ntemplates : 1), sizeof(template_t));
    if (!tp) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < ntemplates; i++) {
        PyObject *parts = PyList_GET_ITEM(templates, i);
        if (!PyTuple_Check(parts) || PyTuple_GET_SIZE(parts) < 1) {
            PyErr_SetString(PyExc_ValueError, "each template is a non-empty tuple of bytes");
            goto done;
        }
        Py_ssize_t k = PyTuple_GET_SIZE(parts);
        tp[i].nlit = k;
        tp[i].lit = PyMem_Calloc((size_t)k, sizeof(char *));
        tp[i].len = PyMem_Calloc((size_t)k, sizeof(Py_ssize_t));
        if (!tp[i].lit || !tp[i].len) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t j = 0; j < k; j++) {
            PyObject *b = PyTuple_GET_ITEM(parts, j);
            if (!PyBytes_Check(b)) {
                PyErr_SetString(PyExc_TypeError, "template literals must be bytes");
                goto done;
            }
            tp[i].lit[j] = PyBytes_AS_STRING(b);
            tp[i].len[j] = PyBytes_GET_SIZE(b);
            tp[i].total += tp[i].len[j];
        }
    }
    const int16_t *ids = (const int16_t *)tmpl.buf;
    const int64_t *vals = (const int64_t *)fields.buf;
    Py_ssize_t size = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        int16_t t = ids[r];
        if (t < 0 || t >= ntemplates) {
            PyErr_Format(PyExc_ValueError, "record %zd has unknown template %d", r, (int)t);
            goto done;
        }
        if (tp[t].nlit - 1 > width) {
            PyErr_Format(PyExc_ValueError, "record %zd needs %zd fields, the batch has %zd",
                         r, tp[t].nlit - 1, width);
            goto done;
        }
        /* the exact size (not a bound per field: a batch's text is allocated once, at its
           size, which keeps the writer's peak memory to the text itself) */
        const int64_t *row = (const int64_t *)fields.buf + r * width;
        size += tp[t].total;
        for (Py_ssize_t j = 0; j + 1 < tp[t].nlit; j++) size += int_len(row[j]);
    }
    result = PyBytes_FromStringAndSize(NULL, size);
    if (!result) goto done;
    char *out = PyBytes_AS_STRING(result);
    char *start = out;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < n; r++) {
        const template_t *t = &tp[ids[r]];
        const int64_t *row = vals + r * width;
        for (Py_ssize_t j = 0; j < t->nlit; j++) {
            memcpy(out, t->lit[j], (size_t)t->len[j]);
            out += t->len[j];
            if (j + 1 < t->nlit) out = put_int(out, row[j]);
        }
    }
    Py_END_ALLOW_THREADS
    if (out - start != size) { /* cannot happen: int_len and put_int agree */
        Py_CLEAR(result);
        PyErr_SetString(PyExc_RuntimeError, "formatted length differs from its size");
    }
done:
    free_templates(tp, ntemplates);
    PyBuffer_Release(&fields);
    PyBuffer_Release(&tmpl);
    return result;
}

static PyMethodDef methods[] = {
    {"format_records", format_records, METH_VARARGS,
     "format_records(templates, fields, width, tmpl) -> bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastfmt", "Numeric Paraver records to text.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastfmt(void) { return PyModule_Create(&module); }
