/* sq_code.h: scalar-quantizer codes of one vector component, as inline
 * functions that the host encoder (algo/sq.c), the CPU scan (cpu/cpu_sq.c)
 * and the CUDA scan share, so that every one decodes the same floats.
 *
 * The codes are Faiss's (ScalarQuantizer.cpp), so that Faiss files read as
 * they were written:
 *   - SQ8: per dimension j a range [vmin_j, vmin_j + vdiff_j]; the code of v
 *     is floor(255 t), t = (v - vmin_j) / vdiff_j clamped to [0, 1], and it
 *     decodes to vmin_j + vdiff_j (c + 0.5) / 255;
 *   - SQfp16: IEEE half, rounded to nearest even (overflow gives inf);
 *   - SQbf16: the top 16 bits of the float, rounded to nearest even. */
#ifndef SML_SQ_CODE_H
#define SML_SQ_CODE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SML_SQ_HD __host__ __device__
#else
#define SML_SQ_HD
#endif

/* The element codes (values are Faiss's QuantizerType, which files hold). */
typedef enum sml_sq_type {
    SML_SQ_8BIT = 0,  /* Faiss QT_8bit */
    SML_SQ_FP16 = 4,  /* Faiss QT_fp16 */
    SML_SQ_BF16 = 7   /* Faiss QT_bf16 */
} sml_sq_type;

/* Bytes of one component's code. */
static inline SML_SQ_HD size_t sml_sq_elem_bytes(sml_sq_type t) { return t == SML_SQ_8BIT ? 1 : 2; }

static inline SML_SQ_HD uint32_t sml_sq_float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline SML_SQ_HD float sml_sq_bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline SML_SQ_HD uint16_t sml_sq_bf16_encode(float f)
{
    uint32_t u = sml_sq_float_bits(f);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline SML_SQ_HD float sml_sq_bf16_decode(uint16_t h)
{
    return sml_sq_bits_float((uint32_t)h << 16);
}

/* float -> IEEE half, round to nearest even (finite input; simil's vectors
 * are checked finite before they are coded). */
static inline SML_SQ_HD uint16_t sml_sq_fp16_encode(float f)
{
    const uint32_t u = sml_sq_float_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a >= 0x477ff000u) return sign | 0x7c00u;   /* rounds past 65504: inf */
    if (a < 0x38800000u) {                         /* below 2^-14: subnormal or 0 */
        if (a < 0x33000000u) return sign;          /* below half the smallest: 0 */
        const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        const int shift = 126 - (int)(a >> 23);    /* 14..24 */
        const uint32_t q = mant >> shift, rest = mant & ((1u << shift) - 1u);
        const uint32_t halfway = 1u << (shift - 1);
        return sign | (uint16_t)(q + (rest > halfway || (rest == halfway && (q & 1u))));
    }
    const uint32_t r = a - 0x38000000u;            /* rebias exponent 127 -> 15 */
    const uint32_t q = r >> 13, rest = r & 0x1fffu;
    return sign | (uint16_t)(q + (rest > 0x1000u || (rest == 0x1000u && (q & 1u))));
}

static inline SML_SQ_HD float sml_sq_fp16_decode(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {                                   /* 0 or subnormal: m 2^-24 */
        const float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (e == 31) return sml_sq_bits_float(sign | 0x7f800000u | (m << 13));
    return sml_sq_bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

static inline SML_SQ_HD uint8_t sml_sq8_encode(float v, float vmin, float vdiff)
{
    float t = vdiff > 0.0f ? (v - vmin) / vdiff : 0.0f;
    t = t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
    return (uint8_t)(255.0f * t);
}

static inline SML_SQ_HD float sml_sq8_decode(uint8_t c, float vmin, float vdiff)
{
    return vmin + vdiff * (((float)c + 0.5f) / 255.0f);
}

/* Component j of a code row (vmin, vdiff: SQ8's ranges, else unused). */
static inline SML_SQ_HD float sml_sq_decode(sml_sq_type t, const uint8_t *code, int64_t j,
                                            const float *vmin, const float *vdiff)
{
    if (t == SML_SQ_8BIT) return sml_sq8_decode(code[j], vmin[j], vdiff[j]);
    uint16_t h;
    memcpy(&h, code + 2 * j, sizeof h);
    return t == SML_SQ_FP16 ? sml_sq_fp16_decode(h) : sml_sq_bf16_decode(h);
}

#endif
