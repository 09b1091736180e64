/* Format numeric Paraver records into text, without one Python object per record.
 *
 * format_records(templates, fields, width, tmpl) -> bytes
 *   templates: list of tuples of bytes; template t with k fields has k + 1 literals and
 *              its line is lit[0] f0 lit[1] f1 ... f(k-1) lit[k]
 *   fields:    C-contiguous int64 buffer of n * width values (row-major)
 *   tmpl:      C-contiguous int16 buffer of n template ids
 *
 * write_records(fd, templates, fields, width, tmpl) -> int
 *   the same text written to the file descriptor fd (at its offset), formatted into a buffer
 *   of WRITE_BUFFER bytes written whenever the next record may not fit: one pass, without the
 *   GIL, no bytes object; returns the bytes written (OSError on a failed write)
 *
 * Behind(fd): write_records' text written by a thread of its own (see below), which never
 *   takes the GIL: .write(templates, fields, width, tmpl), .flush(), .close(drop=False)
 *
 * The pure-Python fallback in fastfmt.py produces the same bytes; the tests compare them.
 */
#include "fastfmt.h"
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

static PyObject *write_records(PyObject *self, PyObject *args) {
    int fd;
    batch_t b;
    (void)self;
    if (!PyArg_ParseTuple(args, "iO!y*ny*", &fd, &PyList_Type, &b.templates, &b.fields,
                          &b.width, &b.tmpl)) {
        return NULL;
    }
    PyObject *result = NULL;
    char *buf = NULL;
    if (open_batch(&b) < 0) goto done;
    Py_ssize_t cap = buffer_need(&b);
    buf = PyMem_RawMalloc((size_t)cap);
    if (!buf) {
        PyErr_NoMemory();
        goto done;
    }
    int err;
    Py_ssize_t written = 0;
    Py_BEGIN_ALLOW_THREADS
    err = put_batch(fd, &b, buf, cap, &written);
    Py_END_ALLOW_THREADS
    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    result = PyLong_FromSsize_t(written);
done:
    PyMem_RawFree(buf);
    close_batch(&b);
    return result;
}

static PyObject *format_records(PyObject *self, PyObject *args) {
    batch_t b;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!y*ny*", &PyList_Type, &b.templates, &b.fields, &b.width,
                          &b.tmpl)) {
        return NULL;
    }
    PyObject *result = NULL;
    if (open_batch(&b) < 0) goto done;
    const template_t *tp = b.tp;
    const int16_t *ids = b.ids;
    const int64_t *vals = b.vals;
    Py_ssize_t n = b.n, width = b.width;
    Py_ssize_t size = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        int16_t t = ids[r];
        /* the exact size (not a bound per field: a batch's text is allocated once, at its
           size, which keeps the writer's peak memory to the text itself) */
        const int64_t *row = vals + r * width;
        size += tp[t].total;
        for (Py_ssize_t j = 0; j + 1 < tp[t].nlit; j++) size += int_len(row[j]);
    }
    result = PyBytes_FromStringAndSize(NULL, size);
    if (!result) goto done;
    char *out = PyBytes_AS_STRING(result);
    char *start = out;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < n; r++) out = put_record(out, &tp[ids[r]], vals + r * width);
    Py_END_ALLOW_THREADS
    if (out - start != size) { /* cannot happen: int_len and put_int agree */
        Py_CLEAR(result);
        PyErr_SetString(PyExc_RuntimeError, "formatted length differs from its size");
    }
done:
    close_batch(&b);
    return result;
}

/* ---- Behind(fd): a writer thread of its own, which never takes the GIL ----------------
 * write() hands a batch over (its buffers held, its templates copied) and returns at once
 * while a slot is free; the thread formats and writes the batches in order. The caller never
 * waits for the thread to be scheduled, as it would for a Python thread wanting the GIL. */

/* batches handed over at once: one being written, one waiting */
#define SLOTS 2

enum { EMPTY, QUEUED, WRITING, DONE };

typedef struct {
    batch_t b;
    int state;
    unsigned long seq;
} job_t;

typedef struct {
    PyObject_HEAD
    int fd;
    int running;            /* the thread was started and not joined */
    int stop;               /* the thread ends once nothing is queued */
    int drop;               /* the thread skips what is queued */
    int err;                /* errno of the first failed write, until reported */
    int init;               /* mutex and conditions initialized */
    unsigned long queued, written;  /* sequence numbers handed over / taken by the thread */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;    /* a batch queued, or stop */
    pthread_cond_t freed;   /* a batch done */
    job_t jobs[SLOTS];
    char *buf;              /* the thread's text buffer */
    Py_ssize_t cap;
} behind_t;

static void *behind_run(void *arg) {
    behind_t *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        job_t *job = NULL;
        for (int i = 0; i < SLOTS; i++) {
            if (w->jobs[i].state == QUEUED && w->jobs[i].seq == w->written) job = &w->jobs[i];
        }
        if (!job) {
            if (w->stop) break;
            pthread_cond_wait(&w->wake, &w->mu);
            continue;
        }
        job->state = WRITING;
        w->written++;
        int skip = w->drop || w->err;
        pthread_mutex_unlock(&w->mu);
        int err = 0;
        if (!skip) {
            Py_ssize_t need = buffer_need(&job->b), count = 0;
            if (need > w->cap) {
                PyMem_RawFree(w->buf);
                w->buf = PyMem_RawMalloc((size_t)need);
                w->cap = w->buf ? need : 0;
            }
            err = w->buf ? put_batch(w->fd, &job->b, w->buf, w->cap, &count) : ENOMEM;
        }
        pthread_mutex_lock(&w->mu);
        if (err && !w->err) w->err = err;
        job->state = DONE;
        pthread_cond_broadcast(&w->freed);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* the done batches' buffers released (with the GIL); returns the free slots */
static int behind_reap(behind_t *w) {
    batch_t done[SLOTS];
    int ndone = 0, free_slots = 0;
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < SLOTS; i++) {
        if (w->jobs[i].state == DONE) {
            done[ndone++] = w->jobs[i].b;
            w->jobs[i].state = EMPTY;
        }
        if (w->jobs[i].state == EMPTY) free_slots++;
    }
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < ndone; i++) {
        close_batch(&done[i]);
        Py_DECREF(done[i].templates);
    }
    return free_slots;
}

/* waits (without the GIL) until a batch is done, or every one when all is set */
static void behind_wait(behind_t *w, int all) {
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int busy = 0, done = 0;
        for (int i = 0; i < SLOTS; i++) {
            busy += w->jobs[i].state == QUEUED || w->jobs[i].state == WRITING;
            done += w->jobs[i].state == DONE || w->jobs[i].state == EMPTY;
        }
        if (all ? busy == 0 : done > 0) break;
        pthread_cond_wait(&w->freed, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    Py_END_ALLOW_THREADS
}

/* the write error not reported yet, raised (and cleared); -1 when there was one */
static int behind_raise(behind_t *w) {
    pthread_mutex_lock(&w->mu);
    int err = w->err;
    w->err = 0;
    pthread_mutex_unlock(&w->mu);
    if (!err) return 0;
    errno = err;
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
}

static void behind_join(behind_t *w, int drop) {
    if (!w->running) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    w->drop = w->drop || drop;
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->mu);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(w->thread, NULL);
    Py_END_ALLOW_THREADS
    w->running = 0;
    behind_reap(w);
}

static int behind_init(behind_t *w, PyObject *args, PyObject *kwds) {
    int fd;
    (void)kwds;
    if (!PyArg_ParseTuple(args, "i", &fd)) return -1;
    if (w->init) {
        PyErr_SetString(PyExc_RuntimeError, "Behind is initialized once");
        return -1;
    }
    w->fd = fd;
    if (pthread_mutex_init(&w->mu, NULL) || pthread_cond_init(&w->wake, NULL) ||
        pthread_cond_init(&w->freed, NULL)) {
        PyErr_SetString(PyExc_OSError, "cannot create the writer's locks");
        return -1;
    }
    w->init = 1;
    int err = pthread_create(&w->thread, NULL, behind_run, w);
    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    w->running = 1;
    return 0;
}

static PyObject *behind_write(behind_t *w, PyObject *args) {
    batch_t b;
    PyObject *given;
    if (!PyArg_ParseTuple(args, "O!y*ny*", &PyList_Type, &given, &b.fields, &b.width,
                          &b.tmpl)) {
        return NULL;
    }
    /* a copy of the list: the caller may append templates while the thread reads these */
    b.templates = PyList_GetSlice(given, 0, PyList_GET_SIZE(given));
    if (!b.templates || open_batch(&b) < 0 || !w->running || behind_raise(w) < 0) {
        if (b.templates && !w->running && !PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "the writer is closed");
        }
        if (b.templates) {
            close_batch(&b);
            Py_DECREF(b.templates);
        } else {
            PyBuffer_Release(&b.fields);
            PyBuffer_Release(&b.tmpl);
        }
        return NULL;
    }
    while (behind_reap(w) == 0) behind_wait(w, 0);
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < SLOTS; i++) {
        if (w->jobs[i].state == EMPTY) {
            w->jobs[i].b = b;
            w->jobs[i].seq = w->queued++;
            w->jobs[i].state = QUEUED;
            break;
        }
    }
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
    Py_RETURN_NONE;
}

static PyObject *behind_flush(behind_t *w, PyObject *unused) {
    (void)unused;
    if (w->running) behind_wait(w, 1);
    behind_reap(w);
    if (behind_raise(w) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *behind_close(behind_t *w, PyObject *args) {
    int drop = 0;
    if (!PyArg_ParseTuple(args, "|p", &drop)) return NULL;
    behind_join(w, drop);
    if (drop) {
        pthread_mutex_lock(&w->mu);
        w->err = 0;
        pthread_mutex_unlock(&w->mu);
    } else if (behind_raise(w) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static void behind_dealloc(behind_t *w) {
    if (w->init) {
        behind_join(w, 1);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->wake);
        pthread_cond_destroy(&w->freed);
    }
    PyMem_RawFree(w->buf);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyMethodDef behind_methods[] = {
    {"write", (PyCFunction)behind_write, METH_VARARGS,
     "write(templates, fields, width, tmpl): hand a batch to the thread (waits for a free "
     "slot; raises the error of an earlier write)"},
    {"flush", (PyCFunction)behind_flush, METH_NOARGS,
     "flush(): wait until every batch handed over is written; raise a write error"},
    {"close", (PyCFunction)behind_close, METH_VARARGS,
     "close(drop=False): end the thread (dropping what waits when drop); idempotent; "
     "raises a write error unless drop"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BehindType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "prvstream.sinks.paraver._fastfmt.Behind",
    .tp_doc = "Behind(fd): formats and writes record batches to fd in a thread of its own",
    .tp_basicsize = sizeof(behind_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)behind_init,
    .tp_dealloc = (destructor)behind_dealloc,
    .tp_methods = behind_methods,
};

static PyMethodDef methods[] = {
    {"format_records", format_records, METH_VARARGS,
     "format_records(templates, fields, width, tmpl) -> bytes"},
    {"write_records", write_records, METH_VARARGS,
     "write_records(fd, templates, fields, width, tmpl) -> int (bytes written)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastfmt_definition = {
    PyModuleDef_HEAD_INIT, "_fastfmt", "Numeric Paraver records to text.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastfmt(void) {
    if (PyType_Ready(&BehindType) < 0) return NULL;
    PyObject *m = PyModule_Create(&fastfmt_definition);
    if (m && PyModule_AddObjectRef(m, "Behind", (PyObject *)&BehindType) < 0) Py_CLEAR(m);
    return m;
}
