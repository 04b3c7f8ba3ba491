/* test_knn_graph.c: k-NN graphs on the CPU: the exact graph equals a float64
 * brute force without self (L2 and IP, duplicates, k >= n), IVF with every
 * list probed equals it, chunked and streamed builds (callbacks and files)
 * give the same graph as one in memory, the quality measure on graphs altered
 * by a known amount, and errors and allocation failures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "util/test_util.h"

enum { N = 600, D = 13, K = 7 };

static simil_knn_graph_params cpu_params(const char *index)
{
    simil_knn_graph_params p;
    simil_knn_graph_params_init(&p);
    p.index = index;
    p.device = "cpu";
    return p;
}

static void assert_no_self(const int64_t *ids, int64_t n, int64_t k)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < k; j++)
            if (ids[i * k + j] == i) fail_msg("row %lld lists itself at rank %lld", (long long)i,
                                              (long long)j);
}

static void check_exact(const char *context, simil_metric metric, int64_t batch)
{
    float *x = sml_test_malloc(sizeof(float) * N * D);
    sml_test_fill_uniform(x, N * D, 7, -1, 1);
    int64_t ids[N * K], ref_ids[N * K];
    float dist[N * K], ref_dist[N * K];
    simil_knn_graph_params p = cpu_params("Flat");
    p.metric = metric;
    p.batch = batch;
    SML_ASSERT_OK(simil_knn_graph(&p, N, D, x, K, ids, dist, NULL));
    sml_test_reference_graph(x, N, D, K, metric, ref_ids, ref_dist);
    char ctx[128];
    snprintf(ctx, sizeof ctx, "%s (seed 7, n=%d dim=%d k=%d batch=%lld)", context, N, D, K,
             (long long)batch);
    sml_test_check_same(ctx, x, N, x, N, D, K, metric, dist, ids, ref_dist, ref_ids, 1e-4);
    if (metric == SIMIL_METRIC_L2) assert_no_self(ids, N, K);
    free(x);
}

static void test_exact_l2(void **state)
{
    (void)state;
    check_exact("exact L2 graph", SIMIL_METRIC_L2, 200000);
    check_exact("exact L2 graph in chunks", SIMIL_METRIC_L2, 37);
}

static void test_exact_ip(void **state)
{
    (void)state;
    /* IP: a row is not always its own best match; the rule still applies */
    check_exact("exact IP graph", SIMIL_METRIC_IP, 200000);
}

static void test_duplicates_and_k_beyond_n(void **state)
{
    (void)state;
    enum { n = 6, d = 3, k = 8 };
    float x[n * d];
    sml_test_fill_uniform(x, n * d, 3, 0, 1);
    memcpy(x + 4 * d, x + 1 * d, sizeof(float) * d); /* row 4 duplicates row 1 */
    int64_t ids[n * k];
    float dist[n * k];
    simil_knn_graph_params p = cpu_params("Flat");
    SML_ASSERT_OK(simil_knn_graph(&p, n, d, x, k, ids, dist, NULL));
    assert_no_self(ids, n, k);
    /* the duplicate is the other's nearest, at distance 0 */
    assert_int_equal(ids[1 * k], 4);
    assert_int_equal(ids[4 * k], 1);
    assert_true(fabsf(dist[1 * k]) < 1e-5f);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < k; j++) {
            if (j < n - 1) {
                assert_true(ids[i * k + j] >= 0 && ids[i * k + j] < n);
            } else {
                assert_int_equal(ids[i * k + j], -1);
                assert_true(isinf(dist[i * k + j]) && dist[i * k + j] > 0);
            }
        }
}

static void test_ivf_all_lists_is_exact(void **state)
{
    (void)state;
    float *x = sml_test_malloc(sizeof(float) * N * D);
    sml_test_fill_uniform(x, N * D, 11, 0, 1);
    int64_t ids[N * K], ref_ids[N * K], low_ids[N * K];
    float dist[N * K], ref_dist[N * K], low_dist[N * K];
    simil_knn_graph_params p = cpu_params("IVF8,Flat");
    simil_search_params *all = sml_test_params("nprobe=8"), *one = sml_test_params("nprobe=1");
    p.search = all;
    p.max_train = 400; /* trains on a sample */
    simil_knn_graph_stats stats;
    SML_ASSERT_OK(simil_knn_graph(&p, N, D, x, K, ids, dist, &stats));
    assert_string_equal(stats.index, "IVF8,Flat");
    assert_true(stats.quality == -1);
    sml_test_reference_graph(x, N, D, K, SIMIL_METRIC_L2, ref_ids, ref_dist);
    sml_test_check_same("IVF8,Flat nprobe=8 graph (seed 11, n=600 dim=13 k=7)", x, N, x, N, D,
                        K, SIMIL_METRIC_L2, dist, ids, ref_dist, ref_ids, 1e-4);
    /* one list: approximate, never itself, and worse quality than exact */
    p.search = one;
    p.quality = 1;
    SML_ASSERT_OK(simil_knn_graph(&p, N, D, x, K, low_ids, low_dist, &stats));
    assert_no_self(low_ids, N, K);
    double q;
    SML_ASSERT_OK(simil_graph_quality(&p, N, D, x, low_ids, K, &q));
    if (!(q > 0.2 && q < 0.99))
        fail_msg("IVF8,Flat nprobe=1: quality %g, want in (0.2, 0.99)", q);
    /* the build's own measure is the same computation on the same sample */
    if (stats.quality != q) fail_msg("build quality %.17g, graph quality %.17g", stats.quality, q);
    simil_search_params_destroy(all);
    simil_search_params_destroy(one);
    free(x);
}

/* ---- streaming ---- */

typedef struct reader {
    const float *x;
    int64_t dim, calls, max_count;
} reader;

static simil_status read_rows(void *user, int64_t first, int64_t count, float *out)
{
    reader *r = user;
    r->calls++;
    if (count > r->max_count) r->max_count = count;
    memcpy(out, r->x + first * r->dim, sizeof(float) * (size_t)(count * r->dim));
    return SIMIL_OK;
}

static void test_stream_equals_memory(void **state)
{
    (void)state;
    float *x = sml_test_malloc(sizeof(float) * N * D);
    sml_test_fill_uniform(x, N * D, 5, -3, 3);
    int64_t mem_ids[N * K], st_ids[N * K];
    float mem_dist[N * K], st_dist[N * K];
    const char *indexes[] = {"Flat", "IVF4,Flat", "Flat", "IVF4,Flat"};
    simil_search_params *two = sml_test_params("nprobe=2");
    for (int t = 0; t < 4; t++) {
        simil_knn_graph_params p = cpu_params(indexes[t]);
        p.method = t < 2 ? SIMIL_KNN_GRAPH_SEARCH : SIMIL_KNN_GRAPH_JOIN;
        p.batch = 64;
        p.max_train = 250;
        p.search = two;
        p.quality = 1;
        simil_knn_graph_stats ms, ss;
        SML_ASSERT_OK(simil_knn_graph(&p, N, D, x, K, mem_ids, mem_dist, &ms));
        reader r = {x, D, 0, 0};
        sml_test_sink s = {st_ids, st_dist, 0};
        SML_ASSERT_OK(
            simil_knn_graph_stream(&p, N, D, read_rows, &r, K, sml_test_sink_rows, &s, &ss));
        assert_int_equal(s.next, N);
        assert_int_equal(r.max_count, 64);
        assert_string_equal(ss.method, t < 2 ? "search" : "join");
        /* passes over ceil(600 / 64) = 10 chunks: search: sample, add, query and
         * quality; join: add and quality, and for IVF the sample (its add
         * also assigns the lists: the rows are sorted on the backend) */
        assert_true(r.calls >= (t == 2 ? 20 : 30));
        assert_memory_equal(mem_ids, st_ids, sizeof mem_ids);
        assert_memory_equal(mem_dist, st_dist, sizeof mem_dist);
        if (ms.quality != ss.quality)
            fail_msg("%s (%s): quality %.17g in memory, %.17g streamed", indexes[t], ss.method,
                     ms.quality, ss.quality);
    }
    simil_search_params_destroy(two);
    free(x);
}

static void read_graph_file(const char *path, int64_t n, int64_t k, int64_t *ids_out,
                            float *dist_out)
{
    simil_matrix m;
    SML_ASSERT_OK(simil_matrix_read(path, 0, -1, &m));
    assert_int_equal(m.rows, n);
    assert_int_equal(m.cols, k);
    for (int64_t i = 0; i < n * k; i++) {
        if (ids_out != NULL && m.dtype == SIMIL_DTYPE_INT32)
            ids_out[i] = ((int32_t *)m.data)[i];
        else if (ids_out != NULL && m.dtype == SIMIL_DTYPE_INT64)
            ids_out[i] = ((int64_t *)m.data)[i];
        else if (dist_out != NULL && m.dtype == SIMIL_DTYPE_FLOAT32)
            dist_out[i] = ((float *)m.data)[i];
        else
            fail_msg("%s: unexpected element type %d", path, (int)m.dtype);
    }
    simil_matrix_free(&m);
}

static void test_file_equals_memory(void **state)
{
    (void)state;
    float *x = sml_test_malloc(sizeof(float) * N * D);
    sml_test_fill_uniform(x, N * D, 9, 0, 10);
    simil_matrix data = {N, D, SIMIL_DTYPE_FLOAT32, x};
    char data_path[512];
    snprintf(data_path, sizeof data_path, "%s", sml_test_path("data.fvecs"));
    SML_ASSERT_OK(simil_matrix_write(data_path, &data));
    int64_t mem_ids[N * K], f_ids[N * K];
    float mem_dist[N * K], f_dist[N * K];
    simil_knn_graph_params p = cpu_params("Flat");
    p.batch = 100;
    SML_ASSERT_OK(simil_knn_graph(&p, N, D, x, K, mem_ids, mem_dist, NULL));
    const char *names[][2] = {{"g.ivecs", "g.fvecs"}, {"g.npy", "g-distances.npy"}};
    for (int t = 0; t < 2; t++) {
        char ids_path[512], dist_path[512];
        snprintf(ids_path, sizeof ids_path, "%s", sml_test_path(names[t][0]));
        snprintf(dist_path, sizeof dist_path, "%s", sml_test_path(names[t][1]));
        SML_ASSERT_OK(simil_knn_graph_file(&p, data_path, K, ids_path, dist_path, NULL));
        read_graph_file(ids_path, N, K, f_ids, NULL);
        read_graph_file(dist_path, N, K, NULL, f_dist);
        assert_memory_equal(mem_ids, f_ids, sizeof mem_ids);
        assert_memory_equal(mem_dist, f_dist, sizeof mem_dist);
    }
    /* ids only */
    const char *only = sml_test_path("only.npy");
    SML_ASSERT_OK(simil_knn_graph_file(&p, data_path, K, only, NULL, NULL));
    read_graph_file(only, N, K, f_ids, NULL);
    assert_memory_equal(mem_ids, f_ids, sizeof mem_ids);
    free(x);
}

/* ---- quality ---- */

/* A graph whose row i keeps the first 10 - alter(i) true neighbours and
 * fills the rest with rows far away (ranks 30 and beyond). */
static void altered_graph(const float *x, int64_t n, int64_t dim, int (*alter)(int64_t),
                          int64_t *ids)
{
    enum { R = 40 };
    double *rd = sml_test_malloc(sizeof *rd * (size_t)(n * (R + 1)));
    int64_t *rl = sml_test_malloc(sizeof *rl * (size_t)(n * (R + 1)));
    sml_test_reference_knn(x, n, x, n, dim, R + 1, SIMIL_METRIC_L2, rd, rl);
    for (int64_t i = 0; i < n; i++) {
        const int64_t *row = rl + i * (R + 1);
        const double *drow = rd + i * (R + 1);
        assert_int_equal(row[0], i); /* no duplicates: self first */
        /* no near tie around the 10th neighbour that float32 could reorder:
         * distances are about 1 and float32 errs by about 1e-6 here */
        if (!(drow[11] - drow[10] > 1e-5))
            fail_msg("row %lld: ranks 10 and 11 tie (%.9g, %.9g); change the seed", (long long)i,
                     drow[10], drow[11]);
        int a = alter(i);
        for (int j = 0; j < 10; j++) ids[i * 10 + j] = j < 10 - a ? row[1 + j] : row[30 + j];
    }
    free(rd);
    free(rl);
}

static int alter_three(int64_t i) { (void)i; return 3; }
static int alter_mod(int64_t i) { return (int)(i % 11); }

static void test_quality_known_overlap(void **state)
{
    (void)state;
    enum { n = 1500, d = 16 };
    float *x = sml_test_malloc(sizeof(float) * n * d);
    int64_t *ids = sml_test_malloc(sizeof(int64_t) * n * 10);
    sml_test_fill_uniform(x, n * d, 21, 0, 1);
    simil_knn_graph_params p = cpu_params("Flat");
    double q;
    altered_graph(x, n, d, alter_three, ids);
    SML_ASSERT_OK(simil_graph_quality(&p, n, d, x, ids, 10, &q));
    if (fabs(q - 0.7) > 1e-12) fail_msg("3 of 10 replaced (seed 21, n=1500): quality %.17g", q);
    p.quality_sample = 300; /* every node scores 0.7, so any sample does */
    p.batch = 128;          /* and the exact search in chunks */
    SML_ASSERT_OK(simil_graph_quality(&p, n, d, x, ids, 10, &q));
    if (fabs(q - 0.7) > 1e-12) fail_msg("sample of 300: quality %.17g, want 0.7", q);
    /* row i loses i % 11 neighbours: the mean over all rows */
    altered_graph(x, n, d, alter_mod, ids);
    double want = 0;
    for (int64_t i = 0; i < n; i++) want += (10.0 - (double)(i % 11)) / 10.0;
    want /= n;
    p.quality_sample = 10000;
    SML_ASSERT_OK(simil_graph_quality(&p, n, d, x, ids, 10, &q));
    if (fabs(q - want) > 1e-12) fail_msg("i %% 11 replaced: quality %.17g, want %.17g", q, want);
    /* a sample: the mean over the nodes it drew, which differs from the full mean */
    p.quality_sample = 200;
    p.seed = 77;
    SML_ASSERT_OK(simil_graph_quality(&p, n, d, x, ids, 10, &q));
    if (!(q > want - 0.1 && q < want + 0.1))
        fail_msg("sample of 200: quality %g, full mean %g", q, want);
    free(ids);
    free(x);
}

static void test_quality_r_and_edges(void **state)
{
    (void)state;
    enum { n = 300, d = 5 };
    float x[n * d];
    sml_test_fill_uniform(x, n * d, 4, 0, 1);
    int64_t ids[n * 15];
    float dist[n * 15];
    simil_knn_graph_params p = cpu_params("Flat");
    double q;
    /* k = 15: only the first 10 count, and an exact graph scores 1 */
    SML_ASSERT_OK(simil_knn_graph(&p, n, d, x, 15, ids, dist, NULL));
    SML_ASSERT_OK(simil_graph_quality(&p, n, d, x, ids, 15, &q));
    assert_true(q == 1.0);
    /* k = 3: r = 3; a graph of empty slots scores 0 */
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < 3; j++) ids[i * 3 + j] = -1;
    SML_ASSERT_OK(simil_graph_quality(&p, n, d, x, ids, 3, &q));
    assert_true(q == 0.0);
    /* one node: nothing to compare */
    SML_ASSERT_OK(simil_graph_quality(&p, 1, d, x, ids, 3, &q));
    assert_true(q == 1.0);
}

/* ---- errors ---- */

static simil_status failing_reader(void *user, int64_t first, int64_t count, float *out)
{
    (void)user;
    memset(out, 0, sizeof(float) * (size_t)(count * 4));
    return first + count > 200 ? SIMIL_ERR_IO : SIMIL_OK;
}

static simil_status failing_sink(void *user, int64_t first, int64_t count, int64_t k,
                                 const int64_t *ids, const float *dist)
{
    (void)user, (void)count, (void)k, (void)ids, (void)dist;
    return first > 0 ? SIMIL_ERR_IO : SIMIL_OK;
}

static void test_errors(void **state)
{
    (void)state;
    float x[40 * 4];
    int64_t ids[40 * 3];
    float dist[40 * 3];
    sml_test_fill_uniform(x, 40 * 4, 1, 0, 1);
    simil_knn_graph_params p = cpu_params("Flat");
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_knn_graph(NULL, 40, 4, x, 3, ids, dist, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_knn_graph(&p, 40, 4, x, 0, ids, dist, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_knn_graph(&p, 40, 0, x, 3, ids, dist, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_knn_graph(&p, 40, 4, NULL, 3, ids, dist, NULL));
    p.batch = 0;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_knn_graph(&p, 40, 4, x, 3, ids, dist, NULL));
    p.batch = 10;
    /* n = 0 is an empty graph */
    SML_ASSERT_OK(simil_knn_graph(&p, 0, 4, NULL, 3, NULL, NULL, NULL));
    /* the index's own errors come through */
    p.index = "IVF64,Flat";
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_knn_graph(&p, 40, 4, x, 3, ids, dist, NULL));
    p.index = "NoSuchIndex";
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_knn_graph(&p, 40, 4, x, 3, ids, dist, NULL));
    p.index = "Flat";
    x[17] = NAN;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_knn_graph(&p, 40, 4, x, 3, ids, dist, NULL));
    x[17] = 0.5f;
    /* a row past the first batch is named by its number in the data */
    const float keep = x[25 * 4 + 1];
    x[25 * 4 + 1] = INFINITY;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_knn_graph(&p, 40, 4, x, 3, ids, dist, NULL));
    if (strstr(simil_last_error(), "vector 25 has Inf") == NULL)
        fail_msg("Inf in row 25: '%s'", simil_last_error());
    x[25 * 4 + 1] = keep;
    if (!simil_built_with_cuda()) {
        p.device = "gpu";
        SML_ASSERT_STATUS(SIMIL_ERR_NO_DEVICE, simil_knn_graph(&p, 40, 4, x, 3, ids, dist, NULL));
        p.device = "cpu";
    }
    /* callbacks' failures stop the build with their status and a message */
    sml_test_sink s = {ids, dist, 0};
    SML_ASSERT_STATUS(SIMIL_ERR_IO, simil_knn_graph_stream(&p, 400, 4, failing_reader, NULL, 3,
                                                           sml_test_sink_rows, &s, NULL));
    assert_non_null(strstr(simil_last_error(), "row reader failed"));
    reader r = {x, 4, 0, 0};
    SML_ASSERT_STATUS(SIMIL_ERR_IO, simil_knn_graph_stream(&p, 40, 4, read_rows, &r, 3,
                                                           failing_sink, NULL, NULL));
    assert_non_null(strstr(simil_last_error(), "sink failed"));
    /* files: bad names are refused before any work, and nothing is left */
    simil_matrix data = {40, 4, SIMIL_DTYPE_FLOAT32, x};
    char data_path[512];
    snprintf(data_path, sizeof data_path, "%s", sml_test_path("small.fvecs"));
    SML_ASSERT_OK(simil_matrix_write(data_path, &data));
    char bad[512], dpath[512];
    snprintf(bad, sizeof bad, "%s", sml_test_path("g.txt"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_knn_graph_file(&p, data_path, 3, bad, NULL, NULL));
    snprintf(dpath, sizeof dpath, "%s", sml_test_path("d.ivecs"));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_knn_graph_file(&p, data_path, 3, sml_test_path("e.ivecs"), dpath,
                                           NULL));
    assert_null(fopen(sml_test_path("e.ivecs"), "rb"));
    /* a failing build leaves no graph files */
    p.index = "IVF64,Flat";
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_knn_graph_file(&p, data_path, 3, sml_test_path("h.npy"), NULL, NULL));
    assert_null(fopen(sml_test_path("h.npy"), "rb"));
    SML_ASSERT_STATUS(SIMIL_ERR_IO, simil_knn_graph_file(&p, sml_test_path("missing.fvecs"), 3,
                                                         sml_test_path("h.npy"), NULL, NULL));
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_graph_quality(&p, 40, 4, x, ids, 3, NULL));
}

static void test_alloc_failures(void **state)
{
    (void)state;
    enum { n = 120, d = 6, k = 4 };
    float x[n * d];
    int64_t ids[n * k], ref[n * k];
    float dist[n * k];
    sml_test_fill_uniform(x, n * d, 2, 0, 1);
    simil_knn_graph_params p = cpu_params("IVF4,Flat");
    p.batch = 50;
    p.max_train = 100;
    p.quality = 1;
    simil_search_params *four = sml_test_params("nprobe=4");
    p.search = four;
    SML_ASSERT_OK(simil_knn_graph(&p, n, d, x, k, ref, dist, NULL));
    int failures = 0, absorbed = 0;
    for (int64_t at = 1; at < 10000; at++) {
        sml_alloc_fail_at(at, 0);
        simil_status s = simil_knn_graph(&p, n, d, x, k, ids, dist, NULL);
        int64_t made = sml_alloc_fail_at(0, 0);
        if (s == SIMIL_OK && made < at) break; /* none failed */
        if (s == SIMIL_OK) {
            /* one failure the build gets past: the join's sorted copy of the
             * rows, whereupon the rows come again (pass 2), to the same graph */
            absorbed++;
            assert_memory_equal(ids, ref, sizeof ids);
            continue;
        }
        if (s != SIMIL_ERR_OUT_OF_MEMORY)
            fail_msg("allocation %lld failing gave %s (%s)", (long long)at, simil_status_name(s),
                     simil_last_error());
        failures++;
    }
    assert_true(failures > 10);
    assert_int_equal(absorbed, 1);
    SML_ASSERT_OK(simil_knn_graph(&p, n, d, x, k, ids, dist, NULL));
    assert_memory_equal(ids, ref, sizeof ids);
    simil_search_params_destroy(four);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_l2),
        cmocka_unit_test(test_exact_ip),
        cmocka_unit_test(test_duplicates_and_k_beyond_n),
        cmocka_unit_test(test_ivf_all_lists_is_exact),
        cmocka_unit_test(test_stream_equals_memory),
        cmocka_unit_test(test_file_equals_memory),
        cmocka_unit_test(test_quality_known_overlap),
        cmocka_unit_test(test_quality_r_and_edges),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
