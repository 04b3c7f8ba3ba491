/* _core.c: the module simil._core: errors, k-selection, k-means, the
 * synthetic generators and vector files.  The Index type is in _core_index.c.
 *
 * Every long call runs with the GIL released, holding references to its input
 * arrays until it returns.  Outputs are new numpy arrays, allocated before the
 * GIL is released. */
#define SIMIL_CORE_IMPORTS_NUMPY
#include "_core.h"

#include <stdarg.h>
#include <string.h>

/* ---- errors ---- */

/* status code (int) -> exception class, registered by __init__.py. */
static PyObject *error_classes;

/* Raise the class registered for status with message (a reference stolen). */
static PyObject *raise_with(simil_status status, PyObject *message)
{
    if (message == NULL) return NULL;
    PyObject *code = PyLong_FromLong((long)status);
    PyObject *cls = NULL;
    if (code != NULL && error_classes != NULL)
        cls = PyDict_GetItemWithError(error_classes, code); /* borrowed */
    if (cls == NULL && code != NULL && !PyErr_Occurred()) cls = PyExc_RuntimeError;
    PyObject *exc = cls != NULL ? PyObject_CallOneArg(cls, message) : NULL;
    if (exc != NULL) {
        PyObject *name = PyUnicode_FromString(simil_status_name(status));
        if (name == NULL || PyObject_SetAttrString(exc, "status", name) < 0 ||
            PyObject_SetAttrString(exc, "code", code) < 0)
            Py_CLEAR(exc);
        Py_XDECREF(name);
    }
    if (exc != NULL) PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_XDECREF(exc);
    Py_XDECREF(code);
    Py_DECREF(message);
    return NULL;
}

PyObject *pysimil_raise(simil_status status)
{
    const char *text = simil_last_error();
    if (text == NULL || text[0] == '\0') text = simil_status_name(status);
    /* Messages can quote file names that are not UTF-8. */
    return raise_with(status, PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace"));
}

PyObject *pysimil_invalid(const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    PyObject *message = PyUnicode_FromFormatV(format, ap);
    va_end(ap);
    return raise_with(SIMIL_ERR_INVALID_ARGUMENT, message);
}

static PyObject *core_set_error_classes(PyObject *Py_UNUSED(module), PyObject *classes)
{
    if (!PyDict_Check(classes)) {
        PyErr_SetString(PyExc_TypeError, "_set_error_classes needs a dict {code: class}");
        return NULL;
    }
    Py_INCREF(classes);
    Py_XSETREF(error_classes, classes);
    Py_RETURN_NONE;
}

/* ---- arrays ---- */

PyArrayObject *pysimil_array(PyObject *obj, int typenum, int ndim, const char *what)
{
    PyArray_Descr *descr = PyArray_DescrFromType(typenum);
    if (descr == NULL) return NULL;
    /* Steals descr.  Without NPY_ARRAY_FORCECAST only safe casts happen. */
    PyArrayObject *a = (PyArrayObject *)PyArray_FromAny(obj, descr, 0, 0,
                                                         NPY_ARRAY_IN_ARRAY, NULL);
    if (a != NULL && PyArray_NDIM(a) != ndim) {
        pysimil_invalid("%s must be a %d-d array, got %d dimensions", what, ndim,
                        PyArray_NDIM(a));
        Py_CLEAR(a);
    }
    return a;
}

PyArrayObject *pysimil_empty(int ndim, int64_t d0, int64_t d1, int typenum)
{
    npy_intp dims[2] = {d0 > 0 ? (npy_intp)d0 : 0, d1 > 0 ? (npy_intp)d1 : 0};
    return (PyArrayObject *)PyArray_SimpleNew(ndim, dims, typenum);
}

#define ROWS(a) ((int64_t)PyArray_DIM((a), 0))
#define COLS(a) ((int64_t)PyArray_DIM((a), 1))

/* ---- library information ---- */

static PyObject *core_version(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyUnicode_FromString(simil_version_string());
}

static PyObject *core_gpu_count(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    int n;
    Py_BEGIN_ALLOW_THREADS /* the first call initializes the CUDA driver */
    n = simil_gpu_count();
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(n);
}

static PyObject *core_built_with_cuda(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(simil_built_with_cuda());
}

static PyObject *core_status_name(PyObject *Py_UNUSED(module), PyObject *arg)
{
    long code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred()) return NULL;
    return PyUnicode_FromString(simil_status_name((simil_status)code));
}

/* ---- k-selection and k-means ---- */

static PyObject *core_select_k(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"values", "k", "largest", NULL};
    PyObject *obj;
    long long k;
    int largest = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OL|p:select_k", kwlist, &obj, &k, &largest))
        return NULL;
    PyArrayObject *values = pysimil_array(obj, NPY_FLOAT32, 2, "values");
    if (values == NULL) return NULL;
    PyArrayObject *out_values = pysimil_empty(2, ROWS(values), k, NPY_FLOAT32);
    PyArrayObject *out_indices = pysimil_empty(2, ROWS(values), k, NPY_INT64);
    simil_status s = SIMIL_OK;
    if (out_values != NULL && out_indices != NULL) {
        Py_BEGIN_ALLOW_THREADS
        s = simil_select_k(ROWS(values), COLS(values), PyArray_DATA(values), k, largest,
                           PyArray_DATA(out_values), PyArray_DATA(out_indices));
        Py_END_ALLOW_THREADS
    }
    Py_DECREF(values);
    if (out_values == NULL || out_indices == NULL || s != SIMIL_OK) {
        Py_XDECREF(out_values);
        Py_XDECREF(out_indices);
        return out_values == NULL || out_indices == NULL ? NULL : pysimil_raise(s);
    }
    return Py_BuildValue("NN", out_values, out_indices);
}

static int to_uint64(PyObject *obj, void *out)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return 0;
    *(uint64_t *)out = (uint64_t)v;
    return 1;
}

static PyObject *core_kmeans(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"x",    "k",         "iterations", "init", "max_points_per_centroid",
                             "seed", "spherical", "device",     NULL};
    simil_kmeans_params p;
    simil_kmeans_params_init(&p);
    PyObject *obj;
    long long k, max_points = p.max_points_per_centroid;
    int init = (int)p.init;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OL|iiLO&pz:kmeans", kwlist, &obj, &k,
                                     &p.iterations, &init, &max_points, to_uint64, &p.seed,
                                     &p.spherical, &p.device))
        return NULL;
    p.k = k;
    p.init = (simil_kmeans_init)init;
    p.max_points_per_centroid = max_points;
    PyArrayObject *x = pysimil_array(obj, NPY_FLOAT32, 2, "x");
    if (x == NULL) return NULL;
    PyArrayObject *centroids = pysimil_empty(2, k, COLS(x), NPY_FLOAT32);
    PyArrayObject *assignments = pysimil_empty(1, ROWS(x), 0, NPY_INT64);
    PyArrayObject *objective = pysimil_empty(1, p.iterations, 0, NPY_FLOAT64);
    int ready = centroids != NULL && assignments != NULL && objective != NULL;
    simil_status s = SIMIL_OK;
    if (ready) {
        Py_BEGIN_ALLOW_THREADS
        s = simil_kmeans(&p, ROWS(x), COLS(x), PyArray_DATA(x), PyArray_DATA(centroids),
                         PyArray_DATA(assignments), PyArray_DATA(objective));
        Py_END_ALLOW_THREADS
    }
    Py_DECREF(x);
    if (!ready || s != SIMIL_OK) {
        Py_XDECREF(centroids);
        Py_XDECREF(assignments);
        Py_XDECREF(objective);
        return ready ? pysimil_raise(s) : NULL;
    }
    return Py_BuildValue("NNN", centroids, assignments, objective);
}

/* ---- synthetic data and vector files ---- */

static PyObject *core_generate(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"kind", "n", "dim", "seed", "first", NULL};
    const char *kind;
    long long n, dim, first = 0;
    uint64_t seed;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "sLLO&|L:generate", kwlist, &kind, &n, &dim,
                                     to_uint64, &seed, &first))
        return NULL;
    PyArrayObject *out = pysimil_empty(2, n, dim, NPY_FLOAT32);
    if (out == NULL) return NULL;
    simil_status s;
    Py_BEGIN_ALLOW_THREADS
    s = simil_generate(kind, first, n, dim, seed, PyArray_DATA(out));
    Py_END_ALLOW_THREADS
    if (s != SIMIL_OK) {
        Py_DECREF(out);
        return pysimil_raise(s);
    }
    return (PyObject *)out;
}

static int typenum_of(simil_dtype dtype)
{
    switch (dtype) {
    case SIMIL_DTYPE_FLOAT32: return NPY_FLOAT32;
    case SIMIL_DTYPE_UINT8: return NPY_UINT8;
    case SIMIL_DTYPE_INT32: return NPY_INT32;
    case SIMIL_DTYPE_INT64: return NPY_INT64;
    }
    return NPY_NOTYPE;
}

static const char matrix_capsule_name[] = "simil._core.matrix";

static void matrix_capsule_free(PyObject *capsule)
{
    simil_matrix *m = PyCapsule_GetPointer(capsule, matrix_capsule_name);
    simil_matrix_free(m);
    PyMem_RawFree(m);
}

/* An array over the data of m, which it takes over: no copy is made, and the
 * data goes back to simil_matrix_free when the array dies. */
static PyObject *matrix_to_array(simil_matrix *m)
{
    int typenum = typenum_of(m->dtype);
    npy_intp dims[2] = {(npy_intp)m->rows, (npy_intp)m->cols};
    simil_matrix *owned = NULL;
    PyObject *capsule, *array = NULL;
    if (typenum == NPY_NOTYPE) {
        PyErr_Format(PyExc_RuntimeError, "read: unknown element type %d", (int)m->dtype);
    } else if (m->rows == 0 || m->cols == 0 || m->data == NULL) {
        array = PyArray_ZEROS(2, dims, typenum, 0);
    } else if ((owned = PyMem_RawMalloc(sizeof *owned)) == NULL) {
        PyErr_NoMemory();
    } else {
        *owned = *m;
        memset(m, 0, sizeof *m);
        capsule = PyCapsule_New(owned, matrix_capsule_name, matrix_capsule_free);
        if (capsule == NULL) {
            *m = *owned;
            PyMem_RawFree(owned);
        } else {
            /* From here on the capsule frees the data when it dies. */
            array = PyArray_SimpleNewFromData(2, dims, typenum, owned->data);
            if (array == NULL)
                Py_DECREF(capsule);
            else if (PyArray_SetBaseObject((PyArrayObject *)array, capsule) < 0)
                Py_CLEAR(array); /* SetBaseObject stole the capsule even so */
        }
    }
    simil_matrix_free(m); /* a no-op once the capsule owns the data */
    return array;
}

static PyObject *core_read(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"path", "first", "count", NULL};
    PyObject *path;
    long long first = 0, count = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&|LL:read", kwlist, PyUnicode_FSConverter,
                                     &path, &first, &count))
        return NULL;
    simil_matrix m;
    simil_status s;
    Py_BEGIN_ALLOW_THREADS
    s = simil_matrix_read(PyBytes_AS_STRING(path), first, count, &m);
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    if (s != SIMIL_OK) return pysimil_raise(s);
    return matrix_to_array(&m);
}

static int dtype_of(PyArrayObject *a, simil_dtype *dtype)
{
    static const simil_dtype all[] = {SIMIL_DTYPE_FLOAT32, SIMIL_DTYPE_UINT8, SIMIL_DTYPE_INT32,
                                      SIMIL_DTYPE_INT64};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (PyArray_EquivTypenums(PyArray_TYPE(a), typenum_of(all[i]))) {
            *dtype = all[i];
            return 1;
        }
    }
    return 0;
}

static PyObject *core_write(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"path", "array", NULL};
    PyObject *path, *obj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&O:write", kwlist, PyUnicode_FSConverter,
                                     &path, &obj))
        return NULL;
    PyArrayObject *a = (PyArrayObject *)PyArray_FromAny(
        obj, NULL, 2, 2, NPY_ARRAY_IN_ARRAY | NPY_ARRAY_NOTSWAPPED, NULL);
    simil_matrix m = {0};
    if (a != NULL && !dtype_of(a, &m.dtype)) {
        PyErr_SetString(PyExc_TypeError, "write: the array must be float32, uint8, int32 or int64");
        Py_CLEAR(a);
    }
    if (a == NULL) {
        Py_DECREF(path);
        return NULL;
    }
    m.rows = ROWS(a);
    m.cols = COLS(a);
    m.data = PyArray_DATA(a);
    simil_status s;
    Py_BEGIN_ALLOW_THREADS
    s = simil_matrix_write(PyBytes_AS_STRING(path), &m);
    Py_END_ALLOW_THREADS
    Py_DECREF(a);
    Py_DECREF(path);
    if (s != SIMIL_OK) return pysimil_raise(s);
    Py_RETURN_NONE;
}

/* ---- the module ---- */

/* The library's table of search parameters: a tuple of (name, type, default,
 * range, index_types, help, choices) tuples, type "int", "float" or "enum",
 * choices a tuple of names or None. */
static PyObject *core_search_parameters(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(args))
{
    static const char *const types[] = {"int", "float", "enum"};
    const int n = simil_search_param_count();
    PyObject *all = PyTuple_New(n);
    for (int i = 0; all != NULL && i < n; i++) {
        const simil_search_param_info *p = simil_search_param_get_info(i);
        PyObject *choices = Py_None;
        if (p->choices == NULL) {
            Py_INCREF(Py_None);
        } else {
            Py_ssize_t m = 0;
            while (p->choices[m] != NULL) m++;
            choices = PyTuple_New(m);
            for (Py_ssize_t j = 0; choices != NULL && j < m; j++) {
                PyObject *c = PyUnicode_FromString(p->choices[j]);
                if (c == NULL) Py_CLEAR(choices);
                else PyTuple_SET_ITEM(choices, j, c);
            }
        }
        PyObject *row = choices == NULL
                            ? NULL
                            : Py_BuildValue("(ssssssN)", p->name, types[p->type], p->default_value,
                                            p->range, p->index_types, p->help, choices);
        if (row == NULL) {
            Py_CLEAR(all);
            break;
        }
        PyTuple_SET_ITEM(all, i, row);
    }
    return all;
}

/* ---- DLPack ---- */

/* The structs of DLPack's dlpack.h (version 0.8, ABI-stable since 0.6), as
 * a capsule named "dltensor" holds them: only what is read here. */
typedef struct {
    int32_t device_type; /* 1 CPU, 2 CUDA, 3 CUDA host, 13 CUDA managed */
    int32_t device_id;
} pysimil_dl_device;

typedef struct {
    uint8_t code; /* 0 int, 1 uint, 2 float */
    uint8_t bits;
    uint16_t lanes;
} pysimil_dl_dtype;

typedef struct {
    void *data;
    pysimil_dl_device device;
    int32_t ndim;
    pysimil_dl_dtype dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL: C order */
    uint64_t byte_offset;
} pysimil_dl_tensor;

typedef struct {
    pysimil_dl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(void *self);
} pysimil_dl_managed;

/* dlpack_info(capsule) -> (address, shape, strides or None, (code, bits,
 * lanes), (device_type, device_id)).  The capsule is only read, not
 * consumed: its owner frees the tensor when the capsule goes, so the caller
 * keeps the capsule alive while it uses the memory. */
static PyObject *core_dlpack_info(PyObject *Py_UNUSED(module), PyObject *capsule)
{
    pysimil_dl_managed *m = PyCapsule_GetPointer(capsule, "dltensor");
    if (m == NULL) return NULL;
    const pysimil_dl_tensor *t = &m->dl_tensor;
    if (t->ndim < 0 || t->ndim > 8)
        return pysimil_invalid("a DLPack tensor of %d dimensions", (int)t->ndim);
    PyObject *shape = PyTuple_New(t->ndim), *strides = Py_None;
    if (shape == NULL) return NULL;
    for (int i = 0; i < t->ndim; i++)
        PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(t->shape[i]));
    if (t->strides != NULL) {
        strides = PyTuple_New(t->ndim);
        if (strides == NULL) {
            Py_DECREF(shape);
            return NULL;
        }
        for (int i = 0; i < t->ndim; i++)
            PyTuple_SET_ITEM(strides, i, PyLong_FromLongLong(t->strides[i]));
    } else {
        Py_INCREF(strides);
    }
    return Py_BuildValue("KNN(iii)(ii)",
                         (unsigned long long)((uintptr_t)t->data + t->byte_offset), shape,
                         strides, (int)t->dtype.code, (int)t->dtype.bits, (int)t->dtype.lanes,
                         (int)t->device.device_type, (int)t->device.device_id);
}

/* ---- progress ---- */

/* The callable that progress reports go to, or NULL.  The library calls
 * progress_trampoline on the thread of the call in progress, which runs
 * without the GIL: the trampoline takes it for the callback.  An exception
 * raised by the callback cannot stop the library's call; it goes to
 * sys.unraisablehook and the work goes on.  The trampoline stays installed
 * once set (a None callback makes it return at once), so that the
 * library's pointer never changes under a running call. */
static PyObject *progress_callback;

static void progress_trampoline(const char *stage, int64_t done, int64_t total, void *user)
{
    (void)user;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *callback = progress_callback;
    if (callback != NULL) {
        Py_INCREF(callback);
        PyObject *r = PyObject_CallFunction(callback, "sLL", stage, (long long)done,
                                            (long long)total);
        if (r == NULL) PyErr_WriteUnraisable(callback);
        Py_XDECREF(r);
        Py_DECREF(callback);
    }
    PyGILState_Release(gil);
}

static PyObject *core_set_progress(PyObject *Py_UNUSED(module), PyObject *callback)
{
    if (callback != Py_None && !PyCallable_Check(callback)) {
        PyErr_Format(PyExc_TypeError, "set_progress needs a callable or None, got %R", callback);
        return NULL;
    }
    PyObject *old = progress_callback;
    progress_callback = callback == Py_None ? NULL : (Py_INCREF(callback), callback);
    Py_XDECREF(old);
    static int installed;
    if (!installed && progress_callback != NULL) {
        simil_set_progress(progress_trampoline, NULL);
        installed = 1;
    }
    Py_RETURN_NONE;
}

static PyMethodDef core_methods[] = {
    {"search_parameters", core_search_parameters, METH_NOARGS,
     "search_parameters() -> ((name, type, default, range, index_types, help, choices), ...)"},
    {"version", core_version, METH_NOARGS, "version() -> the loaded libsimil's version string"},
    {"gpu_count", core_gpu_count, METH_NOARGS, "gpu_count() -> GPUs this build can use"},
    {"built_with_cuda", core_built_with_cuda, METH_NOARGS,
     "built_with_cuda() -> whether libsimil has its CUDA backend"},
    {"status_name", core_status_name, METH_O, "status_name(code) -> 'SIMIL_ERR_...'"},
    {"dlpack_info", core_dlpack_info, METH_O,
     "dlpack_info(capsule) -> (address, shape, strides, dtype, device)"},
    {"set_progress", core_set_progress, METH_O,
     "set_progress(callback): callback(stage, done, total) or None"},
    {"_set_error_classes", core_set_error_classes, METH_O,
     "_set_error_classes({code: class}): the exceptions raised for each status"},
    {"select_k", PYSIMIL_KW_METHOD(core_select_k), METH_VARARGS | METH_KEYWORDS,
     "select_k(values, k, largest=False) -> (values, indices); values float32 2-d"},
    {"kmeans", PYSIMIL_KW_METHOD(core_kmeans), METH_VARARGS | METH_KEYWORDS,
     "kmeans(x, k, iterations, init, max_points_per_centroid, seed, spherical, device)\n"
     "-> (centroids, assignments, objective); init is 0 (random) or 1 (k-means++)"},
    {"generate", PYSIMIL_KW_METHOD(core_generate), METH_VARARGS | METH_KEYWORDS,
     "generate(kind, n, dim, seed, first=0) -> float32 n x dim"},
    {"read", PYSIMIL_KW_METHOD(core_read), METH_VARARGS | METH_KEYWORDS,
     "read(path, first=0, count=-1) -> 2-d array of the file's element type"},
    {"write", PYSIMIL_KW_METHOD(core_write), METH_VARARGS | METH_KEYWORDS,
     "write(path, array): array 2-d, float32, uint8, int32 or int64"},
    {"load", PYSIMIL_KW_METHOD(pysimil_index_load), METH_VARARGS | METH_KEYWORDS,
     "load(path, device=None) -> Index"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "simil._core",
    .m_doc = "The C layer of simil: thin, checked wrappers of libsimil's public API.\n"
             "Use the package simil, which normalizes arguments and documents them.",
    .m_size = -1,
    .m_methods = core_methods,
};

PyMODINIT_FUNC PyInit__core(void)
{
    import_array();
    if (PyType_Ready(&pysimil_index_type) < 0) return NULL;
    PyObject *m = PyModule_Create(&core_module);
    if (m == NULL) return NULL;
    Py_INCREF(&pysimil_index_type);
    if (PyModule_AddObject(m, "Index", (PyObject *)&pysimil_index_type) < 0) {
        Py_DECREF(&pysimil_index_type);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
