/* SQLite rows straight into a structured layout, without a Python object per row or value
 * (the reader process's fetch: Cursor.fetchmany made a tuple and an int per value and took
 * and dropped the GIL at every row, about 40% of that process's CPU).
 *
 * open(uri, pragmas) -> Db                  a read-only connection (a URI), pragmas run
 * Db.query(sql) -> Query                    the statement prepared; its first step runs at
 *                                           the first fill (so SQLite sorts then)
 * Query.fill(rows, itemsize, offsets, sizes[, wraps, names]) -> (status, bytearray or message)
 *   up to rows rows, each value i of a row into offsets[i] (sizes[i]: 4 or 8 bytes, little
 *   endian); status 0 with the rows (empty at the end), 1 with SQLite's message, or 2 with the
 *   message of a value that is not an integer or out of its column's range: the statuses and
 *   messages of the reader's Python fetch and fill_rows (_rowfill.c).
 *   wraps[i] 1: value i (4 bytes) is first wrapped into int32 as kinds.sql.wrap_i4's SQL
 *   wraps it (an integer here; any other value, or one whose sum would leave int64, by SQLite
 *   running that very expression on it), so a query need not compute it per row; names[i]:
 *   the column a message calls value i (the column of the query that wraps in SQL).
 * Errors opening or preparing raise RuntimeError with SQLite's message.
 *
 * borrow(connection, module_path) -> Db     the open connection of a sqlite3.Connection
 *   (exactly that type), read through without a second connection: its statements run in
 *   that connection's read transaction. Only on the Pythons whose Connection starts with its
 *   sqlite3 handle (3.11 to 3.13), and only where the sqlite3 module at module_path runs on
 *   this very library (its sqlite3_open_v2 is ours); else RuntimeError. The Db keeps the
 *   Connection alive and never closes it.
 */
#include "layout.h"
#include <dlfcn.h>
#include <sqlite3.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    sqlite3 *db;
    PyObject *owner; /* a borrowed connection's sqlite3.Connection (never closed here) */
} db_t;

/* the start of CPython's pysqlite_Connection (Modules/_sqlite/connection.h, 3.11 to 3.13) */
typedef struct {
    PyObject_HEAD
    sqlite3 *db;
} pysqlite_head_t;

typedef struct {
    PyObject_HEAD
    PyObject *owner; /* the Db, kept open while the statement lives */
    sqlite3_stmt *st;
    sqlite3_stmt *wrap; /* wrap_i4's SQL on one bound value, prepared at its first use */
    int done;        /* stepped to its end, or failed */
} query_t;

/* wrap_i4's SQL (kinds.sql) on one value: SQLite's own arithmetic for the values it converts */
static const char WRAP_SQL[] = "SELECT (((?1) + 2147483648) & 4294967295) - 2147483648";

static PyTypeObject DbType, QueryType;

static PyObject *sqlite_error(sqlite3 *db) {
    PyErr_SetString(PyExc_RuntimeError, db ? sqlite3_errmsg(db) : "out of memory");
    return NULL;
}

static PyObject *db_open(PyObject *self, PyObject *args) {
    const char *uri;
    PyObject *pragmas;
    (void)self;
    if (!PyArg_ParseTuple(args, "sO!", &uri, &PyList_Type, &pragmas)) return NULL;
    db_t *d = PyObject_New(db_t, &DbType);
    if (!d) return NULL;
    d->db = NULL;
    d->owner = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sqlite3_open_v2(uri, &d->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
    Py_END_ALLOW_THREADS
    if (rc != SQLITE_OK) {
        sqlite_error(d->db);
        Py_DECREF(d);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(pragmas); i++) {
        const char *sql = PyUnicode_AsUTF8(PyList_GET_ITEM(pragmas, i));
        if (!sql || sqlite3_exec(d->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
            if (sql) sqlite_error(d->db);
            Py_DECREF(d);
            return NULL;
        }
    }
    return (PyObject *)d;
}

/* 1 where the sqlite3 module at path runs on this library, 0 where not (checked once) */
static int same_library(const char *path) {
    static int known = -1;
    if (known < 0) {
        void *module = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
        void *theirs = module ? dlsym(module, "sqlite3_open_v2") : NULL;
        known = theirs != NULL && theirs == (void *)&sqlite3_open_v2;
        if (module) dlclose(module);
    }
    return known;
}

static PyObject *db_borrow(PyObject *self, PyObject *args) {
    PyObject *con;
    const char *path;
    (void)self;
    if (!PyArg_ParseTuple(args, "Os", &con, &path)) return NULL;
#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
    (void)con;
    (void)path;
    PyErr_SetString(PyExc_RuntimeError, "cannot borrow a connection on this Python");
    return NULL;
#else
    const char *name = Py_TYPE(con)->tp_name;
    if (strcmp(name, "sqlite3.Connection") != 0) {
        PyErr_SetString(PyExc_RuntimeError, "not a sqlite3.Connection");
        return NULL;
    }
    if (!same_library(path)) {
        PyErr_SetString(PyExc_RuntimeError, "the sqlite3 module runs on another SQLite");
        return NULL;
    }
    sqlite3 *handle = ((pysqlite_head_t *)con)->db;
    if (!handle) {
        PyErr_SetString(PyExc_RuntimeError, "the connection is closed");
        return NULL;
    }
    db_t *d = PyObject_New(db_t, &DbType);
    if (!d) return NULL;
    d->db = handle;
    d->owner = Py_NewRef(con);
    return (PyObject *)d;
#endif
}

static void db_dealloc(db_t *d) {
    if (d->owner) Py_DECREF(d->owner);
    else if (d->db) sqlite3_close_v2(d->db);
    PyObject_Free(d);
}

static PyObject *db_query(db_t *d, PyObject *args) {
    const char *sql;
    if (!PyArg_ParseTuple(args, "s", &sql)) return NULL;
    query_t *q = PyObject_New(query_t, &QueryType);
    if (!q) return NULL;
    q->st = NULL;
    q->wrap = NULL;
    q->done = 0;
    q->owner = Py_NewRef((PyObject *)d);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sqlite3_prepare_v2(d->db, sql, -1, &q->st, NULL);
    Py_END_ALLOW_THREADS
    if (rc != SQLITE_OK || !q->st) {
        if (rc == SQLITE_OK) PyErr_SetString(PyExc_RuntimeError, "no statement in the SQL");
        else sqlite_error(d->db);
        Py_DECREF(q);
        return NULL;
    }
    return (PyObject *)q;
}

static void query_dealloc(query_t *q) {
    if (q->st) sqlite3_finalize(q->st);
    if (q->wrap) sqlite3_finalize(q->wrap);
    Py_XDECREF(q->owner);
    PyObject_Free(q);
}

/* what the Python fetch calls a value of this SQLite type */
static const char *type_name(int type) {
    switch (type) {
    case SQLITE_FLOAT: return "float";
    case SQLITE_TEXT: return "str";
    case SQLITE_BLOB: return "bytes";
    default: return "NoneType";
    }
}

/* the rows, or an error: 0 (ok), 1 (SQLite: msg from db), 2 (a value: msg set) */
static int fill_loop(sqlite3_stmt *st, char *out, Py_ssize_t rows, Py_ssize_t itemsize,
                     Py_ssize_t ncols, const Py_ssize_t *off, const int *wide,
                     const int *wrap, const Py_ssize_t *name, sqlite3_stmt **wst,
                     Py_ssize_t *got, int *done, char *msg, size_t msglen) {
    Py_ssize_t n = 0;
    while (n < rows) {
        int rc = sqlite3_step(st);
        if (rc == SQLITE_DONE) {
            *done = 1;
            break;
        }
        if (rc != SQLITE_ROW) {
            *done = 1;
            *got = n;
            return 1;
        }
        if (sqlite3_column_count(st) < ncols) {
            snprintf(msg, msglen, "row %zd is not a tuple of %zd values", n, ncols);
            *done = 1;
            *got = n;
            return 2;
        }
        char *item = out + n * itemsize;
        for (Py_ssize_t j = 0; j < ncols; j++) {
            /* one column lookup a value (its type and integer read from it), not two */
            sqlite3_value *v = sqlite3_column_value(st, (int)j);
            int type = sqlite3_value_type(v);
            int64_t x = type == SQLITE_INTEGER ? sqlite3_value_int64(v) : 0;
            int slow = 0;
            if (wrap[j]) {
                if (type == SQLITE_INTEGER && x <= INT64_MAX - 2147483648LL) {
                    /* ((x + 2^31) & (2^32 - 1)) - 2^31: x's low 32 bits, signed */
                    x = (int32_t)(uint32_t)(uint64_t)x;
                } else {
                    /* SQLite's conversions of text, reals and NULL, and its sum past int64 */
                    sqlite3 *db = sqlite3_db_handle(st);
                    if (!*wst && sqlite3_prepare_v2(db, WRAP_SQL, -1, wst, NULL) != SQLITE_OK) {
                        *done = 1;
                        *got = n;
                        return 1;
                    }
                    if (sqlite3_bind_value(*wst, 1, v) != SQLITE_OK ||
                        sqlite3_step(*wst) != SQLITE_ROW) {
                        sqlite3_reset(*wst);
                        *done = 1;
                        *got = n;
                        return 1;
                    }
                    v = sqlite3_column_value(*wst, 0);
                    type = sqlite3_value_type(v);
                    x = type == SQLITE_INTEGER ? sqlite3_value_int64(v) : 0;
                    slow = 1;
                }
            }
            if (slow) sqlite3_reset(*wst);
            if (type != SQLITE_INTEGER) {
                snprintf(msg, msglen, "row %zd column %zd holds a %s, not an int", n, name[j],
                         type_name(type));
                *done = 1;
                *got = n;
                return 2;
            }
            if (wide[j]) {
                memcpy(item + off[j], &x, 8);
            } else if (x < INT32_MIN || x > INT32_MAX) {
                snprintf(msg, msglen, "row %zd column %zd is out of range", n, name[j]);
                *done = 1;
                *got = n;
                return 2;
            } else {
                int32_t w = (int32_t)x;
                memcpy(item + off[j], &w, 4);
            }
        }
        n++;
    }
    *got = n;
    return 0;
}

static PyObject *query_fill(query_t *q, PyObject *args) {
    Py_ssize_t rows, itemsize;
    PyObject *offsets, *sizes, *wraps = NULL, *names = NULL;
    if (!PyArg_ParseTuple(args, "nnO!O!|O!O!", &rows, &itemsize, &PyTuple_Type, &offsets,
                          &PyTuple_Type, &sizes, &PyTuple_Type, &wraps, &PyTuple_Type,
                          &names)) {
        return NULL;
    }
    Py_ssize_t ncols = PyTuple_GET_SIZE(offsets);
    Py_ssize_t off[MAX_COLUMNS];
    int wide[MAX_COLUMNS];
    int wrap[MAX_COLUMNS];
    Py_ssize_t name[MAX_COLUMNS];
    if (parse_layout(offsets, sizes, itemsize, off, wide) < 0) return NULL;
    if ((wraps && PyTuple_GET_SIZE(wraps) != ncols) || (names && PyTuple_GET_SIZE(names) != ncols)
        || (names && !wraps)) {
        PyErr_SetString(PyExc_ValueError, "one wrap and one name per offset");
        return NULL;
    }
    for (Py_ssize_t j = 0; j < ncols; j++) {
        wrap[j] = 0;
        name[j] = j;
        if (wraps) {
            wrap[j] = PyObject_IsTrue(PyTuple_GET_ITEM(wraps, j));
            if (wrap[j] < 0) return NULL;
            if (wrap[j] && wide[j]) {
                PyErr_SetString(PyExc_ValueError, "a wrapped value is 4 bytes");
                return NULL;
            }
        }
        if (names) {
            name[j] = PyLong_AsSsize_t(PyTuple_GET_ITEM(names, j));
            if (name[j] == -1 && PyErr_Occurred()) return NULL;
        }
    }
    if (rows < 0) {
        PyErr_SetString(PyExc_ValueError, "rows must be at least 0");
        return NULL;
    }
    if (q->done) return Py_BuildValue("(iy#)", 0, "", (Py_ssize_t)0);
    PyObject *con = ((db_t *)q->owner)->owner;
    if (con && !((pysqlite_head_t *)con)->db) {
        /* the borrowed connection was closed: as the Python fetch's cursor says then */
        q->done = 1;
        return Py_BuildValue("(is)", 1, "Cannot operate on a closed database.");
    }
    PyObject *buf = PyByteArray_FromStringAndSize(NULL, rows * itemsize);
    if (!buf) return NULL;
    char msg[200] = "";
    Py_ssize_t got = 0;
    int status;
    char *out = PyByteArray_AS_STRING(buf);
    memset(out, 0, (size_t)(rows * itemsize));
    Py_BEGIN_ALLOW_THREADS
    status = fill_loop(q->st, out, rows, itemsize, ncols, off, wide, wrap, name, &q->wrap,
                       &got, &q->done, msg, sizeof msg);
    Py_END_ALLOW_THREADS
    if (status == 1) {
        Py_DECREF(buf);
        return Py_BuildValue("(is)", 1, sqlite3_errmsg(sqlite3_db_handle(q->st)));
    }
    if (status == 2) {
        Py_DECREF(buf);
        return Py_BuildValue("(is)", 2, msg);
    }
    if (PyByteArray_Resize(buf, got * itemsize) < 0) {
        Py_DECREF(buf);
        return NULL;
    }
    PyObject *result = Py_BuildValue("(iN)", 0, buf);
    return result;
}

static PyMethodDef db_methods[] = {
    {"query", (PyCFunction)db_query, METH_VARARGS, "query(sql) -> Query"},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef query_methods[] = {
    {"fill", (PyCFunction)query_fill, METH_VARARGS,
     "fill(rows, itemsize, offsets, sizes[, wraps, names]) -> (status, bytearray or message)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DbType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_sqlrows.Db",
    .tp_doc = "a read-only SQLite connection (open())",
    .tp_basicsize = sizeof(db_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)db_dealloc,
    .tp_methods = db_methods,
};

static PyTypeObject QueryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_sqlrows.Query",
    .tp_doc = "a prepared statement read in chunks (Db.query())",
    .tp_basicsize = sizeof(query_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)query_dealloc,
    .tp_methods = query_methods,
};

static PyMethodDef methods[] = {
    {"open", db_open, METH_VARARGS, "open(uri, pragmas) -> Db"},
    {"borrow", db_borrow, METH_VARARGS, "borrow(connection, module_path) -> Db"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef sqlrows_definition = {
    PyModuleDef_HEAD_INIT, "_sqlrows", "SQLite rows into structured layouts, in C.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__sqlrows(void) {
    if (PyType_Ready(&DbType) < 0 || PyType_Ready(&QueryType) < 0) return NULL;
    return PyModule_Create(&sqlrows_definition);
}
