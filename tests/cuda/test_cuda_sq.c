/* test_cuda_sq.c: scalar quantizers on the GPU against the CPU: the same
 * index (filled on the CPU, loaded on the GPU) gives the same results for
 * every type and metric, flat and IVF, at k = 1 to past 2048 and several
 * nprobe, in batches and in a few queries (IVF's probe scan); reconstruct
 * agrees; remove and add on the GPU; an empty index. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/test_util.h"

static const double rel_tol = 1e-4;
static const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP, SIMIL_METRIC_COSINE};

static void search(const simil_index *index, int64_t nq, const float *q, int64_t k,
                   int64_t nprobe, float *d, int64_t *l)
{
    simil_search_params *p = sml_test_params("");
    SML_ASSERT_OK(simil_search_params_set_int(p, "nprobe", nprobe));
    SML_ASSERT_OK(simil_index_search(index, nq, q, k, p, d, l));
    simil_search_params_destroy(p);
}

/* An index trained and filled on the CPU, and its copy loaded on the GPU. */
static void twin(const char *desc, int64_t dim, simil_metric metric, int64_t n, const float *x,
                 simil_index **cpu, simil_index **gpu)
{
    SML_ASSERT_OK(simil_index_create(cpu, dim, desc, metric, "cpu"));
    SML_ASSERT_OK(simil_index_train(*cpu, n, x));
    SML_ASSERT_OK(simil_index_add(*cpu, n, x, NULL));
    const char *path = sml_test_path("twin_sq.simil");
    SML_ASSERT_OK(simil_index_save(*cpu, path));
    SML_ASSERT_OK(simil_index_load(gpu, path, "gpu"));
    remove(path);
}

/* GPU results against the CPU's; base: the decoded vectors (positions =
 * ids), queries prepared as the index sees them. */
static void compare(const char *what, const simil_index *cpu, const simil_index *gpu,
                    const float *base, int64_t n, const float *q, int64_t nq, int64_t dim,
                    int64_t k, int64_t nprobe, simil_metric metric)
{
    char context[160];
    snprintf(context, sizeof context, "%s n=%lld nq=%lld dim=%lld k=%lld nprobe=%lld", what,
             (long long)n, (long long)nq, (long long)dim, (long long)k, (long long)nprobe);
    const size_t out = (size_t)(nq * k);
    float *dc = sml_test_malloc(4 * out), *dg = sml_test_malloc(4 * out);
    int64_t *lc = sml_test_malloc(8 * out), *lg = sml_test_malloc(8 * out);
    search(cpu, nq, q, k, nprobe, dc, lc);
    search(gpu, nq, q, k, nprobe, dg, lg);
    sml_test_check_same(context, base, n, q, nq, dim, k,
                        metric == SIMIL_METRIC_L2 ? SIMIL_METRIC_L2 : SIMIL_METRIC_IP, dg, lg, dc,
                        lc, rel_tol);
    free(dc);
    free(dg);
    free(lc);
    free(lg);
}

static void test_same_as_cpu(void **state)
{
    (void)state;
    const int64_t n = sml_test_quick() ? 3000 : 20000, dim = 36, nq = 150;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    float *base = sml_test_malloc(sizeof(float) * n * dim);
    float *rec = sml_test_malloc(sizeof(float) * dim);
    const char *descs[] = {"SQ8", "SQfp16", "SQbf16", "IVF32,SQ8", "IVF32,SQfp16", "IVF32,SQbf16"};
    for (int c = 0; c < 6; c++) {
        const int ivf = c >= 3;
        for (int m = 0; m < 3; m++) {
            SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 21 + m, x));
            SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 31 + m, q));
            if (metrics[m] == SIMIL_METRIC_COSINE) sml_test_normalize(q, nq, dim);
            simil_index *cpu, *gpu;
            twin(descs[c], dim, metrics[m], n, x, &cpu, &gpu);
            for (int64_t i = 0; i < n; i++) {
                SML_ASSERT_OK(simil_index_reconstruct(cpu, i, base + i * dim));
                SML_ASSERT_OK(simil_index_reconstruct(gpu, i, rec));
                assert_memory_equal(base + i * dim, rec, sizeof(float) * dim);
            }
            char what[96];
            snprintf(what, sizeof what, "%s %s seed=%d", descs[c], simil_metric_name(metrics[m]),
                     21 + m);
            const int64_t ks[] = {1, 10, 100};
            for (int i = 0; i < 3; i++)
                compare(what, cpu, gpu, base, n, q, nq, dim, ks[i], ivf ? 8 : 1, metrics[m]);
            if (ivf) compare(what, cpu, gpu, base, n, q, nq, dim, 10, 32, metrics[m]);
            /* a few queries: IVF's probe scan on the decoded rows (one query,
             * and 10 at k = 100) */
            compare(what, cpu, gpu, base, n, q, 1, dim, 10, ivf ? 8 : 1, metrics[m]);
            compare(what, cpu, gpu, base, n, q, 10, dim, 100, ivf ? 8 : 1, metrics[m]);
            /* past WarpSelect: radix selection over each query's segment */
            compare(what, cpu, gpu, base, n, q, 20, dim, 2500, ivf ? 32 : 1, metrics[m]);
            simil_index_destroy(cpu);
            simil_index_destroy(gpu);
        }
    }
    free(x);
    free(q);
    free(base);
    free(rec);
}

/* Remove and add on the GPU as on the CPU: the same results after. */
static void test_remove_add(void **state)
{
    (void)state;
    const int64_t n = 4000, dim = 20, nq = 40, k = 10;
    float *x = sml_test_malloc(sizeof(float) * n * dim);
    float *q = sml_test_malloc(sizeof(float) * nq * dim);
    float *base = sml_test_malloc(sizeof(float) * n * dim);
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 41, x));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 42, q));
    const char *descs[] = {"SQ8", "IVF16,SQfp16"};
    for (int c = 0; c < 2; c++) {
        simil_index *cpu, *gpu;
        twin(descs[c], dim, SIMIL_METRIC_L2, n / 2, x, &cpu, &gpu);
        int64_t gone[100], removed;
        for (int i = 0; i < 100; i++) gone[i] = 3 * i;
        SML_ASSERT_OK(simil_index_remove(cpu, 100, gone, &removed));
        SML_ASSERT_OK(simil_index_remove(gpu, 100, gone, &removed));
        assert_int_equal(removed, 100);
        SML_ASSERT_OK(simil_index_add(cpu, n / 2, x + n / 2 * dim, NULL));
        SML_ASSERT_OK(simil_index_add(gpu, n / 2, x + n / 2 * dim, NULL));
        assert_int_equal(simil_index_size(gpu), n - 100);
        /* positions = ids; removed ones get the CPU's decoded floats of row 0,
         * never returned, so never checked */
        for (int64_t i = 0; i < n; i++) {
            const int64_t id = (i < 300 && i % 3 == 0) ? 1 : i;
            SML_ASSERT_OK(simil_index_reconstruct(cpu, id, base + i * dim));
        }
        compare(descs[c], cpu, gpu, base, n, q, nq, dim, k, 16, SIMIL_METRIC_L2);
        simil_index_destroy(cpu);
        simil_index_destroy(gpu);
    }
    free(x);
    free(q);
    free(base);
}

/* An empty index answers with empty slots, as on the CPU. */
static void test_empty(void **state)
{
    (void)state;
    float q[2 * 8] = {0}, d[2 * 5];
    int64_t l[2 * 5];
    simil_index *gpu;
    SML_ASSERT_OK(simil_index_create(&gpu, 8, "SQfp16", SIMIL_METRIC_L2, "gpu"));
    search(gpu, 2, q, 5, 1, d, l);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(l[i], -1);
        assert_true(isinf(d[i]));
    }
    simil_index_destroy(gpu);
}

int main(void)
{
    sml_test_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_cpu),
        cmocka_unit_test(test_remove_add),
        cmocka_unit_test(test_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
