/* vectors.h: checks and transforms of caller vectors that every index needs
 * before data enters it. */
#ifndef SML_VECTORS_H
#define SML_VECTORS_H

#include <stddef.h>
#include <stdint.h>

#include "simil/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest squared norm a row may have where norms are bounded: distances
 * add and subtract three such terms in float, whose largest finite value is
 * about 3.4e38.  Backends that check rows in their own memory use it too. */
#define SML_NORM2_BOUND 1e37

/* Fail with SIMIL_ERR_INVALID_ARGUMENT, naming what, the row and the column,
 * if any component is NaN or Inf, or if bound_norms is set and a row's squared
 * norm is too large for float arithmetic on distances. */
simil_status sml_vectors_check(const float *x, int64_t n, int64_t dim, int bound_norms,
                               const char *what);

/* The same for rows first .. first + n - 1 of a larger set, x pointing at
 * row first: the message names the row by its number in the set. */
simil_status sml_vectors_check_from(const float *x, int64_t n, int64_t dim, int bound_norms,
                                    const char *what, int64_t first);

/* out = x with each row scaled to unit L2 norm (computed in double).  Zero
 * rows stay zero.  out may equal x. */
void sml_vectors_normalize(const float *x, int64_t n, int64_t dim, float *out);

/* sml_vectors_check_from without a bound on norms, and out = x normalized
 * as sml_vectors_normalize (the same bits), in one pass: each row is checked
 * and scaled while it is in cache, where two passes read x twice.  out may
 * equal x.  After a failure out holds part of the rows. */
simil_status sml_vectors_check_normalize(const float *x, int64_t n, int64_t dim, const char *what,
                                         int64_t first, float *out);

/* memcpy by every OpenMP thread, a slice each: one core cannot keep up with
 * a GPU's pinned buffer when results come back from it. */
void sml_copy_parallel(void *dst, const void *src, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
