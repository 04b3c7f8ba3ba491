/* opq.h: the OPQ rotation (opq.c).  rt is d x dout, row-major: vectors are
 * rotated by y = x . rt and mapped back by x = y . rt^T. */
#ifndef SML_ALGO_OPQ_H
#define SML_ALGO_OPQ_H

#include "core/backend.h"

/* Train rt for a PQ of m sub-quantizers on (the first 65,536 of) n vectors. */
simil_status sml_opq_train(sml_backend *b, int64_t n, int64_t d, int64_t dout, int64_t m,
                           const float *x, float *rt);

/* rt = U V^T (d x dout, orthonormal columns) for the SVD a = U S V^T of the
 * d x dout matrix a (row-major): the orthogonal factor of a, the best
 * rotation of orthogonal Procrustes.  Also XFBQ's random rotation (from a
 * Gaussian a). */
simil_status sml_opq_procrustes(int d, int dout, const float *a, float *rt);

/* y = x rt (n x dout) and back, the same bits for any thread count; they
 * fail only where OpenBLAS cannot be loaded or has no room (core/blas.h). */
simil_status sml_opq_apply(int64_t n, int64_t d, int64_t dout, const float *rt, const float *x,
                           float *y);
simil_status sml_opq_unapply(int64_t n, int64_t d, int64_t dout, const float *rt, const float *y,
                             float *x);

#endif
