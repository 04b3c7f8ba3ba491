/* xfbq.c: XFBQ codes, the scale alpha and the selection parameters (xfbq.h).
 * Everything here runs on the host, with OpenMP over rows; the scans that use
 * the codes are backend ops (cpu_xfbq.c, cuda_xfbq.cu). */
#include "algo/xfbq.h"

#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

static size_t sml_round16(size_t x) { return (x + 15) / 16 * 16; }

simil_status sml_xfbq_init(sml_xfbq *q, int64_t dim, int query_bits, int base_bits)
{
    memset(q, 0, sizeof *q);
    SML_RETURN_IF(query_bits < 1 || query_bits > 8 || base_bits < 1 || base_bits > 8,
                  SIMIL_ERR_INVALID_ARGUMENT, "XFBQ%dx%d: bit counts must be 1 to 8", query_bits,
                  base_bits);
    q->dim = dim;
    q->query_bits = query_bits;
    q->base_bits = base_bits;
    q->words = (dim + 63) / 64;
    SML_RETURN_IF(sml_xfbq_dmax(q) >= ((uint64_t)1 << 31), SIMIL_ERR_UNSUPPORTED,
                  "XFBQ%dx%d on %" PRId64 " dimensions: distances would pass 2^31 "
                  "(dim x (2^Q - 1) x (2^B - 1)); use fewer bits or dimensions",
                  query_bits, base_bits, dim);
    q->code_bytes = sml_round16((size_t)base_bits * (size_t)q->words * 8);
    q->row_size = sml_round16(q->code_bytes + (size_t)dim * sizeof(float));
    return SIMIL_OK;
}

uint64_t sml_xfbq_dmax(const sml_xfbq *q)
{
    return (uint64_t)q->dim * (uint64_t)((1 << q->query_bits) - 1) *
           (uint64_t)((1 << q->base_bits) - 1);
}

/* Rearrange a[0..n) so that a[r] holds the value of rank r (quickselect). */
static float sml_select_rank(float *a, int64_t n, int64_t r)
{
    int64_t lo = 0, hi = n - 1;
    while (hi > lo) {
        const float pivot = a[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) {
                const float t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        if (r <= j) {
            hi = j;
        } else if (r >= i) {
            lo = i;
        } else {
            break;  /* a[j+1..i-1] all equal the pivot */
        }
    }
    return a[r];
}

simil_status sml_xfbq_choose_alpha(int64_t n, int64_t dim, const float *x, int normalize,
                                   float *alpha)
{
    *alpha = 1.0f;
    if (n <= 0) return SIMIL_OK;
    const int64_t budget = (int64_t)1 << 21;
    int64_t rows = budget / dim;
    if (rows < 1) rows = 1;
    if (rows > n) rows = n;
    float *v;
    SML_TRY(sml_alloc((void **)&v, (size_t)(rows * dim), sizeof *v, "the XFBQ scale sample"));
    float largest = 0;
#pragma omp parallel for schedule(static) reduction(max : largest) if (rows * dim > 65536)
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + (int64_t)((double)r * (double)n / (double)rows) * dim;
        const float s = sml_xfbq_row_scale(row, dim, 1.0f, normalize);
        for (int64_t j = 0; j < dim; j++) {
            const float a = fabsf(row[j] * s);
            v[r * dim + j] = a;
            if (a > largest) largest = a;
        }
    }
    const int64_t count = rows * dim;
    int64_t rank = (int64_t)ceil(0.98 * (double)count) - 1;
    if (rank < 0) rank = 0;
    const float quantile = sml_select_rank(v, count, rank);
    sml_free(v);
    if (quantile > 0) {
        *alpha = 1.0f / quantile;
    } else if (largest > 0) {
        *alpha = 1.0f / largest;
    }
    return SIMIL_OK;
}

/* The code of one row, word by word. */
static void sml_xfbq_encode_row(const sml_xfbq *q, int bits, const float *x, float scale,
                                uint64_t *code)
{
    for (int64_t w = 0; w < q->words; w++)
        sml_xfbq_encode_word(x, q->dim, scale, bits, q->words, w, code);
}

void sml_xfbq_encode(const sml_xfbq *q, int bits, int64_t n, const float *x, int normalize,
                     uint64_t *out, size_t stride)
{
#pragma omp parallel for schedule(static) if (n * q->dim > 65536)
    for (int64_t r = 0; r < n; r++) {
        const float *row = x + r * q->dim;
        uint64_t *code = (uint64_t *)((uint8_t *)out + (size_t)r * stride);
        sml_xfbq_encode_row(q, bits, row, sml_xfbq_row_scale(row, q->dim, q->alpha, normalize),
                            code);
    }
}

/* Rows [0, m) of a block: y_qj = fmaf(x_qi, r_ij, y_qj) for i = 0, 1, ...,
 * the chain of sml_xfbq_rotated_component per component, the j of a row side
 * by side (vectorized: the order within each chain does not change).  A block
 * of rows shares each row of r, so r is read once a block. */
static inline __attribute__((always_inline)) void sml_rotate_block(const float *r, int64_t dim,
                                                                   int64_t m, const float *x,
                                                                   float *y)
{
    memset(y, 0, sizeof(float) * (size_t)(m * dim));
    for (int64_t i = 0; i < dim; i++) {
        const float *ri = r + i * dim;
        for (int64_t q = 0; q < m; q++) {
            const float xi = x[q * dim + i];
            float *yq = y + q * dim;
#pragma omp simd
            for (int64_t j = 0; j < dim; j++) yq[j] = fmaf(xi, ri[j], yq[j]);
        }
    }
}

enum { SML_XFBQ_ROTATE_BLOCK = 8 };

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* With the FMA instructions: fmaf is one instruction (without them, a libm
 * call that computes the same fused result, slowly). */
__attribute__((target("avx2,fma"))) static void sml_rotate_block_fma(const float *r, int64_t dim,
                                                                     int64_t m, const float *x,
                                                                     float *y)
{
    sml_rotate_block(r, dim, m, x, y);
}
#endif

static void sml_rotate_block_plain(const float *r, int64_t dim, int64_t m, const float *x,
                                   float *y)
{
    sml_rotate_block(r, dim, m, x, y);
}

void sml_xfbq_rotate(const float *r, int64_t dim, int64_t n, const float *x, float *y)
{
    void (*block)(const float *, int64_t, int64_t, const float *, float *) =
        sml_rotate_block_plain;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        block = sml_rotate_block_fma;
#endif
    const int64_t blocks = (n + SML_XFBQ_ROTATE_BLOCK - 1) / SML_XFBQ_ROTATE_BLOCK;
#pragma omp parallel for schedule(static) if (n * dim * dim > (1 << 20))
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t q0 = b * SML_XFBQ_ROTATE_BLOCK;
        const int64_t m = n - q0 < SML_XFBQ_ROTATE_BLOCK ? n - q0 : SML_XFBQ_ROTATE_BLOCK;
        block(r, dim, m, x + q0 * dim, y + q0 * dim);
    }
}

void sml_xfbq_make_rows(const sml_xfbq *q, int64_t n, const float *x, int normalize,
                        uint8_t *rows)
{
    const size_t plain = (size_t)q->base_bits * (size_t)q->words * 8;
    const size_t floats = (size_t)q->dim * sizeof(float);
#pragma omp parallel for schedule(static) if (n * q->dim > 65536)
    for (int64_t r = 0; r < n; r++) {
        uint8_t *row = rows + (size_t)r * q->row_size;
        const float *v = x + r * q->dim;
        sml_xfbq_encode_row(q, q->base_bits, v, sml_xfbq_row_scale(v, q->dim, q->alpha, normalize),
                            (uint64_t *)row);
        memset(row + plain, 0, q->code_bytes - plain);
        memcpy(row + q->code_bytes, v, floats);
        memset(row + q->code_bytes + floats, 0, q->row_size - q->code_bytes - floats);
    }
}

void sml_xfbq_selection(const sml_xfbq *q, float extra_distance, int of_spread,
                        sml_xfbq_select *sel)
{
    const uint64_t dmax = sml_xfbq_dmax(q);
    int shift = 0;
    while ((dmax >> shift) >= SML_XFBQ_MAX_BINS) shift++;
    sel->shift = shift;
    sel->nbins = (int64_t)(dmax >> shift) + 1;
    sel->extra_bins = 0;
    sel->spread_q16 = 0;
    if (!(extra_distance > 0)) return;
    if (of_spread) {
        const double q16 = ceil((double)extra_distance * 65536.0 * (1 - 1e-6));
        sel->spread_q16 = q16 > 65536.0 ? 65536u : (uint32_t)q16;
        return;
    }
    /* less a hair, so that e = 0.05f (a little above 0.05) gives 0.05 dmax */
    double bins = ceil((double)extra_distance * (double)dmax / ldexp(1.0, shift) * (1 - 1e-6));
    if (bins > (double)sel->nbins) bins = (double)sel->nbins;
    sel->extra_bins = (int64_t)bins;
}
