/* cpu_sq.c: the scalar-quantizer scan on the CPU (sml_sq_scan_args), in the
 * frame of cpu_ivf.h.  Codes of residuals need no decoded centroid: per
 * probed list the query becomes x - c (L2, since ||x - (c + r)|| =
 * ||(x - c) - r||), or the key starts from <x, c> (IP).
 *
 * SQ8 keys its rows' bytes without decoding them: a component decodes to
 * a_j + s_j code_j (a_j = vmin_j + vdiff_j / 510, s_j = vdiff_j / 255), so
 * per list the query gives the weights w_j = x_j s_j and the constant
 * <x, a> (IP: -<x, y> = -(<x, a> + sum w_j code_j)), or u_j = x_j - a_j and
 * s (L2: sum (u_j - s_j code_j)^2), and each row is one vectorized pass over
 * its bytes.  The keys are those of the decoded floats up to rounding.
 * SQfp16 and SQbf16 rows are converted 16 components at a time in registers
 * with AVX-512, else decoded into a per-thread buffer and keyed with the SIMD
 * loops of cpu_knn.c. */
#include <assert.h>
#include <omp.h>
#include <stdbool.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/sq_code.h"
#include "cpu/cpu_ivf.h"
#include "cpu/cpu_knn.h"
#include "cpu/cpu_sq.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SML_SQ_X86 1
#include <immintrin.h>
#define SML_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SML_SQ_X86 0
#define SML_SIMD_CLONES
#endif

/* sum w_j code_j (IP), or sum (u_j - s_j code_j)^2 (L2), over a row of SQ8
 * bytes: the portable loops, which GCC vectorizes only 4 floats wide. */
SML_SIMD_CLONES static float sml_sq8_row(bool l2, const float *w, const float *s,
                                         const uint8_t *code, int64_t dim)
{
    float sum = 0;
    if (l2) {
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < dim; j++) {
            const float t = w[j] - s[j] * (float)code[j];
            sum += t * t;
        }
    } else {
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < dim; j++) sum += w[j] * (float)code[j];
    }
    return sum;
}

#if SML_SQ_X86
/* The same, 16 bytes at a time widened to floats (AVX-512).  IVF1024,SQ8
 * over 10^6 mix vectors, 1,000 queries at nprobe 16 on 2 cores: 0.32-0.42 s,
 * against 1.11 s with the portable loop (and 2.66 s decoding each row). */
__attribute__((target("avx512f"))) static float sml_sq8_row_avx512(bool l2, const float *w,
                                                                   const float *s,
                                                                   const uint8_t *code,
                                                                   int64_t dim)
{
    __m512 acc = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= dim; j += 16) {
        const __m512 c = _mm512_cvtepi32_ps(
            _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(code + j))));
        if (l2) {
            const __m512 t = _mm512_fnmadd_ps(_mm512_loadu_ps(s + j), c, _mm512_loadu_ps(w + j));
            acc = _mm512_fmadd_ps(t, t, acc);
        } else {
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(w + j), c, acc);
        }
    }
    float sum = _mm512_reduce_add_ps(acc);
    for (; j < dim; j++) {
        const float t = l2 ? w[j] - s[j] * (float)code[j] : w[j] * (float)code[j];
        sum += l2 ? t * t : t;
    }
    return sum;
}
#endif

static inline bool sml_sq_avx512(sml_sq_impl impl)
{
#if SML_SQ_X86
    return impl == SML_SQ_IMPL_AUTO && __builtin_cpu_supports("avx512f");
#else
    (void)impl;
    return false;
#endif
}

float sml_cpu_sq8_row(sml_sq_impl impl, bool l2, const float *w, const float *s,
                      const uint8_t *code, int64_t dim)
{
#if SML_SQ_X86
    if (sml_sq_avx512(impl)) return sml_sq8_row_avx512(l2, w, s, code, dim);
#endif
    return sml_sq8_row(l2, w, s, code, dim);
}

#if SML_SQ_X86
/* sum x_j y_j (IP) or sum (x_j - y_j)^2 (L2) over a row of SQfp16 or SQbf16
 * codes, 16 at a time converted in registers (AVX-512): both conversions are
 * exact, so y is what sml_sq_decode gives. */
__attribute__((target("avx512f"))) static float sml_sq16_row_avx512(sml_sq_type type, bool l2,
                                                                    const float *x,
                                                                    const uint8_t *code,
                                                                    int64_t dim)
{
    const bool fp16 = type == SML_SQ_FP16;
    __m512 acc = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= dim; j += 16) {
        const __m256i h = _mm256_loadu_si256((const __m256i *)(code + 2 * j));
        const __m512 y = fp16 ? _mm512_cvtph_ps(h)
                              : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        const __m512 xv = _mm512_loadu_ps(x + j);
        if (l2) {
            const __m512 t = _mm512_sub_ps(xv, y);
            acc = _mm512_fmadd_ps(t, t, acc);
        } else {
            acc = _mm512_fmadd_ps(xv, y, acc);
        }
    }
    float sum = _mm512_reduce_add_ps(acc);
    for (; j < dim; j++) {
        const float y = sml_sq_decode(type, code, j, NULL, NULL);
        sum += l2 ? (x[j] - y) * (x[j] - y) : x[j] * y;
    }
    return sum;
}
#endif

float sml_cpu_sq16_row(sml_sq_impl impl, int type, bool l2, const float *x, const uint8_t *code,
                       int64_t dim, float *buf)
{
    assert(type == SML_SQ_FP16 || type == SML_SQ_BF16);
#if SML_SQ_X86
    if (sml_sq_avx512(impl)) return sml_sq16_row_avx512((sml_sq_type)type, l2, x, code, dim);
#endif
    for (int64_t j = 0; j < dim; j++) buf[j] = sml_sq_decode((sml_sq_type)type, code, j, NULL, NULL);
    return l2 ? sml_cpu_l2sq(x, buf, dim) : sml_cpu_dot(x, buf, dim);
}

/* What sml_cpu_sq_list has made of a query for one list. */
typedef struct sml_sq_query {
    const sml_sq_scan_args *a;
    bool l2, sq8;
    float *y;               /* SQ8: the weights (IP) or u (L2); SQfp16 and SQbf16: scratch */
    const float *step;      /* SQ8: s */
    const float *xq;        /* the query (its residual for L2 with a coarse quantizer) */
    float base;             /* IP: added to every row's sum */
} sml_sq_query;

/* Arena row i's key for the query into t. */
static inline void sml_cpu_sq_push(const sml_sq_query *q, int64_t i, sml_topk *t)
{
    const sml_ivf_scan_args *s = &q->a->scan;
    const int64_t dim = s->dim;
    const uint8_t *code = (const uint8_t *)s->lists.codes + (size_t)i * s->lists.code_stride;
    const float sum =
        q->sq8 ? sml_cpu_sq8_row(SML_SQ_IMPL_AUTO, q->l2, q->y, q->step, code, dim)
               : sml_cpu_sq16_row(SML_SQ_IMPL_AUTO, q->a->type, q->l2, q->xq, code, dim, q->y);
    sml_topk_push(t, q->l2 ? sum : -(q->base + sum), s->lists.ids[i]);
}

/* Query q's keys over list l into t; buf: 3 x dim floats of the thread. */
static void sml_cpu_sq_list(const sml_sq_scan_args *a, const float *x, int64_t l, float *buf,
                            sml_topk *t)
{
    const sml_ivf_scan_args *s = &a->scan;
    const int64_t dim = s->dim;
    const bool l2 = s->metric == SIMIL_METRIC_L2, sq8 = a->type == SML_SQ_8BIT;
    float *y = buf, *xl = buf + dim, *step = buf + 2 * dim;
    const float *xq = x;
    float base = 0.0f;
    if (a->coarse != NULL) {
        const float *c = a->coarse + l * dim;
        if (l2) {
            for (int64_t j = 0; j < dim; j++) xl[j] = x[j] - c[j];
            xq = xl;
        } else {
            base = sml_cpu_dot(x, c, dim);
        }
    }
    if (sq8) {  /* y: the weights (IP) or u (L2); step: s */
        for (int64_t j = 0; j < dim; j++) {
            step[j] = a->vdiff[j] / 255.0f;
            const float aj = a->vmin[j] + a->vdiff[j] * (0.5f / 255.0f);
            if (l2) {
                y[j] = xq[j] - aj;
            } else {
                y[j] = xq[j] * step[j];
                base += xq[j] * aj;
            }
        }
    }
    const int64_t end = s->lists.offset[l] + s->lists.size[l];
    const sml_sq_query sq = {a, l2, sq8, y, step, xq, base};
    if (s->filter == NULL) {
        for (int64_t i = s->lists.offset[l]; i < end; i++) sml_cpu_sq_push(&sq, i, t);
        return;
    }
    /* the allowed rows of each chunk first (sml_allowed_rows: no branch per
     * row's test) */
    int64_t pick[SML_ALLOWED_CHUNK];
    for (int64_t i0 = s->lists.offset[l]; i0 < end; i0 += SML_ALLOWED_CHUNK) {
        const int np = sml_allowed_rows(s->filter, s->lists.ids, i0, end, pick);
        for (int p = 0; p < np; p++) sml_cpu_sq_push(&sq, pick[p], t);
    }
}

simil_status sml_cpu_sq_scan(sml_backend *b, const sml_sq_scan_args *a)
{
    const sml_ivf_scan_args *s = &a->scan;
    assert(sml_ivf_scan_args_ok(s));
    assert(a->type != SML_SQ_8BIT || (a->vmin != NULL && a->vdiff != NULL));
    assert(s->lists.code_stride >= (size_t)s->dim * sml_sq_elem_bytes((sml_sq_type)a->type));
    sml_ivf_probes probes;
    SML_TRY(sml_cpu_ivf_probes(b, s, &probes));
    const int threads = s->threads > 0 ? s->threads : omp_get_max_threads();
    const int64_t kept = sml_cpu_ivf_kept(s->k, sml_cpu_ivf_most(s, &probes));
    const int64_t cap = sml_topk_capacity(kept);
    sml_topk_pair *storage = NULL;
    float *bufs = NULL;
    simil_status st = sml_alloc((void **)&storage, (size_t)(threads * cap), sizeof *storage,
                                "SQ candidate lists");
    if (st == SIMIL_OK)
        st = sml_alloc((void **)&bufs, (size_t)(threads * 3 * s->dim), sizeof *bufs,
                       "SQ decoded rows");
    if (st != SIMIL_OK) {
        sml_free(storage);
        sml_cpu_ivf_probes_free(s, &probes);
        return st;
    }
    const int64_t nprobe = probes.nprobe;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4)
    for (int64_t q = 0; q < s->nq; q++) {
        const int me = omp_get_thread_num();
        sml_topk t;
        sml_topk_reset(&t, storage + me * cap, kept);
        for (int64_t p = 0; p < nprobe; p++) {
            const int64_t l = probes.lists[q * nprobe + p];
            if (l >= 0)
                sml_cpu_sq_list(a, s->queries + q * s->dim, l, bufs + me * 3 * s->dim, &t);
        }
        sml_cpu_ivf_finish(s, q, kept, &t);
    }
    sml_free(bufs);
    sml_free(storage);
    sml_cpu_ivf_probes_free(s, &probes);
    return SIMIL_OK;
}
