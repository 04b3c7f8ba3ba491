/* index_sq.c: "SQ8", "SQfp16", "SQbf16", exhaustive search over scalar
 * codes (algo/sq.h), and the parts every SQ type shares (index_sq.h).
 *
 * The codes live in a row store (row_store.h) that the scan streams as a
 * single list, with the ids beside them; storage is the same on the CPU and
 * the GPU, and so are files.  SQ8 must be trained (its ranges); the half
 * types take vectors at once.  Keys are those of the query and the decoded
 * rows, as in Faiss's IndexScalarQuantizer. */
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/progress.h"
#include "index/index_sq.h"
#include "index/row_store.h"

/* ---- the shared parts (index_sq.h) ---- */

void sml_sq_params_init(sml_sq_params *p, sml_sq_type type, int64_t dim)
{
    memset(p, 0, sizeof *p);
    p->type = type;
    p->dim = dim;
}

void sml_sq_params_free(sml_backend *b, sml_sq_params *p)
{
    sml_free(p->vmin);
    sml_free(p->vdiff);
    if (p->vmin_mem) b->ops->mem_free(b, p->vmin_mem);
    if (p->vdiff_mem) b->ops->mem_free(b, p->vdiff_mem);
    p->vmin = p->vdiff = p->vmin_mem = p->vdiff_mem = NULL;
}

/* Host arrays for ranges of dim dimensions: both or neither. */
static simil_status sml_sq_ranges_alloc(int64_t dim, float **vmin, float **vdiff)
{
    *vdiff = NULL;
    SML_TRY(sml_alloc((void **)vmin, (size_t)dim, sizeof **vmin, "SQ ranges"));
    const simil_status s = sml_alloc((void **)vdiff, (size_t)dim, sizeof **vdiff, "SQ ranges");
    if (s != SIMIL_OK) {
        sml_free(*vmin);
        *vmin = NULL;
    }
    return s;
}

/* Take vmin and vdiff (host, owned) as the ranges: uploaded, then swapped in. */
static simil_status sml_sq_params_adopt(sml_backend *b, sml_sq_params *p, float *vmin,
                                        float *vdiff)
{
    const size_t bytes = (size_t)p->dim * sizeof(float);
    sml_sq_params next = *p;
    next.vmin = vmin;
    next.vdiff = vdiff;
    next.vmin_mem = next.vdiff_mem = NULL;
    simil_status s = b->ops->mem_alloc(b, bytes, (void **)&next.vmin_mem);
    if (s == SIMIL_OK) s = b->ops->mem_alloc(b, bytes, (void **)&next.vdiff_mem);
    if (s == SIMIL_OK) s = b->ops->mem_upload(b, next.vmin_mem, vmin, bytes);
    if (s == SIMIL_OK) s = b->ops->mem_upload(b, next.vdiff_mem, vdiff, bytes);
    if (s != SIMIL_OK) {
        sml_sq_params_free(b, &next);
        return s;
    }
    sml_sq_params_free(b, p);
    *p = next;
    return SIMIL_OK;
}

simil_status sml_sq_params_set(sml_backend *b, sml_sq_params *p, const float *vmin_in,
                               const float *vdiff_in)
{
    if (!sml_sq_needs_training(p->type)) return SIMIL_OK;
    float *vmin, *vdiff;
    SML_TRY(sml_sq_ranges_alloc(p->dim, &vmin, &vdiff));
    memcpy(vmin, vmin_in, (size_t)p->dim * sizeof *vmin);
    memcpy(vdiff, vdiff_in, (size_t)p->dim * sizeof *vdiff);
    return sml_sq_params_adopt(b, p, vmin, vdiff);
}

simil_status sml_sq_params_train(sml_backend *b, sml_sq_params *p, int64_t n, const float *x)
{
    if (!sml_sq_needs_training(p->type)) return SIMIL_OK;
    SML_RETURN_IF(n < 1, SIMIL_ERR_INVALID_ARGUMENT,
                  "train: SQ8 learns the range of each dimension from at least 1 vector, got 0");
    float *vmin, *vdiff;
    SML_TRY(sml_sq_ranges_alloc(p->dim, &vmin, &vdiff));
    sml_sq_train(n, p->dim, x, vmin, vdiff);
    return sml_sq_params_adopt(b, p, vmin, vdiff);
}

void sml_sq_params_encode(const sml_sq_params *p, int64_t n, const float *x, uint8_t *codes)
{
    sml_sq_encode(p->type, p->dim, n, x, p->vmin, p->vdiff, codes, sml_sq_stride(p->type, p->dim));
}

simil_status sml_sq_search(const simil_index *index, const sml_sq_params *p,
                           const sml_ivf_scan_args *scan, const float *coarse_mem)
{
    sml_backend *b = index->backend;
    const sml_sq_scan_args args = {
        .scan = *scan,
        .type = (int)p->type,
        .vmin = p->vmin_mem,
        .vdiff = p->vdiff_mem,
        .coarse = coarse_mem,
    };
    return b->ops->sq_scan(b, &args);
}

static const uint32_t sml_tag_sq = SML_TAG('S', 'Q', 'P', 'R');

simil_status sml_sq_params_save(const sml_sq_params *p, sml_writer *w)
{
    const int ranges = p->vmin != NULL;
    const uint64_t bytes = (uint64_t)p->dim * sizeof(float);
    const uint32_t type = (uint32_t)p->type;
    SML_TRY(sml_section_begin(w, sml_tag_sq, 4 + (ranges ? 2 * bytes : 0)));
    SML_TRY(sml_writer_write(w, &type, 4));
    if (ranges) {
        SML_TRY(sml_writer_write(w, p->vmin, (size_t)bytes));
        SML_TRY(sml_writer_write(w, p->vdiff, (size_t)bytes));
    }
    return sml_section_end(w);
}

simil_status sml_sq_params_load(sml_backend *b, sml_sq_params *p, sml_reader *r)
{
    uint64_t len;
    uint32_t type;
    const uint64_t bytes = (uint64_t)p->dim * sizeof(float);
    SML_TRY(sml_section_open(r, sml_tag_sq, &len));
    SML_RETURN_IF(len != 4 && len != 4 + 2 * bytes, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: SQ section of %" PRIu64 " bytes", r->path, len);
    SML_TRY(sml_section_read(r, &type, 4));
    SML_RETURN_IF(type != (uint32_t)p->type, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: SQ type %u where the description says %d", r->path, type,
                  (int)p->type);
    SML_RETURN_IF(len > 4 && !sml_sq_needs_training(p->type), SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: ranges for an SQ type without them", r->path);
    if (len > 4) {
        float *vmin, *vdiff;
        SML_TRY(sml_sq_ranges_alloc(p->dim, &vmin, &vdiff));
        simil_status s = sml_section_read(r, vmin, (size_t)bytes);
        if (s == SIMIL_OK) s = sml_section_read(r, vdiff, (size_t)bytes);
        if (s == SIMIL_OK) s = sml_section_close(r);
        if (s == SIMIL_OK) return sml_sq_params_adopt(b, p, vmin, vdiff); /* takes them */
        sml_free(vmin);
        sml_free(vdiff);
        return s;
    }
    return sml_section_close(r);
}

/* ---- flat SQ ---- */

typedef struct sml_sq_flat {
    sml_sq_params sq;
    sml_row_store rows;  /* column 0: codes, sml_sq_stride bytes */
} sml_sq_flat;

static sml_sq_flat *sml_sq_flat_of(const simil_index *index) { return index->impl; }

static simil_status sml_sq_flat_train(simil_index *index, int64_t n, const float *x)
{
    return sml_sq_params_train(index->backend, &sml_sq_flat_of(index)->sq, n, x);
}

simil_status sml_sq_flat_append_codes(simil_index *index, int64_t n, const uint8_t *codes,
                                      const int64_t *ids)
{
    sml_sq_flat *f = sml_sq_flat_of(index);
    sml_backend *b = index->backend;
    const int64_t at = index->ntotal;
    sml_row_store next;
    SML_TRY(sml_row_store_reserve(b, &f->rows, at, at + n, &next));
    simil_status s = b->ops->mem_upload(b, sml_row_store_at(&next, 0, at), codes,
                                        (size_t)n * next.width[0]);
    if (s == SIMIL_OK) s = sml_row_store_put_ids(b, &next, at, n, ids);
    if (s != SIMIL_OK) {
        sml_row_store_discard(b, &f->rows, &next);
        return s;
    }
    return sml_row_store_commit(b, &f->rows, &next, at + n);
}

/* Coded on the host in chunks (for progress), then appended at once. */
static simil_status sml_sq_flat_add(simil_index *index, int64_t n, const float *x,
                                    const int64_t *ids)
{
    const sml_sq_flat *f = sml_sq_flat_of(index);
    const size_t stride = f->rows.width[0];
    const int64_t chunk = (int64_t)1 << 16;
    uint8_t *codes;
    SML_TRY(sml_alloc((void **)&codes, (size_t)n, stride, "codes"));
    for (int64_t i = 0; i < n; i += chunk) {
        const int64_t m = n - i < chunk ? n - i : chunk;
        sml_sq_params_encode(&f->sq, m, x + i * index->dim, codes + (size_t)i * stride);
        sml_progress("add", i + m, n);
    }
    const simil_status s = sml_sq_flat_append_codes(index, n, codes, ids);
    sml_free(codes);
    return s;
}

/* One list of every row, which every query probes. */
static simil_status sml_sq_flat_search(const simil_index *index, const sml_search_call *call)
{
    const sml_sq_flat *f = sml_sq_flat_of(index);
    sml_one_list one;
    sml_ivf_scan_args scan;
    SML_TRY(sml_row_store_scan(&f->rows, 0, index->ntotal, index->dim,
                               sml_kernel_metric(index->metric), call, &one, &scan));
    const simil_status s = sml_sq_search(index, &f->sq, &scan, NULL);
    sml_row_store_scan_free(&one);
    return s;
}

static simil_status sml_sq_flat_remove(simil_index *index, int64_t n_sorted,
                                       const int64_t *sorted, int64_t *removed)
{
    return sml_row_store_remove(index->backend, &sml_sq_flat_of(index)->rows, index->ntotal,
                                n_sorted, sorted, removed);
}

/* The decoded code of the first row with this id. */
static simil_status sml_sq_flat_reconstruct(const simil_index *index, int64_t id, float *out)
{
    const sml_sq_flat *f = sml_sq_flat_of(index);
    uint8_t *code;
    SML_TRY(sml_alloc((void **)&code, 1, f->rows.width[0], "a code"));
    simil_status s = sml_row_store_reconstruct(index->backend, &f->rows, index->ntotal, id, 0,
                                               code);
    if (s == SIMIL_OK)
        sml_sq_decode_row(f->sq.type, index->dim, code, f->sq.vmin, f->sq.vdiff, out);
    sml_free(code);
    return s;
}

static void sml_sq_flat_ids(const simil_index *index, int64_t *out)
{
    sml_row_store_ids(&sml_sq_flat_of(index)->rows, index->ntotal, out);
}

static void sml_sq_flat_reset(simil_index *index)
{
    sml_row_store_free(index->backend, &sml_sq_flat_of(index)->rows);
}

static const uint32_t sml_tag_ids = SML_TAG('I', 'D', 'S', ' ');
static const uint32_t sml_tag_codes = SML_TAG('S', 'Q', 'C', 'D');

/* Sections SQPR (the ranges), IDS (ids), SQCD (codes, stride bytes a row). */
static simil_status sml_sq_flat_save(const simil_index *index, sml_writer *w)
{
    const sml_sq_flat *f = sml_sq_flat_of(index);
    const uint64_t n = (uint64_t)index->ntotal;
    SML_TRY(sml_sq_params_save(&f->sq, w));
    SML_TRY(sml_section_write(w, sml_tag_ids, f->rows.host_ids, n * sizeof(int64_t)));
    return sml_section_write_mem(w, sml_tag_codes, index->backend, f->rows.column[0],
                                 n * f->rows.width[0]);
}

/* On a fresh index whose counters the header gave; on failure the caller
 * destroys the index. */
static simil_status sml_sq_flat_load(simil_index *index, sml_reader *r)
{
    sml_sq_flat *f = sml_sq_flat_of(index);
    sml_backend *b = index->backend;
    SML_TRY(sml_sq_params_load(b, &f->sq, r));
    index->trained = !sml_sq_needs_training(f->sq.type) || f->sq.vmin != NULL;
    const int64_t n = index->ntotal;
    SML_RETURN_IF(n > 0 && !index->trained, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: SQ8 codes without their ranges", r->path);
    const uint64_t stride = f->rows.width[0];
    index->ntotal = 0;
    SML_TRY(sml_row_store_load_ids(b, &f->rows, r, sml_tag_ids, n, index->next_id,
                                   sizeof(int64_t) + stride));
    SML_TRY(sml_section_read_mem(r, sml_tag_codes, b, f->rows.column[0], (uint64_t)n * stride));
    index->ntotal = n;
    return SIMIL_OK;
}

static void sml_sq_flat_destroy(simil_index *index)
{
    sml_sq_flat *f = sml_sq_flat_of(index);
    sml_row_store_free(index->backend, &f->rows);
    sml_sq_params_free(index->backend, &f->sq);
    sml_free(f);
}

static const sml_index_vtable sml_sq_flat_vtable = {
    .train = sml_sq_flat_train,
    .add = sml_sq_flat_add,
    .search = sml_sq_flat_search,
    .remove = sml_sq_flat_remove,
    .reconstruct = sml_sq_flat_reconstruct,
    .ids = sml_sq_flat_ids,
    .reset = sml_sq_flat_reset,
    .save = sml_sq_flat_save,
    .load = sml_sq_flat_load,
    .destroy = sml_sq_flat_destroy,
};

simil_status sml_sq_flat_init(simil_index *index)
{
    sml_sq_flat *f;
    SML_TRY(sml_calloc((void **)&f, 1, sizeof *f, "an SQ index"));
    const sml_sq_type type = (sml_sq_type)index->spec.sq_type;
    sml_sq_params_init(&f->sq, type, index->dim);
    f->rows = sml_row_store_empty(sml_sq_stride(type, index->dim), 0);
    index->impl = f;
    index->vt = &sml_sq_flat_vtable;
    index->trained = !sml_sq_needs_training(type);
    return SIMIL_OK;
}

/* For Faiss files (faiss_read.c): the index's quantizer parameters. */
sml_sq_params *sml_sq_flat_params(simil_index *index) { return &sml_sq_flat_of(index)->sq; }
