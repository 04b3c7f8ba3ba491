/* test_kmeans.c: k-means on the CPU: recovers separated clusters, the
 * objective never rises, a seed gives the same centroids for any thread
 * count, empty clusters are reseeded, sampling, k-means++, spherical, and
 * bad arguments. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/test_util.h"

enum { D = 16, C = 12, PER = 400, N = C * PER };

/* C centres far apart (40 units), each with PER points of +-0.5 noise. */
static float *clustered(float *centres)
{
    float *x = sml_test_malloc(sizeof(float) * N * D);
    sml_test_fill_uniform(centres, C * D, 1, -20, 20);
    for (int c = 0; c < C; c++) centres[c * D + c % D] += 40.0f * (float)(c + 1);
    sml_test_fill_uniform(x, N * D, 2, -0.5f, 0.5f);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++) x[i * D + j] += centres[(i % C) * D + j];
    return x;
}

static simil_kmeans_params params(int64_t k, int iters)
{
    simil_kmeans_params p;
    simil_kmeans_params_init(&p);
    p.k = k;
    p.iterations = iters;
    p.device = "cpu";
    return p;
}

static void test_recovers_clusters(void **state)
{
    (void)state;
    float centres[C * D], got[C * D];
    float *x = clustered(centres);
    simil_kmeans_params p = params(C, 25);
    p.init = SIMIL_KMEANS_INIT_PLUSPLUS;
    p.max_points_per_centroid = 0; /* train on all N points */
    double obj[25];
    int64_t *assign = sml_test_malloc(sizeof(int64_t) * N);
    SML_ASSERT_OK(simil_kmeans(&p, N, D, x, got, assign, obj));
    /* every true centre has a centroid close by: a mean of 400 points is off
     * by about 16 / (12 * 400) = 0.003 squared; clusters are 40 apart */
    for (int c = 0; c < C; c++) {
        double best = INFINITY;
        for (int g = 0; g < C; g++)
            best = fmin(best, sml_test_distance(centres + c * D, got + g * D, D, SIMIL_METRIC_L2));
        if (best > 0.05) fail_msg("centre %d: nearest centroid at squared distance %g", c, best);
    }
    /* points of one true cluster share one assignment */
    for (int i = C; i < N; i++) assert_int_equal(assign[i], assign[i % C]);
    /* final objective: the noise variance, 16 dims x (1/12) per point */
    assert_true(fabs(obj[24] / N - D / 12.0) < 0.05);
    for (int it = 1; it < 25; it++)
        if (obj[it] > obj[it - 1] * (1 + 1e-6))
            fail_msg("objective rose at iteration %d: %g -> %g", it, obj[it - 1], obj[it]);
    free(assign);
    free(x);
}

static void test_deterministic(void **state)
{
    (void)state;
    float centres[C * D], a[C * D], b[C * D];
    float *x = clustered(centres);
    simil_kmeans_params p = params(C, 8);
    int before = omp_get_max_threads();
    omp_set_num_threads(1);
    SML_ASSERT_OK(simil_kmeans(&p, N, D, x, a, NULL, NULL));
    omp_set_num_threads(before > 1 ? before : 2);
    SML_ASSERT_OK(simil_kmeans(&p, N, D, x, b, NULL, NULL));
    omp_set_num_threads(before);
    assert_memory_equal(a, b, sizeof a);
    p.seed = 99;
    SML_ASSERT_OK(simil_kmeans(&p, N, D, x, b, NULL, NULL));
    assert_memory_not_equal(a, b, sizeof a);
    free(x);
}

static void test_empty_clusters_are_reseeded(void **state)
{
    (void)state;
    /* 3 distinct points, 300 copies, k = 6: some clusters start empty */
    enum { M = 300 };
    float x[M * 2], got[6 * 2];
    for (int i = 0; i < M; i++) {
        x[i * 2] = (float)(i % 3) * 10.0f + 1.0f;
        x[i * 2 + 1] = 5.0f;
    }
    simil_kmeans_params p = params(6, 5);
    double obj[5];
    SML_ASSERT_OK(simil_kmeans(&p, M, 2, x, got, NULL, obj));
    for (int i = 0; i < 12; i++) assert_true(isfinite(got[i]));
    assert_true(obj[4] < 1e-3 * M); /* every point sits on a centroid */
}

static void test_sampling_and_spherical(void **state)
{
    (void)state;
    float centres[C * D], got[C * D];
    float *x = clustered(centres);
    simil_kmeans_params p = params(C, 5);
    p.max_points_per_centroid = 40; /* 480 of the 4800 points */
    int64_t *assign = sml_test_malloc(sizeof(int64_t) * N);
    SML_ASSERT_OK(simil_kmeans(&p, N, D, x, got, assign, NULL));
    for (int i = 0; i < N; i++) assert_true(assign[i] >= 0 && assign[i] < C);
    p.spherical = 1;
    SML_ASSERT_OK(simil_kmeans(&p, N, D, x, got, NULL, NULL));
    for (int c = 0; c < C; c++) {
        double norm = sml_test_distance(got + c * D, got + c * D, D, SIMIL_METRIC_IP);
        assert_true(fabs(norm - 1.0) < 1e-5);
    }
    free(assign);
    free(x);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, c[8];
    simil_kmeans_params p = params(3, 2);
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_kmeans(&p, 2, 4, x, c, NULL, NULL));
    assert_non_null(strstr(simil_last_error(), "at least k=3"));
    p.k = 0;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_kmeans(&p, 2, 4, x, c, NULL, NULL));
    p.k = 1;
    x[5] = NAN;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_kmeans(&p, 2, 4, x, c, NULL, NULL));
    x[5] = 6;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_kmeans(NULL, 2, 4, x, c, NULL, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_kmeans(&p, 2, 4, NULL, c, NULL, NULL));
    p.device = "tpu";
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_kmeans(&p, 2, 4, x, c, NULL, NULL));
    p.device = "cpu";
    p.iterations = -1;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_kmeans(&p, 2, 4, x, c, NULL, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recovers_clusters),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_empty_clusters_are_reseeded),
        cmocka_unit_test(test_sampling_and_spherical),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
