/* test_cuda_flat.c: exact search on the GPU against the float64 reference and
 * against the CPU backend: dims 1 to 1024, k from 1 past 2048, n from 0 to
 * millions (tiling), queries and results in host or GPU memory (several tiles
 * through the pinned slots), NaN, and
 * adversarial data for the tensor-core path's error bound (near-duplicates,
 * large values, tight clusters). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_backend.h"
#include "util/test_util.h"

static const double rel_tol = 1e-4;

/* GPU search checked against the float64 reference. */
static void check_reference(int64_t n, int64_t nq, int64_t dim, int64_t k, simil_metric metric,
                            uint64_t seed)
{
    char context[160];
    snprintf(context, sizeof context, "gpu %s n=%lld nq=%lld dim=%lld k=%lld seed=%llu",
             simil_metric_name(metric), (long long)n, (long long)nq, (long long)dim,
             (long long)k, (unsigned long long)seed);
    float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim + 1));
    float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim + 1));
    sml_test_fill_uniform(base, n * dim, seed, -1, 1);
    sml_test_fill_uniform(q, nq * dim, seed + 99, -1, 1);
    simil_index *index = sml_test_flat_index("gpu", dim, metric, n, base);
    float *d = sml_test_malloc(sizeof(float) * (size_t)(nq * k));
    int64_t *l = sml_test_malloc(sizeof(int64_t) * (size_t)(nq * k));
    SML_ASSERT_OK(simil_index_search(index, nq, q, k, NULL, d, l));
    sml_test_check_knn_metric(context, base, n, q, nq, dim, k, metric, d, l, rel_tol);
    simil_index_destroy(index);
    free(d);
    free(l);
    free(base);
    free(q);
}

/* GPU against CPU on the same data (for sizes the float64 loop would crawl on). */
static void check_against_cpu(const char *what, const float *base, int64_t n, const float *q,
                              int64_t nq, int64_t dim, int64_t k, simil_metric metric)
{
    char context[160];
    snprintf(context, sizeof context, "%s gpu vs cpu %s n=%lld nq=%lld dim=%lld k=%lld", what,
             simil_metric_name(metric), (long long)n, (long long)nq, (long long)dim,
             (long long)k);
    simil_index *gpu = sml_test_flat_index("gpu", dim, metric, n, base);
    simil_index *cpu = sml_test_flat_index("cpu", dim, metric, n, base);
    size_t out = (size_t)(nq * k);
    float *dg = sml_test_malloc(sizeof(float) * out), *dc = sml_test_malloc(sizeof(float) * out);
    int64_t *lg = sml_test_malloc(sizeof(int64_t) * out);
    int64_t *lc = sml_test_malloc(sizeof(int64_t) * out);
    SML_ASSERT_OK(simil_index_search(gpu, nq, q, k, NULL, dg, lg));
    SML_ASSERT_OK(simil_index_search(cpu, nq, q, k, NULL, dc, lc));
    float *bn = NULL, *qn = NULL;
    const float *b = base, *qq = q;
    if (metric == SIMIL_METRIC_COSINE) {
        bn = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
        qn = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
        memcpy(bn, base, sizeof(float) * (size_t)(n * dim));
        memcpy(qn, q, sizeof(float) * (size_t)(nq * dim));
        sml_test_normalize(bn, n, dim);
        sml_test_normalize(qn, nq, dim);
        b = bn;
        qq = qn;
    }
    sml_test_check_same(context, b, n, qq, nq, dim, k, metric, dg, lg, dc, lc, rel_tol);
    free(bn);
    free(qn);
    free(dg);
    free(dc);
    free(lg);
    free(lc);
    simil_index_destroy(gpu);
    simil_index_destroy(cpu);
}

static void test_dims_and_k(void **state)
{
    (void)state;
    const int64_t dims[] = {1, 3, 100, 128, 785, 1024};
    const int64_t n = 6000;
    const int64_t ks[] = {1, 7, 32, 33, 100, 1024, 2048, 2049, 5000, n};
    const size_t ndims = sml_test_quick() ? 2 : sizeof dims / sizeof dims[0];
    const size_t nks = sml_test_quick() ? 3 : sizeof ks / sizeof ks[0];
    uint64_t seed = 1;
    for (size_t di = 0; di < ndims; di++)
        for (size_t ki = 0; ki < nks; ki++)
            check_reference(n, 20, dims[di], ks[ki], SIMIL_METRIC_L2, seed++);
    for (size_t ki = 0; ki < nks; ki++) {
        check_reference(n, 20, 64, ks[ki], SIMIL_METRIC_IP, seed++);
        check_reference(n, 20, 48, ks[ki], SIMIL_METRIC_COSINE, seed++);
    }
    check_reference(1, 5, 16, 3, SIMIL_METRIC_L2, seed++);
    check_reference(40, 300, 16, 50, SIMIL_METRIC_L2, seed++); /* k > n, many queries */
}

static void test_empty_and_tiny(void **state)
{
    (void)state;
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, 8, "Flat", SIMIL_METRIC_L2, "gpu"));
    float q[16] = {0}, d[6];
    int64_t l[6];
    SML_ASSERT_OK(simil_index_search(index, 2, q, 3, NULL, d, l));
    for (int i = 0; i < 6; i++) assert_true(l[i] == -1 && isinf(d[i]));
    simil_index_destroy(index);
}

static void test_tiling_millions(void **state)
{
    (void)state;
    const int64_t n = sml_test_quick() ? 100000 : 3000000, dim = 8, nq = 300;
    float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
    sml_test_fill_uniform(base, n * dim, 7, 0, 1);
    sml_test_fill_uniform(q, nq * dim, 8, 0, 1);
    check_against_cpu("tiling", base, n, q, nq, dim, 10, SIMIL_METRIC_L2);
    check_against_cpu("tiling", base, n, q, nq, dim, 100, SIMIL_METRIC_IP);
    check_against_cpu("tiling", base, n, q, 40, dim, 3000, SIMIL_METRIC_L2);
    free(base);
    free(q);
}

/* Uploads of 64 MB and more go through pinned pieces of 32 MB
 * (cuda_backend.cu): a 1024-d add moves 256 MB per chunk of 65,536 rows.
 * Rows on both sides of every piece boundary, and the last, come back as
 * they went in, and each finds itself. */
static void test_staged_upload(void **state)
{
    (void)state;
    const int64_t n = 70000, dim = 1024, rows_per_piece = ((int64_t)32 << 20) / (4 * dim);
    float *x = sml_test_malloc(sizeof(float) * (size_t)(n * dim)), *r = sml_test_malloc(4 * dim);
    sml_test_fill_uniform(x, n * dim, 9, -1, 1);
    simil_index *gpu;
    SML_ASSERT_OK(simil_index_create(&gpu, dim, "Flat", SIMIL_METRIC_L2, "gpu"));
    SML_ASSERT_OK(simil_index_add(gpu, n, x, NULL));
    for (int64_t row = 0; row < n; row += rows_per_piece) {
        const int64_t ids[] = {row == 0 ? 0 : row - 1, row, n - 1};
        for (int i = 0; i < 3; i++) {
            SML_ASSERT_OK(simil_index_reconstruct(gpu, ids[i], r));
            if (memcmp(r, x + ids[i] * dim, 4 * dim) != 0)
                fail_msg("row %lld changed on its way to the GPU", (long long)ids[i]);
            float d;
            int64_t l;
            SML_ASSERT_OK(simil_index_search(gpu, 1, x + ids[i] * dim, 1, NULL, &d, &l));
            assert_int_equal(l, ids[i]);
        }
    }
    simil_index_destroy(gpu);
    free(x);
    free(r);
}

static void test_device_memory(void **state)
{
    (void)state;
    const int64_t n = 20000, dim = 40, nq = 64, k = 16;
    float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
    sml_test_fill_uniform(base, n * dim, 11, -1, 1);
    sml_test_fill_uniform(q, nq * dim, 12, -1, 1);
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_COSINE};
    for (int m = 0; m < 2; m++) {
        simil_index *index = sml_test_flat_index("gpu", dim, metrics[m], n, base);
        float *d_q, *d_d;
        int64_t *d_l;
        assert_int_equal(cudaMalloc((void **)&d_q, sizeof(float) * nq * dim), 0);
        assert_int_equal(cudaMalloc((void **)&d_d, sizeof(float) * nq * k), 0);
        assert_int_equal(cudaMalloc((void **)&d_l, sizeof(int64_t) * nq * k), 0);
        assert_int_equal(cudaMemcpy(d_q, q, sizeof(float) * nq * dim, cudaMemcpyHostToDevice), 0);
        SML_ASSERT_OK(simil_index_search(index, nq, d_q, k, NULL, d_d, d_l));
        float dh[64 * 16], dref[64 * 16];
        int64_t lh[64 * 16], lref[64 * 16];
        assert_int_equal(cudaMemcpy(dh, d_d, sizeof dh, cudaMemcpyDeviceToHost), 0);
        assert_int_equal(cudaMemcpy(lh, d_l, sizeof lh, cudaMemcpyDeviceToHost), 0);
        SML_ASSERT_OK(simil_index_search(index, nq, q, k, NULL, dref, lref));
        assert_memory_equal(lh, lref, sizeof lh);
        assert_memory_equal(dh, dref, sizeof dh);
        /* NaN in GPU-resident queries is caught too */
        float nan = NAN;
        assert_int_equal(cudaMemcpy(d_q + 5, &nan, sizeof nan, cudaMemcpyHostToDevice), 0);
        SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                          simil_index_search(index, nq, d_q, k, NULL, d_d, d_l));
        cudaFree(d_q);
        cudaFree(d_d);
        cudaFree(d_l);
        simil_index_destroy(index);
    }
    free(base);
    free(q);
}

/* A batch of several query tiles, so that host queries and results go through
 * the two pinned slots in turn (cuda_knn.cu), with queries that fail the fast
 * path's bound spread over every tile: the re-runs must land on the right
 * rows after their tile's results were copied out.  Every placement of
 * queries and outputs (host or GPU) gives the same bits, equal to the CPU's. */
static void test_staged_tiles(void **state)
{
    (void)state;
    /* more queries than one tile takes (16,384; fewer for k = 3000) */
    const int64_t n = 20000, dim = 48, nq = sml_test_quick() ? 5000 : 36000;
    float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
    sml_test_fill_uniform(base, n * dim, 51, -1, 1);
    /* 20 groups of 500 near-duplicates in the first half of the base: more than
     * the fast path's 2k candidates, so the bound cannot hold for a query there */
    for (int64_t i = 20; i < n / 2; i++)
        for (int64_t j = 0; j < dim; j++)
            base[i * dim + j] = base[(i % 20) * dim + j] + 1e-4f * (float)((i * 7 + j) % 13);
    sml_test_fill_uniform(q, nq * dim, 52, -1, 1);
    for (int64_t i = 0; i < nq; i += 3) /* every third query sits on a duplicate */
        memcpy(q + i * dim, base + (i % (n / 2)) * dim, sizeof(float) * (size_t)dim);
    const int64_t ks[3] = {10, 100, 3000};
    for (int ki = 0; ki < 3; ki++) {
        const int64_t k = ks[ki];
        const size_t out = (size_t)(nq * k);
        long long before = sml_cuda_fallback_queries();
        check_against_cpu("staged tiles", base, n, q, nq, dim, k, SIMIL_METRIC_L2);
        printf("staged tiles k=%lld: %lld of %lld queries re-ran in fp32\n", (long long)k,
               sml_cuda_fallback_queries() - before, (long long)nq);
        if (k <= 100) assert_true(sml_cuda_fallback_queries() > before);
        simil_index *index = sml_test_flat_index("gpu", dim, SIMIL_METRIC_L2, n, base);
        float *dref = sml_test_malloc(sizeof(float) * out);
        float *dh = sml_test_malloc(sizeof(float) * out);
        int64_t *lref = sml_test_malloc(sizeof(int64_t) * out);
        int64_t *lh = sml_test_malloc(sizeof(int64_t) * out);
        SML_ASSERT_OK(simil_index_search(index, nq, q, k, NULL, dref, lref));
        float *d_q, *d_d;
        int64_t *d_l;
        assert_int_equal(cudaMalloc((void **)&d_q, sizeof(float) * (size_t)(nq * dim)), 0);
        assert_int_equal(cudaMalloc((void **)&d_d, sizeof(float) * out), 0);
        assert_int_equal(cudaMalloc((void **)&d_l, sizeof(int64_t) * out), 0);
        assert_int_equal(
            cudaMemcpy(d_q, q, sizeof(float) * (size_t)(nq * dim), cudaMemcpyHostToDevice), 0);
        for (int place = 1; place < 4; place++) {
            const int queries_on_gpu = place & 1, outputs_on_gpu = place >> 1;
            float *d = outputs_on_gpu ? d_d : dh;
            int64_t *l = outputs_on_gpu ? d_l : lh;
            SML_ASSERT_OK(simil_index_search(index, nq, queries_on_gpu ? d_q : q, k, NULL, d, l));
            if (outputs_on_gpu) {
                assert_int_equal(cudaMemcpy(dh, d_d, sizeof(float) * out, cudaMemcpyDeviceToHost),
                                 0);
                assert_int_equal(
                    cudaMemcpy(lh, d_l, sizeof(int64_t) * out, cudaMemcpyDeviceToHost), 0);
            }
            assert_memory_equal(lh, lref, sizeof(int64_t) * out);
            assert_memory_equal(dh, dref, sizeof(float) * out);
        }
        cudaFree(d_q);
        cudaFree(d_d);
        cudaFree(d_l);
        free(dref);
        free(dh);
        free(lref);
        free(lh);
        simil_index_destroy(index);
    }
    free(base);
    free(q);
}

static void test_nan_rejected(void **state)
{
    (void)state;
    float base[4 * 3] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    simil_index *index = sml_test_flat_index("gpu", 3, SIMIL_METRIC_L2, 4, base);
    float bad[3] = {1, NAN, 2}, d[2];
    int64_t l[2];
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_search(index, 1, bad, 2, NULL, d, l));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add(index, 1, bad, NULL));
    assert_int_equal(simil_index_size(index), 4);
    simil_index_destroy(index);
}

/* Data built to stress the tensor-core path's bound: results must stay exact. */
static void test_adversarial(void **state)
{
    (void)state;
    const int64_t n = sml_test_quick() ? 5000 : 50000, dim = 64, nq = 200;
    float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
    /* near-duplicates: 500 vectors, each copied 100 times with 1e-4 noise */
    float *noise = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    sml_test_fill_uniform(noise, n * dim, 21, -1e-4f, 1e-4f);
    sml_test_fill_uniform(base, 500 * dim, 22, -1, 1);
    for (int64_t i = 500; i < n; i++)
        for (int64_t j = 0; j < dim; j++)
            base[i * dim + j] = base[(i % 500) * dim + j] + noise[i * dim + j];
    for (int64_t i = 0; i < nq; i++)
        for (int64_t j = 0; j < dim; j++) q[i * dim + j] = base[(i * 37 % n) * dim + j] + noise[i];
    long long before = sml_cuda_fallback_queries();
    check_against_cpu("near-duplicates", base, n, q, nq, dim, 10, SIMIL_METRIC_L2);
    printf("near-duplicates: %lld of %lld queries re-ran in fp32\n",
           sml_cuda_fallback_queries() - before, (long long)nq);
    /* large values: fp16 would overflow without per-row scaling */
    sml_test_fill_uniform(base, n * dim, 23, -3e4f, 3e4f);
    sml_test_fill_uniform(q, nq * dim, 24, -3e4f, 3e4f);
    check_against_cpu("large values", base, n, q, nq, dim, 10, SIMIL_METRIC_L2);
    check_against_cpu("large values", base, n, q, nq, dim, 100, SIMIL_METRIC_IP);
    /* tight clusters far from the origin: distances tiny next to the norms */
    sml_test_fill_uniform(noise, n * dim, 25, -0.01f, 0.01f);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < dim; j++)
            base[i * dim + j] = 10.0f + (float)((i % 50) * (j % 7)) * 0.5f + noise[i * dim + j];
    for (int64_t i = 0; i < nq; i++)
        for (int64_t j = 0; j < dim; j++) q[i * dim + j] = base[(i * 101 % n) * dim + j] + 0.003f;
    before = sml_cuda_fallback_queries();
    check_against_cpu("clusters", base, n, q, nq, dim, 10, SIMIL_METRIC_L2);
    printf("clusters: %lld of %lld queries re-ran in fp32\n",
           sml_cuda_fallback_queries() - before, (long long)nq);
    free(noise);
    free(base);
    free(q);
}

static void test_fast_path_is_used(void **state)
{
    (void)state;
    /* on well-spread data the bound must prove almost every query */
    const int64_t n = sml_test_quick() ? 20000 : 200000, dim = 128, nq = 1000;
    float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
    sml_test_fill_uniform(base, n * dim, 31, 0, 1);
    sml_test_fill_uniform(q, nq * dim, 32, 0, 1);
    long long before = sml_cuda_fallback_queries();
    check_against_cpu("uniform", base, n, q, nq, dim, 10, SIMIL_METRIC_L2);
    long long redone = sml_cuda_fallback_queries() - before;
    printf("uniform: %lld of %lld queries re-ran in fp32\n", redone, (long long)nq);
    assert_true(redone * 20 < nq);
    free(base);
    free(q);
}

static void test_files_move_between_backends(void **state)
{
    (void)state;
    const int64_t n = 3000, dim = 24, nq = 30, k = 5;
    float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    sml_test_fill_uniform(base, n * dim, 41, -1, 1);
    simil_index *gpu = sml_test_flat_index("gpu", dim, SIMIL_METRIC_L2, n, base);
    int64_t gone[3] = {0, 10, 20};
    SML_ASSERT_OK(simil_index_remove(gpu, 3, gone, NULL));
    const char *path = sml_test_path("gpu.simil");
    SML_ASSERT_OK(simil_index_save(gpu, path));
    simil_index *cpu;
    SML_ASSERT_OK(simil_index_load(&cpu, path, "cpu"));
    float dg[30 * 5], dc[30 * 5];
    int64_t lg[30 * 5], lc[30 * 5];
    SML_ASSERT_OK(simil_index_search(gpu, nq, base, k, NULL, dg, lg));
    SML_ASSERT_OK(simil_index_search(cpu, nq, base, k, NULL, dc, lc));
    assert_memory_equal(lg, lc, sizeof lg);
    for (int i = 0; i < nq; i++) assert_true(lg[i * k] != 0 && lg[i * k] != 10 && lg[i * k] != 20);
    SML_ASSERT_OK(simil_index_save(cpu, path));
    simil_index *back;
    SML_ASSERT_OK(simil_index_load(&back, path, "gpu"));
    SML_ASSERT_OK(simil_index_search(back, nq, base, k, NULL, dg, lg));
    assert_memory_equal(lg, lc, sizeof lg);
    assert_non_null(strstr(simil_backend_name(back), "cuda"));
    simil_index_destroy(gpu);
    simil_index_destroy(cpu);
    simil_index_destroy(back);
    free(base);
}

int main(void)
{
    sml_test_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dims_and_k),
        cmocka_unit_test(test_empty_and_tiny),
        cmocka_unit_test(test_tiling_millions),
        cmocka_unit_test(test_staged_upload),
        cmocka_unit_test(test_device_memory),
        cmocka_unit_test(test_staged_tiles),
        cmocka_unit_test(test_nan_rejected),
        cmocka_unit_test(test_adversarial),
        cmocka_unit_test(test_fast_path_is_used),
        cmocka_unit_test(test_files_move_between_backends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
