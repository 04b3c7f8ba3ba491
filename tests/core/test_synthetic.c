/* test_synthetic.c: the generators of docs/datasets.md (src/core/synthetic.c).
 *
 * Exact bit patterns come from an independent Python implementation (below),
 * which rounds to float32 with struct and calls the C library's logf, cosf
 * and sqrtf through ctypes, as the definition says gauss uses them:
 *
 *   import struct, ctypes
 *   libm = ctypes.CDLL("libm.so.6")
 *   for fn in ("logf", "cosf", "sqrtf"):
 *       getattr(libm, fn).restype = ctypes.c_float
 *       getattr(libm, fn).argtypes = [ctypes.c_float]
 *   M = (1 << 64) - 1
 *   def f32(x): return struct.unpack('<f', struct.pack('<f', x))[0]
 *   def bits(x): return struct.unpack('<I', struct.pack('<f', x))[0]
 *   def sm64(x):
 *       x = (x + 0x9e3779b97f4a7c15) & M
 *       x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M
 *       x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M
 *       return x ^ (x >> 31)
 *   def u01(h): return f32(f32((h >> 40) + 0.5) / 16777216.0)
 *   def gauss(s):
 *       a = u01(sm64(s)); b = u01(sm64(s ^ 0x5555555555555555))
 *       r = libm.sqrtf(f32(-2.0 * libm.logf(a)))
 *       return f32(r * libm.cosf(f32(f32(6.2831853) * b)))
 *   def uniform(i, j, d, seed): return u01(sm64((seed * 0x100000001b3 + i * d + j) & M))
 *   def mix(i, j, d, seed):
 *       c = sm64(seed ^ ((i * 0x632be59bd9b4e019) & M)) % 1024
 *       return f32(gauss((0xabcdef + c * d + j) & M)
 *                  + f32(0.5 * gauss((seed * 0x100000001b3 + i * d + j + 7) & M)))
 *   print(hex(bits(mix(1, 17, 96, 11))))
 *
 * mix(1, 17, 96, 11) is one of the ~1.5% of values where glibc's logf/cosf
 * differ from correctly rounded ones (that gives 0x3dec1fa5): the generators
 * are bit-exact with respect to the C library's float functions. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/synthetic.h"
#include "util/test_util.h"

typedef struct {
    const char *kind;
    int64_t row, col, dim;
    uint64_t seed;
    uint32_t bits;
} expected_value;

static const expected_value expected[] = {
    {"uniform", 0, 0, 128, 0x1ull, 0x3effdc77u},       /* 0.499728888 */
    {"uniform", 0, 1, 128, 0x1ull, 0x3f579ff2u},       /* 0.842284322 */
    {"uniform", 999999, 127, 128, 0x1ull, 0x3ea5df7bu}, /* 0.323970646 */
    {"uniform", 5, 3, 96, 0x2ull, 0x3f487930u},         /* 0.783099174 */
    {"uniform", 123456, 50, 96, 0xffffffffffffffffull, 0x3e0cf226u}, /* 0.137642473 */
    {"mix", 0, 0, 96, 0xbull, 0xbf1bcf03u},       /* -0.608627498 */
    {"mix", 1, 5, 96, 0xbull, 0xbefa7299u},       /* -0.489155561 */
    {"mix", 1, 17, 96, 0xbull, 0x3dec1fa4u},      /* 0.115294725 */
    {"mix", 9999999, 95, 96, 0xbull, 0x3f120a83u}, /* 0.570472896 */
    {"mix", 42, 17, 96, 0xdull, 0xbd9a3320u},     /* -0.0752928257 */
    {"mix", 7, 2, 3, 0xcull, 0x3c545550u},        /* 0.0129597932 */
};

static void test_exact_values(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof expected / sizeof expected[0]; k++) {
        const expected_value *e = &expected[k];
        float *row = sml_test_malloc(sizeof(float) * (size_t)e->dim);
        SML_ASSERT_OK(simil_generate(e->kind, e->row, 1, e->dim, e->seed, row));
        uint32_t got;
        memcpy(&got, &row[e->col], 4);
        if (got != e->bits)
            fail_msg("%s(dim %lld, seed %llu) row %lld col %lld: 0x%08x (%.9g), expected 0x%08x",
                     e->kind, (long long)e->dim, (unsigned long long)e->seed, (long long)e->row,
                     (long long)e->col, got, row[e->col], e->bits);
        free(row);
    }
}

/* Generating [0, n) at once equals generating it in uneven pieces. */
static void check_chunks(const char *kind, int64_t n, int64_t dim, uint64_t seed)
{
    size_t count = (size_t)(n * dim);
    float *whole = sml_test_malloc(count * sizeof(float));
    float *parts = sml_test_malloc(count * sizeof(float));
    SML_ASSERT_OK(simil_generate(kind, 0, n, dim, seed, whole));
    const int64_t sizes[] = {1, 7, 700, 333, 4096};
    int64_t at = 0;
    for (int k = 0; at < n; k = (k + 1) % 5) {
        int64_t len = sizes[k] < n - at ? sizes[k] : n - at;
        SML_ASSERT_OK(simil_generate(kind, at, len, dim, seed, parts + at * dim));
        at += len;
    }
    if (memcmp(whole, parts, count * sizeof(float)) != 0)
        fail_msg("%s n=%lld dim=%lld seed=%llu: chunked generation differs", kind, (long long)n,
                 (long long)dim, (unsigned long long)seed);
    free(whole);
    free(parts);
}

static void test_chunks(void **state)
{
    (void)state;
    check_chunks("uniform", 3000, 13, 1);
    check_chunks("mix", 9000, 7, 11);   /* whole: centre table; pieces: direct */
    check_chunks("mix", 50, 96, 12);
}

static void check_threads(const char *kind, int64_t n, int64_t dim, uint64_t seed)
{
    size_t count = (size_t)(n * dim);
    float *one = sml_test_malloc(count * sizeof(float));
    float *many = sml_test_malloc(count * sizeof(float));
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    SML_ASSERT_OK(simil_generate(kind, 17, n, dim, seed, one));
    omp_set_num_threads(5);
    SML_ASSERT_OK(simil_generate(kind, 17, n, dim, seed, many));
    omp_set_num_threads(saved);
    if (memcmp(one, many, count * sizeof(float)) != 0)
        fail_msg("%s n=%lld dim=%lld seed=%llu: 1 and 5 threads differ", kind, (long long)n,
                 (long long)dim, (unsigned long long)seed);
    free(one);
    free(many);
}

static void test_threads(void **state)
{
    (void)state;
    check_threads("uniform", 10000, 33, 2);
    check_threads("mix", 10000, 33, 13);
    check_threads("mix", 100, 5, 13);
}

/* Loose statistics, to catch a formula that is exact but wrong everywhere
 * the table above does not look. */
static void test_statistics(void **state)
{
    (void)state;
    enum { N = 20000, D = 16 };
    float *x = sml_test_malloc(sizeof(float) * N * D);
    SML_ASSERT_OK(simil_generate("uniform", 0, N, D, 1, x));
    double mean = 0;
    for (int k = 0; k < N * D; k++) {
        assert_true(x[k] > 0.0f && x[k] <= 1.0f);
        mean += x[k];
    }
    mean /= N * D;
    if (mean < 0.495 || mean > 0.505) fail_msg("uniform mean %g, expected 0.5 +- 0.005", mean);
    SML_ASSERT_OK(simil_generate("mix", 0, N, D, 11, x));
    double sum = 0, sq = 0;
    for (int k = 0; k < N * D; k++) {
        sum += x[k];
        sq += (double)x[k] * x[k];
    }
    double var = sq / (N * D) - (sum / (N * D)) * (sum / (N * D));
    /* centre N(0,1) plus 0.5 N(0,1): variance about 1.25 */
    if (var < 1.15 || var > 1.35) fail_msg("mix variance %g, expected 1.25 +- 0.1", var);
    free(x);
}

/* The GPU generator's recipe (core/synthetic.h): mix from the Box-Muller
 * tables and the centre table, with the float steps of the definition, equals
 * simil_generate bit for bit, including rows whose elements hit glibc's
 * not-correctly-rounded logf and cosf values (row 1, column 17). */
static void test_tables(void **state)
{
    (void)state;
    enum { N = 300, D = 96 };
    const uint64_t seed = 11, first = 999999000;
    float *radius, *cosine, *centres;
    SML_ASSERT_OK(sml_gauss_tables(&radius, &cosine));
    SML_ASSERT_OK(sml_mix_centres(D, &centres));
    float *want = sml_test_malloc(sizeof(float) * N * D);
    SML_ASSERT_OK(simil_generate("mix", first, N, D, seed, want));
    for (uint64_t r = 0; r < N; r++) {
        const uint64_t i = first + r, c = sml_mix_centre(seed, i);
        for (uint64_t j = 0; j < D; j++) {
            const uint64_t s = sml_gen_base(seed) + i * D + j + 7;
            const float g = radius[sml_gauss_word_radius(s) >> 40] *
                            cosine[sml_gauss_word_angle(s) >> 40];
            const float got = centres[c * D + j] + 0.5f * g;
            if (memcmp(&got, &want[r * D + j], 4) != 0)
                fail_msg("mix seed %llu row %llu col %llu: tables give %.9g, simil_generate %.9g",
                         (unsigned long long)seed, (unsigned long long)i, (unsigned long long)j,
                         got, want[r * D + j]);
        }
    }
    /* the value of test_exact_values that glibc rounds differently */
    float row[D];
    SML_ASSERT_OK(simil_generate("mix", 1, 1, D, 11, row));
    const uint64_t s = sml_gen_base(11) + 1 * D + 17 + 7, c = sml_mix_centre(11, 1);
    const float got = centres[c * D + 17] +
                      0.5f * (radius[sml_gauss_word_radius(s) >> 40] *
                              cosine[sml_gauss_word_angle(s) >> 40]);
    assert_memory_equal(&got, &row[17], 4);
    free(want);
    sml_free(radius);
    sml_free(cosine);
    sml_free(centres);
}

static void test_errors(void **state)
{
    (void)state;
    float x[4];
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_generate("gauss", 0, 1, 4, 1, x));
    assert_non_null(strstr(simil_last_error(), "uniform"));
    assert_non_null(strstr(simil_last_error(), "mix"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_generate(NULL, 0, 1, 4, 1, x));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_generate("mix", -1, 1, 4, 1, x));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_generate("mix", 0, -1, 4, 1, x));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_generate("mix", 0, 1, -4, 1, x));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_generate("mix", 0, 1, 4, 1, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_generate("uniform", INT64_MAX, 2, 4, 1, x));
    SML_ASSERT_OK(simil_generate("mix", 0, 0, 4, 1, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_values),
        cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_statistics),
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
