/* blas.h: OpenBLAS (GEMM and the SVD), loaded when first needed.
 *
 * simil does not link OpenBLAS.  Its load-time constructor reserves about
 * 130 MB of address space per thread for GEMM buffers, and OpenBLAS 0.3.21
 * retries a failed reservation forever (upstream issue 5289), in the
 * constructor or inside sgemm: under `ulimit -v` a program linked with it
 * hung before main.  So it is loaded (dlopen) by the first call that needs
 * it, never by commands that do not (simil info, gen); and sml_blas_ready
 * checks the headroom under RLIMIT_AS first, failing with
 * SIMIL_ERR_OUT_OF_MEMORY where OpenBLAS would hang.  Without a limit the
 * check costs one getrlimit. */
#ifndef SML_BLAS_H
#define SML_BLAS_H

#include <stdint.h>

#include "simil/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Load OpenBLAS unless it is loaded, and check that `callers` threads may
 * call it at once: under an address-space limit, each thread beyond the most
 * that have called it so far needs room for a buffer of its own.  Call
 * before any of the functions below (once per operation, before its
 * parallel region); they assume it succeeded. */
simil_status sml_blas_ready(int callers);

/* The same for up to `want` callers: *got = how many fit (>= 1), fewer
 * where the limit leaves room for fewer. */
simil_status sml_blas_callers(int want, int *got);

/* C = alpha op(A) op(B) + beta C, row-major (cblas_sgemm). */
void sml_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
               int64_t ldc);

/* sml_sgemm cut into blocks of `block` rows of C (of op(A)), spread over
 * the OpenMP threads, each block an sgemm on one thread.  OpenBLAS's own
 * threading splits a product by the number of threads, and its results
 * change with that number (a 3,000 x 96 x 96 product: 42,101 of 288,000
 * entries differed between 1 and 2 threads); fixed blocks give the same bits
 * for any thread count.  Checks the room for its callers (sml_blas_callers)
 * itself. */
simil_status sml_sgemm_rows(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const float *a, int64_t lda, const float *b,
                            int64_t ldb, float beta, float *c, int64_t ldc, int64_t block);

/* LAPACK's sgesdd, the divide-and-conquer SVD (column-major, Fortran
 * calling convention; iwork: 8 min(m, n) ints), on the calling thread
 * alone. */
void sml_sgesdd(const char *jobz, const int *m, const int *n, float *a, const int *lda, float *s,
                float *u, const int *ldu, float *vt, const int *ldvt, float *work,
                const int *lwork, int *iwork, int *info);

/* openblas_get_parallel(): 1 for the pthread build, 2 for the OpenMP one. */
int sml_blas_parallel(void);

/* The kernels OpenBLAS runs (openblas_get_corename(), e.g. "SkylakeX"), or
 * NULL where it does not say.  On a CPU with AVX2 and FMA or AVX-512, simil
 * loads it with those instruction sets' kernels ("Haswell", "SkylakeX"),
 * unless OPENBLAS_CORETYPE is set: OpenBLAS 0.3.21 took one such CPU for a
 * Prescott. */
const char *sml_blas_corename(void);

/* 1 when the kernels in use are those the CPU deserves by the rule above
 * (or the user chose them with OPENBLAS_CORETYPE): for tests. */
int sml_blas_core_wanted(void);

#ifdef __cplusplus
}
#endif
#endif
