/* index_range.c: range search (simil_index_range_search) over any index.
 *
 * A range search is a k-NN search whose k is large enough: results come
 * sorted, so when the k-th of a query lies outside the radius, every
 * neighbour inside it is among the first k (those the search ranks; for Flat,
 * all of them).  Each round searches the queries still open with the round's
 * k; a query whose k results all lie inside (and k < ntotal) stays open for
 * the next round at four times k.  Every round is an ordinary search, so the
 * GPU, the filters and every index type come with it, and results are
 * exactly those of search. */
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/vectors.h"
#include "index/index_internal.h"

enum { SML_RANGE_FIRST_K = 64, SML_RANGE_GROWTH = 4 };

/* Result slots (query x k) of one batch of a round: bounds its memory. */
static const int64_t sml_range_batch_slots = (int64_t)1 << 24;

/* The results found so far: query q's are count[q] pairs from start[q] in
 * a pool that grows as queries close. */
typedef struct sml_range_pool {
    int64_t *start;
    int64_t *count;
    int64_t *labels;
    float *distances;
    int64_t used;
    int64_t cap;
} sml_range_pool;

static simil_status sml_range_pool_take(sml_range_pool *p, int64_t q, int64_t n,
                                        const float *d, const int64_t *l)
{
    if (p->used + n > p->cap) {
        int64_t cap = p->cap * 2 > p->used + n ? p->cap * 2 : p->used + n;
        float *nd;
        int64_t *nl;
        SML_TRY(sml_alloc((void **)&nd, (size_t)cap, sizeof *nd, "range search results"));
        simil_status s = sml_alloc((void **)&nl, (size_t)cap, sizeof *nl, "range search results");
        if (s != SIMIL_OK) {
            sml_free(nd);
            return s;
        }
        if (p->used > 0) {
            memcpy(nd, p->distances, (size_t)p->used * sizeof *nd);
            memcpy(nl, p->labels, (size_t)p->used * sizeof *nl);
        }
        sml_free(p->distances);
        sml_free(p->labels);
        p->distances = nd;
        p->labels = nl;
        p->cap = cap;
    }
    p->start[q] = p->used;
    p->count[q] = n;
    if (n > 0) { /* with nothing pooled yet the arrays are NULL */
        memcpy(p->distances + p->used, d, (size_t)n * sizeof *d);
        memcpy(p->labels + p->used, l, (size_t)n * sizeof *l);
    }
    p->used += n;
    return SIMIL_OK;
}

static void sml_range_pool_free(sml_range_pool *p)
{
    sml_free(p->start);
    sml_free(p->count);
    sml_free(p->labels);
    sml_free(p->distances);
}

/* One batch of a round: the m open queries open[0..m) searched with k; those
 * that close go to the pool, the rest are written back to open[0..*left). */
static simil_status sml_range_batch(const simil_index *index, const float *queries,
                                    float radius, const simil_search_params *params,
                                    int64_t k, int64_t *open, int64_t m, float *x, float *d,
                                    int64_t *l, sml_range_pool *pool, int64_t *left)
{
    const int64_t dim = index->dim;
    for (int64_t i = 0; i < m; i++)
        memcpy(x + i * dim, queries + open[i] * dim, (size_t)dim * sizeof *x);
    SML_TRY(simil_index_search(index, m, x, k, params, d, l));
    const int l2 = index->metric == SIMIL_METRIC_L2;
    *left = 0;
    for (int64_t i = 0; i < m; i++) {
        const float *di = d + i * k;
        const int64_t *li = l + i * k;
        int64_t in = 0;
        while (in < k && li[in] >= 0 && (l2 ? di[in] < radius : di[in] > radius)) in++;
        if (in == k && k < index->ntotal)
            open[(*left)++] = open[i];
        else
            SML_TRY(sml_range_pool_take(pool, open[i], in, di, li));
    }
    return SIMIL_OK;
}

/* Rounds of growing k until no query is open. */
static simil_status sml_range_rounds(const simil_index *index, int64_t nq, const float *queries,
                                     float radius, const simil_search_params *params,
                                     sml_range_pool *pool)
{
    int64_t *open;
    SML_TRY(sml_alloc((void **)&open, (size_t)nq, sizeof *open, "range search queries"));
    for (int64_t q = 0; q < nq; q++) open[q] = q;
    int64_t nopen = nq;
    int64_t k = index->ntotal < SML_RANGE_FIRST_K ? index->ntotal : SML_RANGE_FIRST_K;
    float *x = NULL, *d = NULL;
    int64_t *l = NULL;
    simil_status s = SIMIL_OK;
    while (s == SIMIL_OK && nopen > 0) {
        int64_t batch = sml_range_batch_slots / k;
        if (batch < 1) batch = 1;
        if (batch > nopen) batch = nopen;
        sml_free(x);
        sml_free(d);
        sml_free(l);
        x = NULL, d = NULL, l = NULL;
        s = sml_alloc((void **)&x, (size_t)(batch * index->dim), sizeof *x, "range queries");
        if (s == SIMIL_OK) s = sml_alloc((void **)&d, (size_t)(batch * k), sizeof *d, "range");
        if (s == SIMIL_OK) s = sml_alloc((void **)&l, (size_t)(batch * k), sizeof *l, "range");
        int64_t kept = 0;
        for (int64_t b = 0; s == SIMIL_OK && b < nopen; b += batch) {
            const int64_t m = nopen - b < batch ? nopen - b : batch;
            int64_t left = 0;
            s = sml_range_batch(index, queries, radius, params, k, open + b, m, x, d, l, pool,
                                &left);
            /* the open ones move down to open[kept..); b >= kept throughout */
            if (s == SIMIL_OK) memmove(open + kept, open + b, (size_t)left * sizeof *open);
            kept += left;
        }
        nopen = kept;
        k = k > index->ntotal / SML_RANGE_GROWTH ? index->ntotal : k * SML_RANGE_GROWTH;
    }
    sml_free(x);
    sml_free(d);
    sml_free(l);
    sml_free(open);
    return s;
}

/* The pool, in query order, as the caller's CSR result. */
static simil_status sml_range_result_of(const sml_range_pool *pool, int64_t nq,
                                        simil_range_result **result)
{
    simil_range_result *r;
    SML_TRY(sml_calloc((void **)&r, 1, sizeof *r, "range search result"));
    r->nq = nq;
    const size_t total = (size_t)pool->used;
    simil_status s = sml_alloc((void **)&r->offsets, (size_t)nq + 1, sizeof *r->offsets,
                               "range search offsets");
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&r->labels, total ? total : 1, sizeof *r->labels,
                      "range search labels");
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&r->distances, total ? total : 1, sizeof *r->distances,
                      "range search distances");
    if (s != SIMIL_OK) {
        simil_range_result_destroy(r);
        return s;
    }
    r->offsets[0] = 0;
    for (int64_t q = 0; q < nq; q++) {
        const int64_t at = r->offsets[q], n = pool->count[q];
        if (n > 0) { /* an empty pool's arrays are NULL */
            memcpy(r->labels + at, pool->labels + pool->start[q], (size_t)n * sizeof *r->labels);
            memcpy(r->distances + at, pool->distances + pool->start[q],
                   (size_t)n * sizeof *r->distances);
        }
        r->offsets[q + 1] = at + n;
    }
    *result = r;
    return SIMIL_OK;
}

simil_status simil_index_range_search(const simil_index *index, int64_t nq,
                                      const float *queries, float radius,
                                      const simil_search_params *params,
                                      simil_range_result **result)
{
    SML_RETURN_IF(result == NULL, SIMIL_ERR_INVALID_ARGUMENT, "range search: result is NULL");
    *result = NULL;
    SML_RETURN_IF(index == NULL, SIMIL_ERR_INVALID_ARGUMENT, "range search: index is NULL");
    SML_RETURN_IF(nq < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "range search: nq=%" PRId64 " is negative", nq);
    SML_RETURN_IF(nq > 0 && queries == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "range search: queries is NULL");
    SML_RETURN_IF(isnan(radius) || isinf(radius), SIMIL_ERR_INVALID_ARGUMENT,
                  "range search: the radius is %g; it must be a finite number", (double)radius);
    SML_RETURN_IF(index->metric == SIMIL_METRIC_L2 && radius < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "range search: the radius %g is negative; an L2 radius is a squared "
                  "distance, 0 or more",
                  (double)radius);
    SML_RETURN_IF(nq > 0 && sml_cuda_pointer_is_device(queries), SIMIL_ERR_INVALID_ARGUMENT,
                  "range search: the queries are in GPU memory; pass host memory");
    SML_RETURN_IF(!index->trained, SIMIL_ERR_NOT_TRAINED,
                  "index '%s' is not trained; call train and add before range search",
                  index->description);
    sml_range_pool pool = {0};
    simil_status s = sml_calloc((void **)&pool.start, (size_t)nq + 1, sizeof *pool.start,
                                "range search results");
    if (s == SIMIL_OK)
        s = sml_calloc((void **)&pool.count, (size_t)nq + 1, sizeof *pool.count,
                       "range search results");
    /* an empty index finds nothing, but the queries are still checked */
    if (s == SIMIL_OK && nq > 0 && index->ntotal == 0)
        s = sml_vectors_check(queries, nq, index->dim, index->metric != SIMIL_METRIC_COSINE,
                              "range search");
    else if (s == SIMIL_OK && nq > 0)
        s = sml_range_rounds(index, nq, queries, radius, params, &pool);
    if (s == SIMIL_OK) s = sml_range_result_of(&pool, nq, result);
    sml_range_pool_free(&pool);
    return s;
}

void simil_range_result_destroy(simil_range_result *result)
{
    if (result == NULL) return;
    sml_free(result->offsets);
    sml_free(result->labels);
    sml_free(result->distances);
    sml_free(result);
}
