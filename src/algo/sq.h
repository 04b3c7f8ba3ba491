/* sq.h: scalar quantizers (Faiss's ScalarQuantizer, core/sq_code.h): each
 * component of a vector coded on its own, in 8 bits against a trained range
 * per dimension (SQ8), or as a half-precision float (SQfp16, SQbf16).  A
 * code row is dim x sml_sq_elem_bytes bytes, zero-padded to the row stride
 * that stores it. */
#ifndef SML_SQ_H
#define SML_SQ_H

#include <stddef.h>
#include <stdint.h>

#include "core/sq_code.h"
#include "simil/status.h"

/* Bytes of one vector's code (without padding). */
static inline size_t sml_sq_code_bytes(sml_sq_type t, int64_t dim)
{
    return (size_t)dim * sml_sq_elem_bytes(t);
}

/* 1 where the type has trained parameters (SQ8's ranges). */
static inline int sml_sq_needs_training(sml_sq_type t) { return t == SML_SQ_8BIT; }

/* SQ8's ranges from n vectors (host, n >= 1): per dimension the minimum and
 * the spread max - min (Faiss's RS_minmax), into vmin and vdiff (dim each). */
void sml_sq_train(int64_t n, int64_t dim, const float *x, float *vmin, float *vdiff);

/* Codes of n vectors (host) into rows `stride` bytes apart (stride >= the
 * code bytes; the padding is zeroed).  vmin, vdiff: SQ8's ranges, else
 * unused. */
void sml_sq_encode(sml_sq_type t, int64_t dim, int64_t n, const float *x, const float *vmin,
                   const float *vdiff, uint8_t *codes, size_t stride);

/* The floats of one code row, into out (dim). */
void sml_sq_decode_row(sml_sq_type t, int64_t dim, const uint8_t *code, const float *vmin,
                       const float *vdiff, float *out);

#endif
