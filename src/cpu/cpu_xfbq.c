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
 *     CPUs without POPCNT run its generic clone).
 *
 * Where every query scans the same rows (flat XFBQ: one list) and the CPU has
 * AVX-512 VNNI, D comes from a small-integer dot product instead, for blocks
 * of queries at once.  With A_d and B_d the values of a component's "minus"
 * bits in the query and the row code (A_d = sum_i 2^{Q-1-i} a_id, likewise
 * B_d), popcount(a XOR b) = a + b - 2ab bit by bit gives
 *     D = (2^B - 1) sum_d A_d + (2^Q - 1) sum_d B_d - 2 sum_d A_d B_d,
 * exactly.  A tile of rows is turned into bytes B_d once for the block, and
 * VPDPBUSD sums 64 products A_d B_d per instruction.  Rows of flat XFBQ hold
 * their floats beside their codes, so the popcount loop of one query at a
 * time read a cache line of every row's code from memory per query (19 MB
 * per Fashion-MNIST query); a block reads them once for all its queries. */
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

/* The bytes of one code (bits planes x words words): byte d is the value of
 * component d's bits, sum_i 2^{bits-1-i} plane_i bit d; *sum their sum. */
__attribute__((target("avx512f,avx512bw")))
static void sml_xfbq_unpack_avx512(const uint64_t *code, int bits, int64_t words, uint8_t *out,
                                   int32_t *sum)
{
    const __m512i zero = _mm512_setzero_si512();
    __m512i s = zero;
    for (int64_t w = 0; w < words; w++) {
        __m512i v = zero;
        for (int i = 0; i < bits; i++) {
            const __m512i weight = _mm512_set1_epi8((char)(1 << (bits - 1 - i)));
            v = _mm512_add_epi8(v, _mm512_maskz_mov_epi8((__mmask64)code[i * words + w], weight));
        }
        _mm512_storeu_si512(out + 64 * w, v);
        s = _mm512_add_epi64(s, _mm512_sad_epu8(v, zero));
    }
    *sum = (int32_t)_mm512_reduce_add_epi64(s);
}

/* D from the sums of the bytes (sa, sb) and their dot product. */
static inline uint32_t sml_xfbq_d_of(int qbits, int bbits, int32_t sa, int32_t sb, int32_t dot)
{
    return (uint32_t)(((1 << bbits) - 1) * sa + ((1 << qbits) - 1) * sb - 2 * dot);
}

/* D of one query (bytes a, sum sa) against rows [0, n) of a tile of bytes
 * (words x 64 a row), a row at a time: the queries and rows past a multiple
 * of four, which sml_xfbq_tile4_avx512 leaves. */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void sml_xfbq_tile_avx512(const uint8_t *a, int32_t sa, const uint8_t *tile,
                                 const int32_t *sb, int64_t words, int64_t n, int qbits, int bbits,
                                 uint32_t *out)
{
    for (int64_t r = 0; r < n; r++) {
        const uint8_t *y = tile + r * 64 * words;
        __m512i c = _mm512_setzero_si512();
        for (int64_t w = 0; w < words; w++)
            c = _mm512_dpbusd_epi32(c, _mm512_loadu_si512(a + 64 * w),
                                    _mm512_loadu_si512(y + 64 * w));
        out[r] = sml_xfbq_d_of(qbits, bbits, sa, sb[r], _mm512_reduce_add_epi32(c));
    }
}

/* D of four queries (bytes a + q * stride, sums sa[q]) against rows [0, n)
 * of a tile, four rows at a time: sixteen sums in registers, each loaded
 * word of a query or a row used four times.  (Zen 4 loads one 64-byte word a
 * cycle: with one query a time, the loads, not the dot products, set the
 * pace.)  Rows past a multiple of four go to sml_xfbq_tile_avx512. */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void sml_xfbq_tile4_avx512(const uint8_t *a, const int32_t *sa, const uint8_t *tile,
                                  const int32_t *sb, int64_t words, int64_t n, int qbits,
                                  int bbits, uint32_t *out, int64_t out_stride)
{
    const int64_t stride = 64 * words;
    int64_t r = 0;
    for (; r + 4 <= n; r += 4) {
        const uint8_t *y = tile + r * stride;
        /* sixteen named sums: in arrays, gcc moved them between registers */
        __m512i c00 = _mm512_setzero_si512(), c01 = c00, c02 = c00, c03 = c00;
        __m512i c10 = c00, c11 = c00, c12 = c00, c13 = c00;
        __m512i c20 = c00, c21 = c00, c22 = c00, c23 = c00;
        __m512i c30 = c00, c31 = c00, c32 = c00, c33 = c00;
        for (int64_t w = 0; w < words; w++) {
            const __m512i y0 = _mm512_loadu_si512(y + 64 * w);
            const __m512i y1 = _mm512_loadu_si512(y + stride + 64 * w);
            const __m512i y2 = _mm512_loadu_si512(y + 2 * stride + 64 * w);
            const __m512i y3 = _mm512_loadu_si512(y + 3 * stride + 64 * w);
            __m512i x = _mm512_loadu_si512(a + 64 * w);
            c00 = _mm512_dpbusd_epi32(c00, x, y0);
            c01 = _mm512_dpbusd_epi32(c01, x, y1);
            c02 = _mm512_dpbusd_epi32(c02, x, y2);
            c03 = _mm512_dpbusd_epi32(c03, x, y3);
            x = _mm512_loadu_si512(a + stride + 64 * w);
            c10 = _mm512_dpbusd_epi32(c10, x, y0);
            c11 = _mm512_dpbusd_epi32(c11, x, y1);
            c12 = _mm512_dpbusd_epi32(c12, x, y2);
            c13 = _mm512_dpbusd_epi32(c13, x, y3);
            x = _mm512_loadu_si512(a + 2 * stride + 64 * w);
            c20 = _mm512_dpbusd_epi32(c20, x, y0);
            c21 = _mm512_dpbusd_epi32(c21, x, y1);
            c22 = _mm512_dpbusd_epi32(c22, x, y2);
            c23 = _mm512_dpbusd_epi32(c23, x, y3);
            x = _mm512_loadu_si512(a + 3 * stride + 64 * w);
            c30 = _mm512_dpbusd_epi32(c30, x, y0);
            c31 = _mm512_dpbusd_epi32(c31, x, y1);
            c32 = _mm512_dpbusd_epi32(c32, x, y2);
            c33 = _mm512_dpbusd_epi32(c33, x, y3);
        }
        const __m512i c[4][4] = {{c00, c01, c02, c03}, {c10, c11, c12, c13},
                                 {c20, c21, c22, c23}, {c30, c31, c32, c33}};
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++)
                out[i * out_stride + r + j] = sml_xfbq_d_of(qbits, bbits, sa[i], sb[r + j],
                                                            _mm512_reduce_add_epi32(c[i][j]));
    }
    if (r < n)
        for (int i = 0; i < 4; i++)
            sml_xfbq_tile_avx512(a + i * stride, sa[i], tile + r * stride, sb + r, words, n - r,
                                 qbits, bbits, out + i * out_stride + r);
}
#endif

int sml_cpu_xfbq_has_vnni(void)
{
#if SML_XFBQ_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

int sml_cpu_xfbq_batch_fits(int query_bits, int base_bits, int64_t words)
{
    /* B_d a signed byte; the dot's int32 sums far from overflow */
    return query_bits <= 8 && base_bits <= 7 && words <= SML_XFBQ_BATCH_MAX_WORDS;
}

size_t sml_cpu_xfbq_batch_scratch(int64_t nq, int64_t words)
{
    return (size_t)(nq + SML_XFBQ_BATCH_TILE) * (size_t)(64 * words + sizeof(int32_t));
}

void sml_cpu_xfbq_distances_batch(const uint64_t *queries, int64_t nq, int query_bits,
                                  const uint8_t *rows, size_t row_size, int base_bits,
                                  int64_t words, int64_t n, uint32_t *out, int64_t out_stride,
                                  void *scratch)
{
    assert(sml_cpu_xfbq_has_vnni() && sml_cpu_xfbq_batch_fits(query_bits, base_bits, words));
#if SML_XFBQ_X86
    const int64_t stride = 64 * words;
    uint8_t *qbytes = scratch, *tile = qbytes + nq * stride;
    int32_t *qsum = (int32_t *)(tile + SML_XFBQ_BATCH_TILE * stride), *rsum = qsum + nq;
    for (int64_t q = 0; q < nq; q++)
        sml_xfbq_unpack_avx512(queries + q * query_bits * words, query_bits, words,
                               qbytes + q * stride, &qsum[q]);
    for (int64_t r0 = 0; r0 < n; r0 += SML_XFBQ_BATCH_TILE) {
        const int64_t m = n - r0 < SML_XFBQ_BATCH_TILE ? n - r0 : SML_XFBQ_BATCH_TILE;
        for (int64_t r = 0; r < m; r++)
            sml_xfbq_unpack_avx512((const uint64_t *)(rows + (size_t)(r0 + r) * row_size),
                                   base_bits, words, tile + r * stride, &rsum[r]);
        int64_t q = 0;
        for (; q + 4 <= nq; q += 4)
            sml_xfbq_tile4_avx512(qbytes + q * stride, qsum + q, tile, rsum, words, m, query_bits,
                                  base_bits, out + q * out_stride + r0, out_stride);
        for (; q < nq; q++)
            sml_xfbq_tile_avx512(qbytes + q * stride, qsum[q], tile, rsum, words, m, query_bits,
                                 base_bits, out + q * out_stride + r0);
    }
#else
    (void)queries, (void)nq, (void)query_bits, (void)rows, (void)row_size, (void)base_bits;
    (void)words, (void)n, (void)out, (void)out_stride, (void)scratch;
#endif
}

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

/* D of query q for the rows of its probed lists in order, into dist; the
 * count of rows. */
static int64_t sml_xfbq_query_distances(const sml_xfbq_scan_args *a, const sml_ivf_probes *probes,
                                        int64_t q, uint32_t *dist)
{
    const sml_ivf_lists *lists = &a->scan.lists;
    const int64_t nprobe = probes->nprobe;
    const uint64_t *xq = a->query_codes + q * a->query_bits * a->words;
    int64_t pos = 0;
    for (int64_t p = 0; p < nprobe; p++) {
        const int64_t l = probes->lists[q * nprobe + p];
        if (l < 0 || lists->size[l] == 0) continue;
        sml_cpu_xfbq_distances(SML_XFBQ_IMPL_AUTO, xq, a->query_bits,
                               (const uint8_t *)lists->codes +
                                   (size_t)lists->offset[l] * lists->code_stride,
                               lists->code_stride, a->base_bits, a->words, lists->size[l],
                               dist + pos);
        pos += lists->size[l];
    }
    return pos;
}

/* One query whose D for its pos rows are in dist: histogram, threshold,
 * candidates into t. */
static void sml_xfbq_query(const sml_xfbq_scan_args *a, const sml_ivf_probes *probes, int64_t q,
                           uint32_t *dist, int64_t pos, uint32_t *hist, sml_topk *t)
{
    const sml_ivf_scan_args *sc = &a->scan;
    const sml_ivf_lists *lists = &sc->lists;
    const int64_t nprobe = probes->nprobe;
    const float *x = sc->queries + q * sc->dim;
    const uint8_t *vectors = (const uint8_t *)a->vectors;
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

/* The list every query probes, alone, or -1. */
static int64_t sml_xfbq_shared_list(const sml_ivf_scan_args *sc, const sml_ivf_probes *probes)
{
    if (probes->nprobe != 1 || sc->nq == 0) return -1;
    const int64_t l = probes->lists[0];
    for (int64_t q = 1; q < sc->nq; q++)
        if (probes->lists[q] != l) return -1;
    return l;
}

/* Queries per block of the batched loop: up to 32, as many as keep a
 * thread's D within 16 MiB; 0 where the loop does not apply or would not
 * pay (fewer than 4 queries a block). */
static int64_t sml_xfbq_block(const sml_xfbq_scan_args *a, const sml_ivf_probes *probes,
                              int threads)
{
    const sml_ivf_scan_args *sc = &a->scan;
    const int64_t l = sml_xfbq_shared_list(sc, probes);
    if (l < 0 || sc->lists.size[l] == 0 || !sml_cpu_xfbq_has_vnni() ||
        !sml_cpu_xfbq_batch_fits(a->query_bits, a->base_bits, a->words))
        return 0;
    int64_t block = ((int64_t)16 << 20) / (4 * sc->lists.size[l]);
    if (block > 32) block = 32;
    const int64_t per_thread = (sc->nq + threads - 1) / threads;
    if (block > per_thread) block = per_thread;
    return block >= 4 ? block : 0;
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
    /* Threads take blocks of queries: the batched loop's (block > 0) or one
     * query each.  Per thread: D of a block, the histogram, and the batched
     * loop's bytes. */
    const int64_t block = sml_xfbq_block(a, &probes, threads), rows = most > 0 ? most : 1;
    const int64_t per_block = block > 0 ? block : 1;
    const size_t bytes_scratch =
        block > 0 ? sml_cpu_xfbq_batch_scratch(block, a->words) / sizeof(uint32_t) + 1 : 0;
    const int64_t per_thread = per_block * rows + a->nbins + (int64_t)bytes_scratch;
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
    const int64_t blocks = (sc->nq + per_block - 1) / per_block;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t i = 0; i < blocks; i++) {
        const int me = omp_get_thread_num();
        uint32_t *dist = scratch + (size_t)me * (size_t)per_thread;
        uint32_t *hist = dist + per_block * rows, *bytes = hist + a->nbins;
        const int64_t q0 = i * per_block;
        const int64_t nb = sc->nq - q0 < per_block ? sc->nq - q0 : per_block;
        int64_t n = 0; /* with the batched loop, every query's rows: its one list */
        if (block > 0) {
            const int64_t l = probes.lists[0];
            const size_t stride = sc->lists.code_stride;
            n = sc->lists.size[l];
            sml_cpu_xfbq_distances_batch(
                a->query_codes + q0 * a->query_bits * a->words, nb, a->query_bits,
                (const uint8_t *)sc->lists.codes + (size_t)sc->lists.offset[l] * stride, stride,
                a->base_bits, a->words, n, dist, rows, bytes);
        }
        for (int64_t q = q0; q < q0 + nb; q++) {
            uint32_t *d = dist + (q - q0) * rows;
            const int64_t pos = block > 0 ? n : sml_xfbq_query_distances(a, &probes, q, d);
            sml_topk t;
            sml_topk_reset(&t, storage + me * cap, kept);
            sml_xfbq_query(a, &probes, q, d, pos, hist, &t);
            sml_cpu_ivf_finish(sc, q, kept, &t);
        }
    }
    sml_free(scratch);
    sml_free(storage);
    sml_cpu_ivf_probes_free(sc, &probes);
    return SIMIL_OK;
}
