/* cpu_knn.c: exact k-NN on the CPU.
 *
 * Large batches follow the GPU paper's exact-search layout on the CPU: for a
 * block of queries and a tile of the base, one OpenBLAS sgemm gives
 * -2<q,y> (or -<q,y> for IP), then each query's row gets ||y||^2 added and is
 * streamed through that query's top-k (cpu_select.h), in parallel over
 * queries.  ||q||^2 is added after selection since it cannot change the order.
 * Memory stays bounded for any n and k: one tile plus the top-k buffers.
 *
 * Small batches (a few queries, modest k) skip the GEMM: threads split the
 * base, compute distances directly (exact, no cancellation) with SIMD loops,
 * keep per-thread top-k lists, and merge them.
 *
 * k = 1 against a base of short vectors that fits a core's caches (k-means in
 * the sub-spaces of a product quantizer) skips it too: cpu_nearest.h.
 *
 * Under a filter, the small batches skip the refused rows, and the GEMM
 * blocks multiply only the allowed rows of each tile, gathered with their ids
 * and norms: the work falls with the share of ids allowed.  Which rows a
 * tile gathers depends on the filter and the tile alone, not on the threads;
 * a row's key may differ in its last bits from an unfiltered search's, whose
 * GEMM holds it at another place. */
#include "cpu/cpu_knn.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <string.h>

#include "core/alloc.h"
#include "core/blas.h"
#include "core/error.h"
#include "cpu/cpu_nearest.h"

enum {
    SML_DIRECT_MAX_QUERIES = SML_CPU_KNN_DIRECT_MAX_QUERIES,
    SML_DIRECT_MAX_K = SML_CPU_KNN_DIRECT_MAX_K,
    SML_QUERY_BLOCK = 512,
    SML_BASE_TILE = 2048,
    SML_NEAREST_MAX_DIM = 32,
    SML_NEAREST_MAX_BYTES = 64 << 10,
    SML_GATHER_BYTES = 8 << 20
};

/* Bytes the top-k buffers of one query block may take. */
static const size_t sml_topk_budget = (size_t)256 << 20;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SML_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SML_SIMD_CLONES
#endif

SML_SIMD_CLONES float sml_cpu_dot(const float *a, const float *b, int64_t dim)
{
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < dim; j++) s += a[j] * b[j];
    return s;
}

SML_SIMD_CLONES float sml_cpu_l2sq(const float *a, const float *b, int64_t dim)
{
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < dim; j++) {
        float d = a[j] - b[j];
        s += d * d;
    }
    return s;
}

static int sml_thread_count(int requested)
{
    return requested > 0 ? requested : omp_get_max_threads();
}

/* Turn selected keys into the caller's distances: add ||q||^2 and clamp
 * rounding below zero for L2, flip the sign back for IP. */
static void sml_keys_to_distances(const sml_knn_args *a, const float *query, float *d)
{
    if (a->metric == SIMIL_METRIC_L2) {
        float qn = sml_cpu_dot(query, query, a->dim);
        for (int64_t j = 0; j < a->k; j++) {
            float v = d[j] + qn;
            d[j] = v > 0 ? v : 0;
        }
    } else {
        for (int64_t j = 0; j < a->k; j++) d[j] = -d[j];
    }
}

/* Base row i's keys for every query, into the queries' lists. */
static inline void sml_knn_direct_row(const sml_knn_args *a, int64_t i, sml_topk *lists)
{
    const float *y = a->base + i * a->dim;
    for (int64_t q = 0; q < a->nq; q++) {
        const float *x = a->queries + q * a->dim;
        float key = a->metric == SIMIL_METRIC_L2 ? sml_cpu_l2sq(x, y, a->dim)
                                                 : -sml_cpu_dot(x, y, a->dim);
        sml_topk_push(&lists[q], key, a->base_ids[i]);
    }
}

static simil_status sml_knn_direct(const sml_knn_args *a)
{
    int threads = sml_thread_count(a->threads);
    int64_t max_useful = (a->n + 1023) / 1024;
    if (threads > max_useful) threads = (int)(max_useful > 0 ? max_useful : 1);
    int64_t cap = sml_topk_capacity(a->k);
    sml_topk_pair *storage;
    sml_topk *lists;
    SML_TRY(sml_alloc((void **)&storage, (size_t)(threads * a->nq * cap), sizeof *storage,
                      "k-NN candidate lists"));
    simil_status s = sml_alloc((void **)&lists, (size_t)(threads * a->nq), sizeof *lists,
                               "k-NN candidate lists");
    if (s != SIMIL_OK) {
        sml_free(storage);
        return s;
    }
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num();
        int64_t lo = a->n * t / threads, hi = a->n * (t + 1) / threads;
        sml_topk *mine = lists + t * a->nq;
        for (int64_t q = 0; q < a->nq; q++)
            sml_topk_reset(&mine[q], storage + (t * a->nq + q) * cap, a->k);
        if (a->filter == NULL) {
            for (int64_t i = lo; i < hi; i++) sml_knn_direct_row(a, i, mine);
        } else {
            /* a chunk's allowed rows first, without a branch per row's test
             * (sml_allowed_rows) */
            int64_t pick[SML_ALLOWED_CHUNK];
            for (int64_t i0 = lo; i0 < hi; i0 += SML_ALLOWED_CHUNK) {
                const int np = sml_allowed_rows(a->filter, a->base_ids, i0, hi, pick);
                for (int p = 0; p < np; p++) sml_knn_direct_row(a, pick[p], mine);
            }
        }
    }
    for (int64_t q = 0; q < a->nq; q++) {
        for (int t = 1; t < threads; t++) sml_topk_merge(&lists[q], &lists[t * a->nq + q]);
        float *d = a->distances + q * a->k;
        sml_topk_finish(&lists[q], d, a->labels + q * a->k);
        if (a->metric == SIMIL_METRIC_IP)
            for (int64_t j = 0; j < a->k; j++) d[j] = -d[j];
    }
    sml_free(lists);
    sml_free(storage);
    return SIMIL_OK;
}

/* Keys of m queries against w base rows (rows, their labels and, for L2,
 * their norms): one GEMM into scores (m x w), the norms added, each query's
 * row pushed into its list. */
static void sml_knn_tile(const sml_knn_args *a, const float *queries, int64_t m,
                         const float *rows, const int64_t *ids, const float *norms, int64_t w,
                         float *scores, sml_topk *lists)
{
    const float alpha = a->metric == SIMIL_METRIC_L2 ? -2.0f : -1.0f;
    sml_sgemm(0, 1, m, w, a->dim, alpha, queries, a->dim, rows, a->dim, 0.0f, scores, w);
    for (int64_t i = 0; i < m; i++) {
        float *row = scores + i * w;
        if (norms != NULL) {
#pragma omp simd
            for (int64_t j = 0; j < w; j++) row[j] += norms[j];
        }
        sml_topk_push_row(&lists[i], row, w, ids, 0);
    }
}

void sml_cpu_knn_block_scan(const sml_knn_args *a, const float *queries, int64_t m,
                            int64_t first, int64_t count, int64_t tile, float *scores,
                            sml_topk *lists)
{
    /* a filtered search gathers its allowed rows (sml_knn_scan_allowed) */
    assert(a->filter == NULL);
    for (int64_t b0 = first; b0 < first + count; b0 += tile) {
        const int64_t w = first + count - b0 < tile ? first + count - b0 : tile;
        sml_knn_tile(a, queries, m, a->base + b0 * a->dim, a->base_ids + b0,
                     a->base_norms ? a->base_norms + b0 : NULL, w, scores, lists);
    }
}

void sml_cpu_knn_block_finish(const sml_knn_args *a, const float *queries, int64_t m,
                              sml_topk *lists, float *distances, int64_t *labels)
{
    for (int64_t i = 0; i < m; i++) {
        float *d = distances + i * a->k;
        sml_topk_finish(&lists[i], d, labels + i * a->k);
        sml_keys_to_distances(a, queries + i * a->dim, d);
    }
}

/* A thread's scratch for a filtered GEMM block: a tile's allowed rows. */
typedef struct sml_knn_gather {
    float *rows;    /* tile x dim */
    int64_t *ids;   /* tile */
    float *norms;   /* tile (L2) */
} sml_knn_gather;

/* sml_cpu_knn_block_scan over the whole base under a->filter: each tile's
 * allowed rows gathered into g (their norms only for L2), and only they
 * multiplied. */
static void sml_knn_scan_allowed(const sml_knn_args *a, const float *queries, int64_t m,
                                 int64_t tile, float *scores, sml_topk *lists,
                                 const sml_knn_gather *g)
{
    assert(a->filter != NULL);
    const size_t row_bytes = sizeof(float) * (size_t)a->dim;
    int64_t pick[SML_ALLOWED_CHUNK];
    for (int64_t b0 = 0; b0 < a->n; b0 += tile) {
        const int64_t end = a->n - b0 < tile ? a->n : b0 + tile;
        int64_t c = 0;
        for (int64_t i0 = b0; i0 < end; i0 += SML_ALLOWED_CHUNK) {
            const int np = sml_allowed_rows(a->filter, a->base_ids, i0, end, pick);
            for (int p = 0; p < np; p++, c++) {
                memcpy(g->rows + c * a->dim, a->base + pick[p] * a->dim, row_bytes);
                g->ids[c] = a->base_ids[pick[p]];
                if (a->base_norms != NULL) g->norms[c] = a->base_norms[pick[p]];
            }
        }
        if (c > 0)
            sml_knn_tile(a, queries, m, g->rows, g->ids, a->base_norms ? g->norms : NULL, c,
                         scores, lists);
    }
}

/* Queries [q0, q0 + m) against the whole base, tile by tile, with one set of
 * scratch (g: under a filter). */
static void sml_knn_gemm_block(const sml_knn_args *a, int64_t q0, int64_t m, int64_t tile,
                               float *scores, sml_topk_pair *storage, sml_topk *lists,
                               const sml_knn_gather *g)
{
    int64_t cap = sml_topk_capacity(a->k);
    const float *queries = a->queries + q0 * a->dim;
    for (int64_t i = 0; i < m; i++) sml_topk_reset(&lists[i], storage + i * cap, a->k);
    if (a->filter != NULL)
        sml_knn_scan_allowed(a, queries, m, tile, scores, lists, g);
    else
        sml_cpu_knn_block_scan(a, queries, m, 0, a->n, tile, scores, lists);
    sml_cpu_knn_block_finish(a, queries, m, lists, a->distances + q0 * a->k,
                             a->labels + q0 * a->k);
}

/* OpenBLAS's pthread build runs every sgemm on one pool of its own threads.
 * Called from many threads at once, the callers queue on the pool's locks
 * while the pool spins in sched_yield: on two cores a 62-query search took
 * seconds instead of milliseconds.  Python programs meet that build, because
 * numpy loads Debian's default libopenblas.so.0 (the pthread one) before
 * libsimil, whose OpenMP OpenBLAS has the same soname and is then never
 * loaded.  With that build one thread issues the GEMMs, which OpenBLAS
 * spreads over its pool, and selects too: the pool's threads spin after each
 * GEMM, and an OpenMP team selecting beside them fought them for the cores
 * (docs/benchmarks.md, "CPU against Faiss CPU", has the figures). */
bool sml_cpu_blas_one_caller(void)
{
    return sml_blas_parallel() == 1;
}

/* Threads take query blocks of up to SML_QUERY_BLOCK rows; inside the
 * parallel region OpenBLAS (its OpenMP build) runs single-threaded, so each
 * thread's GEMM tile stays in its own cache and no thread waits on another.
 * OpenBLAS's pthread build gets one caller instead (above). */
static simil_status sml_knn_gemm(const sml_knn_args *a)
{
    int threads = sml_thread_count(a->threads);
    int64_t cap = sml_topk_capacity(a->k);
    /* The block size depends on nq and k only, never on the thread count:
     * GEMM rounding depends on where a row falls in its block, and results
     * must not change with the number of threads. */
    int64_t qb = ((a->nq + 7) / 8 + 31) / 32 * 32;
    if (qb > SML_QUERY_BLOCK) qb = SML_QUERY_BLOCK;
    int64_t qb_budget = (int64_t)(sml_topk_budget / ((size_t)cap * sizeof(sml_topk_pair)));
    if (qb > qb_budget) qb = qb_budget > 0 ? qb_budget : 1;
    int64_t tile = a->n < SML_BASE_TILE ? a->n : SML_BASE_TILE;
    /* a filter's gathered rows take tile x dim floats a thread: at most
     * SML_GATHER_BYTES (but 64 rows) */
    const int64_t gather_rows = (int64_t)(SML_GATHER_BYTES / (sizeof(float) * (size_t)a->dim));
    if (a->filter != NULL && tile > gather_rows) tile = gather_rows > 64 ? gather_rows : 64;
    int64_t blocks = (a->nq + qb - 1) / qb;
    if (threads > blocks) threads = (int)blocks;
    /* under an address-space limit, as many callers as have room */
    SML_TRY(sml_blas_callers(threads, &threads));
    if (sml_cpu_blas_one_caller()) threads = 1;

    float *scores = NULL;
    sml_topk_pair *storage = NULL;
    sml_topk *lists = NULL;
    simil_status s = sml_alloc((void **)&scores, (size_t)(threads * qb * tile), sizeof *scores,
                               "distance tiles");
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&storage, (size_t)(threads * qb * cap), sizeof *storage,
                      "k-NN candidate lists");
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&lists, (size_t)(threads * qb), sizeof *lists,
                      "k-NN candidate lists");
    float *grows = NULL, *gnorms = NULL;
    int64_t *gids = NULL;
    if (s == SIMIL_OK && a->filter != NULL) {
        s = sml_alloc((void **)&grows, (size_t)(threads * tile), sizeof(float) * (size_t)a->dim,
                      "allowed rows");
        if (s == SIMIL_OK)
            s = sml_alloc((void **)&gids, (size_t)(threads * tile), sizeof *gids, "allowed rows");
        if (s == SIMIL_OK && a->base_norms != NULL)
            s = sml_alloc((void **)&gnorms, (size_t)(threads * tile), sizeof *gnorms,
                          "allowed rows");
    }
    if (s == SIMIL_OK) {
#pragma omp parallel for num_threads(threads) schedule(dynamic)
        for (int64_t b = 0; b < blocks; b++) {
            /* A team of one is not "in parallel" to OpenBLAS, which would then
             * start threads of its own; this task's ICV keeps it at one. */
            omp_set_num_threads(1);
            int t = omp_get_thread_num();
            int64_t q0 = b * qb;
            int64_t m = a->nq - q0 < qb ? a->nq - q0 : qb;
            const sml_knn_gather g = {grows ? grows + t * tile * a->dim : NULL,
                                      gids ? gids + t * tile : NULL,
                                      gnorms ? gnorms + t * tile : NULL};
            sml_knn_gemm_block(a, q0, m, tile, scores + t * qb * tile, storage + t * qb * cap,
                               lists + t * qb, &g);
        }
    }
    sml_free(gnorms);
    sml_free(gids);
    sml_free(grows);
    sml_free(lists);
    sml_free(storage);
    sml_free(scores);
    return s;
}

/* k = 1, L2, against a base of short vectors that fits a core's caches (the
 * centroids of k-means in the sub-spaces of a product quantizer): each query
 * goes through cpu_nearest.h, which gives exact distances.  It returns the
 * smallest position among equal distances, which is the smallest label when
 * the labels ascend (k-means labels its centroids 0..k-1). */
static bool sml_knn_nearest_fits(const sml_knn_args *a)
{
    /* the book holds every row: a filter's refused rows would be found */
    if (a->filter != NULL || a->k != 1 || a->metric != SIMIL_METRIC_L2 ||
        a->dim > SML_NEAREST_MAX_DIM ||
        sml_nearest_book_bytes(a->n, a->dim) > SML_NEAREST_MAX_BYTES)
        return false;
    for (int64_t i = 1; i < a->n; i++)
        if (a->base_ids[i] <= a->base_ids[i - 1]) return false;
    return true;
}

static simil_status sml_knn_nearest(const sml_knn_args *a)
{
    sml_nearest_book book;
    SML_TRY(sml_nearest_book_init(&book, a->n, a->dim, a->base, a->dim));
    const int threads = sml_thread_count(a->threads);
#pragma omp parallel for num_threads(threads) schedule(static) if (a->nq * a->n > (1 << 16))
    for (int64_t q = 0; q < a->nq; q++) {
        float d;
        const int64_t j = sml_nearest(&book, a->queries + q * a->dim, &d);
        a->distances[q] = d;
        a->labels[q] = a->base_ids[j];
    }
    sml_nearest_book_free(&book);
    return SIMIL_OK;
}

simil_status sml_cpu_knn(const sml_knn_args *a)
{
    SML_RETURN_IF(a->metric != SIMIL_METRIC_L2 && a->metric != SIMIL_METRIC_IP,
                  SIMIL_ERR_INTERNAL, "cpu knn called with metric %d", (int)a->metric);
    SML_RETURN_IF(a->dim > INT32_MAX || a->n > (int64_t)1 << 40, SIMIL_ERR_UNSUPPORTED,
                  "dimension %" PRId64 " is larger than OpenBLAS supports", a->dim);
    if (a->n == 0 || a->nq == 0) {
        for (int64_t i = 0; i < a->nq * a->k; i++) {
            a->distances[i] = a->metric == SIMIL_METRIC_L2 ? INFINITY : -INFINITY;
            a->labels[i] = -1;
        }
        return SIMIL_OK;
    }
    if (sml_knn_nearest_fits(a)) return sml_knn_nearest(a);
    if (a->nq <= SML_DIRECT_MAX_QUERIES && a->k <= SML_DIRECT_MAX_K) return sml_knn_direct(a);
    return sml_knn_gemm(a);
}
