/* index_ivf_sq.c: "IVFn,SQ8", "IVFn,SQfp16", "IVFn,SQbf16", an inverted file
 * of scalar codes (Faiss's IndexIVFScalarQuantizer with by_residual).
 *
 * Each vector goes to the list of its nearest centroid (ivf.h) and is stored
 * as the code of its residual x - c (algo/sq.h): SQ8's ranges are trained on
 * the residuals of the training set, so they span a list's spread, not the
 * data's.  The scan keys a row with the query and c + the decoded residual
 * (sml_sq_scan_args.coarse), as Faiss does.
 *
 * A Faiss IndexIVFScalarQuantizer with by_residual = false (read from a Faiss
 * file) codes the vectors themselves: such an index (by_residual = 0) trains
 * its ranges on, encodes and decodes the vectors as they are, and its scans
 * key the decoded rows alone (coarse NULL, as flat SQ's: every backend). */
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/progress.h"
#include "index/index_sq.h"
#include "index/ivf.h"

/* an empty section before SQPR: the codes are not of residuals */
static const uint32_t sml_tag_no_residual = SML_TAG('S', 'Q', 'N', 'R');

typedef struct sml_ivf_sq {
    sml_ivf ivf;
    sml_sq_params sq;
    int by_residual; /* 0: codes of the vectors, not of their residuals */
} sml_ivf_sq;

static sml_ivf_sq *sml_ivf_sq_of(const simil_index *index) { return index->impl; }

/* A fresh quantizer and ranges, swapped in when both are trained. */
static simil_status sml_ivf_sq_train(simil_index *index, int64_t n, const float *x)
{
    sml_ivf_sq *v = sml_ivf_sq_of(index);
    sml_backend *b = index->backend;
    sml_ivf next;
    sml_sq_params sq;
    sml_sq_params_init(&sq, v->sq.type, index->dim);
    int64_t *lists = NULL;
    float *res = NULL;
    SML_TRY(sml_ivf_init(&next, v->ivf.nlist, index->dim, v->ivf.metric, v->ivf.spherical,
                         v->ivf.code_size));
    simil_status s = sml_ivf_train(b, &next, n, x);
    if (s == SIMIL_OK) s = sml_alloc((void **)&lists, (size_t)n, sizeof *lists, "list assignments");
    if (s == SIMIL_OK) s = sml_alloc((void **)&res, (size_t)(n * index->dim), sizeof *res, "residuals");
    if (s == SIMIL_OK && v->by_residual) s = sml_ivf_probe(b, &next, n, x, 1, lists);
    if (s == SIMIL_OK) {
        if (v->by_residual) sml_ivf_residuals(&next, n, x, lists, res);
        else /* codes of the vectors: the ranges span the vectors as they are */
            memcpy(res, x, sizeof *res * (size_t)(n * index->dim));
        s = sml_sq_params_train(b, &sq, n, res);
    }
    if (s == SIMIL_OK) {
        sml_ivf_swap_quantizer(&v->ivf, &next);
        sml_sq_params tmp = v->sq;
        v->sq = sq;
        sq = tmp;
    }
    sml_sq_params_free(b, &sq);
    sml_ivf_free(b, &next);
    sml_free(res);
    sml_free(lists);
    return s;
}

/* The lists are appended once at the end so that a failure leaves the index
 * unchanged. */
static simil_status sml_ivf_sq_add(simil_index *index, int64_t n, const float *x,
                                   const int64_t *ids)
{
    sml_ivf_sq *v = sml_ivf_sq_of(index);
    const int64_t dim = index->dim;
    const int64_t chunk = n < ((int64_t)1 << 16) ? n : (int64_t)1 << 16;
    int64_t *lists = NULL;
    uint8_t *codes = NULL;
    float *res = NULL;
    simil_status s = sml_alloc((void **)&lists, (size_t)n, sizeof *lists, "list assignments");
    if (s == SIMIL_OK) s = sml_alloc((void **)&codes, (size_t)n, v->ivf.code_size, "codes");
    if (s == SIMIL_OK) s = sml_alloc((void **)&res, (size_t)(chunk * dim), sizeof *res, "residuals");
    for (int64_t i = 0; i < n && s == SIMIL_OK; i += chunk) {
        const int64_t m = n - i < chunk ? n - i : chunk;
        s = sml_ivf_probe(index->backend, &v->ivf, m, x + i * dim, 1, lists + i);
        if (s != SIMIL_OK) break;
        const float *rows = x + i * dim;
        if (v->by_residual) {
            sml_ivf_residuals(&v->ivf, m, rows, lists + i, res);
            rows = res;
        }
        sml_sq_params_encode(&v->sq, m, rows, codes + (size_t)i * v->ivf.code_size);
        sml_progress("add", i + m, n);
    }
    if (s == SIMIL_OK) s = sml_ivf_append(index->backend, &v->ivf, n, lists, codes, ids);
    sml_free(res);
    sml_free(codes);
    sml_free(lists);
    return s;
}

static simil_status sml_ivf_sq_search(const simil_index *index, const sml_search_call *call)
{
    const sml_ivf_sq *v = sml_ivf_sq_of(index);
    const sml_ivf_scan_args scan = sml_ivf_scan_of(&v->ivf, call);
    return sml_sq_search(index, &v->sq, &scan, v->by_residual ? v->ivf.centroids_mem : NULL);
}

static simil_status sml_ivf_sq_remove(simil_index *index, int64_t n_sorted,
                                      const int64_t *sorted, int64_t *removed)
{
    return sml_ivf_remove(index->backend, &sml_ivf_sq_of(index)->ivf, n_sorted, sorted, removed);
}

/* The centroid of the row's list plus its decoded residual (or the decoded
 * vector). */
static simil_status sml_ivf_sq_reconstruct(const simil_index *index, int64_t id, float *out)
{
    const sml_ivf_sq *v = sml_ivf_sq_of(index);
    const int64_t at = sml_ivf_find(&v->ivf, id);
    SML_RETURN_IF(at < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "reconstruct: id %" PRId64 " is not in the index", id);
    sml_backend *b = index->backend;
    uint8_t *code;
    SML_TRY(sml_alloc((void **)&code, 1, v->ivf.code_size, "a code"));
    simil_status s = b->ops->mem_download(b, code, v->ivf.codes_mem + (size_t)at * v->ivf.code_size,
                                          v->ivf.code_size);
    if (s == SIMIL_OK) {
        sml_sq_decode_row(v->sq.type, index->dim, code, v->sq.vmin, v->sq.vdiff, out);
    }
    if (s == SIMIL_OK && v->by_residual) {
        const float *c = v->ivf.centroids + sml_ivf_list_of(&v->ivf, at) * index->dim;
        for (int64_t t = 0; t < index->dim; t++) out[t] += c[t];
    }
    sml_free(code);
    return s;
}

static void sml_ivf_sq_ids(const simil_index *index, int64_t *out)
{
    sml_ivf_ids(&sml_ivf_sq_of(index)->ivf, out);
}

static void sml_ivf_sq_reset(simil_index *index)
{
    sml_ivf_reset(index->backend, &sml_ivf_sq_of(index)->ivf);
}

/* Sections SQNR (codes of the vectors only, empty), SQPR (index_sq.h), then
 * the inverted file's (ivf.h). */
static simil_status sml_ivf_sq_save(const simil_index *index, sml_writer *w)
{
    const sml_ivf_sq *v = sml_ivf_sq_of(index);
    if (!index->trained) return SIMIL_OK; /* nothing but the header to keep */
    if (!v->by_residual) SML_TRY(sml_section_write(w, sml_tag_no_residual, NULL, 0));
    SML_TRY(sml_sq_params_save(&v->sq, w));
    return sml_ivf_save(index->backend, &v->ivf, w);
}

static simil_status sml_ivf_sq_load(simil_index *index, sml_reader *r)
{
    sml_ivf_sq *v = sml_ivf_sq_of(index);
    if (!index->trained) {
        SML_RETURN_IF(index->ntotal != 0, SIMIL_ERR_CORRUPT,
                      "'%s' is damaged: an untrained index with vectors", r->path);
        return SIMIL_OK;
    }
    uint32_t tag = 0;
    if (r->size - r->offset >= sizeof tag) {
        SML_TRY(sml_reader_read(r, &tag, sizeof tag));
        SML_TRY(sml_reader_seek(r, r->offset - sizeof tag));
    }
    if (tag == sml_tag_no_residual) {
        uint64_t bytes;
        SML_TRY(sml_section_open(r, sml_tag_no_residual, &bytes));
        SML_TRY(sml_section_close(r));
        v->by_residual = 0;
    }
    SML_TRY(sml_sq_params_load(index->backend, &v->sq, r));
    SML_RETURN_IF(sml_sq_needs_training(v->sq.type) && v->sq.vmin == NULL, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: a trained IVF-SQ8 index without its ranges", r->path);
    return sml_ivf_load(index->backend, &v->ivf, r, index->ntotal, index->next_id);
}

static void sml_ivf_sq_destroy(simil_index *index)
{
    sml_ivf_sq *v = sml_ivf_sq_of(index);
    sml_ivf_free(index->backend, &v->ivf);
    sml_sq_params_free(index->backend, &v->sq);
    sml_free(v);
}

static const sml_index_vtable sml_ivf_sq_vtable = {
    .train = sml_ivf_sq_train,
    .add = sml_ivf_sq_add,
    .search = sml_ivf_sq_search,
    .remove = sml_ivf_sq_remove,
    .reconstruct = sml_ivf_sq_reconstruct,
    .ids = sml_ivf_sq_ids,
    .reset = sml_ivf_sq_reset,
    .save = sml_ivf_sq_save,
    .load = sml_ivf_sq_load,
    .destroy = sml_ivf_sq_destroy,
};

simil_status sml_ivf_sq_init(simil_index *index)
{
    sml_ivf_sq *v;
    SML_TRY(sml_calloc((void **)&v, 1, sizeof *v, "an IVF-SQ index"));
    const sml_sq_type type = (sml_sq_type)index->spec.sq_type;
    sml_sq_params_init(&v->sq, type, index->dim);
    v->by_residual = 1;
    simil_status s = sml_ivf_init(&v->ivf, index->spec.ivf_nlist, index->dim,
                                  sml_kernel_metric(index->metric),
                                  index->metric == SIMIL_METRIC_COSINE,
                                  sml_sq_stride(type, index->dim));
    if (s != SIMIL_OK) {
        sml_free(v);
        return s;
    }
    index->impl = v;
    index->vt = &sml_ivf_sq_vtable;
    index->trained = 0;
    return SIMIL_OK;
}

/* For Faiss files (faiss_read.c). */
sml_sq_params *sml_ivf_sq_params(simil_index *index) { return &sml_ivf_sq_of(index)->sq; }
sml_ivf *sml_ivf_sq_ivf(simil_index *index) { return &sml_ivf_sq_of(index)->ivf; }
void sml_ivf_sq_set_by_residual(simil_index *index, int by_residual)
{
    sml_ivf_sq_of(index)->by_residual = by_residual;
}
