/* test_vectors.c: the checks and normalization of caller vectors
 * (core/vectors.c).  The one-pass check and normalization must give the bits
 * of the check followed by the normalization, in place or not, and the same
 * errors, naming the first bad row by its number in the caller's set. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/vectors.h"
#include "util/test_util.h"

static void test_one_pass_same_bits(void **state)
{
    (void)state;
    const int64_t dims[] = {1, 7, 96, 785};
    const int64_t n = 301;
    for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
        const int64_t dim = dims[t];
        const size_t count = (size_t)(n * dim);
        float *x = sml_test_malloc(sizeof(float) * count);
        float *want = sml_test_malloc(sizeof(float) * count);
        float *got = sml_test_malloc(sizeof(float) * count);
        sml_test_fill_uniform(x, (int64_t)count, 11 + (uint64_t)t, -3, 3);
        for (int64_t j = 0; j < dim; j++) {
            x[4 * dim + j] = 0.0f;                       /* a zero row */
            x[9 * dim + j] *= j % 2 ? 1e-20f : 1e20f;    /* mixed magnitudes */
        }
        SML_ASSERT_OK(sml_vectors_check(x, n, dim, 0, "test"));
        sml_vectors_normalize(x, n, dim, want);
        SML_ASSERT_OK(sml_vectors_check_normalize(x, n, dim, "test", 0, got));
        assert_memory_equal(got, want, sizeof(float) * count);
        /* in place */
        memcpy(got, x, sizeof(float) * count);
        SML_ASSERT_OK(sml_vectors_check_normalize(got, n, dim, "test", 0, got));
        assert_memory_equal(got, want, sizeof(float) * count);
        for (int64_t j = 0; j < dim; j++) assert_true(want[4 * dim + j] == 0.0f); /* stays zero */
        free(x);
        free(want);
        free(got);
    }
}

static void test_one_pass_errors(void **state)
{
    (void)state;
    const int64_t n = 50, dim = 33;
    float x[50 * 33], out[50 * 33];
    sml_test_fill_uniform(x, n * dim, 5, -1, 1);
    x[31 * dim + 20] = INFINITY;
    x[17 * dim + 3] = NAN; /* the first bad row is named, whichever thread met it */
    assert_int_equal(sml_vectors_check_normalize(x, n, dim, "search", 1000, out),
                     SIMIL_ERR_INVALID_ARGUMENT);
    if (strstr(simil_last_error(), "search: vector 1017 has NaN in component 3") == NULL)
        fail_msg("got: %s", simil_last_error());
    x[17 * dim + 3] = 0.5f;
    assert_int_equal(sml_vectors_check_normalize(x, n, dim, "search", 0, out),
                     SIMIL_ERR_INVALID_ARGUMENT);
    if (strstr(simil_last_error(), "search: vector 31 has Inf in component 20") == NULL)
        fail_msg("got: %s", simil_last_error());
    x[31 * dim + 20] = 1e30f; /* finite: cosine takes any norm */
    SML_ASSERT_OK(sml_vectors_check_normalize(x, n, dim, "search", 0, out));
    assert_int_equal(sml_vectors_check(x, n, dim, 1, "search"), SIMIL_ERR_INVALID_ARGUMENT);
    if (strstr(simil_last_error(), "search: vector 31 has a squared norm above") == NULL)
        fail_msg("got: %s", simil_last_error());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_pass_same_bits),
        cmocka_unit_test(test_one_pass_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
