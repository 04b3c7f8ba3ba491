/* test_cluster_order.c: the stable counting sort by label
 * (src/core/cluster_order.c) against a plain one-thread reference, for every
 * output and thread count, with starts given and packed, a stride, and bad
 * labels. */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/cluster_order.h"
#include "util/test_util.h"

enum { N = 300000, K = 500, STRIDE = 3 };

static void test_against_reference(void **state)
{
    (void)state;
    int64_t *labels = sml_test_malloc(sizeof(int64_t) * N * STRIDE);
    uint64_t z = 99;
    for (int64_t i = 0; i < N * STRIDE; i++) {
        z = z * 6364136223846793005ULL + 1442695040888963407ULL;
        int64_t c = (int64_t)((z >> 33) % K);
        labels[i] = c % 5 == 2 ? c - 1 : c; /* some labels never occur */
    }
    int64_t start[K], counts[K], ref_counts[K] = {0}, offsets[K + 1], ref_offsets[K + 1];
    for (int64_t i = 0; i < N; i++) ref_counts[labels[i * STRIDE]]++;
    ref_offsets[0] = 0;
    for (int64_t c = 0; c < K; c++) ref_offsets[c + 1] = ref_offsets[c] + ref_counts[c];
    /* starts with gaps, as an inverted list's free rows after its own */
    for (int64_t c = 0, at = 7; c < K; c++) {
        start[c] = at;
        at += ref_counts[c] + c % 3;
    }
    int64_t *order = sml_test_malloc(sizeof(int64_t) * N),
            *ref_order = sml_test_malloc(sizeof(int64_t) * N),
            *place = sml_test_malloc(sizeof(int64_t) * N),
            *ref_place = sml_test_malloc(sizeof(int64_t) * N), next[K];
    memcpy(next, ref_offsets, sizeof next);
    for (int64_t i = 0; i < N; i++) ref_order[next[labels[i * STRIDE]]++] = i;
    memcpy(next, start, sizeof next);
    for (int64_t i = 0; i < N; i++) ref_place[i] = next[labels[i * STRIDE]]++;
    const int threads[] = {0, 1, 2, 5, 64};
    for (int t = 0; t < 5; t++) {
        memset(order, 0xff, sizeof(int64_t) * N);
        SML_ASSERT_OK(sml_cluster_order_by(N, labels, STRIDE, K, threads[t], NULL, counts,
                                           offsets, order, NULL, NULL));
        assert_memory_equal(counts, ref_counts, sizeof counts);
        assert_memory_equal(offsets, ref_offsets, sizeof offsets);
        assert_memory_equal(order, ref_order, sizeof(int64_t) * N);
        SML_ASSERT_OK(sml_cluster_order_by(N, labels, STRIDE, K, threads[t], start, NULL, NULL,
                                           NULL, place, NULL));
        assert_memory_equal(place, ref_place, sizeof(int64_t) * N);
    }
    /* the short form: stride 1 */
    int64_t small[6] = {2, 0, 2, 1, 0, 2}, o[4], ord[6];
    SML_ASSERT_OK(sml_cluster_order(6, small, 3, o, ord));
    const int64_t want_o[4] = {0, 2, 3, 6}, want_ord[6] = {1, 4, 3, 0, 2, 5};
    assert_memory_equal(o, want_o, sizeof o);
    assert_memory_equal(ord, want_ord, sizeof ord);
    /* bad labels: the first is named, nothing placed */
    labels[250000 * STRIDE] = K;
    labels[100001 * STRIDE] = -1;
    for (int t = 0; t < 5; t++) {
        int64_t bad = 0;
        memset(order, 0xff, sizeof(int64_t) * N);
        assert_int_equal(sml_cluster_order_by(N, labels, STRIDE, K, threads[t], NULL, NULL, NULL,
                                              order, NULL, &bad),
                         SIMIL_ERR_INTERNAL);
        assert_int_equal(bad, 100001);
        assert_int_equal(order[0], -1);
    }
    /* the counts table not allocated */
    labels[250000 * STRIDE] = labels[100001 * STRIDE] = 0;
    sml_alloc_fail_at(1, 0);
    simil_status st =
        sml_cluster_order_by(N, labels, STRIDE, K, 2, NULL, NULL, offsets, order, NULL, NULL);
    sml_alloc_fail_at(0, 0);
    assert_int_equal(st, SIMIL_ERR_OUT_OF_MEMORY);
    free(labels);
    free(order);
    free(ref_order);
    free(place);
    free(ref_place);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_against_reference)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
