/* _core_index.c: simil._core.Index, a simil_index handle.
 *
 * The C API lets searches run together on one index, but train, add, remove
 * and reset need it alone (simil/index.h).  Once the GIL is released, Python
 * threads can make any of these calls at the same time, so each call holds a
 * read-write lock: shared for searches and reads, exclusive for changes.  The
 * lock is only taken with the GIL released, so a thread that waits for it
 * never stops the other Python threads.  glibc's locks let new readers in
 * while a writer waits, so threads that search without pause would keep an
 * add out for good; the lock is made to prefer writers (a glibc extension,
 * which Python.h enables with _GNU_SOURCE). */
#include "_core.h"

#include <pthread.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    simil_index *index; /* NULL only while the object is being built */
    pthread_rwlock_t lock;
} IndexObject;

enum { SHARED = 0, EXCLUSIVE = 1 };

/* Call these with the GIL released. */
static void index_lock(IndexObject *self, int mode)
{
    if (mode == EXCLUSIVE)
        pthread_rwlock_wrlock(&self->lock);
    else
        pthread_rwlock_rdlock(&self->lock);
}

static void index_unlock(IndexObject *self) { pthread_rwlock_unlock(&self->lock); }

/* A new Index object that owns index (destroyed here on failure). */
static PyObject *index_wrap(simil_index *index)
{
    IndexObject *self = PyObject_New(IndexObject, &pysimil_index_type);
    if (self == NULL) {
        simil_index_destroy(index);
        return NULL;
    }
    self->index = NULL;
    pthread_rwlockattr_t attr;
    int failed = pthread_rwlockattr_init(&attr);
#ifdef __GLIBC__
    if (!failed)
        failed = pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
    if (!failed) {
        failed = pthread_rwlock_init(&self->lock, &attr);
        pthread_rwlockattr_destroy(&attr);
    }
    if (failed) {
        simil_index_destroy(index);
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->index = index;
    return (PyObject *)self;
}

static void index_dealloc(IndexObject *self)
{
    if (self->index != NULL) {
        simil_index_destroy(self->index);
        pthread_rwlock_destroy(&self->lock);
    }
    PyObject_Free(self);
}

static PyObject *index_new(PyTypeObject *Py_UNUSED(type), PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dim", "description", "metric", "device", NULL};
    long long dim;
    const char *description = "Flat", *metric_name = "l2", *device = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "L|ssz:Index", kwlist, &dim, &description,
                                     &metric_name, &device))
        return NULL;
    simil_metric metric;
    simil_status s = simil_metric_parse(metric_name, &metric);
    if (s != SIMIL_OK) return pysimil_raise(s);
    simil_index *index = NULL;
    Py_BEGIN_ALLOW_THREADS /* opening a GPU can take a while */
    s = simil_index_create(&index, dim, description, metric, device);
    Py_END_ALLOW_THREADS
    if (s != SIMIL_OK) return pysimil_raise(s);
    return index_wrap(index);
}

PyObject *pysimil_index_load(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"path", "device", NULL};
    PyObject *path;
    const char *device = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&|z:load", kwlist, PyUnicode_FSConverter,
                                     &path, &device))
        return NULL;
    simil_index *index = NULL;
    simil_status s;
    Py_BEGIN_ALLOW_THREADS
    s = simil_index_load(&index, PyBytes_AS_STRING(path), device);
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    if (s != SIMIL_OK) return pysimil_raise(s);
    return index_wrap(index);
}

/* obj as float32 rows of the index's dimension (a new reference). */
static PyArrayObject *vectors_arg(IndexObject *self, PyObject *obj, const char *what)
{
    PyArrayObject *a = pysimil_array(obj, NPY_FLOAT32, 2, what);
    int64_t dim = simil_index_dim(self->index);
    if (a != NULL && (int64_t)PyArray_DIM(a, 1) != dim) {
        pysimil_invalid("%s have %lld columns, the index has dimension %lld", what,
                        (long long)PyArray_DIM(a, 1), (long long)dim);
        Py_CLEAR(a);
    }
    return a;
}

/* obj as a 1-d int64 array of ids (a new reference). */
static PyArrayObject *ids_arg(PyObject *obj)
{
    return pysimil_array(obj, NPY_INT64, 1, "ids");
}

static PyObject *index_train(IndexObject *self, PyObject *obj)
{
    PyArrayObject *x = vectors_arg(self, obj, "training vectors");
    if (x == NULL) return NULL;
    simil_status s;
    Py_BEGIN_ALLOW_THREADS
    index_lock(self, EXCLUSIVE);
    s = simil_index_train(self->index, (int64_t)PyArray_DIM(x, 0), PyArray_DATA(x));
    index_unlock(self);
    Py_END_ALLOW_THREADS
    Py_DECREF(x);
    if (s != SIMIL_OK) return pysimil_raise(s);
    Py_RETURN_NONE;
}

static PyObject *index_add(IndexObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"vectors", "ids", NULL};
    PyObject *obj, *ids_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:add", kwlist, &obj, &ids_obj)) return NULL;
    PyArrayObject *x = vectors_arg(self, obj, "vectors");
    if (x == NULL) return NULL;
    PyArrayObject *ids = NULL;
    if (ids_obj != Py_None) {
        ids = ids_arg(ids_obj);
        if (ids != NULL && PyArray_DIM(ids, 0) != PyArray_DIM(x, 0)) {
            pysimil_invalid("%lld ids were given for %lld vectors",
                            (long long)PyArray_DIM(ids, 0), (long long)PyArray_DIM(x, 0));
            Py_CLEAR(ids);
        }
        if (ids == NULL) {
            Py_DECREF(x);
            return NULL;
        }
    }
    simil_status s;
    Py_BEGIN_ALLOW_THREADS
    index_lock(self, EXCLUSIVE);
    s = simil_index_add(self->index, (int64_t)PyArray_DIM(x, 0), PyArray_DATA(x),
                        ids != NULL ? PyArray_DATA(ids) : NULL);
    index_unlock(self);
    Py_END_ALLOW_THREADS
    Py_DECREF(x);
    Py_XDECREF(ids);
    if (s != SIMIL_OK) return pysimil_raise(s);
    Py_RETURN_NONE;
}

/* The search parameters of a tuple of (name, value) pairs into a new handle
 * (*out), or NULL with an exception set.  The Python layer has checked the
 * names and the Python types: ints go as text (so that the library reports
 * any size out of range), floats as double, strings as text. */
static int search_params_of(PyObject *settings, simil_search_params **out)
{
    simil_search_params *p = NULL;
    simil_status s = simil_search_params_create(&p);
    if (s != SIMIL_OK) {
        pysimil_raise(s);
        return 0;
    }
    Py_ssize_t n = settings == NULL ? 0 : PyTuple_Size(settings);
    if (n < 0) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *name;
        PyObject *value;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(settings, i), "sO:search parameter", &name, &value))
            goto fail;
        if (PyFloat_Check(value)) {
            s = simil_search_params_set_float(p, name, PyFloat_AS_DOUBLE(value));
        } else if (PyLong_Check(value) || PyUnicode_Check(value)) {
            PyObject *text = PyObject_Str(value);
            const char *utf8 = text != NULL ? PyUnicode_AsUTF8(text) : NULL;
            if (utf8 == NULL) {
                Py_XDECREF(text);
                goto fail;
            }
            s = simil_search_params_set(p, name, utf8);
            Py_DECREF(text);
        } else {
            PyErr_Format(PyExc_TypeError, "search parameter %s: %R is not an int, float or str",
                         name, value);
            goto fail;
        }
        if (s != SIMIL_OK) {
            pysimil_raise(s);
            goto fail;
        }
    }
    *out = p;
    return 1;
fail:
    simil_search_params_destroy(p);
    return 0;
}

/* The allowed ids into params: None (every id), an int64 array of ids
 * (ascending, no repeats: the Python layer sorts them), or a tuple (uint8
 * array, nbits) of a bitset.  0 with an exception set on failure. */
static int search_allow(PyObject *allow, simil_search_params *params)
{
    simil_status s;
    if (allow == NULL || allow == Py_None) return 1;
    if (PyTuple_Check(allow)) {
        PyObject *bytes;
        long long nbits;
        if (!PyArg_ParseTuple(allow, "OL:allow", &bytes, &nbits)) return 0;
        PyArrayObject *b = (PyArrayObject *)PyArray_FROM_OTF(bytes, NPY_UINT8, NPY_ARRAY_IN_ARRAY);
        if (b == NULL) return 0;
        if (PyArray_SIZE(b) * 8 < nbits) {
            Py_DECREF(b);
            PyErr_SetString(PyExc_ValueError, "allow: the bitset holds fewer bits than nbits");
            return 0;
        }
        s = simil_search_params_allow_bitset(params, nbits, PyArray_DATA(b));
        Py_DECREF(b);
    } else {
        PyArrayObject *ids = (PyArrayObject *)PyArray_FROM_OTF(allow, NPY_INT64,
                                                               NPY_ARRAY_IN_ARRAY);
        if (ids == NULL) return 0;
        s = simil_search_params_allow_ids(params, PyArray_SIZE(ids), PyArray_DATA(ids));
        Py_DECREF(ids);
    }
    if (s != SIMIL_OK) {
        pysimil_raise(s);
        return 0;
    }
    return 1;
}

/* The inputs of a search: the handle of settings and allow (*params) and the
 * queries of obj; NULL with an exception set (and nothing to free) on
 * failure. */
static PyArrayObject *search_inputs(IndexObject *self, PyObject *obj, PyObject *settings,
                                    PyObject *allow, simil_search_params **params)
{
    *params = NULL;
    if (!search_params_of(settings, params)) return NULL;
    PyArrayObject *q = search_allow(allow, *params) ? vectors_arg(self, obj, "queries") : NULL;
    if (q == NULL) {
        simil_search_params_destroy(*params);
        *params = NULL;
    }
    return q;
}

static PyObject *index_search(IndexObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"queries", "k", "settings", "allow", NULL};
    PyObject *obj, *settings = NULL, *allow = NULL;
    long long k;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OL|O!O:search", kwlist, &obj, &k,
                                     &PyTuple_Type, &settings, &allow))
        return NULL;
    simil_search_params *params;
    PyArrayObject *q = search_inputs(self, obj, settings, allow, &params);
    if (q == NULL) return NULL;
    int64_t nq = (int64_t)PyArray_DIM(q, 0);
    PyArrayObject *distances = pysimil_empty(2, nq, k, NPY_FLOAT32);
    PyArrayObject *labels = pysimil_empty(2, nq, k, NPY_INT64);
    int ready = distances != NULL && labels != NULL;
    simil_status s = SIMIL_OK;
    if (ready) {
        Py_BEGIN_ALLOW_THREADS
        index_lock(self, SHARED);
        s = simil_index_search(self->index, nq, PyArray_DATA(q), k, params,
                               PyArray_DATA(distances), PyArray_DATA(labels));
        index_unlock(self);
        Py_END_ALLOW_THREADS
    }
    Py_DECREF(q);
    simil_search_params_destroy(params);
    if (!ready || s != SIMIL_OK) {
        Py_XDECREF(distances);
        Py_XDECREF(labels);
        return ready ? pysimil_raise(s) : NULL;
    }
    return Py_BuildValue("NN", distances, labels);
}

static PyObject *index_range_search(IndexObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"queries", "radius", "settings", "allow", NULL};
    PyObject *obj, *settings = NULL, *allow = NULL;
    double radius;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Od|O!O:range_search", kwlist, &obj, &radius,
                                     &PyTuple_Type, &settings, &allow))
        return NULL;
    simil_search_params *params;
    PyArrayObject *q = search_inputs(self, obj, settings, allow, &params);
    if (q == NULL) return NULL;
    const int64_t nq = (int64_t)PyArray_DIM(q, 0);
    simil_range_result *r = NULL;
    simil_status s;
    Py_BEGIN_ALLOW_THREADS
    index_lock(self, SHARED);
    s = simil_index_range_search(self->index, nq, PyArray_DATA(q), (float)radius, params, &r);
    index_unlock(self);
    Py_END_ALLOW_THREADS
    Py_DECREF(q);
    simil_search_params_destroy(params);
    if (s != SIMIL_OK) return pysimil_raise(s);
    const int64_t total = r->offsets[nq];
    PyArrayObject *offsets = pysimil_empty(1, nq + 1, 0, NPY_INT64);
    PyArrayObject *distances = pysimil_empty(1, total, 0, NPY_FLOAT32);
    PyArrayObject *labels = pysimil_empty(1, total, 0, NPY_INT64);
    if (offsets == NULL || distances == NULL || labels == NULL) {
        Py_XDECREF(offsets);
        Py_XDECREF(distances);
        Py_XDECREF(labels);
        simil_range_result_destroy(r);
        return NULL;
    }
    memcpy(PyArray_DATA(offsets), r->offsets, sizeof(int64_t) * (size_t)(nq + 1));
    memcpy(PyArray_DATA(distances), r->distances, sizeof(float) * (size_t)total);
    memcpy(PyArray_DATA(labels), r->labels, sizeof(int64_t) * (size_t)total);
    simil_range_result_destroy(r);
    return Py_BuildValue("NNN", offsets, distances, labels);
}

static PyObject *index_uses_search_param(IndexObject *self, PyObject *name)
{
    const char *text = PyUnicode_AsUTF8(name);
    if (text == NULL) return NULL;
    return PyBool_FromLong(simil_index_uses_search_param(self->index, text));
}

/* search_pointers(queries, nq, k, settings, distances, labels, allow): the search
 * of index_search on memory given by address, for arrays the library reads
 * and writes where they are (GPU memory: __cuda_array_interface__, DLPack).
 * The Python layer has checked shapes and types against the owners of the
 * memory, which it keeps alive for the call; the library checks that the
 * memory kinds agree with each other and with the index's device. */
static PyObject *index_search_pointers(IndexObject *self, PyObject *args)
{
    unsigned long long q, d, l;
    long long nq, k;
    PyObject *settings, *allow = NULL;
    if (!PyArg_ParseTuple(args, "KLLO!KK|O:search_pointers", &q, &nq, &k, &PyTuple_Type,
                          &settings, &d, &l, &allow))
        return NULL;
    if (nq < 0) return pysimil_invalid("search: nq=%lld is negative", nq);
    simil_search_params *params = NULL;
    if (!search_params_of(settings, &params)) return NULL;
    if (!search_allow(allow, params)) {
        simil_search_params_destroy(params);
        return NULL;
    }
    simil_status s;
    Py_BEGIN_ALLOW_THREADS
    index_lock(self, SHARED);
    s = simil_index_search(self->index, nq, (const float *)(uintptr_t)q, k, params,
                           (float *)(uintptr_t)d, (int64_t *)(uintptr_t)l);
    index_unlock(self);
    Py_END_ALLOW_THREADS
    simil_search_params_destroy(params);
    if (s != SIMIL_OK) return pysimil_raise(s);
    Py_RETURN_NONE;
}

static PyObject *index_remove(IndexObject *self, PyObject *obj)
{
    PyArrayObject *ids = ids_arg(obj);
    if (ids == NULL) return NULL;
    int64_t removed = 0;
    simil_status s;
    Py_BEGIN_ALLOW_THREADS
    index_lock(self, EXCLUSIVE);
    s = simil_index_remove(self->index, (int64_t)PyArray_DIM(ids, 0), PyArray_DATA(ids),
                           &removed);
    index_unlock(self);
    Py_END_ALLOW_THREADS
    Py_DECREF(ids);
    if (s != SIMIL_OK) return pysimil_raise(s);
    return PyLong_FromLongLong(removed);
}

static PyObject *index_reconstruct(IndexObject *self, PyObject *arg)
{
    long long id = PyLong_AsLongLong(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    PyArrayObject *out = pysimil_empty(1, simil_index_dim(self->index), 0, NPY_FLOAT32);
    if (out == NULL) return NULL;
    simil_status s;
    Py_BEGIN_ALLOW_THREADS
    index_lock(self, SHARED);
    s = simil_index_reconstruct(self->index, id, PyArray_DATA(out));
    index_unlock(self);
    Py_END_ALLOW_THREADS
    if (s != SIMIL_OK) {
        Py_DECREF(out);
        return pysimil_raise(s);
    }
    return (PyObject *)out;
}

/* The stored vectors of these ids, float32 n x dim, under one lock. */
static PyObject *index_reconstruct_batch(IndexObject *self, PyObject *obj)
{
    PyArrayObject *ids = ids_arg(obj);
    if (ids == NULL) return NULL;
    const int64_t n = (int64_t)PyArray_DIM(ids, 0), dim = simil_index_dim(self->index);
    PyArrayObject *out = pysimil_empty(2, n, dim, NPY_FLOAT32);
    if (out == NULL) {
        Py_DECREF(ids);
        return NULL;
    }
    const int64_t *id = PyArray_DATA(ids);
    float *x = PyArray_DATA(out);
    simil_status s = SIMIL_OK;
    Py_BEGIN_ALLOW_THREADS
    index_lock(self, SHARED);
    for (int64_t i = 0; i < n && s == SIMIL_OK; i++)
        s = simil_index_reconstruct(self->index, id[i], x + i * dim);
    index_unlock(self);
    Py_END_ALLOW_THREADS
    Py_DECREF(ids);
    if (s != SIMIL_OK) {
        Py_DECREF(out);
        return pysimil_raise(s);
    }
    return (PyObject *)out;
}

static PyObject *index_reset(IndexObject *self, PyObject *Py_UNUSED(ignored))
{
    simil_status s;
    Py_BEGIN_ALLOW_THREADS
    index_lock(self, EXCLUSIVE);
    s = simil_index_reset(self->index);
    index_unlock(self);
    Py_END_ALLOW_THREADS
    if (s != SIMIL_OK) return pysimil_raise(s);
    Py_RETURN_NONE;
}

static PyObject *index_set_batching(IndexObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"enabled", "max_wait_us", NULL};
    int enabled;
    long long wait_us = 100; /* simil.Index.set_batching's default */
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "p|L:set_batching", kwlist, &enabled, &wait_us))
        return NULL;
    simil_status s;
    Py_BEGIN_ALLOW_THREADS
    index_lock(self, EXCLUSIVE);
    s = simil_index_set_batching(self->index, enabled, wait_us);
    index_unlock(self);
    Py_END_ALLOW_THREADS
    if (s != SIMIL_OK) return pysimil_raise(s);
    Py_RETURN_NONE;
}

/* save(path) and save_faiss(path): a writer under the shared lock. */
static PyObject *index_write(IndexObject *self, PyObject *arg,
                             simil_status (*writer)(const simil_index *, const char *))
{
    PyObject *path;
    if (!PyUnicode_FSConverter(arg, &path)) return NULL;
    simil_status s;
    Py_BEGIN_ALLOW_THREADS
    index_lock(self, SHARED);
    s = writer(self->index, PyBytes_AS_STRING(path));
    index_unlock(self);
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    if (s != SIMIL_OK) return pysimil_raise(s);
    Py_RETURN_NONE;
}

static PyObject *index_save(IndexObject *self, PyObject *arg)
{
    return index_write(self, arg, simil_index_save);
}

static PyObject *index_save_faiss(IndexObject *self, PyObject *arg)
{
    return index_write(self, arg, simil_index_save_faiss);
}

/* ---- properties: dim, metric, description and backend never change after
 * creation; ntotal and is_trained do, so they are read under the lock ---- */

static PyObject *index_get_dim(IndexObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(simil_index_dim(self->index));
}

static PyObject *index_get_ntotal(IndexObject *self, void *Py_UNUSED(closure))
{
    int64_t n;
    Py_BEGIN_ALLOW_THREADS
    index_lock(self, SHARED);
    n = simil_index_size(self->index);
    index_unlock(self);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(n);
}

static PyObject *index_get_is_trained(IndexObject *self, void *Py_UNUSED(closure))
{
    int trained;
    Py_BEGIN_ALLOW_THREADS
    index_lock(self, SHARED);
    trained = simil_index_is_trained(self->index);
    index_unlock(self);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(trained);
}

static PyObject *index_get_nprobe(IndexObject *self, void *Py_UNUSED(closure))
{
    int64_t n;
    Py_BEGIN_ALLOW_THREADS
    index_lock(self, SHARED);
    n = simil_index_nprobe(self->index);
    index_unlock(self);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(n);
}

static int index_set_nprobe(IndexObject *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "nprobe cannot be deleted; set it to 1");
        return -1;
    }
    long long n = PyLong_AsLongLong(value);
    if (n == -1 && PyErr_Occurred()) return -1;
    simil_status s;
    Py_BEGIN_ALLOW_THREADS
    index_lock(self, EXCLUSIVE);
    s = simil_index_set_nprobe(self->index, n);
    index_unlock(self);
    Py_END_ALLOW_THREADS
    if (s != SIMIL_OK) {
        pysimil_raise(s);
        return -1;
    }
    return 0;
}

static PyObject *index_get_metric(IndexObject *self, void *Py_UNUSED(closure))
{
    return PyUnicode_FromString(simil_metric_name(simil_index_metric(self->index)));
}

static PyObject *index_get_description(IndexObject *self, void *Py_UNUSED(closure))
{
    return PyUnicode_FromString(simil_index_description(self->index));
}

static PyObject *index_get_backend(IndexObject *self, void *Py_UNUSED(closure))
{
    return PyUnicode_FromString(simil_backend_name(self->index));
}

static PyMethodDef index_methods[] = {
    {"train", (PyCFunction)index_train, METH_O, "train(x): x float32, n x dim"},
    {"add", PYSIMIL_KW_METHOD(index_add), METH_VARARGS | METH_KEYWORDS,
     "add(vectors, ids=None): vectors float32 n x dim, ids int64 n or None"},
    {"search", PYSIMIL_KW_METHOD(index_search), METH_VARARGS | METH_KEYWORDS,
     "search(queries, k, settings=(), allow=None) -> (distances, labels); settings: (name, "
     "value) pairs; allow: sorted int64 ids or (uint8 bitset, nbits)"},
    {"search_pointers", (PyCFunction)index_search_pointers, METH_VARARGS,
     "search_pointers(queries, nq, k, settings, distances, labels, allow=None): by address"},
    {"range_search", PYSIMIL_KW_METHOD(index_range_search), METH_VARARGS | METH_KEYWORDS,
     "range_search(queries, radius, settings=(), allow=None) -> (offsets, distances, labels)"},
    {"uses_search_param", (PyCFunction)index_uses_search_param, METH_O,
     "uses_search_param(name) -> whether searches of this index read that setting"},
    {"remove", (PyCFunction)index_remove, METH_O, "remove(ids) -> number removed"},
    {"reconstruct", (PyCFunction)index_reconstruct, METH_O, "reconstruct(id) -> float32 dim"},
    {"reconstruct_batch", (PyCFunction)index_reconstruct_batch, METH_O,
     "reconstruct_batch(ids) -> float32 n x dim"},
    {"reset", (PyCFunction)index_reset, METH_NOARGS, "reset(): remove every vector"},
    {"set_batching", PYSIMIL_KW_METHOD(index_set_batching), METH_VARARGS | METH_KEYWORDS,
     "set_batching(enabled, max_wait_us=100): combine concurrent searches"},
    {"save", (PyCFunction)index_save, METH_O, "save(path): write the index atomically"},
    {"save_faiss", (PyCFunction)index_save_faiss, METH_O,
     "save_faiss(path): write the index as a Faiss index file, atomically"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef index_getset[] = {
    {"dim", (getter)index_get_dim, NULL, "vector dimension", NULL},
    {"ntotal", (getter)index_get_ntotal, NULL, "number of vectors held", NULL},
    {"is_trained", (getter)index_get_is_trained, NULL, "whether add may be called", NULL},
    {"nprobe", (getter)index_get_nprobe, (setter)index_set_nprobe,
     "inverted lists a search visits by default (0 without inverted lists)", NULL},
    {"metric", (getter)index_get_metric, NULL, "'l2', 'ip' or 'cosine'", NULL},
    {"description", (getter)index_get_description, NULL, "normalized factory string", NULL},
    {"backend", (getter)index_get_backend, NULL, "what the index runs on", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pysimil_index_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "simil._core.Index",
    .tp_doc = "Index(dim, description='Flat', metric='l2', device=None): a simil_index.",
    .tp_basicsize = sizeof(IndexObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = index_new,
    .tp_dealloc = (destructor)index_dealloc,
    .tp_methods = index_methods,
    .tp_getset = index_getset,
};
