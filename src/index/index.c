/* index.c: the public index API.  Checks every argument, prepares vectors
 * and dispatches: to the index type (index_internal.h), to index_factory.c
 * for creating, adding and destroying, and to the file formats for saving
 * and loading (a Faiss file by its magic, else a simil file). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/id_map.h"
#include "core/sq_code.h"
#include "core/trace.h"
#include "core/vectors.h"
#include "index/index_internal.h"
#include "index/search_batch.h"

/* Results of nq x k beyond this many slots are refused before any work. */
static const int64_t sml_max_result_slots = (int64_t)1 << 40;

simil_status simil_metric_parse(const char *name, simil_metric *metric)
{
    SML_RETURN_IF(name == NULL || metric == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "simil_metric_parse: NULL argument");
    if (strcmp(name, "l2") == 0 || strcmp(name, "L2") == 0) {
        *metric = SIMIL_METRIC_L2;
    } else if (strcmp(name, "ip") == 0 || strcmp(name, "IP") == 0 ||
               strcmp(name, "inner_product") == 0) {
        *metric = SIMIL_METRIC_IP;
    } else if (strcmp(name, "cosine") == 0 || strcmp(name, "cos") == 0) {
        *metric = SIMIL_METRIC_COSINE;
    } else {
        return sml_error(SIMIL_ERR_INVALID_ARGUMENT,
                         "unknown metric '%s'; use l2, ip or cosine", name);
    }
    return SIMIL_OK;
}

const char *simil_metric_name(simil_metric metric)
{
    switch (metric) {
    case SIMIL_METRIC_L2: return "l2";
    case SIMIL_METRIC_IP: return "ip";
    case SIMIL_METRIC_COSINE: return "cosine";
    }
    return "unknown";
}

simil_status simil_index_create(simil_index **index, int64_t dim, const char *description,
                                simil_metric metric, const char *device)
{
    return sml_index_new(index, dim, description, metric, device);
}

void simil_index_destroy(simil_index *index) { sml_index_free(index); }

simil_status simil_index_set_batching(simil_index *index, int enabled, int64_t max_wait_us)
{
    SML_RETURN_IF(index == NULL, SIMIL_ERR_INVALID_ARGUMENT, "set_batching: index is NULL");
    SML_RETURN_IF(max_wait_us < 0 || max_wait_us > 10000000, SIMIL_ERR_INVALID_ARGUMENT,
                  "set_batching: max_wait_us=%" PRId64 " is outside [0, 10^7]", max_wait_us);
    SML_RETURN_IF(enabled && !index->vt->batchable, SIMIL_ERR_UNSUPPORTED,
                  "set_batching: index '%s' cannot combine searches; batching is for Flat, "
                  "IVFn,Flat, IVFn,PQm and XFBQ indexes",
                  index->description);
    sml_batcher_set(index->batcher, enabled, max_wait_us);
    return SIMIL_OK;
}

#define SML_CHECK_INDEX(index) \
    SML_RETURN_IF((index) == NULL, SIMIL_ERR_INVALID_ARGUMENT, "%s: index is NULL", __func__)

/* Check caller vectors and give back the ones the index type should see:
 * x itself, or a normalized copy for cosine (*copy then owns it).  Vectors in
 * GPU memory (search queries only) are checked through a host copy; the type
 * gets that copy unless it takes GPU memory (device_io) and cosine needs no
 * normalized copy. */
static simil_status sml_prepare_vectors(const simil_index *index, int64_t n, const float *x,
                                        const char *what, const float **prepared, float **copy,
                                        int *prepared_on_device)
{
    const int host_only = !index->vt->device_io;
    *copy = NULL;
    *prepared = x;
    if (prepared_on_device != NULL) *prepared_on_device = 0;
    if (n == 0) return SIMIL_OK;
    SML_RETURN_IF(x == NULL, SIMIL_ERR_INVALID_ARGUMENT, "%s: vectors pointer is NULL", what);
    SML_RETURN_IF(!sml_product_fits(n, index->dim, SML_MAX_FLOATS), SIMIL_ERR_INVALID_ARGUMENT,
                  "%s: %" PRId64 " vectors of dimension %" PRId64 " exceed the address space",
                  what, n, index->dim);
    int cosine = index->metric == SIMIL_METRIC_COSINE;
    size_t count = (size_t)n * (size_t)index->dim;
    const float *host = x;
    const int x_on_device = sml_cuda_pointer_is_device(x);
    if (x_on_device) {
        sml_backend *b = index->backend;
        SML_RETURN_IF(b->gpu < 0 || strcmp(what, "search") != 0, SIMIL_ERR_INVALID_ARGUMENT,
                      "%s: the vectors are in GPU memory, but %s; pass host memory", what,
                      b->gpu < 0 ? "the index is on the CPU" : "only search takes GPU memory");
        SML_TRY(sml_alloc((void **)copy, count, sizeof(float), "a host copy of the queries"));
        simil_status s = b->ops->mem_download(b, *copy, x, count * sizeof(float));
        if (s != SIMIL_OK) {
            sml_free(*copy);
            *copy = NULL;
            return s;
        }
        host = *copy;
    }
    simil_status s = SIMIL_OK;
    if (cosine) {
        if (*copy == NULL)
            s = sml_alloc((void **)copy, count, sizeof(float), "normalized vectors");
        if (s == SIMIL_OK) s = sml_vectors_check_normalize(host, n, index->dim, what, 0, *copy);
        if (s == SIMIL_OK) *prepared = *copy;
    } else {
        s = sml_vectors_check(host, n, index->dim, 1, what);
    }
    if (s == SIMIL_OK && !cosine && *copy != NULL && host_only) *prepared = *copy;
    if (s != SIMIL_OK || (!cosine && *copy != NULL && !host_only)) {
        sml_free(*copy);
        *copy = NULL;
    }
    if (prepared_on_device != NULL) *prepared_on_device = x_on_device && *prepared == x;
    return s;
}

/* Whether an index's stored vectors depend on what train learns: an inverted
 * file holds them in the lists of its centroids, PQ and OPQ as codes under
 * their codebooks and rotation, SQ8 as codes in its trained ranges.  (Flat
 * XFBQ recodes its vectors when train picks a new alpha.) */
static int sml_vectors_depend_on_training(const sml_index_spec *spec)
{
    return spec->ivf_nlist > 0 || spec->encoding == SML_ENCODING_PQ || spec->opq_m > 0 ||
           (spec->encoding == SML_ENCODING_SQ && spec->sq_type == SML_SQ_8BIT);
}

simil_status simil_index_train(simil_index *index, int64_t n, const float *x)
{
    SML_CHECK_INDEX(index);
    SML_RETURN_IF(n < 0, SIMIL_ERR_INVALID_ARGUMENT, "train: n=%" PRId64 " is negative", n);
    if (index->vt->train == NULL) return SIMIL_OK;
    SML_RETURN_IF(index->ntotal > 0 && sml_vectors_depend_on_training(&index->spec),
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "train: index '%s' holds %" PRId64 " vectors, placed and encoded with its "
                  "current training, which retraining would leave unreachable; remove them "
                  "first (reset the index) or train a new index",
                  index->description, index->ntotal);
    const float *prepared;
    float *copy;
    SML_TRY(sml_prepare_vectors(index, n, x, "train", &prepared, &copy, NULL));
    simil_status s = index->vt->train(index, n, prepared);
    if (s == SIMIL_OK) index->trained = 1;
    sml_free(copy);
    return s;
}

simil_status simil_index_add(simil_index *index, int64_t n, const float *x, const int64_t *ids)
{
    SML_CHECK_INDEX(index);
    SML_RETURN_IF(n < 0, SIMIL_ERR_INVALID_ARGUMENT, "add: n=%" PRId64 " is negative", n);
    SML_RETURN_IF(!index->trained, SIMIL_ERR_NOT_TRAINED,
                  "index '%s' must be trained before vectors are added; call train first",
                  index->description);
    if (n == 0) return SIMIL_OK;
    const float *prepared;
    float *copy;
    SML_TRY(sml_prepare_vectors(index, n, x, "add", &prepared, &copy, NULL));
    simil_status s = sml_index_append(index, n, prepared, ids);
    sml_free(copy);
    return s;
}

/* Results of a search of an empty index: every slot empty.  The outputs may
 * be in GPU memory. */
static simil_status sml_fill_empty(const simil_index *index, int64_t nq, int64_t k,
                                   float *distances, int64_t *labels)
{
    float empty = index->metric == SIMIL_METRIC_L2 ? INFINITY : -INFINITY;
    size_t count = (size_t)nq * (size_t)k;
    float *d = distances;
    int64_t *l = labels;
    int on_device = sml_cuda_pointer_is_device(distances);
    if (on_device) {
        SML_TRY(sml_alloc((void **)&d, count, sizeof *d, "empty results"));
        simil_status s = sml_alloc((void **)&l, count, sizeof *l, "empty results");
        if (s != SIMIL_OK) {
            sml_free(d);
            return s;
        }
    }
    for (size_t i = 0; i < count; i++) {
        d[i] = empty;
        l[i] = -1;
    }
    simil_status s = SIMIL_OK;
    if (on_device) {
        sml_backend *b = index->backend;
        s = b->ops->mem_upload(b, distances, d, count * sizeof *d);
        if (s == SIMIL_OK) s = b->ops->mem_upload(b, labels, l, count * sizeof *l);
        sml_free(d);
        sml_free(l);
    }
    return s;
}

/* Search into host buffers, then upload the results to the caller's GPU
 * arrays: for types that write results on the host (all but device_io). */
static simil_status sml_search_staged(const simil_index *index, sml_search_call call)
{
    const size_t count = (size_t)call.nq * (size_t)call.k;
    float *out_d = call.distances, *d = NULL;
    int64_t *out_l = call.labels, *l = NULL;
    simil_status s = sml_alloc((void **)&d, count, sizeof *d, "search results");
    if (s == SIMIL_OK) s = sml_alloc((void **)&l, count, sizeof *l, "search results");
    if (s == SIMIL_OK) {
        call.distances = d;
        call.labels = l;
        s = index->vt->search(index, &call);
    }
    sml_backend *b = index->backend;
    if (s == SIMIL_OK) s = b->ops->mem_upload(b, out_d, d, count * sizeof *d);
    if (s == SIMIL_OK) s = b->ops->mem_upload(b, out_l, l, count * sizeof *l);
    sml_free(d);
    sml_free(l);
    return s;
}

/* A bitset filter must say something of every id the index may hold. */
static simil_status sml_filter_check(const simil_index *index, const sml_id_filter *f)
{
    if (f == NULL || f->bits == NULL || f->nbits >= index->next_id) return SIMIL_OK;
    if (index->next_id == INT64_MAX)
        return sml_error(SIMIL_ERR_INVALID_ARGUMENT,
                         "search: index '%s' may hold any id up to 2^63-1 (it was read from "
                         "a Faiss file), which no bitset covers; allow a list of ids instead",
                         index->description);
    return sml_error(SIMIL_ERR_INVALID_ARGUMENT,
                     "search: the allowed-ids bitset has %" PRId64 " bits, but index '%s' has "
                     "held ids up to %" PRId64 "; give one bit for each id, %" PRId64 " bits",
                     f->nbits, index->description, index->next_id - 1, index->next_id);
}

simil_status simil_index_search(const simil_index *index, int64_t nq, const float *queries,
                                int64_t k, const simil_search_params *params, float *distances,
                                int64_t *labels)
{
    SML_CHECK_INDEX(index);
    sml_trace_mark(NULL);
    SML_RETURN_IF(nq < 0, SIMIL_ERR_INVALID_ARGUMENT, "search: nq=%" PRId64 " is negative", nq);
    SML_RETURN_IF(k < 1, SIMIL_ERR_INVALID_ARGUMENT, "search: k=%" PRId64 " must be >= 1", k);
    SML_RETURN_IF(nq > 0 && k > sml_max_result_slots / nq, SIMIL_ERR_INVALID_ARGUMENT,
                  "search: nq=%" PRId64 " x k=%" PRId64 " results is beyond 2^40 slots", nq, k);
    SML_RETURN_IF(nq > 0 && (distances == NULL || labels == NULL), SIMIL_ERR_INVALID_ARGUMENT,
                  "search: distances and labels must not be NULL");
    SML_RETURN_IF(!index->trained, SIMIL_ERR_NOT_TRAINED,
                  "index '%s' is not trained; call train and add before search",
                  index->description);
    SML_RETURN_IF(index->backend->gpu < 0 && nq > 0 &&
                      (sml_cuda_pointer_is_device(distances) || sml_cuda_pointer_is_device(labels)),
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "search: the outputs are in GPU memory, but the index is on the CPU");
    sml_search_call call = {.nq = nq, .k = k, .distances = distances, .labels = labels};
    call.params = params != NULL ? *params : *sml_search_defaults();
    /* a search that does not set nprobe visits the index's default (saved
     * with it, or read from a Faiss file) */
    if (!sml_search_param_given(&call.params, "nprobe") && index->nprobe > 0)
        call.params.nprobe = index->nprobe;
    SML_TRY(sml_filter_check(index, call.params.allow));
    /* an inverted file probes min(nprobe, nlist) lists per query */
    const int64_t probes = call.params.nprobe < index->spec.ivf_nlist ? call.params.nprobe
                                                                       : index->spec.ivf_nlist;
    SML_RETURN_IF(!sml_product_fits(nq, probes, sml_max_result_slots), SIMIL_ERR_INVALID_ARGUMENT,
                  "search: nq=%" PRId64 " x %" PRId64 " probed lists is beyond 2^40; search "
                  "fewer queries at a time",
                  nq, probes);
    if (nq == 0) return SIMIL_OK;
    const int on_device = sml_cuda_pointer_is_device(distances);
    SML_RETURN_IF(on_device != sml_cuda_pointer_is_device(labels), SIMIL_ERR_INVALID_ARGUMENT,
                  "search: distances and labels must both be in host or both in GPU memory");
    /* queries are checked (NaN, norms) also when the index is empty */
    float *copy;
    int queries_on_device;
    SML_TRY(sml_prepare_vectors(index, nq, queries, "search", &call.queries, &copy,
                                &queries_on_device));
    /* asked once here; the backends take the answers (sml_knn_args) */
    call.queries_host = !queries_on_device;
    call.outputs_host = !on_device;
    sml_trace_mark("search: checks and query preparation");
    simil_status s;
    if (index->ntotal == 0)
        s = sml_fill_empty(index, nq, k, distances, labels);
    else if (on_device && !index->vt->device_io)
        s = sml_search_staged(index, call);
    else if (!on_device && (index->backend->gpu < 0 || !index->vt->device_io ||
                            !queries_on_device))
        s = sml_batcher_search(index->batcher, index, &call);
    else
        s = index->vt->search(index, &call);
    sml_free(copy);
    sml_trace_mark("search: the rest");
    return s;
}

simil_status simil_index_remove(simil_index *index, int64_t n, const int64_t *ids,
                                int64_t *removed)
{
    SML_CHECK_INDEX(index);
    if (removed != NULL) *removed = 0;
    SML_RETURN_IF(n < 0, SIMIL_ERR_INVALID_ARGUMENT, "remove: n=%" PRId64 " is negative", n);
    SML_RETURN_IF(n > 0 && ids == NULL, SIMIL_ERR_INVALID_ARGUMENT, "remove: ids is NULL");
    if (n == 0 || index->ntotal == 0) return SIMIL_OK;
    int64_t *sorted;
    SML_TRY(sml_alloc((void **)&sorted, (size_t)n, sizeof *sorted, "ids to remove"));
    memcpy(sorted, ids, (size_t)n * sizeof *sorted);
    sml_ids_sort(sorted, n);
    int64_t unique = 0;
    for (int64_t i = 0; i < n; i++)
        if (unique == 0 || sorted[unique - 1] != sorted[i]) sorted[unique++] = sorted[i];
    int64_t count = 0;
    simil_status s = index->vt->remove(index, unique, sorted, &count);
    if (s == SIMIL_OK) {
        index->ntotal -= count;
        if (removed != NULL) *removed = count;
    }
    sml_free(sorted);
    return s;
}

simil_status simil_index_reconstruct(const simil_index *index, int64_t id, float *out)
{
    SML_CHECK_INDEX(index);
    SML_RETURN_IF(out == NULL, SIMIL_ERR_INVALID_ARGUMENT, "reconstruct: out is NULL");
    return index->vt->reconstruct(index, id, out);
}

simil_status simil_index_reset(simil_index *index)
{
    SML_CHECK_INDEX(index);
    index->vt->reset(index);
    index->ntotal = 0;
    return SIMIL_OK;
}

simil_status simil_index_set_nprobe(simil_index *index, int64_t nprobe)
{
    SML_CHECK_INDEX(index);
    SML_RETURN_IF(index->spec.ivf_nlist == 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "nprobe: index '%s' has no inverted lists", index->description);
    SML_RETURN_IF(nprobe < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "nprobe=%" PRId64 " must be >= 1 (or 0 for the default, 1)",
                  nprobe);
    index->nprobe = nprobe;
    return SIMIL_OK;
}

int64_t simil_index_nprobe(const simil_index *index)
{
    if (index == NULL || index->spec.ivf_nlist == 0) return 0;
    return index->nprobe > 0 ? index->nprobe : 1;
}

int64_t simil_index_size(const simil_index *index) { return index ? index->ntotal : 0; }
int64_t simil_index_dim(const simil_index *index) { return index ? index->dim : 0; }

simil_metric simil_index_metric(const simil_index *index)
{
    return index ? index->metric : SIMIL_METRIC_L2;
}

int simil_index_is_trained(const simil_index *index) { return index ? index->trained : 0; }

const char *simil_index_description(const simil_index *index)
{
    return index ? index->description : "";
}

const char *simil_backend_name(const simil_index *index)
{
    return index ? index->backend->name : "";
}

simil_status simil_index_save(const simil_index *index, const char *path)
{
    SML_CHECK_INDEX(index);
    SML_RETURN_IF(path == NULL, SIMIL_ERR_INVALID_ARGUMENT, "save: path is NULL");
    return sml_index_file_save(index, path);
}

simil_status simil_index_load(simil_index **index, const char *path, const char *device)
{
    SML_RETURN_IF(index == NULL || path == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "load: index and path must not be NULL");
    *index = NULL;
    if (sml_faiss_file(path)) return sml_faiss_load(path, device, index);
    return sml_index_file_load(index, path, device);
}

int simil_gpu_count(void) { return sml_cuda_device_count(); }

simil_status simil_gpu_memory(int gpu, size_t *free_bytes, size_t *total_bytes)
{
    SML_RETURN_IF(free_bytes == NULL || total_bytes == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "gpu_memory: NULL argument");
    return sml_cuda_memory_info(gpu, free_bytes, total_bytes);
}

int simil_built_with_cuda(void) { return sml_cuda_built(); }
