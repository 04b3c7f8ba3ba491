/* _core.h: what the C files of the extension simil._core share.
 *
 * _core.c holds the module, the mapping of simil_status to Python exceptions
 * and the free functions (select_k, kmeans, datasets); _core_index.c holds the
 * Index type.  Both wrap the public C API only.  The pure-Python layer in
 * __init__.py normalizes arguments (dtypes, 1-d inputs) and carries the
 * docstrings users read; this layer still checks every shape and dtype itself,
 * so that no call can make the library read or write outside an array. */
#ifndef SIMIL_PY_CORE_H
#define SIMIL_PY_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL simil_core_ARRAY_API
#ifndef SIMIL_CORE_IMPORTS_NUMPY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include "simil/simil.h"

/* Raise the exception class registered for status (a simil.Error subclass)
 * with simil_last_error() as its message, and with the attributes status (the
 * code's name) and code.  Call it on the thread that made the failed call,
 * before any other simil call.  Returns NULL. */
PyObject *pysimil_raise(simil_status status);

/* Raise simil.InvalidArgumentError with a PyUnicode_FromFormat message.
 * Returns NULL. */
PyObject *pysimil_invalid(const char *format, ...);

/* obj as an aligned, C-contiguous, native-order array of typenum with ndim
 * dimensions (a new reference), or NULL with an exception set.  Casts only
 * where no information is lost: the Python layer converts the rest. */
PyArrayObject *pysimil_array(PyObject *obj, int typenum, int ndim, const char *what);

/* A new array of typenum with these dimensions; negative ones become 0, so
 * that the library, not numpy, reports a bad k or n. */
PyArrayObject *pysimil_empty(int ndim, int64_t d0, int64_t d1, int typenum);

/* The Index type, and load(path, device) which returns one. */
extern PyTypeObject pysimil_index_type;
PyObject *pysimil_index_load(PyObject *module, PyObject *args, PyObject *kwds);

/* Methods taking keywords go through this cast, which -Wcast-function-type
 * accepts. */
#define PYSIMIL_KW_METHOD(fn) ((PyCFunction)(void (*)(void))(fn))

#endif
