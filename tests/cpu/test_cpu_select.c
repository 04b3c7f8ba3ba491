/* test_cpu_select.c: the CPU top-k against a full sort, for every k from 1
 * to n on small rows and selected k on long rows, with ties and NaN, with
 * labels by position and as a reversed label array. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_select.h"
#include "util/test_util.h"

/* Select k of keys[0..n), labelled by position (reversed: n - 1 - position,
 * passed as a label array, so that ties break against the order of the
 * row); compare with qsort. */
static void check_select_labels(const float *keys, int64_t n, int64_t k, const char *what,
                                int reversed)
{
    int64_t *labels = sml_test_malloc(sizeof(int64_t) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) labels[i] = reversed ? n - 1 - i : i;
    sml_topk_pair *storage = sml_test_malloc(sizeof *storage * (size_t)sml_topk_capacity(k));
    sml_topk t;
    sml_topk_reset(&t, storage, k);
    /* push in uneven pieces, as tiles would */
    for (int64_t i = 0; i < n;) {
        int64_t m = 1 + (i * 7919) % 97;
        if (m > n - i) m = n - i;
        sml_topk_push_row(&t, keys + i, m, reversed ? labels + i : NULL, i);
        i += m;
    }
    float *got_k = sml_test_malloc(sizeof(float) * (size_t)k);
    int64_t *got_l = sml_test_malloc(sizeof(int64_t) * (size_t)k);
    sml_topk_finish(&t, got_k, got_l);

    sml_test_key_pos *all = sml_test_malloc(sizeof *all * (size_t)(n + 1));
    int64_t valid = 0;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(keys[i])) all[valid++] = (sml_test_key_pos){keys[i], labels[i]};
    sml_test_sort_key_pos(all, valid);
    for (int64_t j = 0; j < k; j++) {
        if (j < valid) {
            if (got_l[j] != all[j].pos || got_k[j] != all[j].key)
                fail_msg("%s n=%lld k=%lld rank %lld: got (%g,%lld) want (%g,%lld)", what,
                         (long long)n, (long long)k, (long long)j, got_k[j], (long long)got_l[j],
                         all[j].key, (long long)all[j].pos);
        } else if (got_l[j] != -1 || !isinf(got_k[j])) {
            fail_msg("%s n=%lld k=%lld rank %lld: expected an empty slot", what, (long long)n,
                     (long long)k, (long long)j);
        }
    }
    free(all);
    free(got_k);
    free(got_l);
    free(storage);
    free(labels);
}

static void check_select(const float *keys, int64_t n, int64_t k, const char *what)
{
    check_select_labels(keys, n, k, what, 0);
    check_select_labels(keys, n, k, what, 1);
}

static void test_every_k_small(void **state)
{
    (void)state;
    float keys[300];
    sml_test_fill_uniform(keys, 300, 1, -1, 1);
    for (int64_t k = 1; k <= 310; k++) check_select(keys, 300, k, "uniform");
}

static void test_ties(void **state)
{
    (void)state;
    /* few distinct values: ties must break by label */
    enum { N = 5000 };
    float *keys = sml_test_malloc(sizeof(float) * N);
    sml_test_fill_uniform(keys, N, 2, 0, 4);
    for (int i = 0; i < N; i++) keys[i] = floorf(keys[i]);
    int64_t ks[] = {1, 3, 100, 1250, 1251, 4999, 5000, 6000};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) check_select(keys, N, ks[i], "ties");
    for (int i = 0; i < N; i++) keys[i] = 7.0f;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) check_select(keys, N, ks[i], "equal");
    free(keys);
}

static void test_long_rows(void **state)
{
    (void)state;
    enum { N = 200000 };
    float *keys = sml_test_malloc(sizeof(float) * N);
    sml_test_fill_uniform(keys, N, 3, -100, 100);
    int64_t ks[] = {1, 10, 32, 33, 100, 1024, 2048, 2049, 5000, 65536};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) check_select(keys, N, ks[i], "long");
    /* descending input makes every push an improvement */
    for (int i = 0; i < N; i++) keys[i] = (float)(N - i);
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) check_select(keys, N, ks[i], "desc");
    free(keys);
}

static void test_nan_and_inf(void **state)
{
    (void)state;
    float keys[64];
    sml_test_fill_uniform(keys, 64, 4, 0, 1);
    keys[3] = NAN;
    keys[10] = INFINITY;
    keys[11] = -INFINITY;
    keys[40] = NAN;
    for (int64_t k = 1; k <= 64; k++) check_select(keys, 64, k, "nan");
    /* rows of NaN alone (k = 1 takes its own path) */
    for (int i = 0; i < 64; i++) keys[i] = i % 3 ? NAN : INFINITY;
    for (int64_t k = 1; k <= 3; k++) check_select(keys, 64, k, "nan and inf");
    for (int i = 0; i < 64; i++) keys[i] = NAN;
    for (int64_t k = 1; k <= 3; k++) check_select(keys, 64, k, "all nan");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_k_small),
        cmocka_unit_test(test_ties),
        cmocka_unit_test(test_long_rows),
        cmocka_unit_test(test_nan_and_inf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
