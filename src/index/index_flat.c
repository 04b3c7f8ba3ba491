/* index_flat.c: "Flat", exact search over the stored vectors.
 *
 * Vectors, their squared norms (L2 only) and their ids live in a row store
 * (row_store.h), with the backend's shadow of the vectors: backend memory, a
 * host copy of the ids for remove and reconstruct, growth by half, and new
 * arrays built beside the old ones and swapped in only when complete, so a
 * failure leaves the old arrays (and the shadow) as they were. */
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/progress.h"
#include "index/index_internal.h"
#include "index/row_store.h"

enum { SML_FLAT_VECTORS = 0, SML_FLAT_NORMS = 1 };

typedef struct sml_flat {
    sml_row_store rows;  /* vectors (dim floats, shadowed), norms (a float, L2 only) */
} sml_flat;

static float *sml_flat_vectors(const sml_row_store *rows) { return rows->column[SML_FLAT_VECTORS]; }
static float *sml_flat_norms(const sml_row_store *rows) { return rows->column[SML_FLAT_NORMS]; }

/* Fill rows [at, at + n) of next with x and ids. */
static simil_status sml_flat_fill(const simil_index *index, sml_row_store *next, int64_t at,
                                  int64_t n, const float *x, const int64_t *ids)
{
    sml_backend *b = index->backend;
    const size_t row = (size_t)index->dim * sizeof(float);
    /* Upload in chunks so that progress shows on long adds. */
    const int64_t chunk = (int64_t)1 << 16;
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t m = n - i < chunk ? n - i : chunk;
        float *v = sml_row_store_at(next, SML_FLAT_VECTORS, at + i);
        SML_TRY(b->ops->mem_upload(b, v, x + i * index->dim, (size_t)m * row));
        if (next->width[SML_FLAT_NORMS] > 0)
            SML_TRY(b->ops->row_norms(b, m, index->dim, v, sml_flat_norms(next) + at + i));
        sml_progress("add", i + m, n);
    }
    return sml_row_store_put_ids(b, next, at, n, ids);
}

static simil_status sml_flat_add(simil_index *index, int64_t n, const float *x, const int64_t *ids)
{
    sml_flat *f = index->impl;
    sml_backend *b = index->backend;
    const int64_t at = index->ntotal;
    sml_row_store next;
    SML_TRY(sml_row_store_reserve(b, &f->rows, at, at + n, &next));
    const simil_status s = sml_flat_fill(index, &next, at, n, x, ids);
    if (s != SIMIL_OK) {
        sml_row_store_discard(b, &f->rows, &next);
        return s;
    }
    return sml_row_store_commit(b, &f->rows, &next, at + n);
}

static simil_status sml_flat_search(const simil_index *index, const sml_search_call *call)
{
    sml_flat *f = index->impl;
    sml_knn_args args = {
        .base = sml_flat_vectors(&f->rows),
        .base_norms = sml_flat_norms(&f->rows),
        .base_ids = f->rows.ids,
        .n = index->ntotal,
        .dim = index->dim,
        .queries = call->queries,
        .nq = call->nq,
        .k = call->k,
        .metric = sml_kernel_metric(index->metric),
        .distances = call->distances,
        .labels = call->labels,
        .threads = call->params.threads,
        .base_shadow = f->rows.shadow,
        .filter = call->params.allow,
        .queries_host = call->queries_host,
        .outputs_host = call->outputs_host,
    };
    return index->backend->ops->knn(index->backend, &args);
}

static simil_status sml_flat_remove(simil_index *index, int64_t n_sorted, const int64_t *sorted,
                                    int64_t *removed)
{
    sml_flat *f = index->impl;
    return sml_row_store_remove(index->backend, &f->rows, index->ntotal, n_sorted, sorted,
                                removed);
}

static simil_status sml_flat_reconstruct(const simil_index *index, int64_t id, float *out)
{
    const sml_flat *f = index->impl;
    return sml_row_store_reconstruct(index->backend, &f->rows, index->ntotal, id,
                                     SML_FLAT_VECTORS, out);
}

static void sml_flat_reset(simil_index *index)
{
    sml_flat *f = index->impl;
    sml_row_store_free(index->backend, &f->rows);
}

static const uint32_t sml_tag_ids = SML_TAG('I', 'D', 'S', ' ');
static const uint32_t sml_tag_vectors = SML_TAG('V', 'E', 'C', 'S');

static simil_status sml_flat_save(const simil_index *index, sml_writer *w)
{
    const sml_flat *f = index->impl;
    uint64_t n = (uint64_t)index->ntotal;
    SML_TRY(sml_section_write(w, sml_tag_ids, f->rows.host_ids, n * sizeof(int64_t)));
    return sml_section_write_mem(w, sml_tag_vectors, index->backend, sml_flat_vectors(&f->rows),
                                 n * (uint64_t)index->dim * sizeof(float));
}

/* Called on a fresh index whose ntotal the file header gave; on failure the
 * caller destroys the index. */
static simil_status sml_flat_load(simil_index *index, sml_reader *r)
{
    sml_flat *f = index->impl;
    sml_backend *b = index->backend;
    const int64_t n = index->ntotal;
    const uint64_t row = (uint64_t)index->dim * sizeof(float);
    index->ntotal = 0;
    SML_TRY(sml_row_store_load_ids(b, &f->rows, r, sml_tag_ids, n, index->next_id,
                                   sizeof(int64_t) + row));
    float *vectors = sml_flat_vectors(&f->rows);
    SML_TRY(sml_section_read_mem(r, sml_tag_vectors, b, vectors, (uint64_t)n * row));
    if (f->rows.width[SML_FLAT_NORMS] > 0)
        SML_TRY(b->ops->row_norms(b, n, index->dim, vectors, sml_flat_norms(&f->rows)));
    SML_TRY(sml_row_store_sync(b, &f->rows, n));
    index->ntotal = n;
    return SIMIL_OK;
}

static void sml_flat_destroy(simil_index *index)
{
    sml_flat_reset(index);
    sml_free(index->impl);
}

static void sml_flat_ids(const simil_index *index, int64_t *out)
{
    const sml_flat *f = index->impl;
    sml_row_store_ids(&f->rows, index->ntotal, out);
}

void sml_flat_data(const simil_index *index, const float **vectors, const int64_t **host_ids)
{
    const sml_flat *f = index->impl;
    *vectors = sml_flat_vectors(&f->rows);
    *host_ids = f->rows.host_ids;
}

static const sml_index_vtable sml_flat_vtable = {
    .train = NULL,
    .add = sml_flat_add,
    .search = sml_flat_search,
    .remove = sml_flat_remove,
    .reconstruct = sml_flat_reconstruct,
    .ids = sml_flat_ids,
    .reset = sml_flat_reset,
    .save = sml_flat_save,
    .load = sml_flat_load,
    .destroy = sml_flat_destroy,
    .device_io = 1,
    .batchable = 1,
};

simil_status sml_flat_init(simil_index *index)
{
    sml_flat *f;
    SML_TRY(sml_calloc((void **)&f, 1, sizeof *f, "a Flat index"));
    f->rows = sml_row_store_empty((size_t)index->dim * sizeof(float),
                                  index->metric == SIMIL_METRIC_L2 ? sizeof(float) : 0);
    sml_row_store_shadow(&f->rows, SML_FLAT_VECTORS, index->metric);
    index->impl = f;
    index->vt = &sml_flat_vtable;
    index->trained = 1;
    return SIMIL_OK;
}
