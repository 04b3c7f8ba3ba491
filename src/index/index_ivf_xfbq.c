/* index_ivf_xfbq.c: "IVFn,XFBQ[QxB]", an inverted file of XFBQ rows
 * (index_xfbq_common.h).  Each vector is one row of the inverted-list arena
 * (ivf.h): its code, then its floats, then padding (xfbq.h), so that rows
 * move with their lists.  A search probes the nprobe nearest lists of each
 * query (a call parameter, default 1, clamped to nlist), found by the backend
 * where the scan runs; storage and files are the same on the CPU and the
 * GPU. */
#include "core/alloc.h"
#include "core/error.h"
#include "core/progress.h"
#include "index/index_xfbq_common.h"
#include "index/ivf.h"

typedef struct sml_ivf_xfbq {
    sml_xfbq_base base;  /* first: index_xfbq_common.c reads it */
    sml_ivf ivf;         /* rows of base.q.row_size bytes */
} sml_ivf_xfbq;

static sml_ivf_xfbq *sml_ivf_xfbq_of(const simil_index *index) { return index->impl; }

/* A copy of the arena with the rows of every list recoded for q's alpha,
 * swapped in. */
static simil_status sml_ivf_xfbq_recode(simil_index *index, const sml_xfbq *q)
{
    sml_ivf_xfbq *x = sml_ivf_xfbq_of(index);
    sml_backend *b = index->backend;
    const sml_ivf *ivf = &x->ivf;
    const size_t rs = q->row_size;
    uint8_t *fresh = NULL, *buf = NULL;
    SML_TRY(b->ops->mem_alloc(b, (size_t)(ivf->capacity > 0 ? ivf->capacity : 1) * rs,
                              (void **)&fresh));
    simil_status s = b->ops->mem_copy(b, fresh, ivf->codes_mem, (size_t)ivf->capacity * rs);
    if (s == SIMIL_OK) s = sml_alloc((void **)&buf, (size_t)SML_XFBQ_CHUNK, rs, "rows to recode");
    /* (an untrained IVF has no lists yet) */
    for (int64_t l = 0; ivf->size != NULL && l < ivf->nlist && s == SIMIL_OK; l++) {
        for (int64_t r = 0; r < ivf->size[l] && s == SIMIL_OK; r += SML_XFBQ_CHUNK) {
            const int64_t m = ivf->size[l] - r < SML_XFBQ_CHUNK ? ivf->size[l] - r : SML_XFBQ_CHUNK;
            uint8_t *at = fresh + (size_t)(ivf->offset[l] + r) * rs;
            s = b->ops->mem_download(b, buf, at, (size_t)m * rs);
            if (s == SIMIL_OK)
                s = sml_xfbq_code_rows(&x->base, q, m, (const float *)(buf + q->code_bytes), rs,
                                       (uint64_t *)buf, rs);
            if (s == SIMIL_OK) s = b->ops->mem_upload(b, at, buf, (size_t)m * rs);
        }
    }
    sml_free(buf);
    if (s != SIMIL_OK) {
        b->ops->mem_free(b, fresh);
        return s;
    }
    b->ops->mem_free(b, x->ivf.codes_mem);
    x->ivf.codes_mem = fresh;
    return SIMIL_OK;
}

/* The coarse quantizer is trained beside the current one and swapped in
 * once alpha is set too, so a failure leaves the index as it was. */
static simil_status sml_ivf_xfbq_train(simil_index *index, int64_t n, const float *xs)
{
    sml_ivf_xfbq *x = sml_ivf_xfbq_of(index);
    sml_backend *b = index->backend;
    sml_ivf next;
    SML_TRY(sml_ivf_init(&next, x->ivf.nlist, x->ivf.dim, x->ivf.metric, x->ivf.spherical,
                         x->ivf.code_size));
    simil_status s = sml_ivf_train(b, &next, n, xs);
    if (s == SIMIL_OK && n > 0) s = sml_xfbq_pick_alpha(index, n, xs);
    if (s == SIMIL_OK) sml_ivf_swap_quantizer(&x->ivf, &next);
    sml_ivf_free(b, &next);
    return s;
}

static simil_status sml_ivf_xfbq_append(simil_index *index, int64_t n, const float *xs,
                                        const int64_t *ids)
{
    sml_ivf_xfbq *x = sml_ivf_xfbq_of(index);
    sml_backend *b = index->backend;
    int64_t *lists = NULL;
    uint8_t *rows = NULL;
    simil_status s = sml_alloc((void **)&lists, (size_t)n, sizeof *lists, "list assignments");
    if (s == SIMIL_OK) s = sml_alloc((void **)&rows, (size_t)n, x->base.q.row_size, "XFBQ rows");
    const int64_t chunk = (int64_t)1 << 18;
    for (int64_t i = 0; i < n && s == SIMIL_OK; i += chunk) {
        const int64_t m = n - i < chunk ? n - i : chunk;
        uint8_t *at = rows + (size_t)i * x->base.q.row_size;
        s = sml_ivf_probe(b, &x->ivf, m, xs + i * index->dim, 1, lists + i);
        sml_xfbq_make_rows(&x->base.q, m, xs + i * index->dim, x->base.normalize, at);
        /* with RR the codes again, of the rotated floats */
        if (s == SIMIL_OK && x->base.rotation != NULL)
            s = sml_xfbq_code_rows(&x->base, &x->base.q, m,
                                   (const float *)(at + x->base.q.code_bytes),
                                   x->base.q.row_size, (uint64_t *)at, x->base.q.row_size);
        sml_progress("add", i + m, n);
    }
    if (s == SIMIL_OK) s = sml_ivf_append(b, &x->ivf, n, lists, rows, ids);
    sml_free(rows);
    sml_free(lists);
    return s;
}

static simil_status sml_ivf_xfbq_add(simil_index *index, int64_t n, const float *xs,
                                     const int64_t *ids)
{
    return sml_xfbq_add_with(index, n, xs, ids, sml_ivf_xfbq_append);
}

/* The backend finds the probes (sml_ivf_scan_of); rows hold the floats after
 * their codes. */
static simil_status sml_ivf_xfbq_search(const simil_index *index, const sml_search_call *call)
{
    const sml_ivf_xfbq *x = sml_ivf_xfbq_of(index);
    const sml_ivf_scan_args scan = sml_ivf_scan_of(&x->ivf, call);
    return sml_xfbq_search(index, call, scan,
                           (const float *)(x->ivf.codes_mem + x->base.q.code_bytes),
                           x->base.q.row_size, NULL);
}

static simil_status sml_ivf_xfbq_remove(simil_index *index, int64_t n_sorted,
                                        const int64_t *sorted, int64_t *removed)
{
    return sml_ivf_remove(index->backend, &sml_ivf_xfbq_of(index)->ivf, n_sorted, sorted,
                          removed);
}

/* The stored floats of the first row with this id. */
static simil_status sml_ivf_xfbq_reconstruct(const simil_index *index, int64_t id, float *out)
{
    const sml_ivf_xfbq *x = sml_ivf_xfbq_of(index);
    const int64_t at = sml_ivf_find(&x->ivf, id);
    SML_RETURN_IF(at < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "reconstruct: id %" PRId64 " is not in the index", id);
    sml_backend *b = index->backend;
    return b->ops->mem_download(
        b, out, x->ivf.codes_mem + (size_t)at * x->base.q.row_size + x->base.q.code_bytes,
        (size_t)index->dim * sizeof(float));
}

static void sml_ivf_xfbq_ids(const simil_index *index, int64_t *out)
{
    sml_ivf_ids(&sml_ivf_xfbq_of(index)->ivf, out);
}

static void sml_ivf_xfbq_reset(simil_index *index)
{
    sml_ivf_reset(index->backend, &sml_ivf_xfbq_of(index)->ivf);
}

/* Section XFBQ (index_xfbq_common.c), then the inverted file once trained. */
static simil_status sml_ivf_xfbq_save(const simil_index *index, sml_writer *w)
{
    SML_TRY(sml_xfbq_save_params(index, w));
    if (!index->trained) return SIMIL_OK;
    return sml_ivf_save(index->backend, &sml_ivf_xfbq_of(index)->ivf, w);
}

/* On a fresh index whose counters the header gave; on failure the caller
 * destroys the index. */
static simil_status sml_ivf_xfbq_load(simil_index *index, sml_reader *r)
{
    SML_TRY(sml_xfbq_load_params(index, r));
    if (!index->trained) {
        SML_RETURN_IF(index->ntotal != 0, SIMIL_ERR_CORRUPT,
                      "'%s' is damaged: an untrained index with vectors", r->path);
        return SIMIL_OK;
    }
    return sml_ivf_load(index->backend, &sml_ivf_xfbq_of(index)->ivf, r, index->ntotal,
                        index->next_id);
}

static void sml_ivf_xfbq_destroy(simil_index *index)
{
    sml_ivf_free(index->backend, &sml_ivf_xfbq_of(index)->ivf);
    sml_xfbq_base_free(&sml_ivf_xfbq_of(index)->base, index->backend);
    sml_free(index->impl);
}

static const sml_index_vtable sml_ivf_xfbq_vtable = {
    .train = sml_ivf_xfbq_train,
    .add = sml_ivf_xfbq_add,
    .search = sml_ivf_xfbq_search,
    .remove = sml_ivf_xfbq_remove,
    .reconstruct = sml_ivf_xfbq_reconstruct,
    .ids = sml_ivf_xfbq_ids,
    .reset = sml_ivf_xfbq_reset,
    .save = sml_ivf_xfbq_save,
    .load = sml_ivf_xfbq_load,
    .destroy = sml_ivf_xfbq_destroy,
    .batchable = 1,
};

simil_status sml_ivf_xfbq_init(simil_index *index)
{
    sml_ivf_xfbq *x;
    SML_TRY(sml_calloc((void **)&x, 1, sizeof *x, "an XFBQ index"));
    simil_status s = sml_xfbq_base_init(&x->base, index, sml_ivf_xfbq_recode);
    if (s == SIMIL_OK)
        s = sml_ivf_init(&x->ivf, index->spec.ivf_nlist, index->dim,
                         sml_kernel_metric(index->metric), index->metric == SIMIL_METRIC_COSINE,
                         x->base.q.row_size);
    if (s != SIMIL_OK) {
        sml_xfbq_base_free(&x->base, index->backend);
        sml_free(x);
        return s;
    }
    index->impl = x;
    index->vt = &sml_ivf_xfbq_vtable;
    /* the coarse quantizer needs training first */
    index->trained = 0;
    return SIMIL_OK;
}
