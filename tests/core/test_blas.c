/* test_blas.c: OpenBLAS as simil loads it (core/blas.c).  The kernels in use
 * must be those the CPU's instruction sets call for: Debian 12's OpenBLAS
 * 0.3.21 took the AVX-512 Xeon of the development machine for a Prescott
 * (SSE3 kernels, 5x slower GEMM), which the load now corrects; with
 * OPENBLAS_CORETYPE set, the user's choice stands.  Then a product through
 * the loaded library against a plain loop. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/blas.h"
#include "util/test_util.h"

static void test_kernels_fit_the_cpu(void **state)
{
    (void)state;
    SML_ASSERT_OK(sml_blas_ready(1));
    const char *core = sml_blas_corename();
    printf("OpenBLAS kernels: %s (OPENBLAS_CORETYPE %s)\n", core ? core : "(not said)",
           getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "unset");
    if (!sml_blas_core_wanted())
        fail_msg("OpenBLAS runs %s kernels on a CPU with AVX2 or AVX-512", core ? core : "?");
}

static void test_product(void **state)
{
    (void)state;
    enum { M = 37, N = 29, K = 53 };
    float a[M * K], b[N * K], c[M * N];
    sml_test_fill_uniform(a, M * K, 1, -1, 1);
    sml_test_fill_uniform(b, N * K, 2, -1, 1);
    SML_ASSERT_OK(sml_blas_ready(1));
    sml_sgemm(0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double want = 0;
            for (int t = 0; t < K; t++) want += (double)a[i * K + t] * b[j * K + t];
            if (fabs(c[i * N + j] - want) > 1e-4 * (1 + fabs(want)))
                fail_msg("c[%d][%d] = %g, want %g", i, j, c[i * N + j], want);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_fit_the_cpu),
        cmocka_unit_test(test_product),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
