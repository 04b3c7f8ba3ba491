/* test_cuda_select.c: simil_select_k on GPU memory against a full sort and
 * against the CPU selection: WarpSelect (many rows), BlockSelect (few long
 * rows), radix selection (k > 2048), ties, NaN, largest-first, k past cols. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_backend.h"
#include "util/test_util.h"

typedef struct {
    float key;
    int64_t idx;
} pair;

static int pair_cmp(const void *pa, const void *pb)
{
    const pair *a = pa, *b = pb;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

enum pattern { UNIFORM, FEW_VALUES, WITH_NAN, DESCENDING };

static void fill(float *v, int64_t count, int64_t cols, enum pattern p, uint64_t seed)
{
    sml_test_fill_uniform(v, count, seed, -1000, 1000);
    for (int64_t i = 0; i < count; i++) {
        if (p == FEW_VALUES) v[i] = floorf(v[i] / 400.0f);
        if (p == WITH_NAN && i % 7 == 3) v[i] = NAN;
        if (p == DESCENDING) v[i] = (float)(cols - i % cols);
    }
}

static void *to_device(const void *host, size_t bytes)
{
    void *d;
    assert_int_equal(cudaMalloc(&d, bytes ? bytes : 1), cudaSuccess);
    if (bytes) assert_int_equal(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    return d;
}

static void check(int64_t rows, int64_t cols, int64_t k, int largest, enum pattern p)
{
    char context[128];
    snprintf(context, sizeof context, "rows=%lld cols=%lld k=%lld largest=%d pattern=%d",
             (long long)rows, (long long)cols, (long long)k, largest, (int)p);
    size_t n_in = (size_t)(rows * cols), n_out = (size_t)(rows * k);
    float *v = sml_test_malloc(sizeof(float) * n_in);
    fill(v, (int64_t)n_in, cols, p, (uint64_t)(rows * 31 + cols * 7 + k));
    float *d_v = to_device(v, sizeof(float) * n_in);
    float *d_out;
    int64_t *d_idx;
    assert_int_equal(cudaMalloc((void **)&d_out, sizeof(float) * n_out), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&d_idx, sizeof(int64_t) * n_out), cudaSuccess);
    SML_ASSERT_OK(simil_select_k(rows, cols, d_v, k, largest, d_out, d_idx));
    float *got = sml_test_malloc(sizeof(float) * n_out), *cpu = sml_test_malloc(sizeof(float) * n_out);
    int64_t *got_i = sml_test_malloc(sizeof(int64_t) * n_out);
    int64_t *cpu_i = sml_test_malloc(sizeof(int64_t) * n_out);
    assert_int_equal(cudaMemcpy(got, d_out, sizeof(float) * n_out, cudaMemcpyDeviceToHost), 0);
    assert_int_equal(cudaMemcpy(got_i, d_idx, sizeof(int64_t) * n_out, cudaMemcpyDeviceToHost), 0);
    SML_ASSERT_OK(simil_select_k(rows, cols, v, k, largest, cpu, cpu_i));
    pair *sorted = sml_test_malloc(sizeof(pair) * (size_t)(cols + 1));
    for (int64_t r = 0; r < rows; r++) {
        /* the reference: sort (key, index) with NaN as +inf */
        for (int64_t j = 0; j < cols; j++) {
            float key = largest ? -v[r * cols + j] : v[r * cols + j];
            sorted[j] = (pair){isnan(key) ? INFINITY : key, j};
        }
        qsort(sorted, (size_t)cols, sizeof(pair), pair_cmp);
        for (int64_t j = 0; j < k; j++) {
            float want = j < cols ? (largest ? -sorted[j].key : sorted[j].key)
                                  : (largest ? -INFINITY : INFINITY);
            int64_t want_i = j < cols ? sorted[j].idx : -1;
            size_t o = (size_t)(r * k + j);
            if (got_i[o] != want_i || !(got[o] == want || (isnan(got[o]) && isnan(want))))
                fail_msg("%s row %lld rank %lld: GPU (%g, %lld), sort (%g, %lld)", context,
                         (long long)r, (long long)j, got[o], (long long)got_i[o], want,
                         (long long)want_i);
            if (cpu_i[o] != want_i)
                fail_msg("%s row %lld rank %lld: CPU index %lld, sort %lld", context,
                         (long long)r, (long long)j, (long long)cpu_i[o], (long long)want_i);
        }
    }
    free(sorted);
    free(got);
    free(cpu);
    free(got_i);
    free(cpu_i);
    free(v);
    cudaFree(d_v);
    cudaFree(d_out);
    cudaFree(d_idx);
}

/* Many rows, every queue size, with each kernel forced in turn (1 WarpSelect,
 * 2 BlockSelect) and with the automatic choice (0). */
static void test_many_rows(void **state)
{
    (void)state;
    const int64_t ks[] = {1, 7, 32, 33, 100, 128, 129, 1024, 2048};
    const int64_t rows = sml_test_quick() ? 70 : 1200;
    for (int kernel = 0; kernel <= 2; kernel++) {
        sml_cuda_select_force(kernel);
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            check(rows, 3000, ks[i], 0, UNIFORM);
            check(rows, 2500, ks[i], 1, FEW_VALUES);
        }
        check(777, 1000, 100, 0, WITH_NAN);
        check(512, 4096, 256, 0, DESCENDING);
        check(3000, 31, 7, 0, UNIFORM);  /* rows shorter than a warp's pass */
        check(100, 5, 40, 0, UNIFORM);   /* k past cols */
        check(300, 1001, 50, 0, UNIFORM); /* rows not a multiple of 4: scalar loads */
    }
    sml_cuda_select_force(0);
}

/* More long rows than the GPU holds warps at once (a second wave; the
 * benchmark's case).  Too big for the sort reference: the GPU must equal the
 * CPU backend exactly. */
static void test_rows_past_one_wave(void **state)
{
    (void)state;
    if (sml_test_quick()) {
        printf("skipped in quick mode (1.4 GB)\n");
        return;
    }
    const int64_t rows = 9000, cols = 40000, ks[2] = {10, 100};
    const size_t n_in = (size_t)(rows * cols);
    float *v = sml_test_malloc(sizeof(float) * n_in);
    fill(v, (int64_t)n_in, cols, FEW_VALUES, 77); /* ties everywhere: order by index */
    float *d_v = to_device(v, sizeof(float) * n_in);
    for (int i = 0; i < 2; i++) {
        const size_t n_out = (size_t)(rows * ks[i]);
        float *d_out, *got = sml_test_malloc(sizeof(float) * n_out);
        float *cpu = sml_test_malloc(sizeof(float) * n_out);
        int64_t *d_idx, *got_i = sml_test_malloc(sizeof(int64_t) * n_out);
        int64_t *cpu_i = sml_test_malloc(sizeof(int64_t) * n_out);
        assert_int_equal(cudaMalloc((void **)&d_out, sizeof(float) * n_out), cudaSuccess);
        assert_int_equal(cudaMalloc((void **)&d_idx, sizeof(int64_t) * n_out), cudaSuccess);
        SML_ASSERT_OK(simil_select_k(rows, cols, d_v, ks[i], 0, d_out, d_idx));
        assert_int_equal(cudaMemcpy(got, d_out, sizeof(float) * n_out, cudaMemcpyDeviceToHost),
                         0);
        assert_int_equal(
            cudaMemcpy(got_i, d_idx, sizeof(int64_t) * n_out, cudaMemcpyDeviceToHost), 0);
        SML_ASSERT_OK(simil_select_k(rows, cols, v, ks[i], 0, cpu, cpu_i));
        assert_memory_equal(got_i, cpu_i, sizeof(int64_t) * n_out);
        assert_memory_equal(got, cpu, sizeof(float) * n_out);
        free(got);
        free(cpu);
        free(got_i);
        free(cpu_i);
        cudaFree(d_out);
        cudaFree(d_idx);
    }
    cudaFree(d_v);
    free(v);
}

/* Few long rows (BlockSelect's case), each kernel again. */
static void test_few_long_rows(void **state)
{
    (void)state;
    const int64_t ks[] = {1, 10, 33, 128, 500, 1024, 2048};
    const int64_t cols = sml_test_quick() ? 40000 : 200000;
    for (int kernel = 0; kernel <= 2; kernel++) {
        sml_cuda_select_force(kernel);
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            check(3, cols, ks[i], 0, UNIFORM);
            check(1, cols / 2, ks[i], 1, FEW_VALUES);
        }
        check(2, 50000, 64, 0, WITH_NAN);
        check(4, 65536, 2048, 0, DESCENDING);
    }
    sml_cuda_select_force(0);
}

static void test_radix_select(void **state)
{
    (void)state;
    const int64_t ks[] = {2049, 5000, 16384};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        check(20, 100000, ks[i], 0, UNIFORM);
        check(7, 40000, ks[i], 1, FEW_VALUES);
    }
    check(5, 30000, 30000, 0, UNIFORM); /* k = cols */
    check(3, 10000, 12000, 0, WITH_NAN); /* k past cols */
    check(9, 50000, 3000, 0, DESCENDING);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    float v[4] = {1, 2, 3, 4}, out[2];
    int64_t idx[2];
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_select_k(1, 4, v, 0, 0, out, idx));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_select_k(-1, 4, v, 1, 0, out, idx));
    float *d_v = to_device(v, sizeof v);
    /* mixing host and device memory is refused */
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_select_k(1, 4, d_v, 2, 0, out, idx));
    cudaFree(d_v);
}

int main(void)
{
    sml_test_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_rows),
        cmocka_unit_test(test_few_long_rows),
        cmocka_unit_test(test_rows_past_one_wave),
        cmocka_unit_test(test_radix_select),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
