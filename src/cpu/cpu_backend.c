/* cpu_backend.c: the CPU backend.  Backend memory is host memory, so the
 * memory operations are allocations and copies; the compute operations are
 * in the other cpu_*.c files. */
#include "core/backend.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/cluster_order.h"
#include "core/error.h"
#include "cpu/cpu_ivf.h"
#include "cpu/cpu_knn.h"
#include "cpu/cpu_select.h"
#include "cpu/cpu_xfbq.h"

/* k x dim doubles that cluster_sums accumulates in one pass (512 KB). */
enum { SML_CPU_DIRECT_SUMS = 1 << 16 };

static void sml_cpu_close(sml_backend *b) { sml_free(b); }

static simil_status sml_cpu_mem_alloc(sml_backend *b, size_t bytes, void **mem)
{
    return sml_alloc(mem, bytes, 1, "index data");
}

static void sml_cpu_mem_free(sml_backend *b, void *mem) { sml_free(mem); }

static simil_status sml_cpu_mem_copy(sml_backend *b, void *dst, const void *src, size_t bytes)
{
    if (bytes > 0) memcpy(dst, src, bytes);
    return SIMIL_OK;
}

static simil_status sml_cpu_move_rows(sml_backend *b, void *dst, const int64_t *dst_rows,
                                      const void *src, const int64_t *src_rows,
                                      size_t row_bytes, int64_t n)
{
    char *d = dst;
    const char *s = src;
    assert(row_bytes % 4 == 0 && (n == 0 || d != s));
#pragma omp parallel for schedule(static) if (n * (int64_t)row_bytes > (1 << 20))
    for (int64_t i = 0; i < n; i++) {
        int64_t to = dst_rows ? dst_rows[i] : i, from = src_rows ? src_rows[i] : i;
        memcpy(d + (size_t)to * row_bytes, s + (size_t)from * row_bytes, row_bytes);
    }
    return SIMIL_OK;
}

static simil_status sml_cpu_row_norms(sml_backend *b, int64_t n, int64_t dim, const float *x,
                                      float *norms)
{
#pragma omp parallel for schedule(static) if (n * dim > (1 << 18))
    for (int64_t i = 0; i < n; i++) norms[i] = sml_cpu_dot(x + i * dim, x + i * dim, dim);
    return SIMIL_OK;
}

static simil_status sml_cpu_knn_op(sml_backend *b, const sml_knn_args *args)
{
    assert(args->k >= 1 && args->n >= 0 && args->nq >= 0);
    assert(args->metric == SIMIL_METRIC_L2 || args->metric == SIMIL_METRIC_IP);
    return sml_cpu_knn(args);
}

/* One row at a time per thread through the buffered top-k (cpu_select.h);
 * NaN counts as +inf, as on the GPU. */
static simil_status sml_cpu_select_k(sml_backend *b, int64_t rows, int64_t cols,
                                     const float *values, int64_t k, int largest,
                                     float *out_values, int64_t *out_indices)
{
    int64_t kept = k < cols ? k : cols;
    int64_t cap = sml_topk_capacity(kept > 0 ? kept : 1);
    int threads = omp_get_max_threads();
    sml_topk_pair *storage;
    SML_TRY(sml_alloc((void **)&storage, (size_t)(threads * cap), sizeof *storage,
                      "selection buffers"));
    float sign = largest ? -1.0f : 1.0f;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 16)
    for (int64_t r = 0; r < rows; r++) {
        sml_topk t;
        sml_topk_reset(&t, storage + omp_get_thread_num() * cap, kept > 0 ? kept : 1);
        const float *row = values + r * cols;
        for (int64_t j = 0; j < cols; j++) {
            float key = sign * row[j];
            sml_topk_push(&t, isnan(key) ? INFINITY : key, j);
        }
        float *out = out_values + r * k;
        int64_t *idx = out_indices + r * k;
        sml_topk_finish(&t, out, idx);
        for (int64_t j = 0; j < k; j++) {
            if (j >= kept) {
                out[j] = INFINITY;
                idx[j] = -1;
            }
            out[j] *= sign;
        }
    }
    sml_free(storage);
    return SIMIL_OK;
}

/* Sums of few short centroids (k-means in PQ sub-spaces: 256 x 14): one
 * pass over the rows in order into k x dim doubles.  Each cluster still adds
 * its rows in ascending order, so the sums are those of the sorted path
 * below, without its counting sort and scattered row reads (19% of the CPU
 * time of an IVF256,PQ56 build on Fashion-MNIST went to them). */
static simil_status sml_cpu_cluster_sums_direct(int64_t n, int64_t dim, const float *x,
                                                const int64_t *labels, int64_t k, float *sums,
                                                int64_t *counts)
{
    double *acc;
    SML_TRY(sml_calloc((void **)&acc, (size_t)(k * dim), sizeof *acc, "cluster sums"));
    memset(counts, 0, sizeof *counts * (size_t)k);
    for (int64_t r = 0; r < n; r++) {
        const int64_t c = labels[r];
        double *a = acc + c * dim;
        const float *row = x + r * dim;
        counts[c]++;
        for (int64_t j = 0; j < dim; j++) a[j] += row[j];
    }
    for (int64_t i = 0; i < k * dim; i++) sums[i] = (float)acc[i];
    sml_free(acc);
    return SIMIL_OK;
}

/* Rows grouped by cluster, then each cluster summed in row order (in double)
 * by whichever thread takes it: the same sums for any thread count. */
static simil_status sml_cpu_cluster_sums(sml_backend *b, int64_t n, int64_t dim, const float *x,
                                         const int64_t *labels, int64_t k, float *sums,
                                         int64_t *counts)
{
    if (k * dim <= SML_CPU_DIRECT_SUMS)
        return sml_cpu_cluster_sums_direct(n, dim, x, labels, k, sums, counts);
    int threads = omp_get_max_threads();
    int64_t *offsets = NULL, *order = NULL;
    double *acc = NULL;
    simil_status s = sml_alloc((void **)&offsets, (size_t)(k + 1), sizeof *offsets,
                               "cluster offsets");
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&order, (size_t)(n > 0 ? n : 1), sizeof *order, "cluster order");
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&acc, (size_t)(threads * dim), sizeof *acc, "cluster sums");
    if (s == SIMIL_OK) s = sml_cluster_order(n, labels, k, offsets, order);
    if (s == SIMIL_OK) {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 16)
        for (int64_t c = 0; c < k; c++) {
            double *a = acc + omp_get_thread_num() * dim;
            memset(a, 0, sizeof *a * (size_t)dim);
            for (int64_t o = offsets[c]; o < offsets[c + 1]; o++) {
                const float *row = x + order[o] * dim;
                for (int64_t j = 0; j < dim; j++) a[j] += row[j];
            }
            for (int64_t j = 0; j < dim; j++) sums[c * dim + j] = (float)a[j];
            counts[c] = offsets[c + 1] - offsets[c];
        }
    }
    sml_free(acc);
    sml_free(order);
    sml_free(offsets);
    return s;
}

static const sml_backend_ops sml_cpu_ops = {
    .close = sml_cpu_close,
    .mem_alloc = sml_cpu_mem_alloc,
    .mem_free = sml_cpu_mem_free,
    .mem_upload = sml_cpu_mem_copy,
    .mem_download = sml_cpu_mem_copy,
    .mem_copy = sml_cpu_mem_copy,
    .mem_move_rows = sml_cpu_move_rows,
    .row_norms = sml_cpu_row_norms,
    .knn = sml_cpu_knn_op,
    .knn_join = sml_cpu_knn_join,
    .ivf_flat_scan = sml_cpu_ivf_flat_scan,
    .ivf_pq_scan = sml_cpu_ivf_pq_scan,
    .ivf_pq_ip_vector_codes = 1,
    .pq_encode = sml_cpu_pq_encode,
    .sq_scan = sml_cpu_sq_scan,
    .xfbq_scan = sml_cpu_xfbq_scan,
    .select_k = sml_cpu_select_k,
    .cluster_sums = sml_cpu_cluster_sums,
    .shadow_sync = NULL,
    .shadow_free = NULL,
};

simil_status sml_cpu_backend_open(sml_backend **out)
{
    sml_backend *b;
    SML_TRY(sml_calloc((void **)&b, 1, sizeof *b, "the CPU backend"));
    b->ops = &sml_cpu_ops;
    b->gpu = -1;
    b->batch_max_queries = SML_CPU_KNN_DIRECT_MAX_QUERIES;
    b->batch_max_k = SML_CPU_KNN_DIRECT_MAX_K;
    b->batch_lanes = 1;
    int threads = omp_get_max_threads();
    snprintf(b->name, sizeof b->name, "cpu (%d thread%s)", threads, threads == 1 ? "" : "s");
    *out = b;
    return SIMIL_OK;
}
