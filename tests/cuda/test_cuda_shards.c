/* test_cuda_shards.c: indexes over several GPU parts give the results of one
 * GPU: shards (on distinct GPUs where there are several, else twice on GPU 0),
 * replicas, and the shared IVF quantizer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/test_util.h"

enum { N = 40000, D = 32, NQ = 333, K = 20 };

static simil_index *filled(const char *desc, const char *device, const float *x)
{
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, D, desc, SIMIL_METRIC_L2, device));
    SML_ASSERT_OK(simil_index_train(index, N, x));
    SML_ASSERT_OK(simil_index_add(index, N, x, NULL));
    return index;
}

static void compare(const char *what, const simil_index *one, const simil_index *many,
                    const float *x, const float *q)
{
    float *d1 = sml_test_malloc(4 * NQ * K), *d2 = sml_test_malloc(4 * NQ * K);
    int64_t *l1 = sml_test_malloc(8 * NQ * K), *l2 = sml_test_malloc(8 * NQ * K);
    simil_search_params *p = sml_test_params("nprobe=8");
    SML_ASSERT_OK(simil_index_search(one, NQ, q, K, p, d1, l1));
    SML_ASSERT_OK(simil_index_search(many, NQ, q, K, p, d2, l2));
    simil_search_params_destroy(p);
    sml_test_check_same(what, x, N, q, NQ, D, K, SIMIL_METRIC_L2, d2, l2, d1, l1, 1e-4);
    free(d1);
    free(d2);
    free(l1);
    free(l2);
}

static void test_shards_and_replicas(void **state)
{
    (void)state;
    float *x = sml_test_malloc(4 * N * D), *q = sml_test_malloc(4 * NQ * D);
    SML_ASSERT_OK(simil_generate("mix", 0, N, D, 61, x));
    SML_ASSERT_OK(simil_generate("mix", 0, NQ, D, 62, q));
    const char *many[3] = {"gpu:0,0", "gpu:0,0,0,0/r2", NULL};
    if (simil_gpu_count() >= 2) many[2] = "gpus";
    const char *descs[] = {"Flat", "IVF32,Flat"};
    for (int d = 0; d < 2; d++) {
        simil_index *one = filled(descs[d], "gpu", x);
        for (int m = 0; m < 3 && many[m]; m++) {
            simil_index *sh = filled(descs[d], many[m], x);
            char what[96];
            snprintf(what, sizeof what, "%s on %s (%s)", descs[d], many[m],
                     simil_index_description(sh));
            compare(what, one, sh, x, q);
            simil_index_destroy(sh);
        }
        simil_index_destroy(one);
    }
    free(x);
    free(q);
}

int main(void)
{
    sml_test_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shards_and_replicas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
