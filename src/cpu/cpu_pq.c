/* cpu_pq.c: IVF-PQ on the CPU: encoding residuals, and scanning lists with
 * lookup tables (the GPU paper's IVFADC).  Threads take vectors (encode) or
 * queries (scan). */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "cpu/cpu_ivf.h"
#include "cpu/cpu_knn.h"
#include "cpu/cpu_select.h"

simil_status sml_cpu_pq_encode(sml_backend *b, const sml_pq_encode_args *a)
{
    int threads = omp_get_max_threads();
    float *res;
    SML_TRY(sml_alloc((void **)&res, (size_t)(threads * a->dim), sizeof *res, "residuals"));
#pragma omp parallel for num_threads(threads) schedule(static) if (a->n > 256)
    for (int64_t r = 0; r < a->n; r++) {
        float *v = res + omp_get_thread_num() * a->dim;
        const float *x = a->x + r * a->dim;
        const float *c = a->coarse + a->lists[r] * a->dim;
        for (int64_t t = 0; t < a->dim; t++) v[t] = x[t] - c[t];
        uint8_t *code = a->codes + (size_t)r * a->code_size;
        memset(code, 0, a->code_size);
        for (int64_t i = 0; i < a->m; i++) {
            const float *cb = a->codebooks + i * a->ksub * a->dsub;
            float best = FLT_MAX;
            int64_t arg = 0;
            for (int64_t j = 0; j < a->ksub; j++) {
                float d = sml_cpu_l2sq(v + i * a->dsub, cb + j * a->dsub, a->dsub);
                if (d < best) {
                    best = d;
                    arg = j;
                }
            }
            code[i] = (uint8_t)arg;
        }
    }
    sml_free(res);
    return SIMIL_OK;
}

/* The codebooks by dimension: by_dim[(i dsub + t) ksub + j] = q_ij[t], so
 * that building a table runs over the ksub codewords in the inner loop,
 * which vectorizes (a dot product of dsub floats per entry did not: building
 * the tables took most of a query's time at PQ16 on Fashion-MNIST).
 * Transposing costs as much as one query's table, once per call. */
static void sml_pq_by_dim(const sml_ivf_scan_args *a, float *by_dim)
{
    const int64_t m = a->pq_m, ksub = a->pq_ksub, dsub = a->pq_dsub;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ksub; j++)
            for (int64_t t = 0; t < dsub; t++)
                by_dim[(i * dsub + t) * ksub + j] = a->pq_codebooks[(i * ksub + j) * dsub + t];
}

/* Residual tables (L2 without term 1 in the rows): ||(x - c_l)_i - q_ij||^2. */
static void sml_pq_residual_table(const sml_ivf_scan_args *a, const float *by_dim,
                                  const float *x, int64_t l, float *res, float *lut)
{
    const int64_t m = a->pq_m, ksub = a->pq_ksub, dsub = a->pq_dsub;
    const float *c = a->coarse + l * a->dim;
    for (int64_t t = 0; t < a->dim; t++) res[t] = x[t] - c[t];
    for (int64_t e = 0; e < m * ksub; e++) lut[e] = 0.0f;
    for (int64_t i = 0; i < m; i++)
        for (int64_t t = 0; t < dsub; t++) {
            const float r = res[i * dsub + t];
            const float *q = by_dim + (i * dsub + t) * ksub;
            float *out = lut + i * ksub;
#pragma omp simd
            for (int64_t j = 0; j < ksub; j++) out[j] += (r - q[j]) * (r - q[j]);
        }
}

/* term3 of a query: -2 <x_i, q_ij> (L2, with term 1 in the rows) or
 * -<x_i, q_ij> (IP). */
static void sml_pq_term3(const sml_ivf_scan_args *a, const float *by_dim, const float *x,
                         float *term3)
{
    const int64_t m = a->pq_m, ksub = a->pq_ksub, dsub = a->pq_dsub;
    const float scale = a->metric == SIMIL_METRIC_L2 ? -2.0f : -1.0f;
    for (int64_t i = 0; i < m; i++) {
        float *out = term3 + i * ksub;
        for (int64_t j = 0; j < ksub; j++) out[j] = 0.0f;
        for (int64_t t = 0; t < dsub; t++) {
            const float v = scale * x[i * dsub + t];
            const float *q = by_dim + (i * dsub + t) * ksub;
#pragma omp simd
            for (int64_t j = 0; j < ksub; j++) out[j] += v * q[j];
        }
    }
}

/* Push rows [r, end) of one list: their keys are base + term 1 + m entries of
 * tab, each row's added in code order; four rows at a time, so that the
 * four chains of dependent additions overlap. */
static void sml_pq_scan_rows(const sml_ivf_scan_args *a, const float *tab, float base, int64_t r,
                             int64_t end, sml_topk *top)
{
    const int64_t m = a->pq_m, ksub = a->pq_ksub;
    const uint8_t *codes = a->codes;
    const size_t cs = a->code_size;
    for (; r < end; r += 4) {
        const int64_t rows = end - r < 4 ? end - r : 4;
        float d[4];
        const uint8_t *code[4];
        for (int64_t u = 0; u < 4; u++) {
            code[u] = codes + (size_t)(r + (u < rows ? u : 0)) * cs;
            d[u] = base;
            if (a->pq_term1_at) {
                float t1;
                memcpy(&t1, code[u] + a->pq_term1_at, sizeof t1);
                d[u] += t1;
            }
        }
        for (int64_t i = 0; i < m; i++) {
            const float *row = tab + i * ksub;
            for (int64_t u = 0; u < 4; u++) d[u] += row[code[u][i]];
        }
        for (int64_t u = 0; u < rows; u++) sml_topk_push(top, d[u], a->ids[r + u]);
    }
}

simil_status sml_cpu_ivf_pq_scan(sml_backend *b, const sml_ivf_scan_args *a)
{
    const int threads = a->threads > 0 ? a->threads : omp_get_max_threads();
    const int64_t table = a->pq_m * a->pq_ksub;
    int64_t kept = a->k, most = 0;
    for (int64_t q = 0; q < a->nq; q++) {
        int64_t c = 0;
        for (int64_t p = 0; p < a->nprobe; p++) {
            int64_t l = a->probes[q * a->nprobe + p];
            if (l >= 0) c += a->list_size[l];
        }
        most = c > most ? c : most;
    }
    if (kept > most) kept = most > 0 ? most : 1;
    const int64_t cap = sml_topk_capacity(kept);
    const int64_t per_thread = 2 * table + a->dim;
    sml_topk_pair *storage;
    float *scratch, *by_dim = NULL;
    SML_TRY(sml_alloc((void **)&storage, (size_t)(threads * cap), sizeof *storage,
                      "IVF-PQ candidates"));
    simil_status s = sml_alloc((void **)&scratch, (size_t)(threads * per_thread), sizeof(float),
                               "IVF-PQ tables");
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&by_dim, (size_t)(table * a->pq_dsub), sizeof(float),
                      "IVF-PQ codebooks");
    if (s != SIMIL_OK) {
        sml_free(scratch);
        sml_free(storage);
        return s;
    }
    sml_pq_by_dim(a, by_dim);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4)
    for (int64_t q = 0; q < a->nq; q++) {
        const int t = omp_get_thread_num();
        float *term3 = scratch + t * per_thread, *lut = term3 + table, *res = lut + table;
        const float *x = a->queries + q * a->dim;
        sml_topk top;
        sml_topk_reset(&top, storage + t * cap, kept);
        /* term 3 serves every list; residual tables are rebuilt per list */
        const int residual = a->metric == SIMIL_METRIC_L2 && a->pq_term1_at == 0;
        if (!residual) sml_pq_term3(a, by_dim, x, term3);
        for (int64_t p = 0; p < a->nprobe; p++) {
            const int64_t l = a->probes[q * a->nprobe + p];
            if (l < 0 || a->list_size[l] == 0) continue;
            float base = a->coarse_keys[q * a->nprobe + p];
            const float *tab = term3;
            if (residual) {
                sml_pq_residual_table(a, by_dim, x, l, res, lut);
                base = 0.0f;
                tab = lut;
            }
            sml_pq_scan_rows(a, tab, base, a->list_offset[l], a->list_offset[l] + a->list_size[l],
                             &top);
        }
        float *dist = a->distances + q * a->k;
        int64_t *lab = a->labels + q * a->k;
        sml_topk_finish(&top, dist, lab);
        for (int64_t j = 0; j < a->k; j++) {
            if (j >= kept) {
                dist[j] = INFINITY;
                lab[j] = -1;
            }
            if (a->metric == SIMIL_METRIC_IP) dist[j] = -dist[j];
        }
    }
    sml_free(by_dim);
    sml_free(scratch);
    sml_free(storage);
    return SIMIL_OK;
}
