/* cpu_sq.h: the per-row sums of the CPU scalar-quantizer scan (cpu_sq.c),
 * apart so that tests run every implementation on any machine. */
#ifndef SML_CPU_SQ_H
#define SML_CPU_SQ_H

#include <stdbool.h>
#include <stdint.h>

typedef enum sml_sq_impl {
    SML_SQ_IMPL_AUTO = 0,     /* AVX-512 where the CPU has it, else the portable loops */
    SML_SQ_IMPL_PORTABLE = 1  /* the portable loops (vectorized by the compiler) */
} sml_sq_impl;

/* A row of SQ8 bytes: sum w_j code_j (IP), or sum (w_j - s_j code_j)^2 (L2). */
float sml_cpu_sq8_row(sml_sq_impl impl, bool l2, const float *w, const float *s,
                      const uint8_t *code, int64_t dim);

/* A row of SQfp16 or SQbf16 codes (type: an sml_sq_type) decoded to y:
 * sum x_j y_j (IP), or sum (x_j - y_j)^2 (L2); buf: dim floats of scratch. */
float sml_cpu_sq16_row(sml_sq_impl impl, int type, bool l2, const float *x, const uint8_t *code,
                       int64_t dim, float *buf);

#endif
