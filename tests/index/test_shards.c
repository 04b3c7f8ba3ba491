/* test_shards.c: an index split over several parts (CPU parts here; the GPU
 * variant runs in tests/cuda): sharded search equals one-device search
 * (exact for Flat, the same lists for IVF with the shared quantizer),
 * replicas split uneven query counts, nq < replicas, remove, files, train,
 * and placement errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/test_util.h"

enum { N = 12000, D = 16, NQ = 37, K = 10 };

static simil_index *filled(const char *desc, const char *device, const float *x)
{
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, D, desc, SIMIL_METRIC_L2, device));
    SML_ASSERT_OK(simil_index_train(index, N, x));
    SML_ASSERT_OK(simil_index_add(index, N, x, NULL));
    return index;
}

static void same_results(const char *what, const simil_index *a, const simil_index *b,
                         int64_t nq, const float *q)
{
    float da[NQ * K], db[NQ * K];
    int64_t la[NQ * K], lb[NQ * K];
    simil_search_params *p = sml_test_params("nprobe=5");
    SML_ASSERT_OK(simil_index_search(a, nq, q, K, p, da, la));
    SML_ASSERT_OK(simil_index_search(b, nq, q, K, p, db, lb));
    simil_search_params_destroy(p);
    /* the same ids; distances equal up to the rounding of another GEMM tiling */
    for (int64_t i = 0; i < nq * K; i++)
        if (la[i] != lb[i] ||
            fabs(da[i] - db[i]) >
                1e-5 * (fabs(da[i]) +
                        sml_test_distance(q + (i / K) * D, q + (i / K) * D, D, SIMIL_METRIC_IP)))
            fail_msg("%s: slot %lld: (%lld, %.9g) against (%lld, %.9g)", what, (long long)i,
                     (long long)la[i], da[i], (long long)lb[i], db[i]);
}

static void test_sharded_equals_single(void **state)
{
    (void)state;
    float *x = sml_test_malloc(sizeof(float) * N * D);
    SML_ASSERT_OK(simil_generate("mix", 0, N, D, 3, x));
    const char *descs[] = {"Flat", "IVF24,Flat", "IVF12,PQ4"};
    const char *devices[] = {"cpu:2", "cpu:3", "cpu:4/r2", "cpu:3/r3"};
    for (int i = 0; i < 3; i++) {
        simil_index *one = filled(descs[i], "cpu", x);
        for (int j = 0; j < 4; j++) {
            simil_index *sh = filled(descs[i], devices[j], x);
            char what[64];
            snprintf(what, sizeof what, "%s on %s", descs[i], devices[j]);
            assert_int_equal(simil_index_size(sh), N);
            same_results(what, one, sh, NQ, x);
            same_results(what, one, sh, 1, x + 5 * D); /* fewer queries than replicas */
            same_results(what, one, sh, 2, x + 7 * D);
            simil_index_destroy(sh);
        }
        simil_index_destroy(one);
    }
    free(x);
}

static void test_remove_and_files(void **state)
{
    (void)state;
    float *x = sml_test_malloc(sizeof(float) * N * D);
    SML_ASSERT_OK(simil_generate("mix", 0, N, D, 4, x));
    simil_index *sh = filled("IVF16,Flat", "cpu:3", x);
    assert_string_equal(simil_index_description(sh), "Shards3,IVF16,Flat");
    int64_t gone[3] = {0, 5000, 11999};
    int64_t removed;
    SML_ASSERT_OK(simil_index_remove(sh, 3, gone, &removed));
    assert_int_equal(removed, 3);
    float v[D];
    SML_ASSERT_OK(simil_index_reconstruct(sh, 6000, v));
    assert_memory_equal(v, x + 6000 * D, sizeof v);
    const char *path = sml_test_path("sharded.simil");
    SML_ASSERT_OK(simil_index_save(sh, path));
    simil_index *back, *one;
    SML_ASSERT_OK(simil_index_load(&back, path, "cpu:6/r2"));
    SML_ASSERT_OK(simil_index_load(&one, path, "cpu")); /* every shard on one device */
    assert_int_equal(simil_index_size(back), N - 3);
    same_results("reloaded", sh, back, NQ, x);
    same_results("reloaded on one device", sh, one, NQ, x);
    simil_index *wrong;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_load(&wrong, path, "cpu:2"));
    /* an unsharded file onto several devices: refused with a way out, not "damaged" */
    simil_index *plain = filled("IVF16,Flat", "cpu", x);
    const char *plain_path = sml_test_path("plain.simil");
    SML_ASSERT_OK(simil_index_save(plain, plain_path));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_load(&wrong, plain_path, "cpu:2"));
    assert_non_null(strstr(simil_last_error(), "unsharded"));
    assert_null(wrong);
    simil_index *plain_back;
    SML_ASSERT_OK(simil_index_load(&plain_back, plain_path, "cpu:1"));
    simil_index_destroy(plain_back);
    simil_index_destroy(plain);
    simil_index_destroy(back);
    simil_index_destroy(one);
    simil_index_destroy(sh);
    free(x);
}

/* Training a sharded index: the shards get one training, and one that holds
 * vectors refuses it and keeps every shard's vectors (sharded Flat and flat
 * XFBQ indexes used to copy shard 0, vectors and all, over the others);
 * sharded Flat accepts it and does nothing. */
static void test_train(void **state)
{
    (void)state;
    float *x = sml_test_malloc(sizeof(float) * N * D);
    SML_ASSERT_OK(simil_generate("mix", 0, N, D, 17, x));
    simil_index *xfbq;
    SML_ASSERT_OK(simil_index_create(&xfbq, D, "XFBQ", SIMIL_METRIC_COSINE, "cpu:3"));
    SML_ASSERT_OK(simil_index_add(xfbq, N, x, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_train(xfbq, N, x));
    assert_non_null(strstr(simil_last_error(), "reset the index"));
    assert_int_equal(simil_index_size(xfbq), N);
    float d[K];
    int64_t l[K];
    for (int64_t i = 0; i < N; i += N / 6) {
        SML_ASSERT_OK(simil_index_search(xfbq, 1, x + i * D, K, NULL, d, l));
        assert_int_equal(l[0], i);
    }
    SML_ASSERT_OK(simil_index_reset(xfbq));
    SML_ASSERT_OK(simil_index_train(xfbq, N, x));
    simil_index_destroy(xfbq);
    /* Flat has nothing to train: accepted, and every shard keeps its vectors */
    simil_index *flat;
    SML_ASSERT_OK(simil_index_create(&flat, D, "Flat", SIMIL_METRIC_L2, "cpu:3"));
    SML_ASSERT_OK(simil_index_add(flat, N, x, NULL));
    SML_ASSERT_OK(simil_index_train(flat, N, x));
    for (int64_t i = 0; i < N; i += N / 6) {
        SML_ASSERT_OK(simil_index_search(flat, 1, x + i * D, K, NULL, d, l));
        assert_int_equal(l[0], i);
    }
    simil_index_destroy(flat);
    /* an empty sharded IVF trains once, and again: every shard has the
     * coarse quantizer of a one-device index trained on the same data */
    simil_index *sh, *one;
    SML_ASSERT_OK(simil_index_create(&sh, D, "IVF32,Flat", SIMIL_METRIC_L2, "cpu:2/r2"));
    SML_ASSERT_OK(simil_index_train(sh, N / 2, x + (N / 2) * D));
    SML_ASSERT_OK(simil_index_train(sh, N, x));
    SML_ASSERT_OK(simil_index_add(sh, N, x, NULL));
    one = filled("IVF32,Flat", "cpu", x);
    same_results("retrained shards", sh, one, NQ, x);
    simil_index_destroy(sh);
    simil_index_destroy(one);
    free(x);
}

static void test_placement_errors(void **state)
{
    (void)state;
    simil_index *index;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_create(&index, D, "Flat", SIMIL_METRIC_L2, "cpu:3/r2"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_create(&index, D, "Flat", SIMIL_METRIC_L2, "cpu:0"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_create(&index, D, "Flat", SIMIL_METRIC_L2, "gpu:0,x"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_index_create(&index, D, "Shards2,Flat", SIMIL_METRIC_L2, "cpu:3"));
    if (simil_gpu_count() == 0)
        SML_ASSERT_STATUS(SIMIL_ERR_NO_DEVICE,
                          simil_index_create(&index, D, "Flat", SIMIL_METRIC_L2, "gpus"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sharded_equals_single),
        cmocka_unit_test(test_remove_and_files),
        cmocka_unit_test(test_train),
        cmocka_unit_test(test_placement_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
