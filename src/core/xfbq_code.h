/* xfbq_code.h: the XFBQ code of one vector (the XFBQ paper, section 3;
 * algo/xfbq.h describes the codes), as inline functions that the host encoder
 * (algo/xfbq.c) and the CUDA one (cuda/cuda_xfbq.cu) share, so that both give
 * the same bits. */
#ifndef SML_XFBQ_CODE_H
#define SML_XFBQ_CODE_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define SML_XFBQ_HD __host__ __device__
#else
#define SML_XFBQ_HD
#endif

/* Level of v (already scaled) with bits signs: m in [0, 2^bits), the value
 * being (2m + 1 - 2^bits) / 2^bits; sign s_i = +1 where bit (bits - i) of m
 * is set: exactly the greedy code of algo/xfbq.h, for every float; down: the tie
 * rule of odd dimensions. */
static inline SML_XFBQ_HD int sml_xfbq_level(float v, int bits, int down)
{
    const float half = (float)(1 << (bits - 1));
    const float t = v * half;  /* exact: a power-of-two scale */
    if (!(t > -half)) return 0;
    if (t >= half) return (1 << bits) - 1;
    float f = (float)(int)t;   /* floor, for |t| < 128 */
    if (f > t) f -= 1.0f;
    if (down && f == t) f -= 1.0f;
    return (int)half + (int)f;
}

/* Component j of row x rotated by RR's r (dim x dim, row-major: x r): the sum
 * of x_i r_ij as one chain of FMAs in the order of i, from 0.  Queries are
 * rotated in this order on the host (sml_xfbq_rotate, which runs the chains
 * of many j side by side) and on the device, so that both code a rotated
 * query with the same bits; a GEMM's order is its library's. */
static inline SML_XFBQ_HD float sml_xfbq_rotated_component(const float *x, const float *r,
                                                           int64_t dim, int64_t j)
{
    float s = 0.0f;
    for (int64_t i = 0; i < dim; i++) s = fmaf(x[i], r[i * dim + j], s);
    return s;
}

/* The scale that turns row x into the values to code: alpha, or alpha / ||x||
 * (0 for a zero row) when normalize is set.  The squares are added in double,
 * in order, never fused (the device would contract them into FMAs). */
static inline SML_XFBQ_HD float sml_xfbq_row_scale(const float *x, int64_t dim, float alpha,
                                                   int normalize)
{
    if (!normalize) return alpha;
    double s = 0;
    for (int64_t j = 0; j < dim; j++) {
#ifdef __CUDA_ARCH__
        s = __dadd_rn(s, __dmul_rn((double)x[j], (double)x[j]));
#else
        s += (double)x[j] * x[j];
#endif
    }
    return s > 0 ? (float)(alpha / sqrt(s)) : 0.0f;
}

/* Word w of every plane of one code: components [64 w, 64 w + 64) of row x
 * (dim of them in all) scaled by scale; plane i goes to code[i * words + w].
 * Bits past dim stay 0. */
static inline SML_XFBQ_HD void sml_xfbq_encode_word(const float *x, int64_t dim, float scale,
                                                    int bits, int64_t words, int64_t w,
                                                    uint64_t *code)
{
    const int64_t d0 = w * 64, n = dim - d0 < 64 ? dim - d0 : 64;
    uint64_t plane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t e = 0; e < n; e++) {
        /* bit (bits - 1 - i) of minus: f(s_i) = 1, the sign is -1 */
        const unsigned minus =
            ~(unsigned)sml_xfbq_level(x[d0 + e] * scale, bits, (int)((d0 + e) & 1));
        for (int i = 0; i < 8; i++)  /* constant bounds: the planes stay in registers */
            if (i < bits) plane[i] |= (uint64_t)((minus >> (bits - 1 - i)) & 1u) << e;
    }
    for (int i = 0; i < bits; i++) code[i * words + w] = plane[i];
}

/* The bins a query's window adds to the bin of its K-th smallest D: the fixed
 * extra_bins and ceil(spread_q16 (median - lowest) / 2^16), median and lowest
 * the bins of its median and smallest D (algo/xfbq.h, sml_xfbq_selection).
 * Integer arithmetic, shared by the CPU and GPU scans, so both take the same rows. */
static inline SML_XFBQ_HD int64_t sml_xfbq_window_bins(int64_t extra_bins, uint32_t spread_q16,
                                                       int64_t lowest, int64_t median)
{
    const uint64_t spread = (uint64_t)(median - lowest);  /* < 4096 bins */
    return extra_bins + (int64_t)((spread * spread_q16 + 65535u) >> 16);
}

#endif
