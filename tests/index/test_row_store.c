/* test_row_store.c: the shadow a row store keeps of one column
 * (row_store.h), for Flat and flat XFBQ, on the CPU backend with a fake
 * shadow_sync and shadow_free (the CPU keeps no shadow; the CUDA one is
 * tests/cuda's).  The fake shadow is a host copy of the rows it was given,
 * which checks the store's claim that rows [0, have) are unchanged, and
 * fails the sync the test names.  After every add and remove the index
 * hands the backend the one live shadow, holding its rows in order; a
 * failed sync leaves the index as it was (size, shadow, results); reset and
 * destroy free it.  _fp32 and _host XFBQ keep none. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "index/index_internal.h"
#include "util/test_util.h"

enum { DIM = 12, N = 300, NQ = 7, K = 5 };

typedef struct fake_shadow {
    int64_t n, dim;
    float *rows;
} fake_shadow;

static const sml_backend_ops *cpu_ops; /* the CPU backend's, which the fakes wrap */
static sml_backend_ops fake_ops;
static int64_t live;             /* fake shadows made and not freed */
static int64_t syncs;            /* shadow_sync calls */
static int64_t fail_at;          /* the sync call that fails (1-based), 0: none */
static const void *searched;     /* the shadow the last search was given */

static void fake_free(sml_backend *b, void *p)
{
    (void)b;
    fake_shadow *sh = p;
    free(sh->rows);
    free(sh);
    live--;
}

static simil_status fake_sync(sml_backend *b, void **shadow, const float *base, int64_t have,
                              int64_t n, int64_t dim, simil_metric metric)
{
    (void)metric;
    fake_shadow *old = *shadow;
    assert_true(have >= 0 && have <= n);
    if (have > 0) {
        assert_non_null(old);
        assert_true(have <= old->n && old->dim == dim);
        assert_memory_equal(old->rows, base, sizeof(float) * (size_t)(have * dim));
    }
    if (++syncs == fail_at)
        return sml_error(SIMIL_ERR_OUT_OF_MEMORY, "fake shadow: sync %lld fails", (long long)syncs);
    fake_shadow *sh = sml_test_malloc(sizeof *sh);
    sh->rows = sml_test_malloc(sizeof(float) * (size_t)((n > 0 ? n : 1) * dim));
    memcpy(sh->rows, base, sizeof(float) * (size_t)(n * dim));
    sh->n = n;
    sh->dim = dim;
    live++;
    if (old != NULL) fake_free(b, old);
    *shadow = sh;
    return SIMIL_OK;
}

static simil_status fake_knn(sml_backend *b, const sml_knn_args *args)
{
    searched = args->base_shadow;
    return cpu_ops->knn(b, args);
}

static simil_status fake_xfbq_scan(sml_backend *b, const sml_xfbq_scan_args *args)
{
    searched = args->shadow;
    return cpu_ops->xfbq_scan(b, args);
}

/* A CPU index of desc whose backend has the fake shadow. */
static simil_index *fake_index(const char *desc, simil_metric metric)
{
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, DIM, desc, metric, "cpu"));
    assert_null(index->backend->ops->shadow_sync);
    cpu_ops = index->backend->ops;
    fake_ops = *cpu_ops;
    fake_ops.shadow_sync = fake_sync;
    fake_ops.shadow_free = fake_free;
    fake_ops.knn = fake_knn;
    fake_ops.xfbq_scan = fake_xfbq_scan;
    index->backend->ops = &fake_ops;
    return index;
}

static void search(const simil_index *index, const float *q, float *d, int64_t *l)
{
    searched = NULL;
    SML_ASSERT_OK(simil_index_search(index, NQ, q, K, NULL, d, l));
}

/* The index hands its searches the one live shadow, which holds its rows
 * (reconstructed in the order of its ids) and no more; its address into
 * *shadow. */
static void check_shadow(const simil_index *index, const float *q, const void **shadow)
{
    float d[NQ * K], v[DIM];
    int64_t l[NQ * K];
    search(index, q, d, l);
    assert_int_equal(live, 1);
    const fake_shadow *sh = searched;
    assert_non_null(sh);
    const int64_t n = simil_index_size(index);
    assert_int_equal(sh->n, n);
    int64_t *ids = sml_test_malloc(sizeof *ids * (size_t)(n > 0 ? n : 1));
    index->vt->ids(index, ids);
    for (int64_t i = 0; i < n; i++) {
        SML_ASSERT_OK(simil_index_reconstruct(index, ids[i], v));
        assert_memory_equal(sh->rows + i * DIM, v, sizeof v);
    }
    free(ids);
    *shadow = sh;
}

/* Sync number syncs + 1 fails inside op; the index stays as it was. */
static void check_failed_sync(simil_index *index, const float *q, simil_status status,
                              const void *shadow)
{
    SML_ASSERT_STATUS(SIMIL_ERR_OUT_OF_MEMORY, status);
    assert_int_equal(syncs, fail_at);
    fail_at = 0;
    const void *now;
    check_shadow(index, q, &now);
    assert_ptr_equal(now, shadow);
}

static void test_shadowed(void **state)
{
    (void)state;
    static const struct {
        const char *desc;
        simil_metric metric;
    } types[] = {{"Flat", SIMIL_METRIC_L2}, {"Flat", SIMIL_METRIC_IP},
                 {"XFBQ", SIMIL_METRIC_COSINE}, {"RR,XFBQ_fp16", SIMIL_METRIC_L2}};
    float *x = sml_test_malloc(sizeof(float) * 2 * N * DIM);
    float q[NQ * DIM];
    SML_ASSERT_OK(simil_generate("mix", 0, 2 * N, DIM, 5, x));
    SML_ASSERT_OK(simil_generate("mix", 0, NQ, DIM, 6, q));
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        simil_index *index = fake_index(types[t].desc, types[t].metric);
        const void *shadow, *grown;
        float d0[NQ * K], d1[NQ * K];
        int64_t l0[NQ * K], l1[NQ * K];
        /* the first add makes the shadow, the second extends it (the store
         * grows by half, to room for 450 rows) */
        SML_ASSERT_OK(simil_index_add(index, N, x, NULL));
        check_shadow(index, q, &shadow);
        SML_ASSERT_OK(simil_index_add(index, 100, x + N * DIM, NULL));
        check_shadow(index, q, &grown);
        /* a failed sync: on an add that grows the store, on one that fits,
         * and on a remove */
        search(index, q, d0, l0);
        fail_at = syncs + 1;
        check_failed_sync(index, q, simil_index_add(index, N, x + N * DIM, NULL), grown);
        assert_int_equal(simil_index_size(index), N + 100);
        fail_at = syncs + 1;
        check_failed_sync(index, q, simil_index_add(index, 10, x + N * DIM, NULL), grown);
        int64_t gone[] = {3, 4, 299, 350}, removed = -1;
        fail_at = syncs + 1;
        check_failed_sync(index, q, simil_index_remove(index, 4, gone, &removed), grown);
        assert_int_equal(removed, 0);
        assert_int_equal(simil_index_size(index), N + 100);
        search(index, q, d1, l1);
        assert_memory_equal(l0, l1, sizeof l0);
        assert_memory_equal(d0, d1, sizeof d0);
        /* and the same calls succeeding */
        SML_ASSERT_OK(simil_index_remove(index, 4, gone, &removed));
        assert_int_equal(removed, 4);
        check_shadow(index, q, &shadow);
        SML_ASSERT_OK(simil_index_add(index, 10, x + N * DIM, NULL));
        check_shadow(index, q, &shadow);
        /* a remove of nothing keeps the shadow; reset and destroy free it */
        int64_t absent = 5000;
        SML_ASSERT_OK(simil_index_remove(index, 1, &absent, &removed));
        assert_int_equal(removed, 0);
        check_shadow(index, q, &grown);
        assert_ptr_equal(grown, shadow);
        SML_ASSERT_OK(simil_index_reset(index));
        assert_int_equal(live, 0);
        SML_ASSERT_OK(simil_index_add(index, 20, x, NULL));
        check_shadow(index, q, &shadow);
        simil_index_destroy(index);
        assert_int_equal(live, 0);
    }
    free(x);
}

/* XFBQ with its floats on the GPU (_fp32) or in host memory alone (_host)
 * keeps no shadow, nor does SQ8. */
static void test_unshadowed(void **state)
{
    (void)state;
    const char *descs[] = {"XFBQ_fp32", "XFBQ_host", "SQfp16"};
    float *x = sml_test_malloc(sizeof(float) * N * DIM);
    float q[NQ * DIM], d[NQ * K];
    int64_t l[NQ * K];
    SML_ASSERT_OK(simil_generate("mix", 0, N, DIM, 7, x));
    SML_ASSERT_OK(simil_generate("mix", 0, NQ, DIM, 8, q));
    for (int t = 0; t < 3; t++) {
        simil_index *index = fake_index(descs[t], SIMIL_METRIC_L2);
        SML_ASSERT_OK(simil_index_add(index, N, x, NULL));
        int64_t gone[] = {1, 2}, removed;
        SML_ASSERT_OK(simil_index_remove(index, 2, gone, &removed));
        search(index, q, d, l);
        assert_null(searched);
        assert_int_equal(live, 0);
        simil_index_destroy(index);
    }
    assert_int_equal(syncs, 0);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unshadowed),
        cmocka_unit_test(test_shadowed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
