/* The text of numeric Paraver records: templates, a batch's buffers and its lines written to a
 * file descriptor without touching a Python object once opened (the formatter, the writer and
 * the writer thread of _fastfmt.c share them).
 */
#ifndef PRVSTREAM_FASTFMT_H
#define PRVSTREAM_FASTFMT_H

#include "native.h"
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* write_records' text buffer (the text of about 2,000 records) */
#define WRITE_BUFFER (256 * 1024)
/* most characters an int64 takes */
#define INT_CHARS 20

typedef struct {
    Py_ssize_t nlit;        /* number of literals = fields + 1 */
    const char **lit;       /* literal pointers */
    Py_ssize_t *len;        /* literal lengths */
    Py_ssize_t total;       /* sum of literal lengths */
} template_t;

/* "00" "01" ... "99": two digits a step (half the divisions of one digit a step) */
static const char DIGIT_PAIRS[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* decimal digits of u (1 for 0) */
static inline int u64_digits(uint64_t u) {
    int n = 1;
    if (u >= 10000000000000000ull) {
        n += 16;
        u /= 10000000000000000ull;
    }
    if (u >= 100000000u) {
        n += 8;
        u /= 100000000u;
    }
    if (u >= 10000u) {
        n += 4;
        u /= 10000u;
    }
    if (u >= 100u) {
        n += 2;
        u /= 100u;
    }
    return u >= 10u ? n + 1 : n;
}

/* |v| as unsigned (INT64_MIN included) and its sign written at out */
static inline uint64_t put_sign(char **out, int64_t v) {
    if (v < 0) {
        *(*out)++ = '-';
        return (uint64_t)(-(v + 1)) + 1u;
    }
    return (uint64_t)v;
}

static inline char *put_int(char *out, int64_t v) {
    uint64_t u = put_sign(&out, v);
    if (u < 10u) {  /* most fields of a record: a state, a small id */
        *out++ = (char)('0' + u);
        return out;
    }
    int n = u64_digits(u);
    char *p = out + n;
    while (u >= 100u) {
        unsigned pair = (unsigned)(u % 100u);
        u /= 100u;
        p -= 2;
        memcpy(p, DIGIT_PAIRS + 2 * pair, 2);
    }
    if (u >= 10u) {
        memcpy(p - 2, DIGIT_PAIRS + 2 * u, 2);
    } else {
        p[-1] = (char)('0' + u);
    }
    return out + n;
}

static Py_ssize_t int_len(int64_t v) {
    /* characters put_int writes for v */
    if (v < 0) return 1 + u64_digits((uint64_t)(-(v + 1)) + 1u);
    return u64_digits((uint64_t)v);
}

static void free_templates(template_t *t, Py_ssize_t count) {
    if (!t) return;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyMem_Free((void *)t[i].lit);
        PyMem_Free(t[i].len);
    }
    PyMem_Free(t);
}

/* the literals of each template (borrowed from the list's bytes); NULL with an error set */
static template_t *load_templates(PyObject *templates, Py_ssize_t ntemplates) {
    template_t *tp = PyMem_Calloc((size_t)(ntemplates ? ntemplates : 1), sizeof(template_t));
    if (!tp) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < ntemplates; i++) {
        PyObject *parts = PyList_GET_ITEM(templates, i);
        if (!PyTuple_Check(parts) || PyTuple_GET_SIZE(parts) < 1) {
            PyErr_SetString(PyExc_ValueError, "each template is a non-empty tuple of bytes");
            goto fail;
        }
        Py_ssize_t k = PyTuple_GET_SIZE(parts);
        tp[i].nlit = k;
        tp[i].lit = PyMem_Calloc((size_t)k, sizeof(char *));
        tp[i].len = PyMem_Calloc((size_t)k, sizeof(Py_ssize_t));
        if (!tp[i].lit || !tp[i].len) {
            PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t j = 0; j < k; j++) {
            PyObject *b = PyTuple_GET_ITEM(parts, j);
            if (!PyBytes_Check(b)) {
                PyErr_SetString(PyExc_TypeError, "template literals must be bytes");
                goto fail;
            }
            tp[i].lit[j] = PyBytes_AS_STRING(b);
            tp[i].len[j] = PyBytes_GET_SIZE(b);
            tp[i].total += tp[i].len[j];
        }
    }
    return tp;
fail:
    free_templates(tp, ntemplates);
    return NULL;
}

/* checks every record's template id and field count; -1 with an error set */
static int check_records(const template_t *tp, Py_ssize_t ntemplates, const int16_t *ids,
                         Py_ssize_t n, Py_ssize_t width) {
    for (Py_ssize_t r = 0; r < n; r++) {
        int16_t t = ids[r];
        if (t < 0 || t >= ntemplates) {
            PyErr_Format(PyExc_ValueError, "record %zd has unknown template %d", r, (int)t);
            return -1;
        }
        if (tp[t].nlit - 1 > width) {
            PyErr_Format(PyExc_ValueError, "record %zd needs %zd fields, the batch has %zd",
                         r, tp[t].nlit - 1, width);
            return -1;
        }
    }
    return 0;
}

/* one call's batch: its arguments (set by the caller's PyArg_ParseTuple) and what follows */
typedef struct {
    PyObject *templates;    /* list of tuples of bytes */
    Py_buffer fields, tmpl;
    Py_ssize_t width;
    Py_ssize_t ntemplates, n;
    template_t *tp;
    const int16_t *ids;
    const int64_t *vals;
} batch_t;

/* a parsed batch's templates loaded, its sizes and every record's template checked;
   -1 with an error set (close_batch is due either way) */
static int open_batch(batch_t *b) {
    b->ntemplates = PyList_GET_SIZE(b->templates);
    b->n = b->tmpl.len / (Py_ssize_t)sizeof(int16_t);
    b->tp = NULL;
    b->ids = (const int16_t *)b->tmpl.buf;
    b->vals = (const int64_t *)b->fields.buf;
    if (b->width <= 0 || b->fields.len != b->n * b->width * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "fields must hold len(tmpl) * width int64 values");
        return -1;
    }
    b->tp = load_templates(b->templates, b->ntemplates);
    if (!b->tp) return -1;
    return check_records(b->tp, b->ntemplates, b->ids, b->n, b->width);
}

/* what a parsed batch holds, released */
static void close_batch(batch_t *b) {
    free_templates(b->tp, b->ntemplates);
    PyBuffer_Release(&b->fields);
    PyBuffer_Release(&b->tmpl);
}

/* one record's line at out; returns its end */
static char *put_record(char *out, const template_t *t, const int64_t *row) {
    Py_ssize_t last = t->nlit - 1;
    for (Py_ssize_t j = 0; j <= last; j++) {
        Py_ssize_t len = t->len[j];
        const char *lit = t->lit[j];
        if (len == 1) {  /* the ':' between fields: a byte, not a call to memcpy */
            *out++ = *lit;
        } else {
            memcpy(out, lit, (size_t)len);
            out += len;
        }
        if (j < last) out = put_int(out, row[j]);
    }
    return out;
}

/* all of buf[0:len] to fd; 0, or an errno */
static int write_all(int fd, const char *buf, size_t len) {
    while (len) {
        ssize_t put = write(fd, buf, len);
        if (put < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        buf += put;
        len -= (size_t)put;
    }
    return 0;
}

/* the text buffer a batch needs (at least WRITE_BUFFER: the most one record takes) */
static Py_ssize_t buffer_need(const batch_t *b) {
    Py_ssize_t most = 0;
    for (Py_ssize_t t = 0; t < b->ntemplates; t++) {
        Py_ssize_t need = b->tp[t].total + (b->tp[t].nlit - 1) * INT_CHARS;
        if (need > most) most = need;
    }
    return most > WRITE_BUFFER ? most : WRITE_BUFFER;
}

/* an opened batch's text written to fd through buf (of cap >= buffer_need bytes), without
   touching a Python object (callable without the GIL); 0 or an errno; *written counts */
static int put_batch(int fd, const batch_t *b, char *buf, Py_ssize_t cap, Py_ssize_t *written) {
    int err = 0;
    char *out = buf;
    for (Py_ssize_t r = 0; r < b->n && !err; r++) {
        const template_t *t = &b->tp[b->ids[r]];
        if ((buf + cap) - out < t->total + (t->nlit - 1) * INT_CHARS) {
            err = write_all(fd, buf, (size_t)(out - buf));
            *written += out - buf;
            out = buf;
        }
        out = put_record(out, t, b->vals + r * b->width);
    }
    if (!err) {
        err = write_all(fd, buf, (size_t)(out - buf));
        *written += out - buf;
    }
    return err;
}

#endif
