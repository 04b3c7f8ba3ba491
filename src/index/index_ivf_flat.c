/* index_ivf_flat.c: "IVFn,Flat", an inverted file of float vectors (the GPU
 * paper's IVF baseline).
 *
 * Training runs k-means for the coarse quantizer (spherical for cosine);
 * add sends each vector to the list of its nearest centroid; search probes
 * the nprobe nearest lists of each query (a call parameter, default 1 as in
 * Faiss, clamped to nlist) and computes exact distances to every vector in
 * them on the backend (ivf_flat_scan).  nprobe = nlist is exact search. */
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/progress.h"
#include "index/index_internal.h"
#include "index/ivf.h"

static sml_ivf *sml_ivf_flat(const simil_index *index) { return index->impl; }

static simil_status sml_ivf_flat_train(simil_index *index, int64_t n, const float *x)
{
    return sml_ivf_train(index->backend, sml_ivf_flat(index), n, x);
}

static simil_status sml_ivf_flat_add(simil_index *index, int64_t n, const float *x,
                                     const int64_t *ids)
{
    sml_ivf *ivf = sml_ivf_flat(index);
    /* in chunks, for progress; the lists are appended once at the end so that
     * a failure leaves the index unchanged */
    int64_t *lists;
    SML_TRY(sml_alloc((void **)&lists, (size_t)n, sizeof *lists, "list assignments"));
    const int64_t chunk = (int64_t)1 << 18;
    simil_status s = SIMIL_OK;
    for (int64_t i = 0; i < n && s == SIMIL_OK; i += chunk) {
        int64_t m = n - i < chunk ? n - i : chunk;
        s = sml_ivf_probe(index->backend, ivf, m, x + i * index->dim, 1, lists + i);
        sml_progress("add", i + m, n);
    }
    if (s == SIMIL_OK) s = sml_ivf_append(index->backend, ivf, n, lists, x, ids);
    sml_free(lists);
    return s;
}

static simil_status sml_ivf_flat_search(const simil_index *index, const sml_search_call *call)
{
    /* the backend finds the probes (and, on a GPU, uploads the queries once
     * for the coarse search and the scan) */
    const sml_ivf_scan_args args = sml_ivf_scan_of(sml_ivf_flat(index), call);
    return index->backend->ops->ivf_flat_scan(index->backend, &args);
}

static simil_status sml_ivf_flat_remove(simil_index *index, int64_t n_sorted,
                                        const int64_t *sorted, int64_t *removed)
{
    return sml_ivf_remove(index->backend, sml_ivf_flat(index), n_sorted, sorted, removed);
}

static simil_status sml_ivf_flat_reconstruct(const simil_index *index, int64_t id, float *out)
{
    const sml_ivf *ivf = sml_ivf_flat(index);
    int64_t at = sml_ivf_find(ivf, id);
    SML_RETURN_IF(at < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "reconstruct: id %" PRId64 " is not in the index", id);
    sml_backend *b = index->backend;
    return b->ops->mem_download(b, out, ivf->codes_mem + (size_t)at * ivf->code_size,
                                ivf->code_size);
}

static void sml_ivf_flat_reset(simil_index *index)
{
    sml_ivf_reset(index->backend, sml_ivf_flat(index));
}

static simil_status sml_ivf_flat_save(const simil_index *index, sml_writer *w)
{
    if (!index->trained) return SIMIL_OK; /* nothing but the header to keep */
    return sml_ivf_save(index->backend, sml_ivf_flat(index), w);
}

static simil_status sml_ivf_flat_load(simil_index *index, sml_reader *r)
{
    if (!index->trained) {
        SML_RETURN_IF(index->ntotal != 0, SIMIL_ERR_CORRUPT,
                      "'%s' is damaged: an untrained index with vectors", r->path);
        return SIMIL_OK;
    }
    return sml_ivf_load(index->backend, sml_ivf_flat(index), r, index->ntotal, index->next_id);
}

static void sml_ivf_flat_ids(const simil_index *index, int64_t *out)
{
    sml_ivf_ids(sml_ivf_flat(index), out);
}

static void sml_ivf_flat_destroy(simil_index *index)
{
    sml_ivf_free(index->backend, sml_ivf_flat(index));
    sml_free(index->impl);
}

static const sml_index_vtable sml_ivf_flat_vtable = {
    .train = sml_ivf_flat_train,
    .add = sml_ivf_flat_add,
    .search = sml_ivf_flat_search,
    .remove = sml_ivf_flat_remove,
    .reconstruct = sml_ivf_flat_reconstruct,
    .ids = sml_ivf_flat_ids,
    .reset = sml_ivf_flat_reset,
    .save = sml_ivf_flat_save,
    .load = sml_ivf_flat_load,
    .destroy = sml_ivf_flat_destroy,
    .batchable = 1,
};

simil_status sml_ivf_flat_init(simil_index *index)
{
    sml_ivf *ivf;
    SML_TRY(sml_alloc((void **)&ivf, 1, sizeof *ivf, "an IVF index"));
    simil_status s = sml_ivf_init(ivf, index->spec.ivf_nlist, index->dim,
                                  sml_kernel_metric(index->metric),
                                  index->metric == SIMIL_METRIC_COSINE,
                                  (size_t)index->dim * sizeof(float));
    if (s != SIMIL_OK) {
        sml_free(ivf);
        return s;
    }
    index->impl = ivf;
    index->vt = &sml_ivf_flat_vtable;
    index->trained = 0;
    return SIMIL_OK;
}
