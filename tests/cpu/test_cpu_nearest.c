/* test_cpu_nearest.c: the nearest of a few short vectors (cpu_nearest.h)
 * against a plain float loop that adds the same terms in the same order, so
 * indexes and distances must match exactly: every width of kernel, numbers
 * of vectors on both sides of each block of 64, 1 to 33 components, and
 * repeated vectors (the smallest index wins).  Then the CPU k-NN with k = 1
 * on such a base (the path k-means takes in PQ sub-spaces) against the
 * float64 reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_knn.h"
#include "cpu/cpu_nearest.h"
#include "util/test_util.h"

/* The plain loop: first index of the smallest sum of (x_t - y_t)^2. */
static int64_t plain_nearest(const float *rows, int64_t n, int64_t dim, const float *x, float *dist)
{
    int64_t best = 0;
    float least = INFINITY;
    for (int64_t j = 0; j < n; j++) {
        float s = 0.0f;
        for (int64_t t = 0; t < dim; t++) {
            const float d = x[t] - rows[j * dim + t];
            s += d * d;
        }
        if (s < least) {
            least = s;
            best = j;
        }
    }
    *dist = least;
    return best;
}

static void check_shape(int64_t n, int64_t dim, int lanes, uint64_t seed)
{
    const int64_t nq = 200;
    float *rows = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    float *x = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
    sml_test_fill_uniform(rows, n * dim, seed, -3, 3);
    sml_test_fill_uniform(x, nq * dim, seed + 1, -3, 3);
    /* repeats: the last rows copy earlier ones, and a few queries are rows */
    for (int64_t j = n / 2; j < n; j += 3)
        memcpy(rows + j * dim, rows + (j / 3) * dim, sizeof(float) * (size_t)dim);
    for (int64_t q = 0; q < nq; q += 5)
        memcpy(x + q * dim, rows + ((q * 7) % n) * dim, sizeof(float) * (size_t)dim);
    sml_nearest_book book;
    SML_ASSERT_OK(sml_nearest_book_init(&book, n, dim, rows, dim));
    for (int64_t q = 0; q < nq; q++) {
        float want_d, got_d;
        const int64_t want = plain_nearest(rows, n, dim, x + q * dim, &want_d);
        const int64_t got = sml_nearest_width(&book, x + q * dim, &got_d, lanes);
        if (got != want || memcmp(&got_d, &want_d, sizeof got_d) != 0)
            fail_msg("n=%lld dim=%lld lanes=%d seed=%llu query %lld: got %lld (%.9g), want "
                     "%lld (%.9g)",
                     (long long)n, (long long)dim, lanes, (unsigned long long)seed, (long long)q,
                     (long long)got, got_d, (long long)want, want_d);
    }
    sml_nearest_book_free(&book);
    free(rows);
    free(x);
}

static void test_kernels_match_the_plain_loop(void **state)
{
    (void)state;
    const int64_t ns[] = {1, 2, 16, 63, 64, 65, 100, 128, 256, 300};
    const int64_t dims[] = {1, 2, 3, 7, 14, 16, 33};
    for (int lanes = 4; lanes <= sml_nearest_lanes(); lanes *= 2)
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
                check_shape(ns[a], dims[d], lanes, 100 * a + d);
    printf("kernels checked: 4-float%s\n", sml_nearest_lanes() == 8 ? " and 8-float" : " only");
}

static void test_knn_k1_small_base(void **state)
{
    (void)state;
    const int64_t n = 256, dim = 14, nq = 3000;
    float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
    float *norms = sml_test_malloc(sizeof(float) * (size_t)n);
    float *dist = sml_test_malloc(sizeof(float) * (size_t)nq);
    int64_t *ids = sml_test_malloc(sizeof(int64_t) * (size_t)n);
    int64_t *labels = sml_test_malloc(sizeof(int64_t) * (size_t)nq);
    sml_test_fill_uniform(base, n * dim, 7, 0, 255);
    sml_test_fill_uniform(q, nq * dim, 8, 0, 255);
    for (int64_t j = 0; j < n; j++) {
        ids[j] = j;
        norms[j] = 0;
        for (int64_t t = 0; t < dim; t++) norms[j] += base[j * dim + t] * base[j * dim + t];
    }
    sml_knn_args a = {.base = base, .base_norms = norms, .base_ids = ids, .n = n, .dim = dim,
                      .queries = q, .nq = nq, .k = 1, .metric = SIMIL_METRIC_L2,
                      .distances = dist, .labels = labels};
    SML_ASSERT_OK(sml_cpu_knn(&a));
    sml_test_check_knn("k=1, 256 x 14", base, n, q, nq, dim, 1, SIMIL_METRIC_L2, dist, labels,
                       1e-5);
    free(base);
    free(q);
    free(norms);
    free(dist);
    free(ids);
    free(labels);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_match_the_plain_loop),
        cmocka_unit_test(test_knn_k1_small_base),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
