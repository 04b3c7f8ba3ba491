/* test_flat.c: Flat exact search against the float64 reference, for every
 * metric, awkward dimensions, k from 1 to past n, both CPU code paths (direct
 * for a few queries, GEMM for batches), empty indexes, duplicates, ids,
 * remove, reconstruct and bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/test_util.h"

static const double rel_tol = 1e-4;

typedef struct {
    int64_t n, nq, dim, k;
    simil_metric metric;
    uint64_t seed;
} shape;

static void run_shape(const shape *s, const char *device)
{
    char context[160];
    snprintf(context, sizeof context, "%s n=%lld nq=%lld dim=%lld k=%lld seed=%llu device=%s",
             simil_metric_name(s->metric), (long long)s->n, (long long)s->nq, (long long)s->dim,
             (long long)s->k, (unsigned long long)s->seed, device);
    float *base = sml_test_malloc(sizeof(float) * (size_t)(s->n * s->dim + 1));
    float *queries = sml_test_malloc(sizeof(float) * (size_t)(s->nq * s->dim + 1));
    sml_test_fill_uniform(base, s->n * s->dim, s->seed, -1, 1);
    sml_test_fill_uniform(queries, s->nq * s->dim, s->seed + 1000, -1, 1);
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, s->dim, "Flat", s->metric, device));
    SML_ASSERT_OK(simil_index_add(index, s->n, base, NULL));
    assert_int_equal(simil_index_size(index), s->n);
    float *d = sml_test_malloc(sizeof(float) * (size_t)(s->nq * s->k + 1));
    int64_t *l = sml_test_malloc(sizeof(int64_t) * (size_t)(s->nq * s->k + 1));
    SML_ASSERT_OK(simil_index_search(index, s->nq, queries, s->k, NULL, d, l));
    sml_test_check_knn_metric(context, base, s->n, queries, s->nq, s->dim, s->k, s->metric, d, l,
                              rel_tol);
    simil_index_destroy(index);
    free(d);
    free(l);
    free(base);
    free(queries);
}

static void test_against_reference(void **state)
{
    (void)state;
    const int64_t dims[] = {1, 3, 100, 128, 785};
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP, SIMIL_METRIC_COSINE};
    const int64_t n = 300;
    const int64_t ks[] = {1, 7, 100, n, n + 5};
    const int64_t nqs[] = {3, 40}; /* the direct path and the GEMM path */
    uint64_t seed = 1;
    for (size_t m = 0; m < 3; m++)
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
                for (size_t qi = 0; qi < 2; qi++) {
                    shape s = {n, nqs[qi], dims[di], ks[ki], metrics[m], seed++};
                    run_shape(&s, "cpu");
                }
}

static void test_tiling(void **state)
{
    (void)state;
    /* more queries and base rows than one block and one tile hold */
    shape s = {9000, 1100, 33, 10, SIMIL_METRIC_L2, 77};
    run_shape(&s, "cpu");
    shape t = {9000, 1100, 33, 2500, SIMIL_METRIC_IP, 78};
    run_shape(&t, "cpu");
}

static void test_empty_index(void **state)
{
    (void)state;
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, 4, "Flat", SIMIL_METRIC_L2, "cpu"));
    float q[8] = {0};
    float d[6];
    int64_t l[6];
    SML_ASSERT_OK(simil_index_search(index, 2, q, 3, NULL, d, l));
    for (int i = 0; i < 6; i++) {
        assert_int_equal(l[i], -1);
        assert_true(isinf(d[i]) && d[i] > 0);
    }
    simil_index_destroy(index);
    SML_ASSERT_OK(simil_index_create(&index, 4, "Flat", SIMIL_METRIC_IP, "cpu"));
    SML_ASSERT_OK(simil_index_search(index, 2, q, 3, NULL, d, l));
    for (int i = 0; i < 6; i++) assert_true(isinf(d[i]) && d[i] < 0);
    simil_index_destroy(index);
}

static void test_duplicates_and_ids(void **state)
{
    (void)state;
    enum { N = 50, D = 5 };
    float base[2 * N * D];
    sml_test_fill_uniform(base, N * D, 5, 0, 1);
    memcpy(base + N * D, base, sizeof(float) * N * D); /* every vector twice */
    int64_t ids[2 * N];
    for (int i = 0; i < 2 * N; i++) ids[i] = 1000 + (int64_t)(2 * N - i) * 3;
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, D, "Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_add(index, 2 * N, base, ids));
    float d[4];
    int64_t l[4];
    for (int q = 0; q < N; q++) {
        SML_ASSERT_OK(simil_index_search(index, 1, base + q * D, 2, NULL, d, l));
        /* the two copies tie at distance 0; the smaller id comes first */
        int64_t a = ids[q], b = ids[q + N];
        assert_int_equal(l[0], a < b ? a : b);
        assert_int_equal(l[1], a < b ? b : a);
        assert_true(d[0] == 0.0f && d[1] == 0.0f);
    }
    /* duplicate ids are allowed and both copies are returned */
    int64_t same[2] = {7, 7};
    float two[2 * D];
    sml_test_fill_uniform(two, 2 * D, 6, 5, 6);
    SML_ASSERT_OK(simil_index_add(index, 2, two, same));
    SML_ASSERT_OK(simil_index_search(index, 1, two, 2, NULL, d, l));
    assert_int_equal(l[0], 7);
    assert_int_equal(l[1], 7);
    int64_t removed;
    SML_ASSERT_OK(simil_index_remove(index, 1, same, &removed));
    assert_int_equal(removed, 2);
    simil_index_destroy(index);
}

static void test_sequential_ids_remove_readd(void **state)
{
    (void)state;
    enum { N = 100, D = 8 };
    float base[N * D];
    sml_test_fill_uniform(base, N * D, 9, -1, 1);
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, D, "Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_add(index, 60, base, NULL));
    SML_ASSERT_OK(simil_index_add(index, 40, base + 60 * D, NULL));
    float d[N];
    int64_t l[N];
    for (int q = 0; q < N; q += 7) {
        SML_ASSERT_OK(simil_index_search(index, 1, base + q * D, 1, NULL, d, l));
        assert_int_equal(l[0], q);
    }
    /* remove the even ids: they never come back */
    int64_t even[N / 2];
    for (int i = 0; i < N / 2; i++) even[i] = 2 * i;
    int64_t removed;
    SML_ASSERT_OK(simil_index_remove(index, N / 2, even, &removed));
    assert_int_equal(removed, N / 2);
    assert_int_equal(simil_index_size(index), N / 2);
    SML_ASSERT_OK(simil_index_search(index, 1, base, N, NULL, d, l));
    for (int j = 0; j < N; j++) {
        if (j < N / 2) assert_int_equal(l[j] % 2, 1);
        else assert_int_equal(l[j], -1);
    }
    float v[D];
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_reconstruct(index, 4, v));
    SML_ASSERT_OK(simil_index_reconstruct(index, 5, v));
    assert_memory_equal(v, base + 5 * D, sizeof v);
    /* removing again removes nothing; re-adding continues the numbering */
    SML_ASSERT_OK(simil_index_remove(index, N / 2, even, &removed));
    assert_int_equal(removed, 0);
    SML_ASSERT_OK(simil_index_add(index, 1, base, NULL));
    SML_ASSERT_OK(simil_index_search(index, 1, base, 1, NULL, d, l));
    assert_int_equal(l[0], N);
    /* re-adding with a removed id works */
    int64_t id0 = 0;
    SML_ASSERT_OK(simil_index_add(index, 1, base + 2 * D, &id0));
    SML_ASSERT_OK(simil_index_search(index, 1, base + 2 * D, 1, NULL, d, l));
    assert_int_equal(l[0], 0);
    SML_ASSERT_OK(simil_index_reset(index));
    assert_int_equal(simil_index_size(index), 0);
    SML_ASSERT_OK(simil_index_search(index, 1, base, 1, NULL, d, l));
    assert_int_equal(l[0], -1);
    simil_index_destroy(index);
}

static void test_bad_input(void **state)
{
    (void)state;
    enum { D = 4 };
    simil_index *index;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_create(&index, 0, "Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_create(&index, -3, "Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_create(&index, D, "Flat", (simil_metric)9, "cpu"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_create(&index, D, "Flat", SIMIL_METRIC_L2, "tpu"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_create(NULL, D, "Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_create(&index, D, "Flat", SIMIL_METRIC_L2, "cpu"));
    float x[3 * D] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    SML_ASSERT_OK(simil_index_add(index, 3, x, NULL));
    float bad[2 * D] = {1, 2, 3, 4, 5, NAN, 7, 8};
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add(index, 2, bad, NULL));
    assert_non_null(strstr(simil_last_error(), "NaN"));
    assert_non_null(strstr(simil_last_error(), "vector 1"));
    bad[5] = INFINITY;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add(index, 2, bad, NULL));
    bad[5] = 1e30f; /* finite, but its square overflows float */
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add(index, 2, bad, NULL));
    assert_int_equal(simil_index_size(index), 3); /* nothing was added */
    int64_t neg = -1;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add(index, 1, x, &neg));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add(index, -1, x, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add(index, 1, NULL, NULL));
    float d[8];
    int64_t l[8];
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_search(index, 1, x, 0, NULL, d, l));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_search(index, 1, x, -5, NULL, d, l));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_search(index, 1, x, (int64_t)1 << 41, NULL, d, l));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_search(index, 1, bad + D, 1, NULL, d, l));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_search(index, 1, NULL, 1, NULL, d, l));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_search(index, 1, x, 1, NULL, NULL, l));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_search(NULL, 1, x, 1, NULL, d, l));
    simil_search_params *p = sml_test_params("");
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_search_params_set_int(p, "threads", -1));
    SML_ASSERT_OK(simil_index_search(index, 1, x, 1, p, d, l)); /* p is unchanged */
    simil_search_params_destroy(p);
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_remove(index, 1, NULL, NULL));
    /* k above n pads; nq = 0 does nothing */
    SML_ASSERT_OK(simil_index_search(index, 1, x, 8, NULL, d, l));
    assert_int_equal(l[2], 2);
    assert_int_equal(l[3], -1);
    SML_ASSERT_OK(simil_index_search(index, 0, x, 8, NULL, d, l));
    simil_index_destroy(index);
    simil_index_destroy(NULL);
}

static void test_threads_param(void **state)
{
    (void)state;
    shape s = {2000, 64, 16, 5, SIMIL_METRIC_L2, 11};
    float *base = sml_test_malloc(sizeof(float) * (size_t)(s.n * s.dim));
    float *q = sml_test_malloc(sizeof(float) * (size_t)(s.nq * s.dim));
    sml_test_fill_uniform(base, s.n * s.dim, 1, 0, 1);
    sml_test_fill_uniform(q, s.nq * s.dim, 2, 0, 1);
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, s.dim, "Flat", s.metric, "cpu"));
    SML_ASSERT_OK(simil_index_add(index, s.n, base, NULL));
    float d1[64 * 5], d2[64 * 5];
    int64_t l1[64 * 5], l2[64 * 5];
    simil_search_params *p = sml_test_params("threads=1");
    SML_ASSERT_OK(simil_index_search(index, s.nq, q, s.k, p, d1, l1));
    simil_search_params_destroy(p);
    SML_ASSERT_OK(simil_index_search(index, s.nq, q, s.k, NULL, d2, l2));
    assert_memory_equal(l1, l2, sizeof l1);
    assert_memory_equal(d1, d2, sizeof d1);
    simil_index_destroy(index);
    free(base);
    free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_tiling),
        cmocka_unit_test(test_empty_index),
        cmocka_unit_test(test_duplicates_and_ids),
        cmocka_unit_test(test_sequential_ids_remove_readd),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_threads_param),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
