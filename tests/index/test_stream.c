/* test_stream.c: sources (files by row ranges, generators, memory,
 * callbacks, slices) and the exact search of a source in chunks
 * (simil_source_search), against the float64 reference: every metric, chunks
 * that do and do not divide the rows, k past a chunk and past the rows, an
 * empty source, bad rows and failing callbacks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/test_util.h"

static const double rel_tol = 1e-4;

/* ---- sources ---- */

static void check_rows(simil_source *s, const float *want, int64_t first, int64_t n, int64_t dim)
{
    float *got = sml_test_malloc(sizeof(float) * (size_t)(n * dim + 1));
    SML_ASSERT_OK(simil_source_read(s, first, n, got));
    if (n > 0 && memcmp(got, want + first * dim, sizeof(float) * (size_t)(n * dim)) != 0)
        fail_msg("source '%s' rows [%lld, +%lld) differ", simil_source_name(s), (long long)first,
                 (long long)n);
    free(got);
}

static void test_generator_source(void **state)
{
    (void)state;
    enum { N = 1000, D = 12 };
    float *want = sml_test_malloc(sizeof(float) * N * D);
    SML_ASSERT_OK(simil_generate("mix", 0, N, D, 11, want));
    simil_source *s, *slice;
    SML_ASSERT_OK(simil_source_open(&s, "gen:mix:1000:12:11"));
    assert_int_equal(simil_source_rows(s), N);
    assert_int_equal(simil_source_dim(s), D);
    assert_string_equal(simil_source_name(s), "gen:mix:1000:12:11");
    check_rows(s, want, 0, N, D);
    check_rows(s, want, 333, 17, D);
    SML_ASSERT_OK(simil_source_slice(&slice, s, 400, 100));
    simil_source_close(s);  /* a slice stands on its own */
    assert_int_equal(simil_source_rows(slice), 100);
    check_rows(slice, want + 400 * D, 0, 100, D);
    check_rows(slice, want + 400 * D, 90, 10, D);
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_source_read(slice, 90, 11, want));
    simil_source_close(slice);
    free(want);
}

static void test_file_sources(void **state)
{
    (void)state;
    enum { N = 257, D = 5 };
    float *x = sml_test_malloc(sizeof(float) * N * D);
    sml_test_fill_uniform(x, N * D, 3, -2, 2);
    const simil_matrix m = {N, D, SIMIL_DTYPE_FLOAT32, x};
    const char *names[] = {"base.fvecs", "base.npy"};
    for (int i = 0; i < 2; i++) {
        const char *path = sml_test_path(names[i]);
        SML_ASSERT_OK(simil_matrix_write(path, &m));
        simil_source *s;
        SML_ASSERT_OK(simil_source_open(&s, path));
        assert_int_equal(simil_source_rows(s), N);
        assert_int_equal(simil_source_dim(s), D);
        check_rows(s, x, 0, N, D);
        check_rows(s, x, 100, 57, D);
        check_rows(s, x, N, 0, D);
        simil_source_close(s);
    }
    /* uint8 rows arrive as floats */
    uint8_t bytes[6] = {0, 1, 2, 250, 251, 255};
    const simil_matrix b = {2, 3, SIMIL_DTYPE_UINT8, bytes};
    SML_ASSERT_OK(simil_matrix_write(sml_test_path("b.bvecs"), &b));
    simil_source *s;
    SML_ASSERT_OK(simil_source_open(&s, sml_test_path("b.bvecs")));
    float got[3];
    SML_ASSERT_OK(simil_source_read(s, 1, 1, got));
    assert_true(got[0] == 250.0f && got[1] == 251.0f && got[2] == 255.0f);
    simil_source_close(s);
    free(x);
}

static simil_status square_rows(void *user, int64_t first, int64_t n, float *out)
{
    const int64_t dim = *(const int64_t *)user;
    if (first + n > 1000) return SIMIL_ERR_IO;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < dim; j++) out[i * dim + j] = (float)((first + i) * (j + 1));
    return SIMIL_OK;
}

static void test_memory_and_callback_sources(void **state)
{
    (void)state;
    int64_t dim = 3;
    float x[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, got[12];
    simil_source *s, *slice;
    SML_ASSERT_OK(simil_source_from_memory(&s, 4, 3, x));
    check_rows(s, x, 1, 3, 3);
    SML_ASSERT_OK(simil_source_slice(&slice, s, 2, -1));
    check_rows(slice, x + 6, 0, 2, 3);
    simil_source_close(slice);
    simil_source_close(s);
    SML_ASSERT_OK(simil_source_from_callback(&s, 2000, dim, square_rows, &dim));
    SML_ASSERT_OK(simil_source_read(s, 7, 2, got));
    assert_true(got[0] == 7 && got[2] == 21 && got[3] == 8 && got[5] == 24);
    /* the callback's error comes back with a message naming the rows */
    SML_ASSERT_STATUS(SIMIL_ERR_IO, simil_source_read(s, 999, 2, got));
    assert_non_null(strstr(simil_last_error(), "[999, 1001)"));
    simil_source_close(s);
}

static void test_source_errors(void **state)
{
    (void)state;
    simil_source *s = (simil_source *)1;
    const char *bad[] = {"gen:mix:10:96", "gen:mix:10:0:1", "gen:gauss:10:4:1", "gen:mix:x:4:1",
                         "gen:mix:10:4:1:", "gen::10:4:1", "gen:mix:-1:4:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_source_open(&s, bad[i]));
        assert_null(s);
        assert_non_null(strstr(simil_last_error(), bad[i]));
    }
    SML_ASSERT_STATUS(SIMIL_ERR_IO, simil_source_open(&s, sml_test_path("missing.fvecs")));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_source_open(&s, "noformat.txt"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_source_open(&s, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_source_from_memory(&s, 3, 0, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_source_from_memory(&s, 3, 2, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_source_from_callback(&s, 3, 2, NULL, NULL));
    SML_ASSERT_OK(simil_source_open(&s, "gen:uniform:10:4:1"));
    simil_source *slice;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_source_slice(&slice, s, 11, 0));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_source_slice(&slice, s, 5, 6));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_source_read(s, -1, 2, NULL));
    simil_source_close(s);
    simil_source_close(NULL);
}

/* ---- streamed exact search ---- */

static void run_search(int64_t n, int64_t dim, int64_t nq, int64_t k, int64_t chunk,
                       simil_metric metric, const char *device)
{
    char context[200];
    snprintf(context, sizeof context,
             "source search %s n=%lld dim=%lld nq=%lld k=%lld chunk=%lld seed=%lld device=%s",
             simil_metric_name(metric), (long long)n, (long long)dim, (long long)nq, (long long)k,
             (long long)chunk, (long long)n + dim, device);
    float *base = sml_test_malloc(sizeof(float) * (size_t)(n * dim + 1));
    float *queries = sml_test_malloc(sizeof(float) * (size_t)(nq * dim));
    sml_test_fill_uniform(base, n * dim, (uint64_t)(n + dim), -1, 1);
    sml_test_fill_uniform(queries, nq * dim, (uint64_t)(n + dim + 1), -1, 1);
    simil_source *s;
    SML_ASSERT_OK(simil_source_from_memory(&s, n, dim, base));
    simil_stream_params p;
    simil_stream_params_init(&p);
    p.chunk_rows = chunk;
    p.device = device;
    float *d = sml_test_malloc(sizeof(float) * (size_t)(nq * k));
    int64_t *l = sml_test_malloc(sizeof(int64_t) * (size_t)(nq * k));
    simil_stream_stats stats;
    SML_ASSERT_OK(simil_source_search(s, metric, nq, queries, k, &p, d, l, &stats));
    const int64_t chunks = n == 0 ? 0 : (n + chunk - 1) / chunk;
    if (stats.chunks != chunks) fail_msg("%s: %lld chunks, expected %lld", context,
                                         (long long)stats.chunks, (long long)chunks);
    sml_test_check_knn_metric(context, base, n, queries, nq, dim, k, metric, d, l, rel_tol);
    simil_source_close(s);
    free(base);
    free(queries);
    free(d);
    free(l);
}

static void test_search_against_reference(void **state)
{
    (void)state;
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP, SIMIL_METRIC_COSINE};
    for (int m = 0; m < 3; m++) {
        run_search(1000, 17, 30, 10, 100, metrics[m], "cpu");   /* chunks divide the rows */
        run_search(1000, 17, 30, 10, 333, metrics[m], "cpu");   /* a short last chunk */
        run_search(1000, 17, 30, 50, 20, metrics[m], "cpu");    /* k past every chunk */
        run_search(90, 3, 5, 100, 40, metrics[m], "cpu");       /* k past the rows */
        run_search(500, 100, 3, 1, 1000, metrics[m], "cpu");    /* one chunk */
    }
    run_search(0, 8, 4, 5, 10, SIMIL_METRIC_L2, "cpu");         /* an empty source */
}

/* The generator source gives the same results as its rows in memory. */
static void test_search_generator(void **state)
{
    (void)state;
    enum { N = 3000, D = 24, NQ = 20, K = 10 };
    float *base = sml_test_malloc(sizeof(float) * N * D), q[NQ * D];
    SML_ASSERT_OK(simil_generate("mix", 0, N, D, 11, base));
    SML_ASSERT_OK(simil_generate("mix", 0, NQ, D, 12, q));
    simil_source *s;
    SML_ASSERT_OK(simil_source_open(&s, "gen:mix:3000:24:11"));
    simil_stream_params p;
    simil_stream_params_init(&p);
    p.chunk_rows = 700;
    p.device = "cpu";
    float d[NQ * K];
    int64_t l[NQ * K];
    SML_ASSERT_OK(simil_source_search(s, SIMIL_METRIC_L2, NQ, q, K, &p, d, l, NULL));
    sml_test_check_knn("generator source", base, N, q, NQ, D, K, SIMIL_METRIC_L2, d, l, rel_tol);
    simil_source_close(s);
    free(base);
}

static void test_search_errors(void **state)
{
    (void)state;
    int64_t dim = 4;
    float q[8] = {0}, d[10];
    int64_t l[10];
    simil_source *s;
    /* the callback fails at row 1000: the error surfaces from the reading thread */
    SML_ASSERT_OK(simil_source_from_callback(&s, 2000, dim, square_rows, &dim));
    simil_stream_params p;
    simil_stream_params_init(&p);
    p.chunk_rows = 300;
    p.device = "cpu";
    SML_ASSERT_STATUS(SIMIL_ERR_IO, simil_source_search(s, SIMIL_METRIC_L2, 2, q, 5, &p, d, l,
                                                        NULL));
    assert_non_null(strstr(simil_last_error(), "[900, 1200)"));
    simil_source_close(s);
    /* NaN in a row */
    float base[40];
    for (int i = 0; i < 40; i++) base[i] = (float)i;
    base[33] = NAN;
    SML_ASSERT_OK(simil_source_from_memory(&s, 10, 4, base));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_source_search(s, SIMIL_METRIC_L2, 2, q, 5, &p, d, l, NULL));
    assert_non_null(strstr(simil_last_error(), "NaN"));
    /* in chunks of 3 rows, row 8 is the third of [6, 9): named by its number */
    p.chunk_rows = 3;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_source_search(s, SIMIL_METRIC_L2, 2, q, 5, &p, d, l, NULL));
    if (strstr(simil_last_error(), "rows [6, 9)") == NULL ||
        strstr(simil_last_error(), "vector 8 has NaN in component 1") == NULL)
        fail_msg("NaN in row 8 of chunk [6, 9): '%s'", simil_last_error());
    p.chunk_rows = 300;
    base[33] = 1;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_source_search(s, SIMIL_METRIC_L2, 2, q, 0, &p, d, l, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_source_search(s, SIMIL_METRIC_L2, 2, NULL, 5, &p, d, l, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_source_search(NULL, SIMIL_METRIC_L2, 2, q, 5, &p, d, l, NULL));
    q[1] = INFINITY;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_source_search(s, SIMIL_METRIC_L2, 2, q, 5, &p, d, l, NULL));
    q[1] = 0;
    p.device = "tpu";
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_source_search(s, SIMIL_METRIC_L2, 2, q, 5, &p, d, l, NULL));
    SML_ASSERT_OK(simil_source_search(s, SIMIL_METRIC_L2, 0, NULL, 5, NULL, NULL, NULL, NULL));
    simil_source_close(s);
}

/* ---- training on a sample, adding a source ---- */

typedef struct {
    int64_t dim, reads, rows_read, fail_from;
    int64_t firsts[300];
} counting_source;

/* mix rows, counting the reads; rows from fail_from on fail. */
static simil_status counting_rows(void *user, int64_t first, int64_t n, float *out)
{
    counting_source *c = user;
    if (first + n > c->fail_from) return SIMIL_ERR_IO;
    if (c->reads < 300) c->firsts[c->reads] = first;
    c->reads++;
    c->rows_read += n;
    return simil_generate("mix", first, n, c->dim, 11, out);
}

static void test_train_sample(void **state)
{
    (void)state;
    simil_index *index;
    SML_ASSERT_OK(simil_index_create(&index, 8, "IVF16,PQ4", SIMIL_METRIC_L2, "cpu"));
    assert_int_equal(simil_index_train_sample(index, 50), 50);
    assert_int_equal(simil_index_train_sample(index, 10000000), 100000);
    simil_index *big;
    SML_ASSERT_OK(simil_index_create(&big, 8, "IVF65536,PQ4", SIMIL_METRIC_L2, "cpu"));
    assert_int_equal(simil_index_train_sample(big, 1000000000), 64 * 65536);
    simil_index_destroy(big);
    counting_source c = {8, 0, 0, INT64_MAX, {0}};
    simil_source *s;
    SML_ASSERT_OK(simil_source_from_callback(&s, 1000000, 8, counting_rows, &c));
    SML_ASSERT_OK(simil_index_train_source(index, s, 5000));
    /* 256 evenly spaced runs of 19 or 20 rows */
    assert_int_equal(c.reads, 256);
    assert_int_equal(c.rows_read, 5000);
    for (int r = 0; r < 256; r++) assert_int_equal(c.firsts[r], (int64_t)r * (1000000 / 256));
    assert_true(simil_index_is_trained(index));
    simil_index_destroy(index);
    /* fewer rows than the sample: all of them, once */
    c.reads = c.rows_read = 0;
    simil_source *small;
    SML_ASSERT_OK(simil_source_slice(&small, s, 0, 300));
    SML_ASSERT_OK(simil_index_create(&index, 8, "IVF16,Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_train_source(index, small, 0));
    assert_int_equal(c.reads, 1);
    assert_int_equal(c.rows_read, 300);
    simil_index_destroy(index);
    /* an index that needs no training reads nothing */
    c.reads = 0;
    SML_ASSERT_OK(simil_index_create(&index, 8, "Flat", SIMIL_METRIC_L2, "cpu"));
    SML_ASSERT_OK(simil_index_train_source(index, s, 0));
    assert_int_equal(c.reads, 0);
    simil_index_destroy(index);
    simil_source_close(small);
    simil_source_close(s);
}

/* Search results of two indexes agree on at least `share` of the ids. */
static void check_same_results(const char *context, simil_index *a, simil_index *b, int64_t nq,
                               const float *q, int64_t k, int64_t nprobe, double share)
{
    float *d1 = sml_test_malloc(sizeof(float) * (size_t)(nq * k));
    float *d2 = sml_test_malloc(sizeof(float) * (size_t)(nq * k));
    int64_t *l1 = sml_test_malloc(sizeof(int64_t) * (size_t)(nq * k));
    int64_t *l2 = sml_test_malloc(sizeof(int64_t) * (size_t)(nq * k));
    simil_search_params *p;
    SML_ASSERT_OK(simil_search_params_create(&p));
    SML_ASSERT_OK(simil_search_params_set_int(p, "nprobe", nprobe));
    SML_ASSERT_OK(simil_index_search(a, nq, q, k, p, d1, l1));
    SML_ASSERT_OK(simil_index_search(b, nq, q, k, p, d2, l2));
    simil_search_params_destroy(p);
    int64_t same = 0;
    for (int64_t i = 0; i < nq * k; i++) same += l1[i] == l2[i];
    if ((double)same < share * (double)(nq * k))
        fail_msg("%s: %lld of %lld result ids agree, expected %.1f%%", context, (long long)same,
                 (long long)(nq * k), 100 * share);
    free(d1);
    free(d2);
    free(l1);
    free(l2);
}

/* add_source (in chunks; for IVF-PQ encoded, then placed at final sizes)
 * gives the index that one add of the same rows gives. */
static void check_add_source(const char *desc, simil_metric metric, int64_t chunk, double share)
{
    enum { N = 20000, D = 16, NQ = 50, K = 10 };
    char context[160];
    snprintf(context, sizeof context, "add_source %s %s n=%d dim=%d chunk=%lld", desc,
             simil_metric_name(metric), N, D, (long long)chunk);
    float *x = sml_test_malloc(sizeof(float) * N * D), q[NQ * D];
    SML_ASSERT_OK(simil_generate("mix", 0, N, D, 11, x));
    SML_ASSERT_OK(simil_generate("mix", 0, NQ, D, 12, q));
    simil_source *s;
    SML_ASSERT_OK(simil_source_open(&s, "gen:mix:20000:16:11"));
    simil_index *streamed, *whole;
    SML_ASSERT_OK(simil_index_create(&streamed, D, desc, metric, "cpu"));
    SML_ASSERT_OK(simil_index_create(&whole, D, desc, metric, "cpu"));
    SML_ASSERT_OK(simil_index_train_source(streamed, s, 5000));
    SML_ASSERT_OK(simil_index_train_source(whole, s, 5000));
    simil_stream_params p;
    simil_stream_params_init(&p);
    p.chunk_rows = chunk;
    SML_ASSERT_OK(simil_index_add_source(streamed, s, &p));
    SML_ASSERT_OK(simil_index_add(whole, N, x, NULL));
    if (simil_index_size(streamed) != N) fail_msg("%s: size %lld", context,
                                                 (long long)simil_index_size(streamed));
    check_same_results(context, streamed, whole, NQ, q, K, 4, share);
    /* and once more: ids continue */
    SML_ASSERT_OK(simil_index_add_source(streamed, s, &p));
    assert_int_equal(simil_index_size(streamed), 2 * N);
    float row[D], want[D];
    SML_ASSERT_OK(simil_index_reconstruct(streamed, 2 * N - 1, row));
    SML_ASSERT_OK(simil_index_reconstruct(streamed, N - 1, want));
    assert_memory_equal(row, want, sizeof row);
    simil_index_destroy(streamed);
    simil_index_destroy(whole);
    simil_source_close(s);
    free(x);
}

static void test_add_source(void **state)
{
    (void)state;
    check_add_source("IVF64,PQ8", SIMIL_METRIC_L2, 3000, 0.99);
    check_add_source("IVF64,PQ8", SIMIL_METRIC_IP, 20000, 0.99);
    check_add_source("IVF64,PQ8", SIMIL_METRIC_COSINE, 7001, 0.99);
    check_add_source("PQ4", SIMIL_METRIC_L2, 5000, 0.99);
    check_add_source("Flat", SIMIL_METRIC_L2, 3000, 1.0);
    check_add_source("IVF64,Flat", SIMIL_METRIC_COSINE, 3000, 1.0);
}

static void test_add_source_ids_and_failures(void **state)
{
    (void)state;
    enum { D = 8 };
    const char *descs[] = {"IVF16,PQ4", "IVF16,Flat"};
    for (int t = 0; t < 2; t++) {
        counting_source c = {D, 0, 0, INT64_MAX, {0}};
        simil_source *s;
        SML_ASSERT_OK(simil_source_from_callback(&s, 5000, D, counting_rows, &c));
        simil_index *index;
        SML_ASSERT_OK(simil_index_create(&index, D, descs[t], SIMIL_METRIC_L2, "cpu"));
        SML_ASSERT_STATUS(SIMIL_ERR_NOT_TRAINED, simil_index_add_source(index, s, NULL));
        SML_ASSERT_OK(simil_index_train_source(index, s, 0));
        simil_stream_params p;
        simil_stream_params_init(&p);
        p.chunk_rows = 700;
        p.first_id = 1000000;
        SML_ASSERT_OK(simil_index_add_source(index, s, &p));
        float got[D], want[D];
        SML_ASSERT_OK(simil_index_reconstruct(index, 1000000 + 4321, got));
        SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_reconstruct(index, 4321, got));
        SML_ASSERT_OK(simil_index_reconstruct(index, 1000000 + 4321, want));
        /* ids must be new to the index */
        p.first_id = 1000000 + 4999;
        SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add_source(index, s, &p));
        /* a source that fails after two chunks: the index is as it was */
        c.fail_from = 1500;
        p.first_id = -1;
        SML_ASSERT_STATUS(SIMIL_ERR_IO, simil_index_add_source(index, s, &p));
        assert_non_null(strstr(simil_last_error(), "[1400, 2100)"));
        assert_int_equal(simil_index_size(index), 5000);
        SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                          simil_index_reconstruct(index, 1000000 + 5000, got));
        SML_ASSERT_OK(simil_index_reconstruct(index, 1000000 + 4321, got));
        assert_memory_equal(got, want, sizeof got);
        /* wrong dimension, bad settings */
        simil_source *other;
        SML_ASSERT_OK(simil_source_open(&other, "gen:mix:10:9:1"));
        SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add_source(index, other, NULL));
        SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_train_source(index, other, 0));
        simil_source_close(other);
        p.chunk_rows = -1;
        SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add_source(index, s, &p));
        SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_index_add_source(NULL, s, NULL));
        simil_index_destroy(index);
        simil_source_close(s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generator_source),
        cmocka_unit_test(test_file_sources),
        cmocka_unit_test(test_memory_and_callback_sources),
        cmocka_unit_test(test_source_errors),
        cmocka_unit_test(test_search_against_reference),
        cmocka_unit_test(test_search_generator),
        cmocka_unit_test(test_search_errors),
        cmocka_unit_test(test_train_sample),
        cmocka_unit_test(test_add_source),
        cmocka_unit_test(test_add_source_ids_and_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
