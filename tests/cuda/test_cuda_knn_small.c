/* test_cuda_knn_small.c: the small-batch path of exact search on the GPU
 * (src/cuda/cuda_knn_small.cu) against the float64 reference, the CPU
 * backend and the GPU's own batch path: batch sizes 1 to 64 around the
 * query groups (1, 2, 4, 8 per block), k around the candidate queues (k <= 4
 * keeps 32, then 2k rounded up to 64, 128, 256; k = 129 leaves the path),
 * dims of every load width (1, 3, 6, 100, 785) and of tensor cores (16, 48,
 * 80, 96, 784, 2048; also on CUDA cores), bases shorter than one
 * slice, k > n, slices with a short last one, queries whose candidates fail
 * the bound (redone in fp32), queries sent as kernel arguments (up to 952
 * floats a batch) and copied, one host query in one launch against three, and
 * queries and results in GPU memory. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_backend.h"
#include "util/test_util.h"

static const double rel_tol = 1e-4;

/* Search on the small path (the default limit) and on the batch path (the
 * limit at 0); the small path checked against the float64 reference.  Where
 * no query fell back to fp32 on either path, both give the same bits.  The
 * small path runs on tensor cores where 16 divides dim, else on CUDA cores;
 * tensor says which (0: CUDA cores for every dim). */
static void check_paths_on(int64_t n, int64_t nq, int64_t dim, int64_t k, simil_metric metric,
                           uint64_t seed, int tensor)
{
    char context[160];
    snprintf(context, sizeof context, "small %s n=%lld nq=%lld dim=%lld k=%lld seed=%llu %s",
             simil_metric_name(metric), (long long)n, (long long)nq, (long long)dim,
             (long long)k, (unsigned long long)seed, tensor ? "tensor" : "cuda-cores");
    float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim + 1));
    float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim + 1));
    sml_test_fill_uniform(base, n * dim, seed, -1, 1);
    sml_test_fill_uniform(q, nq * dim, seed + 99, -1, 1);
    simil_index *index = sml_test_flat_index("gpu", dim, metric, n, base);
    const size_t out = (size_t)(nq * k);
    float *d = sml_test_malloc(sizeof(float) * out), *d2 = sml_test_malloc(sizeof(float) * out);
    int64_t *l = sml_test_malloc(sizeof(int64_t) * out);
    int64_t *l2 = sml_test_malloc(sizeof(int64_t) * out);
    sml_cuda_knn_small_max(-1);
    sml_cuda_knn_small_tensor(tensor);
    long long before = sml_cuda_fallback_queries();
    SML_ASSERT_OK(simil_index_search(index, nq, q, k, NULL, d, l));
    sml_cuda_knn_small_tensor(1);
    sml_cuda_knn_small_max(0);
    SML_ASSERT_OK(simil_index_search(index, nq, q, k, NULL, d2, l2));
    sml_cuda_knn_small_max(-1);
    const long long redone = sml_cuda_fallback_queries() - before;
    if (nq == 1) {
        /* one host query runs in one launch: the same bits in three */
        float d3[1024];
        int64_t l3[1024];
        assert_true(k <= 1024);
        sml_cuda_knn_small_tensor(tensor);
        sml_cuda_knn_small_one_launch(0);
        SML_ASSERT_OK(simil_index_search(index, 1, q, k, NULL, d3, l3));
        sml_cuda_knn_small_one_launch(1);
        sml_cuda_knn_small_tensor(1);
        if (memcmp(l, l3, sizeof(int64_t) * out) != 0 || memcmp(d, d3, sizeof(float) * out) != 0)
            fail_msg("%s: one launch and three launches differ", context);
    }
    if (metric == SIMIL_METRIC_COSINE) {
        sml_test_normalize(base, n, dim);
        sml_test_normalize(q, nq, dim);
    }
    const simil_metric m = metric == SIMIL_METRIC_L2 ? SIMIL_METRIC_L2 : SIMIL_METRIC_IP;
    sml_test_check_knn(context, base, n, q, nq, dim, k, m, d, l, rel_tol);
    sml_test_check_same(context, base, n, q, nq, dim, k, m, d, l, d2, l2, rel_tol);
    if (redone == 0) {
        if (memcmp(l, l2, sizeof(int64_t) * out) != 0 || memcmp(d, d2, sizeof(float) * out) != 0)
            fail_msg("%s: the small and the batch path differ", context);
    }
    simil_index_destroy(index);
    free(d);
    free(d2);
    free(l);
    free(l2);
    free(base);
    free(q);
}

/* Both kinds of cores where the dimension allows tensor cores. */
static void check_paths(int64_t n, int64_t nq, int64_t dim, int64_t k, simil_metric metric,
                        uint64_t seed)
{
    check_paths_on(n, nq, dim, k, metric, seed, 1);
    if (dim % 16 == 0) check_paths_on(n, nq, dim, k, metric, seed, 0);
}

static void test_batch_sizes_and_k(void **state)
{
    (void)state;
    const int64_t nqs[] = {1, 2, 3, 5, 8, 9, 17, 33, 64};
    const int64_t ks[] = {1, 4, 5, 10, 32, 33, 64, 100, 128, 129};
    const size_t nnq = sml_test_quick() ? 4 : sizeof nqs / sizeof nqs[0];
    uint64_t seed = 1;
    for (size_t i = 0; i < nnq; i++)
        for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++)
            check_paths(20000, nqs[i], 64, ks[j], SIMIL_METRIC_L2, seed++);
    for (size_t i = 0; i < nnq; i++) {
        check_paths(20000, nqs[i], 48, 10, SIMIL_METRIC_IP, seed++);
        check_paths(20000, nqs[i], 96, 10, SIMIL_METRIC_COSINE, seed++);
    }
}

/* Every load width of CUDA cores (8, 4, 2 and 1 halves), dims past one
 * shared-memory query group, and on tensor cores dims of whole 32s and with
 * a last 16. */
static void test_dims(void **state)
{
    (void)state;
    const int64_t dims[] = {1, 3, 6, 8, 16, 48, 80, 96, 100, 784, 785, 2048};
    uint64_t seed = 100;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        check_paths(5000, 1, dims[i], 10, SIMIL_METRIC_L2, seed++);
        check_paths(5000, 13, dims[i], 3, SIMIL_METRIC_IP, seed++);
    }
}

/* Bases shorter than one slice or than the candidate queue, and k > n. */
static void test_tiny_bases(void **state)
{
    (void)state;
    const int64_t ns[] = {1, 2, 31, 33, 100, 511, 513, 1025};
    uint64_t seed = 200;
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        check_paths(ns[i], 1, 16, 10, SIMIL_METRIC_L2, seed++);
        check_paths(ns[i], 4, 16, 1, SIMIL_METRIC_L2, seed++);
        check_paths(ns[i], 7, 16, 50, SIMIL_METRIC_L2, seed++);
        check_paths(ns[i], 64, 16, 128, SIMIL_METRIC_IP, seed++);
    }
}

/* Many slices, the last one short; against the CPU for speed.  A batch of
 * one query group (1 query; 8 at k = 16) makes a slice per block, at least
 * as many as the candidates (k = 16: 64; k = 100: 256, on a GPU of 128 SMs
 * or more), so that the finish walks the lists under its bound; more groups
 * make fewer slices, whose every pair the finish offers. */
static void test_many_slices(void **state)
{
    (void)state;
    const int64_t n = sml_test_quick() ? 200003 : 2000003, dim = 32;
    float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    float *q = sml_test_malloc(sizeof(float) * 64 * dim);
    sml_test_fill_uniform(base, n * dim, 301, 0, 1);
    sml_test_fill_uniform(q, 64 * dim, 302, 0, 1);
    simil_index *gpu = sml_test_flat_index("gpu", dim, SIMIL_METRIC_L2, n, base);
    simil_index *cpu = sml_test_flat_index("cpu", dim, SIMIL_METRIC_L2, n, base);
    const int64_t nqs[] = {1, 8, 64, 1, 8}, ks[] = {16, 16, 16, 100, 100};
    for (int i = 0; i < 5; i++) {
        const int64_t nq = nqs[i], k = ks[i];
        char context[96];
        snprintf(context, sizeof context, "many slices n=%lld nq=%lld k=%lld", (long long)n,
                 (long long)nq, (long long)k);
        static float dg[64 * 100], dc[64 * 100];
        static int64_t lg[64 * 100], lc[64 * 100];
        SML_ASSERT_OK(simil_index_search(gpu, nq, q, k, NULL, dg, lg));
        SML_ASSERT_OK(simil_index_search(cpu, nq, q, k, NULL, dc, lc));
        sml_test_check_same(context, base, n, q, nq, dim, k, SIMIL_METRIC_L2, dg, lg, dc, lc,
                            rel_tol);
    }
    simil_index_destroy(gpu);
    simil_index_destroy(cpu);
    free(base);
    free(q);
}

/* Near-duplicates: more copies of a vector than the 2k candidates, so the
 * bound fails for queries there and they are searched again in fp32. */
static void test_bound_failures(void **state)
{
    (void)state;
    const int64_t n = 30000, dim = 48, nq = 40, k = 10;
    float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
    sml_test_fill_uniform(base, n * dim, 401, -1, 1);
    for (int64_t i = 10; i < n / 2; i++)
        for (int64_t j = 0; j < dim; j++)
            base[i * dim + j] = base[(i % 10) * dim + j] + 1e-4f * (float)((i * 7 + j) % 13);
    sml_test_fill_uniform(q, nq * dim, 402, -1, 1);
    for (int64_t i = 0; i < nq; i += 2)
        memcpy(q + i * dim, base + (i % 10) * dim, sizeof(float) * (size_t)dim);
    simil_index *gpu = sml_test_flat_index("gpu", dim, SIMIL_METRIC_L2, n, base);
    simil_index *cpu = sml_test_flat_index("cpu", dim, SIMIL_METRIC_L2, n, base);
    float *dg = sml_test_malloc(sizeof(float) * nq * k), *dc = sml_test_malloc(sizeof(float) * nq * k);
    int64_t *lg = sml_test_malloc(sizeof(int64_t) * nq * k);
    int64_t *lc = sml_test_malloc(sizeof(int64_t) * nq * k);
    const long long before = sml_cuda_fallback_queries();
    SML_ASSERT_OK(simil_index_search(gpu, nq, q, k, NULL, dg, lg));
    const long long redone = sml_cuda_fallback_queries() - before;
    printf("small path, near-duplicates: %lld of %lld queries re-ran in fp32\n", redone,
           (long long)nq);
    assert_true(redone >= nq / 2);
    SML_ASSERT_OK(simil_index_search(cpu, nq, q, k, NULL, dc, lc));
    sml_test_check_same("small path, near-duplicates", base, n, q, nq, dim, k, SIMIL_METRIC_L2,
                        dg, lg, dc, lc, rel_tol);
    /* one query of them alone (one launch), redone in fp32 as well */
    const long long before_one = sml_cuda_fallback_queries();
    SML_ASSERT_OK(simil_index_search(gpu, 1, q, k, NULL, dg, lg));
    assert_true(sml_cuda_fallback_queries() - before_one == 1);
    sml_test_check_same("small path, near-duplicates, one query", base, n, q, 1, dim, k,
                        SIMIL_METRIC_L2, dg, lg, dc, lc, rel_tol);
    simil_index_destroy(gpu);
    simil_index_destroy(cpu);
    free(dg);
    free(dc);
    free(lg);
    free(lc);
    free(base);
    free(q);
}

/* Queries and results in GPU memory give the bits of host memory. */
static void test_device_memory(void **state)
{
    (void)state;
    const int64_t n = 50000, dim = 40, nq = 33, k = 20;
    float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
    sml_test_fill_uniform(base, n * dim, 501, -1, 1);
    sml_test_fill_uniform(q, nq * dim, 502, -1, 1);
    simil_index *index = sml_test_flat_index("gpu", dim, SIMIL_METRIC_L2, n, base);
    float dref[33 * 20], dh[33 * 20], *d_q, *d_d;
    int64_t lref[33 * 20], lh[33 * 20], *d_l;
    SML_ASSERT_OK(simil_index_search(index, nq, q, k, NULL, dref, lref));
    assert_int_equal(cudaMalloc((void **)&d_q, sizeof(float) * nq * dim), 0);
    assert_int_equal(cudaMalloc((void **)&d_d, sizeof dh), 0);
    assert_int_equal(cudaMalloc((void **)&d_l, sizeof lh), 0);
    assert_int_equal(cudaMemcpy(d_q, q, sizeof(float) * nq * dim, cudaMemcpyHostToDevice), 0);
    for (int place = 1; place < 4; place++) {
        const int queries_on_gpu = place & 1, outputs_on_gpu = place >> 1;
        SML_ASSERT_OK(simil_index_search(index, nq, queries_on_gpu ? d_q : q, k, NULL,
                                         outputs_on_gpu ? d_d : dh, outputs_on_gpu ? d_l : lh));
        if (outputs_on_gpu) {
            assert_int_equal(cudaMemcpy(dh, d_d, sizeof dh, cudaMemcpyDeviceToHost), 0);
            assert_int_equal(cudaMemcpy(lh, d_l, sizeof lh, cudaMemcpyDeviceToHost), 0);
        }
        assert_memory_equal(lh, lref, sizeof lh);
        assert_memory_equal(dh, dref, sizeof dh);
    }
    /* one host query (one launch) with its results in GPU memory */
    SML_ASSERT_OK(simil_index_search(index, 1, q, k, NULL, dref, lref));
    SML_ASSERT_OK(simil_index_search(index, 1, q, k, NULL, d_d, d_l));
    assert_int_equal(cudaMemcpy(dh, d_d, sizeof(float) * k, cudaMemcpyDeviceToHost), 0);
    assert_int_equal(cudaMemcpy(lh, d_l, sizeof(int64_t) * k, cudaMemcpyDeviceToHost), 0);
    assert_memory_equal(lh, lref, sizeof(int64_t) * k);
    assert_memory_equal(dh, dref, sizeof(float) * k);
    cudaFree(d_q);
    cudaFree(d_d);
    cudaFree(d_l);
    simil_index_destroy(index);
    free(base);
    free(q);
}

/* The small path alone, on both kinds of cores, against the CPU: no batch
 * path runs, so this test function can go under racecheck (which stops on
 * the batch path's fp16 GEMM, docs/reliability.md). */
static void test_small_path_alone(void **state)
{
    (void)state;
    const int64_t n = 9000, dims[] = {16, 48, 96, 100, 784}, nqs[] = {1, 8, 13}, k = 10;
    uint64_t seed = 600;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        const int64_t dim = dims[i];
        float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
        float *q = sml_test_malloc(sizeof(float) * (size_t)(13 * dim));
        sml_test_fill_uniform(base, n * dim, seed++, -1, 1);
        sml_test_fill_uniform(q, 13 * dim, seed++, -1, 1);
        simil_index *gpu = sml_test_flat_index("gpu", dim, SIMIL_METRIC_L2, n, base);
        simil_index *cpu = sml_test_flat_index("cpu", dim, SIMIL_METRIC_L2, n, base);
        for (size_t j = 0; j < sizeof nqs / sizeof nqs[0]; j++)
            for (int tensor = 1; tensor >= 0; tensor--) {
                const int64_t nq = nqs[j];
                char context[96];
                snprintf(context, sizeof context, "small path alone dim=%lld nq=%lld %s",
                         (long long)dim, (long long)nq, tensor ? "tensor" : "cuda-cores");
                float dg[13 * 10], dc[13 * 10];
                int64_t lg[13 * 10], lc[13 * 10];
                sml_cuda_knn_small_tensor(tensor);
                SML_ASSERT_OK(simil_index_search(gpu, nq, q, k, NULL, dg, lg));
                sml_cuda_knn_small_tensor(1);
                SML_ASSERT_OK(simil_index_search(cpu, nq, q, k, NULL, dc, lc));
                sml_test_check_same(context, base, n, q, nq, dim, k, SIMIL_METRIC_L2, dg, lg, dc,
                                    lc, rel_tol);
            }
        simil_index_destroy(gpu);
        simil_index_destroy(cpu);
        free(base);
        free(q);
    }
}

int main(void)
{
    sml_test_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_sizes_and_k), cmocka_unit_test(test_dims),
        cmocka_unit_test(test_tiny_bases),        cmocka_unit_test(test_many_slices),
        cmocka_unit_test(test_bound_failures),    cmocka_unit_test(test_device_memory),
        cmocka_unit_test(test_small_path_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
