/* test_bad_values.c: the Flat CPU index (and simil_select_k) on values at and
 * past the edges: NaN and Inf, huge and tiny magnitudes, dimensions 0 to
 * 2^24 + 1, k from negative to past 2^40 slots, nprobe, and ids -1, 2^63 - 1
 * and duplicates.  Each case checks the outcome simil/index.h and
 * src/index/index.c document; docs/reliability.md lists them all. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index/index_internal.h"
#include "util/test_util.h"

enum { D = 8 };

static const simil_metric metrics[3] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP, SIMIL_METRIC_COSINE};

static simil_index *flat(int64_t dim, simil_metric metric)
{
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, dim, "Flat", metric, "cpu"));
    return index;
}

/* NaN, +Inf or -Inf anywhere in a batch: the whole batch is refused. */
static void test_non_finite_vectors(void **state)
{
    (void)state;
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    float x[4 * D];
    for (int m = 0; m < 3; m++) {
        simil_index *index = flat(D, metrics[m]);
        sml_test_fill_uniform(x, 4 * D, 1, -1, 1);
        SML_ASSERT_OK(simil_index_add(index, 2, x, NULL));
        for (int b = 0; b < 3; b++)
            for (int at = 0; at < 4 * D; at += 4 * D - 1) { /* first and last component */
                float y[4 * D];
                memcpy(y, x, sizeof y);
                y[at] = bad[b];
                SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add(index, 4, y, NULL));
                assert_int_equal(simil_index_size(index), 2);
                /* queries: the same rule */
                float dist[4 * 3];
                int64_t lab[4 * 3];
                SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                                  simil_index_search(index, 4, y, 3, NULL, dist, lab));
            }
        simil_index_destroy(index);
    }
}

/* An empty index checks its queries as a filled one does: non-finite ones
 * are refused; finite ones get empty slots. */
static void test_empty_index_queries(void **state)
{
    (void)state;
    float q[D];
    for (int j = 0; j < D; j++) q[j] = j % 2 ? NAN : INFINITY;
    simil_index *index = flat(D, SIMIL_METRIC_IP);
    float d[2];
    int64_t l[2] = {7, 7};
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_search(index, 1, q, 2, NULL, d, l));
    for (int j = 0; j < D; j++) q[j] = (float)j;
    SML_ASSERT_OK(simil_index_search(index, 1, q, 2, NULL, d, l));
    assert_int_equal(l[0], -1);
    assert_int_equal(l[1], -1);
    assert_true(isinf(d[0]) && d[0] < 0);
    simil_index_destroy(index);
}

/* Flat needs no training: train accepts anything and changes nothing. */
static void test_training_data(void **state)
{
    (void)state;
    float x[3 * D];
    for (int i = 0; i < 3 * D; i++) x[i] = i % 2 ? NAN : INFINITY;
    simil_index *index = flat(D, SIMIL_METRIC_L2);
    SML_ASSERT_OK(simil_index_train(index, 3, x));
    SML_ASSERT_OK(simil_index_train(index, 0, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_train(index, -1, x));
    assert_int_equal(simil_index_size(index), 0);
    assert_true(simil_index_is_trained(index));
    simil_index_destroy(index);
}

/* Finite but huge: a squared norm above 1e37 overflows float distances, so
 * L2 and IP refuse it (vectors and queries); cosine normalizes it first.
 * Subnormal values are ordinary values. */
static void test_magnitudes(void **state)
{
    (void)state;
    float huge[D] = {0}, tiny[D], q[D] = {0};
    huge[3] = 1e19f; /* squared norm 1e38 */
    for (int j = 0; j < D; j++) tiny[j] = 1e-40f;
    for (int m = 0; m < 3; m++) {
        simil_index *index = flat(D, metrics[m]);
        simil_status want = metrics[m] == SIMIL_METRIC_COSINE ? SIMIL_OK : SIMIL_ERR_INVALID_ARGUMENT;
        SML_ASSERT_STATUS(want, simil_index_add(index, 1, huge, NULL));
        SML_ASSERT_OK(simil_index_add(index, 1, tiny, NULL));
        float d[3];
        int64_t l[3];
        SML_ASSERT_STATUS(want, simil_index_search(index, 1, huge, 3, NULL, d, l));
        SML_ASSERT_OK(simil_index_search(index, 1, q, 3, NULL, d, l));
        assert_true(l[0] >= 0);
        simil_index_destroy(index);
    }
}

static void test_dimensions(void **state)
{
    (void)state;
    simil_index *index = NULL;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_create(&index, 0, "Flat", SIMIL_METRIC_L2, "cpu"));
    assert_null(index);
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_create(&index, -1, "Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_create(&index, ((int64_t)1 << 24) + 1, "Flat", SIMIL_METRIC_L2,
                                         "cpu"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_create(&index, INT64_MAX, "Flat", SIMIL_METRIC_L2, "cpu"));
    /* 2^24 is the largest: create alone allocates nothing per dimension */
    index = flat((int64_t)1 << 24, SIMIL_METRIC_IP);
    simil_index_destroy(index);

    /* a million dimensions: two vectors, searched for each other */
    const int64_t big = 1000000;
    float *x = sml_test_malloc(sizeof(float) * (size_t)(2 * big));
    sml_test_fill_uniform(x, 2 * big, 3, -1, 1);
    for (int m = 0; m < 3; m++) {
        index = flat(big, metrics[m]);
        SML_ASSERT_OK(simil_index_add(index, 2, x, NULL));
        float d[2 * 3];
        int64_t l[2 * 3];
        SML_ASSERT_OK(simil_index_search(index, 2, x, 3, NULL, d, l));
        /* each finds itself first; k=3 past n=2 leaves one empty slot */
        assert_int_equal(l[0], 0);
        assert_int_equal(l[1], 1);
        assert_int_equal(l[2], -1);
        assert_int_equal(l[3], 1);
        assert_int_equal(l[4], 0);
        assert_int_equal(l[5], -1);
        float empty = metrics[m] == SIMIL_METRIC_L2 ? INFINITY : -INFINITY;
        assert_true(d[2] == empty && d[5] == empty);
        if (metrics[m] == SIMIL_METRIC_L2) {
            double self = sml_test_distance(x, x + big, big, SIMIL_METRIC_L2);
            printf("dim 1e6: self distance %g, cross %g (float64 %g, relative error %.2e)\n",
                   (double)d[0], (double)d[1], self, fabs(d[1] - self) / self);
            assert_true(d[0] < 1e-3 * self);
            /* float sums over 1e6 terms: about 5e-4 relative error unvectorized */
            assert_true(fabs(d[1] - self) <= 2e-3 * self);
        }
        simil_index_destroy(index);
    }
    free(x);
}

/* k: at least 1; nq x k at most 2^40 slots; past the index size the slots
 * are padded with id -1 and the empty distance. */
static void test_k(void **state)
{
    (void)state;
    float x[3 * D];
    sml_test_fill_uniform(x, 3 * D, 4, -1, 1);
    simil_index *index = flat(D, SIMIL_METRIC_L2);
    SML_ASSERT_OK(simil_index_add(index, 3, x, NULL));
    float d[1000];
    int64_t l[1000];
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_search(index, 1, x, 0, NULL, d, l));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_search(index, 1, x, -1, NULL, d, l));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_search(index, 1, x, INT64_MIN, NULL, d, l));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_search(index, -1, x, 1, NULL, d, l));
    /* nq = 0 with any k >= 1 is an empty search: nothing is written */
    const int64_t k31 = ((int64_t)1 << 31) + 5;
    SML_ASSERT_OK(simil_index_search(index, 0, x, k31, NULL, NULL, NULL));
    SML_ASSERT_OK(simil_index_search(index, 0, NULL, INT64_MAX, NULL, NULL, NULL));
    /* beyond 2^40 result slots: refused before any work or any write */
    l[0] = 12345;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_search(index, 1, x, (int64_t)1 << 41, NULL, d, l));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_search(index, 1, x, ((int64_t)1 << 40) + 1, NULL, d, l));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_search(index, 2, x, ((int64_t)1 << 39) + 1, NULL, d, l));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_search(index, 1, x, INT64_MAX, NULL, d, l));
    assert_int_equal(l[0], 12345);
    /* k = 1000 on 3 vectors: 3 results, then 997 padded slots */
    SML_ASSERT_OK(simil_index_search(index, 1, x, 1000, NULL, d, l));
    assert_int_equal(l[0], 0);
    for (int j = 0; j < 3; j++) assert_true(l[j] >= 0 && l[j] < 3 && isfinite(d[j]));
    for (int j = 3; j < 1000; j++) {
        assert_int_equal(l[j], -1);
        assert_true(isinf(d[j]) && d[j] > 0);
    }
    simil_index_destroy(index);
}

/* nprobe: outside [1, 2^30] is refused when set; Flat has no lists and
 * ignores any other value.  Above nlist on an IVF index it is clamped to
 * nlist (exact search). */
static void test_nprobe(void **state)
{
    (void)state;
    enum { N = 400, NQ = 5, K = 7 };
    float *x = sml_test_malloc(sizeof(float) * N * D);
    sml_test_fill_uniform(x, N * D, 5, -1, 1);
    simil_index *index = flat(D, SIMIL_METRIC_L2);
    SML_ASSERT_OK(simil_index_add(index, N, x, NULL));
    float d[NQ * K], ref_d[NQ * K];
    int64_t l[NQ * K], ref_l[NQ * K];
    SML_ASSERT_OK(simil_index_search(index, NQ, x, K, NULL, ref_d, ref_l));
    /* out of range: refused when set, and the handle keeps its value */
    simil_search_params *p = sml_test_params("");
    const int64_t bad[] = {-1, 0, INT64_MIN, INT64_MAX, ((int64_t)1 << 30) + 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_search_params_set_int(p, "nprobe", bad[i]));
        assert_non_null(strstr(simil_last_error(), "nprobe"));
    }
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_search_params_set_int(p, "threads", -2));
    int64_t v = 0;
    SML_ASSERT_OK(simil_search_params_get_int(p, "nprobe", &v));
    assert_int_equal(v, 1);
    SML_ASSERT_OK(simil_search_params_set_int(p, "nprobe", (int64_t)1 << 30));
    SML_ASSERT_OK(simil_index_search(index, NQ, x, K, p, d, l));
    assert_memory_equal(l, ref_l, sizeof l);
    assert_memory_equal(d, ref_d, sizeof d);
    simil_index_destroy(index);

    /* IVF: built in some trees only.  Without it, nprobe above nlist cannot
     * be tried: skip, visibly. */
    simil_index *ivf = NULL;
    simil_status s = simil_index_create(&ivf, D, "IVF8,Flat", SIMIL_METRIC_L2, "cpu");
    if (s == SIMIL_ERR_UNSUPPORTED) {
        free(x);
        simil_search_params_destroy(p);
        print_message("IVF is not built: nprobe above nlist is not tested\n");
        skip();
    }
    SML_ASSERT_OK(s);
    SML_ASSERT_OK(simil_index_train(ivf, N, x));
    SML_ASSERT_OK(simil_index_add(ivf, N, x, NULL));
    /* above nlist = 8: clamped, so every list is visited */
    SML_ASSERT_OK(simil_search_params_set_int(p, "nprobe", 8 + 1000));
    SML_ASSERT_OK(simil_index_search(ivf, NQ, x, K, p, d, l));
    sml_test_check_knn("IVF8,Flat nprobe=1008", x, N, x, NQ, D, K, SIMIL_METRIC_L2, d, l, 1e-4);
    simil_index_destroy(ivf);
    simil_search_params_destroy(p);
    free(x);
}

/* ids: >= 0; -1 (and any negative) refuses the whole batch; duplicates are
 * kept and both returned; remove drops every copy; removing ids that are not
 * there (-1 included) is not an error. */
static void test_ids(void **state)
{
    (void)state;
    float x[3 * D];
    sml_test_fill_uniform(x, 3 * D, 6, -1, 1);
    simil_index *index = flat(D, SIMIL_METRIC_L2);
    const int64_t with_minus_one[3] = {4, -1, 5};
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add(index, 3, x, with_minus_one));
    const int64_t with_min[3] = {4, 5, INT64_MIN};
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add(index, 3, x, with_min));
    assert_int_equal(simil_index_size(index), 0);

    const int64_t dup[3] = {9, 9, 2};
    float y[3 * D];
    memcpy(y, x, sizeof y);
    memcpy(y + D, x, sizeof(float) * D); /* rows 0 and 1: same vector, same id */
    SML_ASSERT_OK(simil_index_add(index, 3, y, dup));
    float d[4];
    int64_t l[4];
    SML_ASSERT_OK(simil_index_search(index, 1, y, 4, NULL, d, l));
    assert_int_equal(l[0], 9);
    assert_int_equal(l[1], 9);
    assert_true(d[0] == 0.0f && d[1] == 0.0f);
    assert_int_equal(l[2], 2);
    assert_int_equal(l[3], -1);
    int64_t removed = -1;
    const int64_t drop[3] = {9, 9, -1};
    SML_ASSERT_OK(simil_index_remove(index, 3, drop, &removed));
    assert_int_equal(removed, 2);
    assert_int_equal(simil_index_size(index), 1);
    SML_ASSERT_OK(simil_index_remove(index, 1, drop + 2, &removed));
    assert_int_equal(removed, 0);
    /* sequential ids continue past the largest id ever added */
    SML_ASSERT_OK(simil_index_add(index, 1, x, NULL));
    SML_ASSERT_OK(simil_index_search(index, 1, x, 1, NULL, d, l));
    assert_true(l[0] == 10);
    simil_index_destroy(index);
}

/* The largest id, 2^63 - 1: after it, sequential numbering has nowhere to go
 * and must be refused; it must never wrap to negative ids. */
static void test_largest_id(void **state)
{
    (void)state;
    /* id 2^63-1 would make the next sequential id overflow: refused */
    float x[2 * D];
    sml_test_fill_uniform(x, 2 * D, 7, -1, 1);
    simil_index *index = flat(D, SIMIL_METRIC_L2);
    const int64_t top = INT64_MAX;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add(index, 1, x, &top));
    assert_int_equal(simil_index_size(index), 0);
    /* the largest allowed id, then sequential numbering past it is refused */
    const int64_t below = INT64_MAX - 1;
    SML_ASSERT_OK(simil_index_add(index, 1, x, &below));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add(index, 1, x + D, NULL));
    float d[2];
    int64_t l[2];
    SML_ASSERT_OK(simil_index_search(index, 1, x, 2, NULL, d, l));
    assert_true(l[0] == INT64_MAX - 1);
    assert_int_equal(l[1], -1);
    simil_index_destroy(index);
}

/* Sizes whose products overflow: refused before anything is read or sized
 * (the buffers passed are far smaller than the sizes claim). */
static void test_size_products(void **state)
{
    (void)state;
    float x[4 * D] = {0}, d[4];
    int64_t l[4];
    const int64_t big = (int64_t)1 << 40;
    /* n x dim past 2^61 floats: add, train, search (dim 2^24, n 2^40) */
    simil_index *wide = flat((int64_t)1 << 24, SIMIL_METRIC_L2);
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add(wide, big, x, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_search(wide, big, x, 1, NULL, d, l));
    simil_index_destroy(wide);
    simil_index *ivf;
    SML_ASSERT_OK(simil_index_create(&ivf, (int64_t)1 << 24, "IVF2,Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_train(ivf, big, x));
    simil_index_destroy(ivf);
    /* k-means and select_k */
    simil_kmeans_params p;
    simil_kmeans_params_init(&p);
    p.k = 2;
    p.device = "cpu";
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_kmeans(&p, big, (int64_t)1 << 24, x, x, NULL, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_select_k(big, big, x, 1, 0, d, l));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_select_k(big, 1, x, 2, 0, d, l));
    /* Refine's candidates: k = 2^33 x refine_factor = INT_MAX is past
     * INT64_MAX; the count stops at the index size */
    assert_int_equal(sml_refine_candidates((int64_t)1 << 33, INT32_MAX, 300), 300);
    assert_int_equal(sml_refine_candidates(INT64_MAX / 2, INT32_MAX, INT64_MAX - 1),
                     INT64_MAX - 1);
    assert_int_equal(sml_refine_candidates(10, 4, 1000), 40);
    assert_int_equal(sml_refine_candidates(10, 4, 39), 39);
    /* and through the API: refine_factor INT_MAX on a small Refine index */
    enum { N = 300 };
    float *base = sml_test_malloc(sizeof(float) * N * D);
    sml_test_fill_uniform(base, N * D, 5, -1, 1);
    simil_index *refine;
    SML_ASSERT_OK(simil_index_create(&refine, D, "IVF2,PQ2,Refine", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_train(refine, N, base));
    SML_ASSERT_OK(simil_index_add(refine, N, base, NULL));
    simil_search_params *sp = sml_test_params("nprobe=2");
    SML_ASSERT_OK(simil_search_params_set_int(sp, "refine_factor", INT32_MAX));
    SML_ASSERT_OK(simil_index_search(refine, 1, base + 17 * D, 4, sp, d, l));
    assert_int_equal(l[0], 17);
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_search_params_set_int(sp, "refine_factor", (int64_t)INT32_MAX + 1));
    simil_search_params_destroy(sp);
    simil_index_destroy(refine);
    free(base);
}

/* simil_select_k: NaN counts as +inf for the smallest, after every number;
 * k past cols pads with +inf and -1. */
static void test_select_nan(void **state)
{
    (void)state;
    const float v[5] = {3, NAN, 1, -INFINITY, 2};
    float out[7];
    int64_t idx[7];
    SML_ASSERT_OK(simil_select_k(1, 5, v, 7, 0, out, idx));
    const int64_t want[7] = {3, 2, 4, 0, 1, -1, -1};
    assert_memory_equal(idx, want, sizeof want);
    assert_true(out[0] == -INFINITY && out[1] == 1 && out[2] == 2 && out[3] == 3);
    assert_true(isnan(out[4]) || (isinf(out[4]) && out[4] > 0));
    assert_true(isinf(out[5]) && out[5] > 0 && isinf(out[6]));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_select_k(1, 5, v, 0, 0, out, idx));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_select_k(-1, 5, v, 1, 0, out, idx));
    SML_ASSERT_OK(simil_select_k(0, 5, NULL, 3, 0, NULL, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_non_finite_vectors), cmocka_unit_test(test_empty_index_queries),
        cmocka_unit_test(test_training_data),
        cmocka_unit_test(test_magnitudes),         cmocka_unit_test(test_dimensions),
        cmocka_unit_test(test_k),                  cmocka_unit_test(test_nprobe),
        cmocka_unit_test(test_ids),                cmocka_unit_test(test_largest_id),
        cmocka_unit_test(test_select_nan),         cmocka_unit_test(test_size_products),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
