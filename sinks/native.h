/* What every optional C extension of prvstream shares: Python's headers, and the module
 * definition and init function (with the method table of a module that exports one function)
 * (sinks/native.py loads it, or falls back to Python where it was not built).
 */
#ifndef PRVSTREAM_NATIVE_H
#define PRVSTREAM_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Module NAME (a bare identifier, the file's stem) exporting the functions of METHODS, a
 * PyMethodDef table ending in a NULL entry. */
#define PRVSTREAM_MODULE(NAME, DOC, METHODS)                                                \
    static struct PyModuleDef NAME##_definition = {                                        \
        PyModuleDef_HEAD_INIT, #NAME, DOC, -1, METHODS, NULL, NULL, NULL, NULL,            \
    };                                                                                     \
    PyMODINIT_FUNC PyInit_##NAME(void) { return PyModule_Create(&NAME##_definition); }

/* Module NAME exporting FUNC, a METH_VARARGS function. */
#define PRVSTREAM_ONE_FUNCTION_MODULE(NAME, DOC, FUNC, SIGNATURE)                          \
    static PyMethodDef NAME##_methods[] = {                                                \
        {#FUNC, FUNC, METH_VARARGS, SIGNATURE},                                            \
        {NULL, NULL, 0, NULL},                                                             \
    };                                                                                     \
    PRVSTREAM_MODULE(NAME, DOC, NAME##_methods)

#endif
