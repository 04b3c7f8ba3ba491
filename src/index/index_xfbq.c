/* index_xfbq.c: "XFBQ[QxB]", flat XFBQ (index_xfbq_common.h): every vector's
 * code and floats in a row store (row_store.h), the codes (code_bytes each,
 * xfbq.h) in one column, which the scan streams as a single list, the float
 * vectors in another, and the ids beside them.  Storage is the same on the
 * CPU and the GPU, and so are files.  Except with "_fp32", the floats live
 * in host memory that the GPU reads directly (a host column of the store):
 * only the candidates' rows are read, so with "_host" a GPU holds the codes
 * and ids alone, and by default ("XFBQ[QxB]", or "_fp16") an fp16 shadow of
 * the floats besides, which picks the candidates to read. */
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/progress.h"
#include "index/index_xfbq_common.h"
#include "index/row_store.h"

static const uint32_t sml_tag_ids = SML_TAG('I', 'D', 'S', ' ');
static const uint32_t sml_tag_vectors = SML_TAG('V', 'E', 'C', 'S');
static const uint32_t sml_tag_codes = SML_TAG('X', 'C', 'O', 'D');

enum { SML_XFBQ_CODES = 0, SML_XFBQ_VECTORS = 1 };

typedef struct sml_xfbq_flat {
    sml_xfbq_base base;  /* first: index_xfbq_common.c reads it */
    sml_row_store rows;  /* codes (code_bytes), vectors (dim floats; _fp16: shadowed) */
} sml_xfbq_flat;

static sml_xfbq_flat *sml_xfbq_flat_of(const simil_index *index) { return index->impl; }

/* Codes of n host vectors into buf (code_bytes each, padding zeroed). */
static simil_status sml_xfbq_flat_codes(const sml_xfbq_flat *x, const sml_xfbq *q, int64_t n,
                                        const float *v, uint8_t *buf)
{
    memset(buf, 0, (size_t)n * q->code_bytes);
    return sml_xfbq_code_rows(&x->base, q, n, v, sizeof(float) * (size_t)q->dim,
                              (uint64_t *)buf, q->code_bytes);
}

/* A new code column for q's alpha, from the stored vectors, swapped in. */
static simil_status sml_xfbq_flat_recode(simil_index *index, const sml_xfbq *q)
{
    sml_xfbq_flat *x = sml_xfbq_flat_of(index);
    sml_backend *b = index->backend;
    const int64_t n = index->ntotal, chunk = n < SML_XFBQ_CHUNK ? n : SML_XFBQ_CHUNK;
    uint8_t *fresh = NULL, *buf = NULL;
    float *v = NULL;
    SML_TRY(b->ops->mem_alloc(b, (size_t)(x->rows.capacity > 0 ? x->rows.capacity : 1) *
                                     q->code_bytes,
                              (void **)&fresh));
    simil_status s = sml_alloc((void **)&buf, (size_t)chunk, q->code_bytes, "codes to recode");
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&v, (size_t)(chunk * q->dim), sizeof *v, "vectors to recode");
    for (int64_t r = 0; r < n && s == SIMIL_OK; r += chunk) {
        const int64_t m = n - r < chunk ? n - r : chunk;
        s = sml_row_store_get(b, &x->rows, SML_XFBQ_VECTORS, r, v,
                              sizeof *v * (size_t)(m * q->dim));
        if (s == SIMIL_OK) s = sml_xfbq_flat_codes(x, q, m, v, buf);
        if (s == SIMIL_OK) {
            s = b->ops->mem_upload(b, fresh + (size_t)r * q->code_bytes, buf,
                                   (size_t)m * q->code_bytes);
        }
    }
    sml_free(buf);
    sml_free(v);
    if (s != SIMIL_OK) {
        b->ops->mem_free(b, fresh);
        return s;
    }
    b->ops->mem_free(b, x->rows.column[SML_XFBQ_CODES]);
    x->rows.column[SML_XFBQ_CODES] = fresh;
    return SIMIL_OK;
}

static simil_status sml_xfbq_flat_train(simil_index *index, int64_t n, const float *xs)
{
    return n == 0 ? SIMIL_OK : sml_xfbq_pick_alpha(index, n, xs);
}

/* Rows [at, at + n) of next: codes, vectors and ids. */
static simil_status sml_xfbq_flat_fill(const simil_index *index, sml_row_store *next, int64_t n,
                                       const float *xs, const int64_t *ids)
{
    const sml_xfbq_flat *x = sml_xfbq_flat_of(index);
    sml_backend *b = index->backend;
    const int64_t at = index->ntotal, dim = index->dim;
    const size_t cs = x->base.q.code_bytes;
    uint8_t *buf;
    const int64_t chunk = n < SML_XFBQ_CHUNK ? n : SML_XFBQ_CHUNK;
    SML_TRY(sml_alloc((void **)&buf, (size_t)chunk, cs, "XFBQ codes"));
    simil_status s = SIMIL_OK;
    for (int64_t i = 0; i < n && s == SIMIL_OK; i += chunk) {
        const int64_t m = n - i < chunk ? n - i : chunk;
        s = sml_xfbq_flat_codes(x, &x->base.q, m, xs + i * dim, buf);
        if (s == SIMIL_OK)
            s = b->ops->mem_upload(b, sml_row_store_at(next, SML_XFBQ_CODES, at + i), buf,
                                   (size_t)m * cs);
        if (s == SIMIL_OK)
            s = sml_row_store_put(b, next, SML_XFBQ_VECTORS, at + i, xs + i * dim,
                                  sizeof(float) * (size_t)(m * dim));
        sml_progress("add", i + m, n);
    }
    sml_free(buf);
    SML_TRY(s);
    return sml_row_store_put_ids(b, next, at, n, ids);
}

static simil_status sml_xfbq_flat_append(simil_index *index, int64_t n, const float *xs,
                                         const int64_t *ids)
{
    sml_xfbq_flat *x = sml_xfbq_flat_of(index);
    sml_backend *b = index->backend;
    sml_row_store next;
    const int64_t at = index->ntotal;
    SML_TRY(sml_row_store_reserve(b, &x->rows, at, at + n, &next));
    const simil_status s = sml_xfbq_flat_fill(index, &next, n, xs, ids);
    if (s != SIMIL_OK) {
        sml_row_store_discard(b, &x->rows, &next);
        return s;
    }
    return sml_row_store_commit(b, &x->rows, &next, at + n);
}

static simil_status sml_xfbq_flat_add(simil_index *index, int64_t n, const float *xs,
                                      const int64_t *ids)
{
    return sml_xfbq_add_with(index, n, xs, ids, sml_xfbq_flat_append);
}

/* One list of every row, which every query probes. */
static simil_status sml_xfbq_flat_search(const simil_index *index, const sml_search_call *call)
{
    const sml_xfbq_flat *x = sml_xfbq_flat_of(index);
    sml_one_list one;
    sml_ivf_scan_args scan;
    SML_TRY(sml_row_store_scan(&x->rows, SML_XFBQ_CODES, index->ntotal, index->dim,
                               sml_kernel_metric(index->metric), call, &one, &scan));
    const simil_status s = sml_xfbq_search(index, call, scan, x->rows.column[SML_XFBQ_VECTORS],
                                           x->rows.width[SML_XFBQ_VECTORS], x->rows.shadow);
    sml_row_store_scan_free(&one);
    return s;
}

static simil_status sml_xfbq_flat_remove(simil_index *index, int64_t n_sorted,
                                         const int64_t *sorted, int64_t *removed)
{
    return sml_row_store_remove(index->backend, &sml_xfbq_flat_of(index)->rows, index->ntotal,
                                n_sorted, sorted, removed);
}

/* The stored floats of the first row with this id. */
static simil_status sml_xfbq_flat_reconstruct(const simil_index *index, int64_t id, float *out)
{
    return sml_row_store_reconstruct(index->backend, &sml_xfbq_flat_of(index)->rows,
                                     index->ntotal, id, SML_XFBQ_VECTORS, out);
}

static void sml_xfbq_flat_ids(const simil_index *index, int64_t *out)
{
    sml_row_store_ids(&sml_xfbq_flat_of(index)->rows, index->ntotal, out);
}

static void sml_xfbq_flat_reset(simil_index *index)
{
    sml_row_store_free(index->backend, &sml_xfbq_flat_of(index)->rows);
}

/* Sections XFBQ (index_xfbq_common.c), IDS (ids), VECS (floats), XCOD (codes). */
static simil_status sml_xfbq_flat_save(const simil_index *index, sml_writer *w)
{
    const sml_xfbq_flat *x = sml_xfbq_flat_of(index);
    SML_TRY(sml_xfbq_save_params(index, w));
    const uint64_t n = (uint64_t)index->ntotal;
    SML_TRY(sml_section_write(w, sml_tag_ids, x->rows.host_ids, n * sizeof(int64_t)));
    SML_TRY(sml_row_store_write_column(w, sml_tag_vectors, index->backend, &x->rows,
                                       SML_XFBQ_VECTORS, (int64_t)n));
    return sml_section_write_mem(w, sml_tag_codes, index->backend, x->rows.column[SML_XFBQ_CODES],
                                 n * x->base.q.code_bytes);
}

/* On a fresh index whose counters the header gave; on failure the caller
 * destroys the index. */
static simil_status sml_xfbq_flat_load(simil_index *index, sml_reader *r)
{
    sml_xfbq_flat *x = sml_xfbq_flat_of(index);
    sml_backend *b = index->backend;
    SML_TRY(sml_xfbq_load_params(index, r));
    const int64_t n = index->ntotal;
    const uint64_t vs = x->rows.width[SML_XFBQ_VECTORS], cs = x->base.q.code_bytes;
    index->ntotal = 0;
    SML_TRY(sml_row_store_load_ids(b, &x->rows, r, sml_tag_ids, n, index->next_id,
                                   sizeof(int64_t) + cs + vs));
    SML_TRY(sml_row_store_read_column(r, sml_tag_vectors, b, &x->rows, SML_XFBQ_VECTORS, n));
    SML_TRY(sml_section_read_mem(r, sml_tag_codes, b, x->rows.column[SML_XFBQ_CODES],
                                 (uint64_t)n * cs));
    SML_TRY(sml_row_store_sync(b, &x->rows, n));
    index->ntotal = n;
    return SIMIL_OK;
}

static void sml_xfbq_flat_destroy(simil_index *index)
{
    sml_xfbq_flat_reset(index);
    sml_xfbq_base_free(&sml_xfbq_flat_of(index)->base, index->backend);
    sml_free(index->impl);
}

static const sml_index_vtable sml_xfbq_flat_vtable = {
    .train = sml_xfbq_flat_train,
    .add = sml_xfbq_flat_add,
    .search = sml_xfbq_flat_search,
    .remove = sml_xfbq_flat_remove,
    .reconstruct = sml_xfbq_flat_reconstruct,
    .ids = sml_xfbq_flat_ids,
    .reset = sml_xfbq_flat_reset,
    .save = sml_xfbq_flat_save,
    .load = sml_xfbq_flat_load,
    .destroy = sml_xfbq_flat_destroy,
    .batchable = 1,
};

simil_status sml_xfbq_flat_init(simil_index *index)
{
    sml_xfbq_flat *x;
    SML_TRY(sml_calloc((void **)&x, 1, sizeof *x, "an XFBQ index"));
    simil_status s = sml_xfbq_base_init(&x->base, index, sml_xfbq_flat_recode);
    if (s != SIMIL_OK) {
        sml_free(x);
        return s;
    }
    x->rows = sml_row_store_empty(x->base.q.code_bytes, sizeof(float) * (size_t)index->dim);
    if (index->spec.xfbq_floats != SML_XFBQ_FLOATS_BACKEND)
        sml_row_store_host_column(index->backend, &x->rows, SML_XFBQ_VECTORS);
    /* the CPU keeps no shadow: it re-ranks from the floats directly */
    if (index->spec.xfbq_floats == SML_XFBQ_FLOATS_FP16)
        sml_row_store_shadow(&x->rows, SML_XFBQ_VECTORS, sml_kernel_metric(index->metric));
    index->impl = x;
    index->vt = &sml_xfbq_flat_vtable;
    /* vectors are taken at once: the first batch chooses alpha */
    index->trained = 1;
    return SIMIL_OK;
}
