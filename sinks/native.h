/* What every optional C extension of prvstream shares: Python's headers, the module
 * definition and init function (with the method table of a module that exports one function),
 * and the merge of sorted runs two sorts use (sinks/native.py loads an extension, or falls
 * back to Python where it was not built).
 */
#ifndef PRVSTREAM_NATIVE_H
#define PRVSTREAM_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

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

/* A function NAME(a, n, tmp, bounds, runs, ctx) that merges the ascending runs of TYPE items
 * in a (bounds: the first item of each of the runs runs, then n) pairwise through tmp (room
 * for n items) until one run is left, in a. An item of the right run goes first only when
 * RIGHT_FIRST(ctx, right item, left item) (strictly before: the merge is stable); ctx, of
 * type CTX, is what the comparison reads besides the items. bounds is overwritten. */
#define PRVSTREAM_MERGE_RUNS(NAME, TYPE, CTX, RIGHT_FIRST)                                \
    static void NAME(TYPE *a, Py_ssize_t n, TYPE *tmp, Py_ssize_t *bounds, Py_ssize_t runs,  \
                     CTX ctx) {                                                            \
        TYPE *src = a, *dst = tmp;                                                         \
        (void)ctx;                                                                         \
        while (runs > 1) {                                                                 \
            Py_ssize_t kept = 0;                                                           \
            for (Py_ssize_t r = 0; r < runs; r += 2) {                                     \
                const Py_ssize_t lo = bounds[r], mid = bounds[r + 1];                      \
                const Py_ssize_t hi = r + 2 <= runs ? bounds[r + 2] : mid;                 \
                Py_ssize_t i = lo, j = mid, k = lo;                                        \
                while (i < mid && j < hi) {                                                \
                    if (RIGHT_FIRST(ctx, src[j], src[i])) dst[k++] = src[j++];             \
                    else dst[k++] = src[i++];                                              \
                }                                                                          \
                while (i < mid) dst[k++] = src[i++];                                       \
                while (j < hi) dst[k++] = src[j++];                                        \
                bounds[kept++] = lo;                                                       \
            }                                                                              \
            bounds[kept] = n;                                                              \
            runs = kept;                                                                   \
            TYPE *swap = src;                                                              \
            src = dst;                                                                     \
            dst = swap;                                                                    \
        }                                                                                  \
        if (src != a) memcpy(a, src, (size_t)n * sizeof(TYPE));                            \
    }

#endif
