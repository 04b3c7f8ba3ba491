/* test_cpu_cluster_sums.c: the CPU backend's k-means sums against a plain
 * loop (each cluster's rows added in ascending order in double, then rounded
 * to float), bit for bit, for shapes on both sides of the one-pass path's
 * limit (k x dim doubles), on 1 and 2 threads, with empty clusters. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "util/test_util.h"

static void check(int64_t n, int64_t dim, int64_t k, int threads)
{
    float *x = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    int64_t *labels = sml_test_malloc(sizeof(int64_t) * (size_t)n);
    float *sums = sml_test_malloc(sizeof(float) * (size_t)(k * dim));
    int64_t *counts = sml_test_malloc(sizeof(int64_t) * (size_t)k);
    double *want = calloc((size_t)(k * dim), sizeof *want);
    int64_t *want_counts = calloc((size_t)k, sizeof *want_counts);
    sml_test_fill_uniform(x, n * dim, (uint64_t)(n + dim + k), -100, 100);
    /* every third cluster stays empty */
    for (int64_t r = 0; r < n; r++) labels[r] = (r * 7919 % k) / 3 * 3;
    for (int64_t r = 0; r < n; r++) {
        want_counts[labels[r]]++;
        for (int64_t j = 0; j < dim; j++) want[labels[r] * dim + j] += x[r * dim + j];
    }
    sml_backend *b;
    SML_ASSERT_OK(sml_cpu_backend_open(&b));
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    SML_ASSERT_OK(b->ops->cluster_sums(b, n, dim, x, labels, k, sums, counts));
    omp_set_num_threads(before);
    for (int64_t c = 0; c < k; c++) {
        if (counts[c] != want_counts[c])
            fail_msg("n=%lld dim=%lld k=%lld threads=%d: cluster %lld counts %lld, want %lld",
                     (long long)n, (long long)dim, (long long)k, threads, (long long)c,
                     (long long)counts[c], (long long)want_counts[c]);
        for (int64_t j = 0; j < dim; j++) {
            const float w = (float)want[c * dim + j];
            if (memcmp(&sums[c * dim + j], &w, sizeof w) != 0)
                fail_msg("n=%lld dim=%lld k=%lld threads=%d: sum[%lld][%lld] %.9g, want %.9g",
                         (long long)n, (long long)dim, (long long)k, threads, (long long)c,
                         (long long)j, sums[c * dim + j], w);
        }
    }
    b->ops->close(b);
    free(x);
    free(labels);
    free(sums);
    free(counts);
    free(want);
    free(want_counts);
}

static void test_sums_match_the_plain_loop(void **state)
{
    (void)state;
    for (int threads = 1; threads <= 2; threads++) {
        check(5000, 14, 256, threads);  /* one pass: 3,584 doubles */
        check(3000, 300, 256, threads); /* sorted: 76,800 doubles */
        check(100, 1, 1, threads);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sums_match_the_plain_loop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
