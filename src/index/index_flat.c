/* index_flat.c: "Flat", exact search over the stored vectors.
 *
 * Vectors, their squared norms (L2 only) and their ids live in backend memory;
 * a host copy of the ids serves remove and reconstruct without a download.
 * Arrays grow by 1.5x.  An add that needs more room, and a remove, build new
 * arrays beside the old ones and swap them in only when complete, so a
 * failure leaves the old arrays (and the backend's shadow) as they were. */
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/progress.h"
#include "index/index_internal.h"

typedef struct sml_flat {
    float *vectors;     /* mem: capacity x dim */
    float *norms;       /* mem: capacity, L2 only */
    int64_t *ids;       /* mem: capacity */
    int64_t *host_ids;  /* host: capacity */
    int64_t capacity;
    void *shadow;       /* the backend's fast copy of vectors (backend.h), or NULL */
} sml_flat;

static int sml_flat_has_norms(const simil_index *index)
{
    return index->metric == SIMIL_METRIC_L2;
}

/* Bring the backend's shadow up to rows [0, n), of which [0, have) it has. */
static simil_status sml_flat_sync_shadow(const simil_index *index, sml_flat *f, int64_t have,
                                         int64_t n)
{
    sml_backend *b = index->backend;
    if (b->ops->shadow_sync == NULL) return SIMIL_OK;
    return b->ops->shadow_sync(b, &f->shadow, f->vectors, have, n, index->dim, index->metric);
}

static void sml_flat_free_arrays(sml_backend *b, sml_flat *f)
{
    if (f->shadow != NULL) b->ops->shadow_free(b, f->shadow);
    f->shadow = NULL;
    b->ops->mem_free(b, f->vectors);
    b->ops->mem_free(b, f->norms);
    b->ops->mem_free(b, f->ids);
    sml_free(f->host_ids);
    f->vectors = NULL;
    f->norms = NULL;
    f->ids = NULL;
    f->host_ids = NULL;
    f->capacity = 0;
}

/* *next = arrays with room for need rows that hold the index's first ntotal:
 * its own arrays when they have the room, else new blocks (all or none, the
 * old ones untouched).  The caller fills rows past ntotal, then commits next
 * or discards it; either way a failure leaves the index as it was. */
static simil_status sml_flat_room(const simil_index *index, int64_t need, sml_flat *next)
{
    const sml_flat *f = index->impl;
    *next = *f;
    if (need <= f->capacity) return SIMIL_OK;
    int64_t cap = f->capacity + f->capacity / 2;
    if (cap < need) cap = need;
    sml_backend *b = index->backend;
    const size_t row = (size_t)index->dim * sizeof(float), used = (size_t)index->ntotal;
    sml_flat fresh = {.capacity = cap};
    simil_status s = sml_mem_clone(b, (void **)&fresh.vectors, f->vectors, used * row,
                                   (size_t)cap * row);
    if (s == SIMIL_OK && sml_flat_has_norms(index))
        s = sml_mem_clone(b, (void **)&fresh.norms, f->norms, used * sizeof(float),
                          (size_t)cap * sizeof(float));
    if (s == SIMIL_OK)
        s = sml_mem_clone(b, (void **)&fresh.ids, f->ids, used * sizeof(int64_t),
                          (size_t)cap * sizeof(int64_t));
    if (s == SIMIL_OK) s = sml_alloc((void **)&fresh.host_ids, (size_t)cap, sizeof(int64_t), "ids");
    if (s != SIMIL_OK) {
        sml_flat_free_arrays(b, &fresh);
        return s;
    }
    if (used > 0) memcpy(fresh.host_ids, f->host_ids, used * sizeof(int64_t));
    fresh.shadow = f->shadow;
    *next = fresh;
    return SIMIL_OK;
}

/* next (from sml_flat_room, its shadow synced) becomes the index's arrays. */
static void sml_flat_commit(sml_backend *b, sml_flat *f, const sml_flat *next)
{
    if (next->vectors != f->vectors) {
        f->shadow = NULL; /* next holds the shadow now */
        sml_flat_free_arrays(b, f);
    }
    *f = *next;
}

/* Drop next after a failure (the shadow, left as it was, stays the index's). */
static void sml_flat_discard(sml_backend *b, const sml_flat *f, sml_flat *next)
{
    if (next->vectors == f->vectors) return;
    next->shadow = NULL;
    sml_flat_free_arrays(b, next);
}

/* Fill rows [at, at + n) of next with x and ids, and sync the shadow. */
static simil_status sml_flat_fill(const simil_index *index, sml_flat *next, int64_t at, int64_t n,
                                  const float *x, const int64_t *ids)
{
    sml_backend *b = index->backend;
    const size_t row = (size_t)index->dim * sizeof(float);
    /* Upload in chunks so that progress shows on long adds. */
    const int64_t chunk = (int64_t)1 << 16;
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t m = n - i < chunk ? n - i : chunk;
        SML_TRY(b->ops->mem_upload(b, next->vectors + (at + i) * index->dim,
                                   x + i * index->dim, (size_t)m * row));
        if (sml_flat_has_norms(index))
            SML_TRY(b->ops->row_norms(b, m, index->dim, next->vectors + (at + i) * index->dim,
                                      next->norms + at + i));
        sml_progress("add", i + m, n);
    }
    SML_TRY(b->ops->mem_upload(b, next->ids + at, ids, (size_t)n * sizeof(int64_t)));
    SML_TRY(sml_flat_sync_shadow(index, next, at, at + n));
    memcpy(next->host_ids + at, ids, (size_t)n * sizeof(int64_t));
    return SIMIL_OK;
}

static simil_status sml_flat_add(simil_index *index, int64_t n, const float *x, const int64_t *ids)
{
    sml_flat *f = index->impl;
    sml_flat next;
    SML_TRY(sml_flat_room(index, index->ntotal + n, &next));
    simil_status s = sml_flat_fill(index, &next, index->ntotal, n, x, ids);
    if (s != SIMIL_OK) {
        sml_flat_discard(index->backend, f, &next);
        return s;
    }
    sml_flat_commit(index->backend, f, &next);
    return SIMIL_OK;
}

static simil_status sml_flat_search(const simil_index *index, const sml_search_call *call)
{
    sml_flat *f = index->impl;
    sml_knn_args args = {
        .base = f->vectors,
        .base_norms = f->norms,
        .base_ids = f->ids,
        .n = index->ntotal,
        .dim = index->dim,
        .queries = call->queries,
        .nq = call->nq,
        .k = call->k,
        .metric = sml_kernel_metric(index->metric),
        .distances = call->distances,
        .labels = call->labels,
        .threads = call->params.threads,
        .base_shadow = f->shadow,
    };
    return index->backend->ops->knn(index->backend, &args);
}

static int sml_sorted_contains(const int64_t *sorted, int64_t n, int64_t id)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < id) lo = mid + 1; else hi = mid;
    }
    return lo < n && sorted[lo] == id;
}

/* *out = a new block holding rows keep[0..n) of src. */
static simil_status sml_flat_gather(sml_backend *b, void **out, const void *src,
                                    size_t row_bytes, int64_t n, const int64_t *keep)
{
    SML_TRY(b->ops->mem_alloc(b, (size_t)(n > 0 ? n : 1) * row_bytes, out));
    return b->ops->mem_move_rows(b, *out, NULL, src, keep, row_bytes, n);
}

static simil_status sml_flat_remove(simil_index *index, int64_t n_sorted, const int64_t *sorted,
                                    int64_t *removed)
{
    sml_flat *f = index->impl;
    sml_backend *b = index->backend;
    int64_t *keep;
    SML_TRY(sml_alloc((void **)&keep, (size_t)index->ntotal, sizeof *keep, "rows to keep"));
    int64_t kept = 0;
    for (int64_t i = 0; i < index->ntotal; i++)
        if (!sml_sorted_contains(sorted, n_sorted, f->host_ids[i])) keep[kept++] = i;
    *removed = index->ntotal - kept;
    simil_status s = SIMIL_OK;
    if (*removed > 0) {
        /* Build the compacted arrays beside the old ones, then swap. */
        sml_flat next = {.capacity = kept};
        s = sml_flat_gather(b, (void **)&next.vectors, f->vectors,
                            (size_t)index->dim * sizeof(float), kept, keep);
        if (s == SIMIL_OK && f->norms != NULL)
            s = sml_flat_gather(b, (void **)&next.norms, f->norms, sizeof(float), kept, keep);
        if (s == SIMIL_OK)
            s = sml_flat_gather(b, (void **)&next.ids, f->ids, sizeof(int64_t), kept, keep);
        if (s == SIMIL_OK)
            s = sml_alloc((void **)&next.host_ids, (size_t)(kept > 0 ? kept : 1), sizeof(int64_t),
                          "ids");
        if (s == SIMIL_OK) s = sml_flat_sync_shadow(index, &next, 0, kept);
        if (s == SIMIL_OK) {
            for (int64_t i = 0; i < kept; i++) next.host_ids[i] = f->host_ids[keep[i]];
            sml_flat_free_arrays(b, f);
            *f = next;
        } else {
            sml_flat_free_arrays(b, &next);
            *removed = 0;
        }
    }
    sml_free(keep);
    return s;
}

static simil_status sml_flat_reconstruct(const simil_index *index, int64_t id, float *out)
{
    const sml_flat *f = index->impl;
    for (int64_t i = 0; i < index->ntotal; i++) {
        if (f->host_ids[i] == id) {
            sml_backend *b = index->backend;
            return b->ops->mem_download(b, out, f->vectors + i * index->dim,
                                        (size_t)index->dim * sizeof(float));
        }
    }
    return sml_error(SIMIL_ERR_INVALID_ARGUMENT, "reconstruct: id %" PRId64 " is not in the index",
                     id);
}

static void sml_flat_reset(simil_index *index)
{
    sml_flat_free_arrays(index->backend, index->impl);
}

static const uint32_t sml_tag_ids = SML_TAG('I', 'D', 'S', ' ');
static const uint32_t sml_tag_vectors = SML_TAG('V', 'E', 'C', 'S');

static simil_status sml_flat_save(const simil_index *index, sml_writer *w)
{
    const sml_flat *f = index->impl;
    uint64_t n = (uint64_t)index->ntotal;
    SML_TRY(sml_section_write(w, sml_tag_ids, f->host_ids, n * sizeof(int64_t)));
    return sml_section_write_mem(w, sml_tag_vectors, index->backend, f->vectors,
                                 n * (uint64_t)index->dim * sizeof(float));
}

/* Called on a fresh index whose ntotal the file header gave; on failure the
 * caller destroys the index. */
static simil_status sml_flat_load(simil_index *index, sml_reader *r)
{
    sml_flat *f = index->impl;
    sml_backend *b = index->backend;
    int64_t n = index->ntotal;
    index->ntotal = 0;
    uint64_t bytes;
    SML_TRY(sml_section_open(r, sml_tag_ids, &bytes));
    SML_RETURN_IF(bytes != (uint64_t)n * sizeof(int64_t), SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: %" PRId64 " vectors but %llu bytes of ids", r->path, n,
                  (unsigned long long)bytes);
    SML_RETURN_IF((uint64_t)n > r->size / ((uint64_t)index->dim * sizeof(float)),
                  SIMIL_ERR_CORRUPT, "'%s' is truncated: %" PRId64 " vectors of dimension %"
                  PRId64 " cannot fit in %llu bytes", r->path, n, index->dim,
                  (unsigned long long)r->size);
    sml_flat next;
    SML_TRY(sml_flat_room(index, n, &next));
    sml_flat_commit(b, f, &next); /* a fresh index: nothing to keep if the rest fails */
    SML_TRY(sml_section_read(r, f->host_ids, (size_t)bytes));
    SML_TRY(sml_section_close(r));
    SML_TRY(sml_ids_check(r->path, n, f->host_ids, index->next_id));
    SML_TRY(b->ops->mem_upload(b, f->ids, f->host_ids, (size_t)bytes));
    SML_TRY(sml_section_read_mem(r, sml_tag_vectors, b, f->vectors,
                                 (uint64_t)n * (uint64_t)index->dim * sizeof(float)));
    if (sml_flat_has_norms(index)) SML_TRY(b->ops->row_norms(b, n, index->dim, f->vectors, f->norms));
    SML_TRY(sml_flat_sync_shadow(index, f, 0, n));
    index->ntotal = n;
    return SIMIL_OK;
}

static void sml_flat_destroy(simil_index *index)
{
    sml_flat_free_arrays(index->backend, index->impl);
    sml_free(index->impl);
}

static void sml_flat_ids(const simil_index *index, int64_t *out)
{
    const sml_flat *f = index->impl;
    if (index->ntotal > 0) memcpy(out, f->host_ids, sizeof(int64_t) * (size_t)index->ntotal);
}

void sml_flat_data(const simil_index *index, const float **vectors, const int64_t **host_ids)
{
    const sml_flat *f = index->impl;
    *vectors = f->vectors;
    *host_ids = f->host_ids;
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
};

simil_status sml_flat_init(simil_index *index)
{
    SML_TRY(sml_calloc(&index->impl, 1, sizeof(sml_flat), "a Flat index"));
    index->vt = &sml_flat_vtable;
    index->trained = 1;
    return SIMIL_OK;
}
