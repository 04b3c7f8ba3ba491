/* stream_search.c: exact search of a source larger than device (or host)
 * memory, simil_source_search (simil/stream.h).
 *
 * The base goes through the backend in chunks (stream_chunks.h): generated
 * in device memory, or read on the host while the previous chunk is
 * searched and uploaded through two pinned buffers on the copier's stream.
 * Each chunk is searched as a small flat index would be (row norms, the fp16
 * shadow of the GPU's exact tensor-core path, ids 0..n-1), by the backend's
 * exact k-NN, and its k best per query are merged on the host into the
 * running k best, ids shifted by the chunk's first row.  Every chunk's list
 * is exact, so the merged one is. */
#include <math.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/trace.h"
#include "core/vectors.h"
#include "index/index_internal.h"
#include "index/stream_chunks.h"

/* Default chunk: about 1 GiB of floats, at least 65,536 rows. */
static int64_t sml_stream_search_chunk(int64_t dim)
{
    const int64_t rows = ((int64_t)1 << 30) / (4 * dim);
    return rows > 65536 ? rows : 65536;
}

void simil_stream_params_init(simil_stream_params *params)
{
    if (params == NULL) return;
    memset(params, 0, sizeof *params);
    params->device = "auto";
    params->first_id = -1;
}

/* Whether (d1, l1) ranks before (d2, l2): by key, then by id; empty slots
 * (label -1) last. */
static int sml_ranks_before(int ip, float d1, int64_t l1, float d2, int64_t l2)
{
    if (l2 < 0) return l1 >= 0;
    if (l1 < 0) return 0;
    if (d1 != d2) return ip ? d1 > d2 : d1 < d2;
    return l1 < l2;
}

/* Merge each query's k results of a chunk (labels relative to its first
 * row) into its running k. */
static void sml_stream_merge(int ip, int64_t nq, int64_t k, int64_t first, const float *cd,
                             const int64_t *cl, float *rd, int64_t *rl, float *tmp_d,
                             int64_t *tmp_l)
{
#pragma omp parallel for schedule(static) if (nq * k > 4096)
    for (int64_t q = 0; q < nq; q++) {
        const float *ad = rd + q * k, *bd = cd + q * k;
        const int64_t *al = rl + q * k, *bl = cl + q * k;
        float *od = tmp_d + q * k;
        int64_t *ol = tmp_l + q * k;
        int64_t i = 0, j = 0;
        for (int64_t o = 0; o < k; o++) {
            const int64_t lb = bl[j] < 0 ? -1 : bl[j] + first;
            if (j < k && sml_ranks_before(ip, bd[j], lb, ad[i], al[i])) {
                od[o] = bd[j];
                ol[o] = lb;
                j++;
            } else {
                od[o] = ad[i];
                ol[o] = al[i];
                i++;
            }
        }
        memcpy(rd + q * k, od, sizeof(float) * (size_t)k);
        memcpy(rl + q * k, ol, sizeof(int64_t) * (size_t)k);
    }
}

typedef struct sml_stream_search {
    sml_backend *b;
    simil_metric metric;      /* the kernels' */
    int64_t dim, nq, k, chunk_rows;
    const float *queries;     /* prepared */
    float *queries_mem;       /* backend: the prepared queries */
    int threads;
    float *norms_mem;         /* backend: chunk_rows */
    int64_t *ids_mem;         /* backend: 0..chunk_rows-1 */
    void *shadow;             /* the backend's fp16 copy of the chunk, or NULL */
    float *chunk_d;           /* host: nq x k of one chunk */
    int64_t *chunk_l;
    float *tmp_d;             /* host: merge space */
    int64_t *tmp_l;
} sml_stream_search;

static simil_status sml_stream_search_setup(sml_stream_search *s)
{
    sml_backend *b = s->b;
    const size_t results = (size_t)(s->nq * s->k), rows = (size_t)s->chunk_rows;
    int64_t *iota = NULL;
    SML_TRY(sml_alloc((void **)&s->chunk_d, results, sizeof(float), "search results"));
    SML_TRY(sml_alloc((void **)&s->chunk_l, results, sizeof(int64_t), "search results"));
    SML_TRY(sml_alloc((void **)&s->tmp_d, results, sizeof(float), "search results"));
    SML_TRY(sml_alloc((void **)&s->tmp_l, results, sizeof(int64_t), "search results"));
    if (s->metric == SIMIL_METRIC_L2)
        SML_TRY(b->ops->mem_alloc(b, rows * sizeof(float), (void **)&s->norms_mem));
    SML_TRY(b->ops->mem_alloc(b, rows * sizeof(int64_t), (void **)&s->ids_mem));
    sml_trace_mark("stream: set-up, memory");
    /* the queries go up once, not once per chunk: on a GPU, an upload per
     * chunk queued behind the next chunk's copy on the same copy engine and
     * held every chunk's search for most of that copy (17 of 21 ms a
     * gigabyte at 100 queries on an H100) */
    const size_t query_bytes = sizeof(float) * (size_t)(s->nq * s->dim);
    SML_TRY(b->ops->mem_alloc(b, query_bytes, (void **)&s->queries_mem));
    SML_TRY(b->ops->mem_upload(b, s->queries_mem, s->queries, query_bytes));
    sml_trace_mark("stream: set-up, queries up");
    SML_TRY(sml_alloc((void **)&iota, rows, sizeof(int64_t), "row ids"));
    for (int64_t i = 0; i < s->chunk_rows; i++) iota[i] = i;
    simil_status st = b->ops->mem_upload(b, s->ids_mem, iota, rows * sizeof(int64_t));
    sml_free(iota);
    return st;
}

static void sml_stream_search_free(sml_stream_search *s)
{
    sml_backend *b = s->b;
    sml_free(s->chunk_d);
    sml_free(s->chunk_l);
    sml_free(s->tmp_d);
    sml_free(s->tmp_l);
    b->ops->mem_free(b, s->norms_mem);
    b->ops->mem_free(b, s->ids_mem);
    b->ops->mem_free(b, s->queries_mem);
    if (s->shadow != NULL) b->ops->shadow_free(b, s->shadow);
}

/* The fp16 shadow of a chunk: made once at the first chunk's size, then
 * refilled in place (an allocation would wait for the upload in flight). */
static simil_status sml_stream_shadow(sml_stream_search *s, const float *rows, int64_t n)
{
    sml_backend *b = s->b;
    if (b->ops->shadow_sync == NULL) return SIMIL_OK;
    if (s->shadow != NULL && b->ops->shadow_refill != NULL) {
        simil_status st = b->ops->shadow_refill(b, s->shadow, rows, n, s->dim);
        if (st == SIMIL_OK) return SIMIL_OK;
        b->ops->shadow_free(b, s->shadow);
        s->shadow = NULL;
        return st;
    }
    return b->ops->shadow_sync(b, &s->shadow, rows, 0, n, s->dim, s->metric);
}

static simil_status sml_stream_search_chunk_run(sml_stream_search *s, const float *rows,
                                                int64_t first, int64_t n, float *distances,
                                                int64_t *labels)
{
    sml_backend *b = s->b;
    if (s->norms_mem != NULL) SML_TRY(b->ops->row_norms(b, n, s->dim, rows, s->norms_mem));
    sml_trace_mark("stream: row norms");
    SML_TRY(sml_stream_shadow(s, rows, n));
    sml_trace_mark("stream: fp16 copy");
    const sml_knn_args stored = {
        .base = rows,
        .base_norms = s->norms_mem,
        .base_ids = s->ids_mem,
        .base_shadow = s->shadow,
        .n = n,
        .dim = s->dim,
        .metric = s->metric,
        .threads = s->threads,
    };
    const sml_knn_args args =
        sml_knn_of(stored, s->queries_mem, s->nq, s->k, s->chunk_d, s->chunk_l);
    SML_TRY(b->ops->knn(b, &args));
    sml_trace_mark("stream: knn");
    sml_stream_merge(s->metric == SIMIL_METRIC_IP, s->nq, s->k, first, s->chunk_d, s->chunk_l,
                     distances, labels, s->tmp_d, s->tmp_l);
    sml_trace_mark("stream: merge");
    return SIMIL_OK;
}

static simil_status sml_stream_search_run(sml_stream_search *s, const simil_source *base,
                                          int normalize, float *distances, int64_t *labels,
                                          simil_stream_stats *stats)
{
    const int64_t rows = simil_source_rows(base);
    const float empty = s->metric == SIMIL_METRIC_L2 ? INFINITY : -INFINITY;
    for (int64_t i = 0; i < s->nq * s->k; i++) {
        distances[i] = empty;
        labels[i] = -1;
    }
    if (rows == 0) return SIMIL_OK;
    sml_chunks *chunks = NULL;
    sml_trace_mark(NULL);
    simil_status st = sml_stream_search_setup(s);
    sml_trace_mark("stream: set-up");
    if (st == SIMIL_OK)
        st = sml_chunks_open(&chunks, s->b, base, s->chunk_rows, SML_CHUNKS_BACKEND,
                             normalize ? SML_CHUNKS_NORMALIZE : SML_CHUNKS_BOUND_NORMS, "the base");
    sml_trace_mark("stream: chunk reader opened");
    for (;;) {
        const float *chunk;
        int64_t first, n;
        if (st == SIMIL_OK) st = sml_chunks_next(chunks, &chunk, &first, &n);
        sml_trace_mark("stream: waiting for a chunk");
        if (st != SIMIL_OK || n == 0) break;
        st = sml_stream_search_chunk_run(s, chunk, first, n, distances, labels);
        sml_progress("search", first + n, rows);
    }
    if (chunks != NULL && stats != NULL) sml_chunks_stats(chunks, stats);
    sml_chunks_close(chunks);
    sml_stream_search_free(s);
    sml_trace_mark("stream: closed and freed");
    return st;
}

static double sml_stream_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static simil_status sml_stream_search_check(const simil_source *base, simil_metric metric,
                                            int64_t nq, const float *queries, int64_t k,
                                            const float *distances, const int64_t *labels)
{
    SML_RETURN_IF(base == NULL, SIMIL_ERR_INVALID_ARGUMENT, "simil_source_search: base is NULL");
    SML_RETURN_IF(metric != SIMIL_METRIC_L2 && metric != SIMIL_METRIC_IP &&
                      metric != SIMIL_METRIC_COSINE,
                  SIMIL_ERR_INVALID_ARGUMENT, "simil_source_search: unknown metric %d",
                  (int)metric);
    SML_RETURN_IF(nq < 0, SIMIL_ERR_INVALID_ARGUMENT, "search: nq=%" PRId64 " is negative", nq);
    SML_RETURN_IF(k < 1, SIMIL_ERR_INVALID_ARGUMENT, "search: k=%" PRId64 " must be >= 1", k);
    SML_RETURN_IF(nq > 0 && k > ((int64_t)1 << 40) / nq, SIMIL_ERR_INVALID_ARGUMENT,
                  "search: nq=%" PRId64 " x k=%" PRId64 " results is beyond 2^40 slots", nq, k);
    SML_RETURN_IF(nq > 0 && (queries == NULL || distances == NULL || labels == NULL),
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "search: queries, distances and labels must not be NULL");
    return SIMIL_OK;
}

simil_status simil_source_search(const simil_source *base, simil_metric metric, int64_t nq,
                                 const float *queries, int64_t k,
                                 const simil_stream_params *params, float *distances,
                                 int64_t *labels, simil_stream_stats *stats)
{
    const double t0 = sml_stream_now();
    if (stats != NULL) memset(stats, 0, sizeof *stats);
    SML_TRY(sml_stream_search_check(base, metric, nq, queries, k, distances, labels));
    simil_stream_params p;
    simil_stream_params_init(&p);
    if (params != NULL) p = *params;
    SML_RETURN_IF(p.chunk_rows < 0 || p.threads < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "search: chunk_rows=%" PRId64 " and threads=%d must not be negative",
                  p.chunk_rows, p.threads);
    if (nq == 0) return SIMIL_OK;
    const int64_t dim = simil_source_dim(base);
    const int cosine = metric == SIMIL_METRIC_COSINE;
    float *normalized = NULL;
    if (cosine) {
        SML_TRY(sml_alloc((void **)&normalized, (size_t)(nq * dim), sizeof(float), "queries"));
        const simil_status st =
            sml_vectors_check_normalize(queries, nq, dim, "search", 0, normalized);
        if (st != SIMIL_OK) {
            sml_free(normalized);
            return st;
        }
    } else {
        SML_TRY(sml_vectors_check(queries, nq, dim, 1, "search"));
    }
    sml_stream_search s = {
        .metric = sml_kernel_metric(metric),
        .dim = dim,
        .nq = nq,
        .k = k,
        .chunk_rows = p.chunk_rows > 0 ? p.chunk_rows : sml_stream_search_chunk(dim),
        .queries = cosine ? normalized : queries,
        .threads = p.threads,
    };
    const int64_t rows = simil_source_rows(base);
    if (s.chunk_rows > rows) s.chunk_rows = rows > 0 ? rows : 1;
    simil_status st = sml_device_open(p.device, &s.b);
    if (st == SIMIL_OK) st = sml_stream_search_run(&s, base, cosine, distances, labels, stats);
    sml_backend_close(s.b);
    sml_free(normalized);
    if (stats != NULL) stats->seconds = sml_stream_now() - t0;
    return st;
}
