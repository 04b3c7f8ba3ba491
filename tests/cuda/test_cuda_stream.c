/* test_cuda_stream.c: streaming data through the GPU.  The device generator
 * against simil_generate, bit for bit (rows past 2^32 elements too); the
 * exact search of a source on the GPU (chunks uploaded through the copier,
 * or generated on the device) against the float64 reference and against the
 * CPU; and the add of a source to a GPU IVF-PQ index against adding the same
 * rows at once. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "core/file_io.h"
#include "cuda/cuda_backend.h"
#include "index/index_internal.h"
#include "util/test_util.h"

static const double rel_tol = 1e-4;

static void check_generator(const char *kind, int64_t first, int64_t n, int64_t dim,
                            uint64_t seed)
{
    sml_backend *b;
    SML_ASSERT_OK(sml_device_open("gpu", &b));
    void *gen, *mem;
    const size_t bytes = sizeof(float) * (size_t)(n * dim);
    SML_ASSERT_OK(b->ops->generator_open(b, kind, dim, seed, &gen));
    SML_ASSERT_OK(b->ops->mem_alloc(b, bytes, &mem));
    SML_ASSERT_OK(b->ops->generator_fill(b, gen, first, n, mem));
    float *got = sml_test_malloc(bytes), *want = sml_test_malloc(bytes);
    SML_ASSERT_OK(b->ops->mem_download(b, got, mem, bytes));
    SML_ASSERT_OK(simil_generate(kind, first, n, dim, seed, want));
    for (int64_t e = 0; e < n * dim; e++)
        if (memcmp(&got[e], &want[e], 4) != 0)
            fail_msg("GPU %s(first %lld, n %lld, dim %lld, seed %llu): row %lld col %lld is "
                     "%.9g, simil_generate gives %.9g",
                     kind, (long long)first, (long long)n, (long long)dim,
                     (unsigned long long)seed, (long long)(first + e / dim), (long long)(e % dim),
                     got[e], want[e]);
    b->ops->mem_free(b, mem);
    b->ops->generator_close(b, gen);
    sml_backend_close(b);
    free(got);
    free(want);
}

static void test_generator(void **state)
{
    (void)state;
    const int64_t n = sml_test_quick() ? 2000 : 200000;
    check_generator("mix", 0, n, 96, 11);
    check_generator("mix", 999999000, 3000, 96, 11);   /* row * dim past 2^32 */
    check_generator("mix", 1, 1, 96, 11);              /* glibc's odd value (test_synthetic) */
    check_generator("mix", 5, 777, 7, 12);
    check_generator("uniform", 0, n, 128, 1);
    check_generator("uniform", 123456789, 1000, 33, 2);
}

/* Search of a source on the GPU against the float64 reference. */
static void check_search(const char *what, simil_source *s, const float *base, int64_t nq,
                         int64_t k, int64_t chunk, simil_metric metric, int want_generated)
{
    const int64_t n = simil_source_rows(s), dim = simil_source_dim(s);
    char context[200];
    snprintf(context, sizeof context, "%s gpu %s n=%lld dim=%lld nq=%lld k=%lld chunk=%lld",
             what, simil_metric_name(metric), (long long)n, (long long)dim, (long long)nq,
             (long long)k, (long long)chunk);
    float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
    sml_test_fill_uniform(q, nq * dim, (uint64_t)(n + k), -1, 1);
    float *d = sml_test_malloc(sizeof(float) * (size_t)(nq * k));
    int64_t *l = sml_test_malloc(sizeof(int64_t) * (size_t)(nq * k));
    simil_stream_params p;
    simil_stream_params_init(&p);
    p.chunk_rows = chunk;
    p.device = "gpu";
    simil_stream_stats st;
    SML_ASSERT_OK(simil_source_search(s, metric, nq, q, k, &p, d, l, &st));
    if (st.generated_on_device != want_generated)
        fail_msg("%s: generated on the device: %d, expected %d", context, st.generated_on_device,
                 want_generated);
    const uint64_t uploaded = want_generated ? 0 : sizeof(float) * (uint64_t)(n * dim);
    if (st.bytes_uploaded != uploaded)
        fail_msg("%s: %llu bytes uploaded, expected %llu", context,
                 (unsigned long long)st.bytes_uploaded, (unsigned long long)uploaded);
    float *bn = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    memcpy(bn, base, sizeof(float) * (size_t)(n * dim));
    sml_test_check_knn_metric(context, bn, n, q, nq, dim, k, metric, d, l, rel_tol);
    free(bn);
    free(q);
    free(d);
    free(l);
}

/* base[row * dim + col] = value makes the stream search of s (chunks of
 * chunk rows) fail, naming the chunk's rows, the row by its number and
 * `fault`; the base is restored after. */
static void check_bad_row(const char *what, simil_source *s, float *base, int64_t chunk,
                          int64_t row, int64_t col, float value, simil_metric metric,
                          const char *fault)
{
    const int64_t n = simil_source_rows(s), dim = simil_source_dim(s);
    const float was = base[row * dim + col];
    base[row * dim + col] = value;
    float *q = sml_test_malloc(sizeof(float) * (size_t)dim), d[10];
    memset(q, 0, sizeof(float) * (size_t)dim);
    int64_t l[10];
    simil_stream_params p;
    simil_stream_params_init(&p);
    p.chunk_rows = chunk;
    p.device = "gpu";
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_source_search(s, metric, 1, q, 10, &p, d, l, NULL));
    const int64_t first = row / chunk * chunk, end = first + chunk < n ? first + chunk : n;
    char rows[96], vector[64];
    snprintf(rows, sizeof rows, "rows [%lld, %lld) of the base", (long long)first, (long long)end);
    snprintf(vector, sizeof vector, "vector %lld has", (long long)row);
    const char *msg = simil_last_error();
    if (strstr(msg, rows) == NULL || strstr(msg, vector) == NULL || strstr(msg, fault) == NULL)
        fail_msg("%s, %s, row %lld = %g: '%s' does not say '%s', '%s' and '%s'", what,
                 simil_metric_name(metric), (long long)row, value, msg, rows, vector, fault);
    base[row * dim + col] = was;
    free(q);
}

/* Rows are checked on the device as they land (copier_check), on the host
 * where they are normalized: either way the first bad row is named. */
static void check_bad_rows(const char *what, simil_source *s, float *base, int64_t chunk)
{
    const int64_t n = simil_source_rows(s);
    check_bad_row(what, s, base, chunk, n - 2, 3, NAN, SIMIL_METRIC_L2, "NaN in component 3");
    check_bad_row(what, s, base, chunk, 2 * chunk + 5, 0, INFINITY, SIMIL_METRIC_IP,
                  "Inf in component 0");
    check_bad_row(what, s, base, chunk, chunk + 1, 7, 1e19f, SIMIL_METRIC_L2,
                  "squared norm above");
    check_bad_row(what, s, base, chunk, 0, 39, -INFINITY, SIMIL_METRIC_COSINE,
                  "Inf in component 39");
    /* two bad rows in one chunk: the first is named */
    const float was = base[(chunk + 9) * simil_source_dim(s)];
    base[(chunk + 9) * simil_source_dim(s)] = NAN;
    check_bad_row(what, s, base, chunk, chunk + 3, 1, NAN, SIMIL_METRIC_L2, "NaN");
    base[(chunk + 9) * simil_source_dim(s)] = was;
}

static void test_search_memory(void **state)
{
    (void)state;
    const int64_t n = sml_test_quick() ? 5000 : 50000, dim = 40;
    float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    sml_test_fill_uniform(base, n * dim, 7, -1, 1);
    simil_source *s;
    SML_ASSERT_OK(simil_source_from_memory(&s, n, dim, base));
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP, SIMIL_METRIC_COSINE};
    for (int m = 0; m < 3; m++) {
        check_search("memory", s, base, 50, 10, n / 7, metrics[m], 0);  /* 8 chunks, the last short */
        check_search("memory", s, base, 20, 100, n, metrics[m], 0);     /* one chunk */
        check_search("memory", s, base, 5, 300, 200, metrics[m], 0);    /* k past a chunk */
    }
    check_bad_rows("memory", s, base, n / 7);
    simil_source_close(s);
    free(base);
    if (sml_test_quick()) return;
    /* chunks of 5M rows of 8 floats: three pieces of upload each (64, 64
     * and 32 MiB), each queued while the one before is in flight; seven
     * pieces in all go round the ring of four pinned pieces twice */
    const int64_t big = 12000000, d8 = 8;
    base = sml_test_malloc(sizeof(float) * (size_t)(big * d8));
    sml_test_fill_uniform(base, big * d8, 8, -1, 1);
    SML_ASSERT_OK(simil_source_from_memory(&s, big, d8, base));
    check_search("memory, pieces", s, base, 20, 10, 5000000, SIMIL_METRIC_L2, 0);
    simil_source_close(s);
    free(base);
}

/* Rows in pinned memory go up from where they lie (cosine still through
 * the ring, since it normalizes them); the results are the same, and a NaN
 * among them is still found. */
static void test_search_pinned(void **state)
{
    (void)state;
    sml_backend *b;
    SML_ASSERT_OK(sml_device_open("gpu", &b));
    const int64_t n = sml_test_quick() ? 5000 : 50000, dim = 40;
    const size_t bytes = sizeof(float) * (size_t)(n * dim);
    float *base, *plain = sml_test_malloc(bytes);
    assert_int_equal(cudaMallocHost((void **)&base, bytes), cudaSuccess);
    assert_true(b->ops->host_pinned(b, base, bytes));
    assert_true(b->ops->host_pinned(b, base + dim, bytes - sizeof(float) * dim));
    assert_false(b->ops->host_pinned(b, plain, bytes));
    sml_backend_close(b);
    sml_test_fill_uniform(base, n * dim, 7, -1, 1);
    simil_source *s, *slice;
    SML_ASSERT_OK(simil_source_from_memory(&s, n, dim, base));
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP, SIMIL_METRIC_COSINE};
    for (int m = 0; m < 3; m++) {
        check_search("pinned", s, base, 50, 10, n / 7, metrics[m], 0);
        check_search("pinned", s, base, 5, 300, 200, metrics[m], 0);
    }
    SML_ASSERT_OK(simil_source_slice(&slice, s, n / 3, -1));
    check_search("pinned slice", slice, base + n / 3 * dim, 30, 10, n / 5, SIMIL_METRIC_L2, 0);
    simil_source_close(slice);
    check_bad_rows("pinned", s, base, n / 7);
    simil_source_close(s);
    cudaFreeHost(base);
    free(plain);
}

static void test_search_generator(void **state)
{
    (void)state;
    const int64_t n = sml_test_quick() ? 6000 : 60000, dim = 96;
    char spec[64];
    snprintf(spec, sizeof spec, "gen:mix:%lld:96:11", (long long)n);
    float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 11, base));
    simil_source *s, *slice;
    SML_ASSERT_OK(simil_source_open(&s, spec));
    check_search("generator", s, base, 40, 100, n / 3 + 1, SIMIL_METRIC_L2, 1);
    check_search("generator", s, base, 40, 10, n / 4, SIMIL_METRIC_IP, 1);
    /* cosine normalizes each row on the host: generated there, then uploaded */
    check_search("generator", s, base, 40, 10, n / 4, SIMIL_METRIC_COSINE, 0);
    SML_ASSERT_OK(simil_source_slice(&slice, s, n / 2, -1));
    check_search("generator slice", slice, base + n / 2 * dim, 30, 10, n / 5, SIMIL_METRIC_L2,
                 1);
    simil_source_close(slice);
    simil_source_close(s);
    free(base);
}

static uint64_t free_bytes;
static uint64_t fake_free_space(const char *folder)
{
    (void)folder;
    return free_bytes;
}

/* A source added to a GPU IVF-PQ index (generated on the device, encoded,
 * then placed at the lists' final sizes) searches like the same rows added
 * at once (ties in the coarse assignment may differ between batch shapes:
 * 99% of the ids must agree).  Saved, with the disk space checked against
 * the dry run's exact size, and loaded back, it gives the same results. */
static void test_add_source(void **state)
{
    (void)state;
    const int64_t n = sml_test_quick() ? 20000 : 200000, dim = 96, nq = 200, k = 10;
    char spec[64];
    snprintf(spec, sizeof spec, "gen:mix:%lld:96:11", (long long)n);
    float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim));
    float *q = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
    SML_ASSERT_OK(simil_generate("mix", 0, n, dim, 11, base));
    SML_ASSERT_OK(simil_generate("mix", 0, nq, dim, 12, q));
    simil_source *s;
    SML_ASSERT_OK(simil_source_open(&s, spec));
    simil_index *streamed, *whole;
    SML_ASSERT_OK(simil_index_create(&streamed, dim, "IVF256,PQ16", SIMIL_METRIC_L2, "gpu"));
    SML_ASSERT_OK(simil_index_create(&whole, dim, "IVF256,PQ16", SIMIL_METRIC_L2, "gpu"));
    SML_ASSERT_OK(simil_index_train_source(streamed, s, 20000));
    /* the same sample: 256 runs of consecutive rows */
    SML_ASSERT_OK(simil_index_train_source(whole, s, 20000));
    simil_stream_params p;
    simil_stream_params_init(&p);
    p.chunk_rows = n / 6 + 1;
    SML_ASSERT_OK(simil_index_add_source(streamed, s, &p));
    SML_ASSERT_OK(simil_index_add(whole, n, base, NULL));
    assert_int_equal(simil_index_size(streamed), n);
    float *d1 = sml_test_malloc(sizeof(float) * (size_t)(nq * k)), *d2 = sml_test_malloc(sizeof(float) * (size_t)(nq * k));
    int64_t *l1 = sml_test_malloc(sizeof(int64_t) * (size_t)(nq * k)), *l2 = sml_test_malloc(sizeof(int64_t) * (size_t)(nq * k));
    simil_search_params *sp;
    SML_ASSERT_OK(simil_search_params_create(&sp));
    SML_ASSERT_OK(simil_search_params_set_int(sp, "nprobe", 8));
    SML_ASSERT_OK(simil_index_search(streamed, nq, q, k, sp, d1, l1));
    SML_ASSERT_OK(simil_index_search(whole, nq, q, k, sp, d2, l2));
    int64_t same = 0;
    for (int64_t i = 0; i < nq * k; i++) same += l1[i] == l2[i];
    if (same < nq * k * 99 / 100)
        fail_msg("GPU add_source against add n=%lld: %lld of %lld result ids agree",
                 (long long)n, (long long)same, (long long)(nq * k));
    const char *path = sml_test_path("streamed.simil");
    SML_ASSERT_OK(simil_index_save(streamed, path));
    struct stat stat_buf;
    assert_int_equal(stat(path, &stat_buf), 0);
    remove(path);
    sml_file_free_space_hook(fake_free_space);
    free_bytes = (uint64_t)stat_buf.st_size - 1;
    SML_ASSERT_STATUS(SIMIL_ERR_IO, simil_index_save(streamed, path));
    free_bytes = (uint64_t)stat_buf.st_size;
    SML_ASSERT_OK(simil_index_save(streamed, path));
    sml_file_free_space_hook(NULL);
    simil_index *loaded;
    SML_ASSERT_OK(simil_index_load(&loaded, path, "gpu"));
    SML_ASSERT_OK(simil_index_search(loaded, nq, q, k, sp, d2, l2));
    simil_search_params_destroy(sp);
    assert_memory_equal(l1, l2, sizeof(int64_t) * (size_t)(nq * k));
    /* a NaN in the fourth chunk of rows in (pageable) memory, found on the
     * device: the add fails, naming the row, and the index keeps its rows */
    simil_source *mem;
    base[(3 * p.chunk_rows + 17) * dim + 5] = NAN;
    SML_ASSERT_OK(simil_source_from_memory(&mem, n, dim, base));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add_source(streamed, mem, &p));
    char vector[64];
    snprintf(vector, sizeof vector, "vector %lld has NaN", (long long)(3 * p.chunk_rows + 17));
    if (strstr(simil_last_error(), vector) == NULL)
        fail_msg("GPU add_source of a NaN: '%s' does not say '%s'", simil_last_error(), vector);
    assert_int_equal(simil_index_size(streamed), n);
    simil_source_close(mem);
    simil_index_destroy(loaded);
    simil_index_destroy(streamed);
    simil_index_destroy(whole);
    simil_source_close(s);
    free(base);
    free(q);
    free(d1);
    free(d2);
    free(l1);
    free(l2);
}

int main(void)
{
    sml_test_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generator),
        cmocka_unit_test(test_search_memory),
        cmocka_unit_test(test_search_pinned),
        cmocka_unit_test(test_search_generator),
        cmocka_unit_test(test_add_source),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
