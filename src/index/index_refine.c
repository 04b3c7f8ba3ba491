/* index_refine.c: "...,Refine", exact re-ranking behind a compressed index.
 *
 * The float vectors are kept in host memory beside the inner index (as Faiss's
 * IndexRefineFlat does), with their ids and an id -> row map.  A search asks
 * the inner index for k * refine_factor candidates (search parameter, default
 * 4; at most the index size), computes their exact distances, and returns the
 * best k: exact distances for candidates an approximate index would rank
 * imperfectly.  With duplicate
 * ids, a candidate is scored with the first vector added under its id. */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/id_map.h"
#include "core/vectors.h"
#include "index/index_internal.h"

static const uint32_t sml_tag_refine_vectors = SML_TAG('R', 'F', 'V', 'C');
static const uint32_t sml_tag_refine_ids = SML_TAG('R', 'F', 'I', 'D');

typedef struct sml_refine {
    simil_index *inner;
    float *vectors;   /* host: capacity x dim, prepared (normalized for cosine) */
    int64_t *ids;
    int64_t count;
    int64_t capacity;
    sml_id_map map;
} sml_refine;

static sml_refine *sml_refine_of(const simil_index *index) { return index->impl; }

static simil_status sml_refine_reserve(const simil_index *index, sml_refine *r, int64_t need)
{
    if (need <= r->capacity) return SIMIL_OK;
    int64_t cap = r->capacity + r->capacity / 2;
    if (cap < need) cap = need;
    size_t row = sizeof(float) * (size_t)index->dim;
    SML_TRY(sml_grow((void **)&r->vectors, row * (size_t)r->count, row * (size_t)cap,
                     "refinement vectors"));
    SML_TRY(sml_grow((void **)&r->ids, sizeof(int64_t) * (size_t)r->count,
                     sizeof(int64_t) * (size_t)cap, "refinement ids"));
    r->capacity = cap;
    return SIMIL_OK;
}

static simil_status sml_refine_train(simil_index *index, int64_t n, const float *x)
{
    return simil_index_train(sml_refine_of(index)->inner, n, x);
}

static simil_status sml_refine_add(simil_index *index, int64_t n, const float *x,
                                   const int64_t *ids)
{
    sml_refine *r = sml_refine_of(index);
    SML_TRY(sml_refine_reserve(index, r, r->count + n));
    /* the map is rebuilt beside the old one before anything changes */
    memcpy(r->ids + r->count, ids, sizeof(int64_t) * (size_t)n);
    sml_id_map map = {0};
    SML_TRY(sml_id_map_build(&map, r->count + n, r->ids));
    simil_status s = simil_index_add(r->inner, n, x, ids);
    if (s != SIMIL_OK) {
        sml_id_map_free(&map);
        return s;
    }
    memcpy(r->vectors + r->count * index->dim, x, sizeof(float) * (size_t)(n * index->dim));
    r->count += n;
    sml_id_map_free(&r->map);
    r->map = map;
    return SIMIL_OK;
}

typedef struct sml_scored {
    float key;
    int64_t id;
} sml_scored;

static int sml_scored_cmp(const void *pa, const void *pb)
{
    const sml_scored *a = pa, *b = pb;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static float sml_refine_key(const simil_index *index, const float *x, const float *y)
{
    double s = 0;
    for (int64_t j = 0; j < index->dim; j++) {
        if (index->metric == SIMIL_METRIC_L2) {
            double d = (double)x[j] - y[j];
            s += d * d;
        } else {
            s -= (double)x[j] * y[j];
        }
    }
    return (float)s;
}

/* Queries are refined in batches of at most this many candidates (28 bytes
 * each), or one query. */
static const int64_t sml_refine_batch_candidates = (int64_t)1 << 22;

int64_t sml_refine_candidates(int64_t k, int64_t factor, int64_t count)
{
    /* k and factor are caller values: their product is bounded before it is
     * formed */
    assert(k >= 1 && factor >= 1 && count >= 1);
    return k > count / factor ? count : k * factor;
}

/* Re-rank the kc candidates of each of queries [q0, q0 + nq). */
static void sml_refine_rerank(const simil_index *index, const sml_search_call *call, int64_t q0,
                              int64_t nq, int64_t kc, const int64_t *l, sml_scored *scored)
{
    const sml_refine *r = sml_refine_of(index);
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t i = 0; i < nq; i++) {
        const int64_t q = q0 + i;
        sml_scored *c = scored + i * kc;
        const float *x = call->queries + q * index->dim;
        int64_t m = 0;
        for (int64_t j = 0; j < kc; j++) {
            int64_t row = sml_id_map_find(&r->map, l[i * kc + j]);
            if (row < 0) continue;
            c[m].key = sml_refine_key(index, x, r->vectors + row * index->dim);
            c[m++].id = l[i * kc + j];
        }
        qsort(c, (size_t)m, sizeof *c, sml_scored_cmp);
        for (int64_t j = 0; j < call->k; j++) {
            float key = j < m ? c[j].key : INFINITY;
            call->distances[q * call->k + j] = index->metric == SIMIL_METRIC_L2 ? key : -key;
            call->labels[q * call->k + j] = j < m ? c[j].id : -1;
        }
    }
}

static simil_status sml_refine_search(const simil_index *index, const sml_search_call *call)
{
    const sml_refine *r = sml_refine_of(index);
    const int64_t factor = call->params.refine_factor > 0 ? call->params.refine_factor : 4;
    const int64_t kc = sml_refine_candidates(call->k, factor, r->count);
    int64_t batch = sml_refine_batch_candidates / kc;
    if (batch < 1) batch = 1;
    if (batch > call->nq) batch = call->nq;
    float *d = NULL;
    int64_t *l = NULL;
    sml_scored *scored = NULL;
    const size_t slots = (size_t)batch * (size_t)kc;
    simil_status s = sml_alloc((void **)&d, slots, sizeof *d, "candidates");
    if (s == SIMIL_OK) s = sml_alloc((void **)&l, slots, sizeof *l, "candidates");
    if (s == SIMIL_OK) s = sml_alloc((void **)&scored, slots, sizeof *scored, "candidates");
    for (int64_t q0 = 0; q0 < call->nq && s == SIMIL_OK; q0 += batch) {
        const int64_t nb = call->nq - q0 < batch ? call->nq - q0 : batch;
        s = simil_index_search(r->inner, nb, call->queries + q0 * index->dim, kc, &call->params,
                               d, l);
        if (s == SIMIL_OK) sml_refine_rerank(index, call, q0, nb, kc, l, scored);
    }
    sml_free(d);
    sml_free(l);
    sml_free(scored);
    return s;
}

static int sml_refine_sorted_has(const int64_t *sorted, int64_t n, int64_t id)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < id) lo = mid + 1; else hi = mid;
    }
    return lo < n && sorted[lo] == id;
}

static simil_status sml_refine_remove(simil_index *index, int64_t n, const int64_t *sorted,
                                      int64_t *removed)
{
    sml_refine *r = sml_refine_of(index);
    /* the kept rows, and their map, first; then the inner index */
    int64_t *keep_ids;
    SML_TRY(sml_alloc((void **)&keep_ids, (size_t)(r->count + 1), sizeof *keep_ids, "ids"));
    int64_t kept = 0;
    for (int64_t i = 0; i < r->count; i++)
        if (!sml_refine_sorted_has(sorted, n, r->ids[i])) keep_ids[kept++] = r->ids[i];
    sml_id_map map = {0};
    simil_status s = sml_id_map_build(&map, kept, keep_ids);
    sml_free(keep_ids);
    if (s == SIMIL_OK) s = simil_index_remove(r->inner, n, sorted, removed);
    if (s != SIMIL_OK) {
        sml_id_map_free(&map);
        return s;
    }
    int64_t at = 0;
    for (int64_t i = 0; i < r->count; i++) {
        if (sml_refine_sorted_has(sorted, n, r->ids[i])) continue;
        memmove(r->vectors + at * index->dim, r->vectors + i * index->dim,
                sizeof(float) * (size_t)index->dim);
        r->ids[at++] = r->ids[i];
    }
    r->count = at;
    sml_id_map_free(&r->map);
    r->map = map;
    return SIMIL_OK;
}

static simil_status sml_refine_reconstruct(const simil_index *index, int64_t id, float *out)
{
    const sml_refine *r = sml_refine_of(index);
    const int64_t row = sml_id_map_find(&r->map, id);
    SML_RETURN_IF(row < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "reconstruct: id %" PRId64 " is not in the index", id);
    memcpy(out, r->vectors + row * index->dim, sizeof(float) * (size_t)index->dim);
    return SIMIL_OK;
}

static void sml_refine_reset(simil_index *index)
{
    sml_refine *r = sml_refine_of(index);
    simil_index_reset(r->inner);
    r->count = 0;
    sml_id_map_free(&r->map);
}

static simil_status sml_refine_save(const simil_index *index, sml_writer *w)
{
    const sml_refine *r = sml_refine_of(index);
    SML_TRY(r->inner->vt->save(r->inner, w));
    SML_TRY(sml_section_write(w, sml_tag_refine_ids, r->ids, sizeof(int64_t) * (uint64_t)r->count));
    return sml_section_write(w, sml_tag_refine_vectors, r->vectors,
                             sizeof(float) * (uint64_t)(r->count * index->dim));
}

/* The refinement rows must hold exactly the inner index's ids, as many times
 * each: a search scores the inner index's candidates with them, and remove
 * counts what the inner index removed. */
static simil_status sml_refine_same_ids(const simil_index *index, const char *path)
{
    const sml_refine *r = sml_refine_of(index);
    const int64_t n = r->count;
    SML_RETURN_IF(r->inner->ntotal != n, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: %" PRId64 " refinement vectors for an inner index of %" PRId64,
                  path, n, r->inner->ntotal);
    int64_t *a, *b;
    SML_TRY(sml_alloc((void **)&a, (size_t)(n > 0 ? n : 1), sizeof *a, "ids"));
    simil_status s = sml_alloc((void **)&b, (size_t)(n > 0 ? n : 1), sizeof *b, "ids");
    if (s != SIMIL_OK) {
        sml_free(a);
        return s;
    }
    if (n > 0) memcpy(a, r->ids, sizeof *a * (size_t)n);
    r->inner->vt->ids(r->inner, b);
    sml_ids_sort(a, n);
    sml_ids_sort(b, n);
    for (int64_t i = 0; i < n && s == SIMIL_OK; i++)
        if (a[i] != b[i])
            s = sml_error(SIMIL_ERR_CORRUPT,
                          "'%s' is damaged: its refinement vectors and its inner index hold "
                          "different ids (%" PRId64 " against %" PRId64 ")",
                          path, a[i], b[i]);
    sml_free(a);
    sml_free(b);
    return s;
}

static simil_status sml_refine_load(simil_index *index, sml_reader *rd)
{
    sml_refine *r = sml_refine_of(index);
    r->inner->ntotal = index->ntotal;
    r->inner->next_id = index->next_id;
    r->inner->trained = index->trained;
    SML_TRY(r->inner->vt->load(r->inner, rd));
    uint64_t bytes;
    SML_TRY(sml_section_open(rd, sml_tag_refine_ids, &bytes));
    SML_RETURN_IF(bytes != sizeof(int64_t) * (uint64_t)index->ntotal, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: refinement ids for %llu vectors", rd->path,
                  (unsigned long long)(bytes / 8));
    SML_TRY(sml_refine_reserve(index, r, index->ntotal));
    SML_TRY(sml_section_read(rd, r->ids, (size_t)bytes));
    SML_TRY(sml_section_close(rd));
    SML_TRY(sml_section_open(rd, sml_tag_refine_vectors, &bytes));
    SML_RETURN_IF(bytes != sizeof(float) * (uint64_t)(index->ntotal * index->dim),
                  SIMIL_ERR_CORRUPT, "'%s' is damaged: refinement vectors of %llu bytes",
                  rd->path, (unsigned long long)bytes);
    SML_TRY(sml_section_read(rd, r->vectors, (size_t)bytes));
    SML_TRY(sml_section_close(rd));
    r->count = index->ntotal;
    SML_TRY(sml_ids_check(rd->path, r->count, r->ids, index->next_id));
    SML_TRY(sml_refine_same_ids(index, rd->path));
    return sml_id_map_build(&r->map, r->count, r->ids);
}

static void sml_refine_ids(const simil_index *index, int64_t *out)
{
    const sml_refine *r = sml_refine_of(index);
    if (r->count > 0) memcpy(out, r->ids, sizeof(int64_t) * (size_t)r->count);
}

static void sml_refine_destroy(simil_index *index)
{
    sml_refine *r = sml_refine_of(index);
    simil_index_destroy(r->inner);
    sml_free(r->vectors);
    sml_free(r->ids);
    sml_id_map_free(&r->map);
    sml_free(r);
}

static const sml_index_vtable sml_refine_vtable = {
    .train = sml_refine_train,
    .add = sml_refine_add,
    .search = sml_refine_search,
    .remove = sml_refine_remove,
    .reconstruct = sml_refine_reconstruct,
    .ids = sml_refine_ids,
    .reset = sml_refine_reset,
    .save = sml_refine_save,
    .load = sml_refine_load,
    .destroy = sml_refine_destroy,
};

simil_status sml_refine_init(simil_index *index)
{
    sml_refine *r;
    SML_TRY(sml_calloc((void **)&r, 1, sizeof *r, "a Refine index"));
    sml_index_spec inner = index->spec;
    inner.refine = 0;
    simil_status s = sml_index_inner(index, &inner, index->dim, index->metric, &r->inner);
    if (s != SIMIL_OK) {
        sml_free(r);
        return s;
    }
    index->impl = r;
    index->vt = &sml_refine_vtable;
    index->trained = r->inner->trained;
    return SIMIL_OK;
}
