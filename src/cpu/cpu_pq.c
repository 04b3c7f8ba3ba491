/* cpu_pq.c: IVF-PQ on the CPU: encoding residuals, and scanning lists with
 * lookup tables (the GPU paper's IVFADC).  Threads take vectors (encode) or
 * queries (scan). */
#include <assert.h>
#include <omp.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "cpu/cpu_ivf.h"
#include "cpu/cpu_nearest.h"
#include "cpu/cpu_select.h"

/* The codebooks by dimension: by_dim[(i dsub + t) ksub + j] = q_ij[t], so
 * that distances or dot products to all the codewords of a sub-quantizer
 * run over the ksub codewords in the inner loop, which vectorizes (one
 * product of dsub floats per codeword did not: it took most of a query's
 * time at PQ16 on Fashion-MNIST).  Transposing costs as much as one query's
 * table, once per call. */
static void sml_pq_by_dim(const float *codebooks, int64_t m, int64_t ksub, int64_t dsub,
                          float *by_dim)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ksub; j++)
            for (int64_t t = 0; t < dsub; t++)
                by_dim[(i * dsub + t) * ksub + j] = codebooks[(i * ksub + j) * dsub + t];
}

/* dist[j] = ||v - q_ij||^2 over the ksub codewords of sub-quantizer i, each
 * summed over t in order. */
static void sml_pq_codeword_distances(const float *by_dim, int64_t i, int64_t ksub, int64_t dsub,
                                      const float *v, float *dist)
{
    for (int64_t j = 0; j < ksub; j++) dist[j] = 0.0f;
    for (int64_t t = 0; t < dsub; t++) {
        const float r = v[t];
        const float *q = by_dim + (i * dsub + t) * ksub;
#pragma omp simd
        for (int64_t j = 0; j < ksub; j++) dist[j] += (r - q[j]) * (r - q[j]);
    }
}

/* Each residual sub-vector's nearest codeword through cpu_nearest.h: the
 * same float sums in the same order as the loop it replaced (distances to
 * the ksub codewords by dimension, then a scalar arg-min), so the same
 * codes. */
simil_status sml_cpu_pq_encode(sml_backend *b, const sml_pq_encode_args *a)
{
    const int threads = omp_get_max_threads();
    float *scratch;
    sml_nearest_book *books;
    SML_TRY(sml_alloc((void **)&scratch, (size_t)(threads * a->dim), sizeof *scratch,
                      "residuals"));
    simil_status s = sml_calloc((void **)&books, (size_t)a->m, sizeof *books, "PQ codebooks");
    for (int64_t i = 0; i < a->m && s == SIMIL_OK; i++)
        s = sml_nearest_book_init(&books[i], a->ksub, a->dsub,
                                  a->codebooks + i * a->ksub * a->dsub, a->dsub);
    if (s == SIMIL_OK) {
#pragma omp parallel for num_threads(threads) schedule(static) if (a->n > 256)
        for (int64_t r = 0; r < a->n; r++) {
            float *v = scratch + omp_get_thread_num() * a->dim;
            const float *x = a->x + r * a->dim;
            const float *c = a->coarse + a->lists[r] * a->dim;
            for (int64_t t = 0; t < a->dim; t++) v[t] = x[t] - c[t];
            uint8_t *code = a->codes + (size_t)r * a->code_size;
            memset(code, 0, a->code_size);
            for (int64_t i = 0; i < a->m; i++) {
                float d;
                code[i] = (uint8_t)sml_nearest(&books[i], v + i * a->dsub, &d);
            }
        }
    }
    for (int64_t i = 0; books != NULL && i < a->m; i++) sml_nearest_book_free(&books[i]);
    sml_free(books);
    sml_free(scratch);
    return s;
}

/* Residual tables (L2 without term 1 in the rows): ||(x - c_l)_i - q_ij||^2. */
static void sml_pq_residual_table(const sml_ivf_pq_scan_args *a, const float *by_dim,
                                  const float *x, int64_t l, float *res, float *lut)
{
    const int64_t m = a->m, ksub = a->ksub, dsub = a->dsub, dim = a->scan.dim;
    const float *c = a->coarse + l * dim;
    for (int64_t t = 0; t < dim; t++) res[t] = x[t] - c[t];
    for (int64_t i = 0; i < m; i++)
        sml_pq_codeword_distances(by_dim, i, ksub, dsub, res + i * dsub, lut + i * ksub);
}

/* term3 of a query: -2 <x_i, q_ij> (L2, with term 1 in the rows) or
 * -<x_i, q_ij> (IP). */
static void sml_pq_term3(const sml_ivf_pq_scan_args *a, const float *by_dim, const float *x,
                         float *term3)
{
    const int64_t m = a->m, ksub = a->ksub, dsub = a->dsub;
    const float scale = a->scan.metric == SIMIL_METRIC_L2 ? -2.0f : -1.0f;
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

/* A row's key: base + term 1 + its m entries of tab, added in code order. */
static inline float sml_pq_row_start(const sml_ivf_pq_scan_args *a, const uint8_t *code,
                                     float base)
{
    float t1 = 0.0f;
    if (a->term1_at) memcpy(&t1, code + a->term1_at, sizeof t1);
    return a->term1_at ? base + t1 : base;
}

/* Push four rows of one list at once, so that their four chains of dependent
 * additions overlap.  The four sums are separate scalars: as an array, gcc
 * packed them into one vector kept on the stack, and a store per lookup
 * slowed the scan (docs/benchmarks.md, "Tried and dropped"). */
static inline void sml_pq_push4(const sml_ivf_pq_scan_args *a, const float *tab, float base,
                                int64_t r0, int64_t r1, int64_t r2, int64_t r3, sml_topk *top)
{
    const int64_t m = a->m, ksub = a->ksub;
    const uint8_t *codes = a->scan.lists.codes;
    const int64_t *ids = a->scan.lists.ids;
    const size_t cs = a->scan.lists.code_stride;
    const uint8_t *c0 = codes + (size_t)r0 * cs, *c1 = codes + (size_t)r1 * cs;
    const uint8_t *c2 = codes + (size_t)r2 * cs, *c3 = codes + (size_t)r3 * cs;
    float d0 = sml_pq_row_start(a, c0, base), d1 = sml_pq_row_start(a, c1, base);
    float d2 = sml_pq_row_start(a, c2, base), d3 = sml_pq_row_start(a, c3, base);
    for (int64_t i = 0; i < m; i++) {
        const float *row = tab + i * ksub;
        d0 += row[c0[i]];
        d1 += row[c1[i]];
        d2 += row[c2[i]];
        d3 += row[c3[i]];
    }
    sml_topk_push(top, d0, ids[r0]);
    sml_topk_push(top, d1, ids[r1]);
    sml_topk_push(top, d2, ids[r2]);
    sml_topk_push(top, d3, ids[r3]);
}

static inline void sml_pq_push1(const sml_ivf_pq_scan_args *a, const float *tab, float base,
                                int64_t r, sml_topk *top)
{
    const uint8_t *c = a->scan.lists.codes + (size_t)r * a->scan.lists.code_stride;
    float d = sml_pq_row_start(a, c, base);
    for (int64_t i = 0; i < a->m; i++) d += tab[i * a->ksub + c[i]];
    sml_topk_push(top, d, a->scan.lists.ids[r]);
}

/* Push rows [r, end) of one list, four at a time (sml_pq_push4); under a
 * filter, four allowed rows at a time, taken a chunk at a time
 * (sml_allowed_rows), the refused rows skipped before their lookups. */
static void sml_pq_scan_rows(const sml_ivf_pq_scan_args *a, const float *tab, float base,
                             int64_t r, int64_t end, sml_topk *top)
{
    const sml_id_filter *filter = a->scan.filter;
    if (filter != NULL) {
        int64_t pick[SML_ALLOWED_CHUNK];
        for (; r < end; r += SML_ALLOWED_CHUNK) {
            const int np = sml_allowed_rows(filter, a->scan.lists.ids, r, end, pick);
            int p = 0;
            for (; p + 4 <= np; p += 4)
                sml_pq_push4(a, tab, base, pick[p], pick[p + 1], pick[p + 2], pick[p + 3], top);
            for (; p < np; p++) sml_pq_push1(a, tab, base, pick[p], top);
        }
        return;
    }
    for (; r + 4 <= end; r += 4) sml_pq_push4(a, tab, base, r, r + 1, r + 2, r + 3, top);
    for (; r < end; r++) sml_pq_push1(a, tab, base, r, top);
}

simil_status sml_cpu_ivf_pq_scan(sml_backend *b, const sml_ivf_pq_scan_args *a)
{
    assert(sml_ivf_pq_scan_args_ok(a));
    const sml_ivf_scan_args *sc = &a->scan;
    sml_ivf_probes probes;
    SML_TRY(sml_cpu_ivf_probes(b, sc, &probes));
    assert(probes.keys != NULL);
    const int threads = sc->threads > 0 ? sc->threads : omp_get_max_threads();
    const int64_t table = a->m * a->ksub;
    const int64_t kept = sml_cpu_ivf_kept(sc->k, sml_cpu_ivf_most(sc, &probes));
    const int64_t cap = sml_topk_capacity(kept);
    const int64_t per_thread = 2 * table + sc->dim;
    sml_topk_pair *storage = NULL;
    float *scratch = NULL, *by_dim = NULL;
    simil_status s = sml_alloc((void **)&storage, (size_t)(threads * cap), sizeof *storage,
                               "IVF-PQ candidates");
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&scratch, (size_t)(threads * per_thread), sizeof(float),
                      "IVF-PQ tables");
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&by_dim, (size_t)(table * a->dsub), sizeof(float),
                      "IVF-PQ codebooks");
    if (s != SIMIL_OK) {
        sml_free(scratch);
        sml_free(storage);
        sml_cpu_ivf_probes_free(sc, &probes);
        return s;
    }
    sml_pq_by_dim(a->codebooks, a->m, a->ksub, a->dsub, by_dim);
    const int64_t nprobe = probes.nprobe;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4)
    for (int64_t q = 0; q < sc->nq; q++) {
        const int t = omp_get_thread_num();
        float *term3 = scratch + t * per_thread, *lut = term3 + table, *res = lut + table;
        const float *x = sc->queries + q * sc->dim;
        sml_topk top;
        sml_topk_reset(&top, storage + t * cap, kept);
        /* term 3 serves every list; residual tables are rebuilt per list */
        const int residual = sc->metric == SIMIL_METRIC_L2 && a->term1_at == 0;
        if (!residual) sml_pq_term3(a, by_dim, x, term3);
        for (int64_t p = 0; p < nprobe; p++) {
            const int64_t l = probes.lists[q * nprobe + p];
            if (l < 0 || sc->lists.size[l] == 0) continue;
            /* codes of the vectors: no coarse term (IP; L2 takes the residual route) */
            float base = a->codes_of_vectors ? 0.0f : probes.keys[q * nprobe + p];
            const float *tab = term3;
            if (residual) {
                sml_pq_residual_table(a, by_dim, x, l, res, lut);
                base = 0.0f;
                tab = lut;
            }
            sml_pq_scan_rows(a, tab, base, sc->lists.offset[l],
                             sc->lists.offset[l] + sc->lists.size[l], &top);
        }
        sml_cpu_ivf_finish(sc, q, kept, &top);
    }
    sml_free(by_dim);
    sml_free(scratch);
    sml_free(storage);
    sml_cpu_ivf_probes_free(sc, &probes);
    return SIMIL_OK;
}
