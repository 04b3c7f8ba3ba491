/* cpu_xfbq.c: the XFBQ scan on the CPU (the XFBQ paper, section 4).
 *
 * Threads take queries.  For each query: D for every row of its probed lists
 * into a per-thread buffer (XOR and popcount over the bit planes), a
 * histogram of the D bins, the threshold from the K-th smallest plus the
 * extra bins, then the rows under it re-ranked with exact float distances into
 * the query's top-k (cpu_select.h).  The arithmetic of the selection is the
 * GPU's (cuda_xfbq.cu), so both backends take the same candidates.
 *
 * Popcount loops, picked at run time:
 *   - AVX-512 VPOPCNTDQ: a row's code in chunks of eight words, XOR with the
 *     matching query words, VPOPCNTQ, a variable shift per lane for the
 *     weights, one horizontal sum per row;
 *   - scalar: one row at a time with POPCNT (a target_clones function, so
 *     CPUs without POPCNT run its generic clone). */
#include "cpu/cpu_xfbq.h"

#include <assert.h>
#include <omp.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/xfbq_code.h"
#include "cpu/cpu_ivf.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SML_XFBQ_X86 1
#include <immintrin.h>
#define SML_POPCNT_CLONES __attribute__((target_clones("popcnt", "default")))
#else
#define SML_XFBQ_X86 0
#define SML_POPCNT_CLONES
#endif

/* D of one row: Horner over the base planes j, and inside each over the
 * query planes i, so that D = sum_{i,j} 2^{(Q-1-i)+(B-1-j)} popcount. */
SML_POPCNT_CLONES
static void sml_xfbq_distances_scalar(const uint64_t *query, int qbits, const uint8_t *rows,
                                      size_t row_size, int bbits, int64_t words, int64_t n,
                                      uint32_t *out)
{
    for (int64_t r = 0; r < n; r++) {
        const uint64_t *y = (const uint64_t *)(rows + (size_t)r * row_size);
        uint32_t d = 0;
        for (int j = 0; j < bbits; j++) {
            uint32_t t = 0;
            for (int i = 0; i < qbits; i++) {
                uint32_t c = 0;
                for (int64_t w = 0; w < words; w++)
                    c += (uint32_t)__builtin_popcountll(query[i * words + w] ^ y[j * words + w]);
                t = (t << 1) + c;
            }
            d = (d << 1) + t;
        }
        out[r] = d;
    }
}

#if SML_XFBQ_X86
/* A row's code is base_bits x words words in a row; it is read as chunks of
 * eight words (the last one masked), lane e of chunk c being word 8c + e,
 * that is word w = (8c + e) % words of base plane j = (8c + e) / words.  Per
 * query plane i and chunk c the loop XORs with the matching query words and
 * shifts each lane's popcount left by (Q-1-i) + (B-1-j), both prepared once;
 * one horizontal sum per row gives D. */
__attribute__((target("avx512f,avx512vpopcntdq")))
static void sml_xfbq_distances_avx512(const uint64_t *query, int qbits, const uint8_t *rows,
                                      size_t row_size, int bbits, int64_t words, int64_t n,
                                      uint32_t *out)
{
    const int64_t total = bbits * words, chunks = (total + 7) / 8;
    enum { SML_MAX_PREPARED = 512 };  /* query planes x chunks prepared (64 KiB) */
    if (qbits * chunks > SML_MAX_PREPARED) {
        sml_xfbq_distances_scalar(query, qbits, rows, row_size, bbits, words, n, out);
        return;
    }
    __m512i xq[SML_MAX_PREPARED], sh[SML_MAX_PREPARED];
    for (int64_t c = 0; c < chunks; c++)
        for (int i = 0; i < qbits; i++) {
            long long xv[8], sv[8];
            for (int e = 0; e < 8; e++) {
                const int64_t word = 8 * c + e;
                const int64_t w = word < total ? word % words : 0;
                const int64_t j = word < total ? word / words : 0;
                xv[e] = word < total ? (long long)query[i * words + w] : 0; /* 0 ^ 0 */
                sv[e] = (qbits - 1 - i) + (bbits - 1 - j);
            }
            xq[c * qbits + i] = _mm512_loadu_si512(xv);
            sh[c * qbits + i] = _mm512_loadu_si512(sv);
        }
    const __mmask8 tail = (__mmask8)((1u << (total - 8 * (chunks - 1))) - 1);
    for (int64_t r = 0; r < n; r++) {
        const long long *y = (const long long *)(rows + (size_t)r * row_size);
        __m512i acc = _mm512_setzero_si512();
        for (int64_t c = 0; c < chunks; c++) {
            const __m512i v = c + 1 < chunks ? _mm512_loadu_si512(y + 8 * c)
                                             : _mm512_maskz_loadu_epi64(tail, y + 8 * c);
            for (int i = 0; i < qbits; i++) {
                const __m512i p = _mm512_popcnt_epi64(_mm512_xor_si512(v, xq[c * qbits + i]));
                acc = _mm512_add_epi64(acc, _mm512_sllv_epi64(p, sh[c * qbits + i]));
            }
        }
        out[r] = (uint32_t)_mm512_reduce_add_epi64(acc);
    }
}
#endif

int sml_cpu_xfbq_has_avx512(void)
{
#if SML_XFBQ_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vpopcntdq");
#else
    return 0;
#endif
}

void sml_cpu_xfbq_distances(sml_xfbq_impl impl, const uint64_t *query, int query_bits,
                            const uint8_t *rows, size_t row_size, int base_bits, int64_t words,
                            int64_t n, uint32_t *out)
{
#if SML_XFBQ_X86
    if (impl != SML_XFBQ_IMPL_SCALAR && sml_cpu_xfbq_has_avx512()) {
        sml_xfbq_distances_avx512(query, query_bits, rows, row_size, base_bits, words, n, out);
        return;
    }
#endif
    sml_xfbq_distances_scalar(query, query_bits, rows, row_size, base_bits, words, n, out);
}

#if SML_XFBQ_X86
#define SML_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SML_SIMD_CLONES
#endif

/* Re-ranking keys, summed in 16 fixed lanes and then pairwise, so that a key
 * does not depend on where its row sits in memory (the same vector gives the
 * same key in flat XFBQ and in an inverted list, before and after a remove). */
SML_SIMD_CLONES
static float sml_xfbq_key(const float *x, const float *y, int64_t dim, int l2)
{
    float acc[16] = {0};
    int64_t j = 0;
    for (; j + 16 <= dim; j += 16)
        for (int u = 0; u < 16; u++) {
            const float t = l2 ? x[j + u] - y[j + u] : x[j + u];
            acc[u] += t * (l2 ? t : y[j + u]);
        }
    for (int u = 0; j + u < dim; u++) {
        const float t = l2 ? x[j + u] - y[j + u] : x[j + u];
        acc[u] += t * (l2 ? t : y[j + u]);
    }
    for (int w = 8; w >= 1; w /= 2)
        for (int u = 0; u < w; u++) acc[u] += acc[u + w];
    return l2 ? acc[0] : -acc[0];
}

/* The largest D a query keeps (see sml_xfbq_scan_args), from its histogram
 * of `scanned` rows. */
static uint32_t sml_xfbq_threshold(const sml_xfbq_scan_args *a, const uint32_t *hist,
                                   int64_t scanned)
{
    const int64_t want = a->scan.k < scanned ? a->scan.k : scanned;
    int64_t b = 0, below = 0;
    while (below + hist[b] < want) below += hist[b++];
    int64_t window = a->extra_bins;
    if (a->spread_q16 > 0) {
        int64_t lowest = 0, median = 0, under = 0;
        while (hist[lowest] == 0) lowest++;
        while (under + hist[median] < (scanned + 1) / 2) under += hist[median++];
        window = sml_xfbq_window_bins(a->extra_bins, a->spread_q16, lowest, median);
    }
    int64_t c = b + window;
    if (c > a->nbins - 1) c = a->nbins - 1;
    return (uint32_t)((((uint64_t)c + 1) << a->bin_shift) - 1);
}

/* D of a row the filter refuses: out of the histogram and the candidates (a
 * true D is at most 64 x 64 x words, far below). */
#define SML_XFBQ_REFUSED UINT32_MAX

/* Mark query q's refused rows in dist (its probed lists' rows in order);
 * the count of rows left. */
static int64_t sml_xfbq_refuse(const sml_ivf_scan_args *sc, const sml_ivf_probes *probes,
                               int64_t q, uint32_t *dist)
{
    int64_t pos = 0, left = 0;
    for (int64_t p = 0; p < probes->nprobe; p++) {
        const int64_t l = probes->lists[q * probes->nprobe + p];
        if (l < 0) continue;
        for (int64_t r = 0; r < sc->lists.size[l]; r++, pos++) {
            if (sml_id_allowed(sc->filter, sc->lists.ids[sc->lists.offset[l] + r]))
                left++;
            else
                dist[pos] = SML_XFBQ_REFUSED;
        }
    }
    return left;
}

/* One query: D, histogram, threshold, candidates into t. */
static void sml_xfbq_query(const sml_xfbq_scan_args *a, const sml_ivf_probes *probes, int64_t q,
                           uint32_t *dist, uint32_t *hist, sml_topk *t)
{
    const sml_ivf_scan_args *sc = &a->scan;
    const sml_ivf_lists *lists = &sc->lists;
    const int64_t code_words = a->query_bits * a->words, nprobe = probes->nprobe;
    const uint64_t *xq = a->query_codes + q * code_words;
    const float *x = sc->queries + q * sc->dim;
    const uint8_t *codes = lists->codes, *vectors = (const uint8_t *)a->vectors;
    int64_t pos = 0;
    for (int64_t p = 0; p < nprobe; p++) {
        const int64_t l = probes->lists[q * nprobe + p];
        if (l < 0 || lists->size[l] == 0) continue;
        sml_cpu_xfbq_distances(SML_XFBQ_IMPL_AUTO, xq, a->query_bits,
                               codes + (size_t)lists->offset[l] * lists->code_stride,
                               lists->code_stride, a->base_bits, a->words, lists->size[l],
                               dist + pos);
        pos += lists->size[l];
    }
    if (pos == 0) return;
    memset(hist, 0, sizeof *hist * (size_t)a->nbins);
    const uint32_t clamp = (uint32_t)(((uint64_t)a->nbins << a->bin_shift) - 1);
    int64_t counted = pos;
    if (sc->filter != NULL) counted = sml_xfbq_refuse(sc, probes, q, dist);
    for (int64_t i = 0; i < pos; i++) {
        if (dist[i] == SML_XFBQ_REFUSED) continue;
        if (dist[i] > clamp) dist[i] = clamp; /* a no-op but for damaged codes */
        hist[dist[i] >> a->bin_shift]++;
    }
    if (counted == 0) return;
    const uint32_t limit = sml_xfbq_threshold(a, hist, counted);
    pos = 0;
    for (int64_t p = 0; p < nprobe; p++) {
        const int64_t l = probes->lists[q * nprobe + p];
        if (l < 0) continue;
        const int64_t first = lists->offset[l];
        for (int64_t r = 0; r < lists->size[l]; r++, pos++) {
            if (dist[pos] > limit || dist[pos] == SML_XFBQ_REFUSED) continue;
            const float *y = (const float *)(vectors + (size_t)(first + r) * a->vector_stride);
            sml_topk_push(t, sml_xfbq_key(x, y, sc->dim, sc->metric == SIMIL_METRIC_L2),
                          lists->ids[first + r]);
        }
    }
}

simil_status sml_cpu_xfbq_scan(sml_backend *b, const sml_xfbq_scan_args *a)
{
    assert(sml_xfbq_scan_args_ok(a));
    const sml_ivf_scan_args *sc = &a->scan;
    sml_ivf_probes probes;
    SML_TRY(sml_cpu_ivf_probes(b, sc, &probes));
    const int threads = sc->threads > 0 ? sc->threads : omp_get_max_threads();
    const int64_t most = sml_cpu_ivf_most(sc, &probes), kept = sml_cpu_ivf_kept(sc->k, most);
    const int64_t cap = sml_topk_capacity(kept);
    const int64_t per_thread = (most > 0 ? most : 1) + a->nbins;
    sml_topk_pair *storage = NULL;
    uint32_t *scratch = NULL;
    simil_status s = sml_alloc((void **)&storage, (size_t)(threads * cap), sizeof *storage,
                               "XFBQ candidates");
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&scratch, (size_t)threads * (size_t)per_thread, sizeof *scratch,
                      "XFBQ distances");
    if (s != SIMIL_OK) {
        sml_free(storage);
        sml_cpu_ivf_probes_free(sc, &probes);
        return s;
    }
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t q = 0; q < sc->nq; q++) {
        const int me = omp_get_thread_num();
        uint32_t *dist = scratch + (size_t)me * (size_t)per_thread;
        sml_topk t;
        sml_topk_reset(&t, storage + me * cap, kept);
        sml_xfbq_query(a, &probes, q, dist, dist + (most > 0 ? most : 1), &t);
        sml_cpu_ivf_finish(sc, q, kept, &t);
    }
    sml_free(scratch);
    sml_free(storage);
    sml_cpu_ivf_probes_free(sc, &probes);
    return SIMIL_OK;
}
