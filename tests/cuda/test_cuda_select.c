/* test_cuda_select.c: simil_select_k on GPU memory against a full sort and
 * against the CPU selection (the oracle), with each k-selection design forced
 * in turn (sml_cuda_select_force): the buffered WarpSelect, the threshold
 * BlockSelect, the paper's WarpSelect and BlockSelect, the buffered
 * BlockSelect, at every queue size; radix selection (k > 2048); ties, NaN,
 * largest-first, k past cols, short and unaligned rows, few long rows. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_backend.h"
#include "util/test_util.h"

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

/* A design forced for the tests (0: the table's choice). */
typedef struct {
    int design, warps;
} forced;

static const forced kAuto = {0, 0};

/* Every design, the block ones with a power-of-two and an odd number of
 * warps per row. */
static const forced kDesigns[] = {
    {SML_SELECT_BUFFERED_WARP, 0}, {SML_SELECT_THRESHOLD_BLOCK, 0}, {SML_SELECT_QUEUE_WARP, 0},
    {SML_SELECT_QUEUE_BLOCK, 8},   {SML_SELECT_QUEUE_BLOCK, 3},     {SML_SELECT_BUFFERED_BLOCK, 8},
    {SML_SELECT_BUFFERED_BLOCK, 1},
};
static const size_t kDesignCount = sizeof kDesigns / sizeof kDesigns[0];

static forced current = {0, 0};

static void force(forced f)
{
    current = f;
    sml_cuda_select_force(f.design, f.warps);
}

/* GPU against the CPU backend, exactly (indices and keys), and when sorted
 * is set also against a full sort of each row. */
static void check_with(int64_t rows, int64_t cols, int64_t k, int largest, enum pattern p,
                       int sorted_ref)
{
    /* a build without SIMIL_CUDA_SELECT_ALL has only the table's kernels */
    if (!sml_cuda_select_built(current.design, k) ||
        !sml_cuda_select_built(current.design, k < cols ? k : cols))
        return;
    char context[160];
    snprintf(context, sizeof context,
             "design=%d warps=%d rows=%lld cols=%lld k=%lld largest=%d pattern=%d", current.design,
             current.warps, (long long)rows, (long long)cols, (long long)k, largest, (int)p);
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
    for (size_t o = 0; o < n_out; o++)
        if (got_i[o] != cpu_i[o] || !(got[o] == cpu[o] || (isnan(got[o]) && isnan(cpu[o]))))
            fail_msg("%s row %lld rank %lld: GPU (%g, %lld), CPU (%g, %lld)", context,
                     (long long)(o / (size_t)k), (long long)(o % (size_t)k), got[o],
                     (long long)got_i[o], cpu[o], (long long)cpu_i[o]);
    sml_test_key_pos *sorted = sml_test_malloc(sizeof *sorted * (size_t)(cols + 1));
    for (int64_t r = 0; sorted_ref && r < rows; r++) {
        /* the reference: sort (key, index) with NaN as +inf */
        for (int64_t j = 0; j < cols; j++) {
            float key = largest ? -v[r * cols + j] : v[r * cols + j];
            sorted[j] = (sml_test_key_pos){isnan(key) ? INFINITY : key, j};
        }
        sml_test_sort_key_pos(sorted, cols);
        for (int64_t j = 0; j < k; j++) {
            float want = j < cols ? (largest ? -sorted[j].key : sorted[j].key)
                                  : (largest ? -INFINITY : INFINITY);
            int64_t want_i = j < cols ? sorted[j].pos : -1;
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

static void check(int64_t rows, int64_t cols, int64_t k, int largest, enum pattern p)
{
    check_with(rows, cols, k, largest, p, 1);
}

/* Every design at every queue size of both instantiation tables (powers of
 * two for the buffered WarpSelect, kQueueSizes of select.cuh for the others),
 * at the top of each size and inside it, both orders, with ties and with
 * NaN; against the CPU. */
static void test_every_design_every_k(void **state)
{
    (void)state;
    const int64_t ks[] = {1,   10,  32,  33,  64,  65,   96,   100,  128,  129,  192,  200, 256,
                          300, 384, 500, 512, 700, 768, 1000, 1024, 1500, 1536, 2000, 2048};
    const int64_t quick_ks[] = {10, 64, 96, 100, 192, 256, 384, 512, 768, 1024, 1536, 2048};
    const int quick = sml_test_quick();
    const int64_t *k = quick ? quick_ks : ks;
    const size_t nk = quick ? sizeof quick_ks / sizeof quick_ks[0] : sizeof ks / sizeof ks[0];
    const int64_t rows = quick ? 6 : 96;
    for (size_t d = 0; d < kDesignCount; d++) {
        force(kDesigns[d]);
        for (size_t i = 0; i < nk; i++) {
            check_with(rows, 4096, k[i], 0, UNIFORM, 0);   /* aligned: 16-byte loads */
            check_with(rows, 2501, k[i], 1, FEW_VALUES, 0); /* ties; scalar loads */
            check_with(rows, 3001, k[i], 0, WITH_NAN, 0);   /* NaN as +inf, both orders */
            check_with(rows, 3001, k[i], 1, WITH_NAN, 0);
        }
    }
    force(kAuto);
}

/* Many rows, with each design forced in turn and with the table's choice. */
static void test_many_rows(void **state)
{
    (void)state;
    const int64_t ks[] = {1, 7, 32, 33, 100, 128, 129, 1024, 2048};
    const int64_t rows = sml_test_quick() ? 70 : 1200;
    for (size_t d = 0; d <= kDesignCount; d++) {
        force(d == kDesignCount ? kAuto : kDesigns[d]);
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            check_with(rows, 3000, ks[i], 0, UNIFORM, d == kDesignCount);
            check_with(rows, 2500, ks[i], 1, FEW_VALUES, d == kDesignCount);
        }
        check(777, 1000, 100, 0, WITH_NAN);
        check(512, 4096, 256, 0, DESCENDING);
        check(300, 4096, 2048, 0, DESCENDING);  /* every key a new best: merge after merge */
        check(3000, 31, 7, 0, UNIFORM);  /* rows shorter than a warp's pass */
        check(100, 5, 40, 0, UNIFORM);   /* k past cols */
        check(300, 1001, 50, 0, UNIFORM); /* rows not a multiple of 4: scalar loads */
        check(200, 300, 200, 1, WITH_NAN); /* NaN inside the k kept */
    }
    force(kAuto);
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

/* Few long rows (BlockSelect's case; simil_select_k reads each row in
 * pieces, then selects among the pieces' lists), each design again. */
static void test_few_long_rows(void **state)
{
    (void)state;
    const int64_t ks[] = {1, 10, 33, 128, 500, 1024, 2048};
    const int64_t cols = sml_test_quick() ? 40000 : 200000;
    for (size_t d = 0; d <= kDesignCount; d++) {
        force(d == kDesignCount ? kAuto : kDesigns[d]);
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            check(3, cols, ks[i], 0, UNIFORM);
            check(1, cols / 2, ks[i], 1, FEW_VALUES);
        }
        check(2, 50000, 64, 0, WITH_NAN);
        check(4, 65536, 2048, 0, DESCENDING);
    }
    force(kAuto);
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
        cmocka_unit_test(test_every_design_every_k),
        cmocka_unit_test(test_many_rows),
        cmocka_unit_test(test_few_long_rows),
        cmocka_unit_test(test_rows_past_one_wave),
        cmocka_unit_test(test_radix_select),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
