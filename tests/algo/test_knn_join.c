/* test_knn_join.c: k-NN graphs by the list join on the CPU: its blocks and
 * candidate lists on hand-made cases; the rows' order by list on threads
 * against one thread, and a bad probe; the exact graph (Flat) and the join of every
 * list equal a float64 brute force (L2, IP, cosine, odd dimensions); with
 * the same index and nprobe the join's rows are never worse than the
 * per-query search's, and its quality at least as high; a stated quality on
 * clustered data; duplicates, k >= n; one pass over the rows (sorted on the
 * backend) and two (where the sorted copy finds no memory) give the same
 * graph; bad arguments and what the join refuses. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/knn_join.h"
#include "core/alloc.h"
#include "util/test_util.h"

/* Search parameter handles by nprobe, made on first use and destroyed by
 * the group teardown (the graph params only borrow them). */
static simil_search_params *nprobe_params[65];

static simil_search_params *params_nprobe(int64_t nprobe)
{
    assert_true(nprobe >= 0 && nprobe < 65);
    if (nprobe_params[nprobe] == NULL) {
        char s[32];
        snprintf(s, sizeof s, nprobe > 0 ? "nprobe=%d" : "", (int)nprobe);
        nprobe_params[nprobe] = sml_test_params(s);
    }
    return nprobe_params[nprobe];
}

static int free_params(void **state)
{
    (void)state;
    for (int i = 0; i < 65; i++) {
        simil_search_params_destroy(nprobe_params[i]);
        nprobe_params[i] = NULL;
    }
    return 0;
}

static simil_knn_graph_params join_params(const char *index, int64_t nprobe)
{
    simil_knn_graph_params p;
    simil_knn_graph_params_init(&p);
    p.method = SIMIL_KNN_GRAPH_JOIN;
    p.index = index;
    p.device = "cpu";
    p.search = params_nprobe(nprobe);
    return p;
}

/* Three lists: 0 (rows 0-19), 1 (20-29), 2 (30-59 or just 30); nprobe 2.
 * Rows of list 0 probe {0, 1}, except row 5, which probes {0, 2}; rows of
 * list 1 probe {1, 0}, rows of list 2 {2, 0}. */
static void plan(int64_t n, double share, int64_t *nblock, int64_t *order, int64_t **block_offset,
                 int64_t **cand_offset, int64_t **cand)
{
    int64_t probes[120];
    const int64_t offset[] = {0, 20, 30, n};
    for (int64_t r = 0; r < n; r++) {
        probes[2 * r] = r < 20 ? 0 : r < 30 ? 1 : 2;
        probes[2 * r + 1] = r < 20 ? (r == 5 ? 2 : 1) : 0;
        order[r] = r;
    }
    SML_ASSERT_OK(sml_knn_join_blocks(3, offset, order, probes, 2, share, nblock, block_offset,
                                      cand_offset, cand));
}

static void free_plan(int64_t *block_offset, int64_t *cand_offset, int64_t *cand)
{
    sml_free(block_offset);
    sml_free(cand_offset);
    sml_free(cand);
}

static void test_blocks(void **state)
{
    (void)state;
    int64_t nblock, order[520], *bo, *co, *cand;
    /* share 0: each list one block, joined with the union of its probes */
    plan(60, 0, &nblock, order, &bo, &co, &cand);
    const int64_t union_blocks[] = {0, 20, 30, 60}, union_cand_offset[] = {0, 3, 5, 7};
    const int64_t union_cand[] = {0, 1, 2, 0, 1, 0, 2};
    assert_int_equal(nblock, 3);
    assert_memory_equal(bo, union_blocks, sizeof union_blocks);
    assert_memory_equal(co, union_cand_offset, sizeof union_cand_offset);
    assert_memory_equal(cand, union_cand, sizeof union_cand);
    for (int64_t r = 0; r < 60; r++) assert_int_equal(order[r], r);
    free_plan(bo, co, cand);
    /* share 0.1: list 2 is named by 1 row of list 0 of 20: that row moves
     * last and alone joins list 2 (19 x 30 rows saved of 20 x 60) */
    plan(60, 0.1, &nblock, order, &bo, &co, &cand);
    const int64_t split_blocks[] = {0, 19, 20, 30, 60}, split_cand_offset[] = {0, 2, 5, 7, 9};
    const int64_t split_cand[] = {0, 1, 0, 1, 2, 0, 1, 0, 2};
    assert_int_equal(nblock, 4);
    assert_memory_equal(bo, split_blocks, sizeof split_blocks);
    assert_memory_equal(co, split_cand_offset, sizeof split_cand_offset);
    assert_memory_equal(cand, split_cand, sizeof split_cand);
    for (int64_t r = 0; r < 19; r++) assert_int_equal(order[r], r < 5 ? r : r + 1);
    assert_int_equal(order[19], 5);
    free_plan(bo, co, cand);
    /* list 2 of one row: splitting would save 19 of 20 x 31 pairs, too few */
    plan(31, 0.1, &nblock, order, &bo, &co, &cand);
    const int64_t small_blocks[] = {0, 20, 30, 31}, small_cand_offset[] = {0, 3, 5, 7};
    assert_int_equal(nblock, 3);
    assert_memory_equal(bo, small_blocks, sizeof small_blocks);
    assert_memory_equal(co, small_cand_offset, sizeof small_cand_offset);
    assert_memory_equal(cand, union_cand, sizeof union_cand);
    free_plan(bo, co, cand);
    /* list 0 of 20 rows whose second probes spread over lists 1-5 of 100 rows,
     * each named by 4 rows: the union would cost 20 x 520 against the search's
     * 20 x 120, more than 4 times, so list 0 is cut by probe set */
    int64_t probes[1040], offset[] = {0, 20, 120, 220, 320, 420, 520};
    for (int64_t r = 0; r < 520; r++) {
        probes[2 * r] = r < 20 ? 0 : 1 + (r - 20) / 100;
        probes[2 * r + 1] = r < 20 ? 1 + r % 5 : 0;
        order[r] = r;
    }
    SML_ASSERT_OK(sml_knn_join_blocks(6, offset, order, probes, 2, 0.02, &nblock, &bo, &co,
                                      &cand));
    assert_int_equal(nblock, 10);
    for (int64_t b = 0; b < 5; b++) {
        assert_int_equal(bo[b], 4 * b);
        assert_int_equal(co[b], 2 * b);
        assert_int_equal(cand[2 * b], 0);
        assert_int_equal(cand[2 * b + 1], 1 + b);
        for (int64_t i = 0; i < 4; i++) assert_int_equal(order[4 * b + i], b + 5 * i);
    }
    for (int64_t b = 5; b <= 10; b++) assert_int_equal(bo[b], 20 + 100 * (b - 5));
    free_plan(bo, co, cand);
    /* every allocation failing in turn */
    int failures = 0;
    for (int64_t at = 1; at < 30; at++) {
        for (int64_t r = 0; r < 520; r++) order[r] = r;
        sml_alloc_fail_at(at, 0);
        simil_status s = sml_knn_join_blocks(6, offset, order, probes, 2, 0.02, &nblock, &bo, &co,
                                             &cand);
        sml_alloc_fail_at(0, 0);
        if (s == SIMIL_OK) {
            free_plan(bo, co, cand);
            break;
        }
        assert_int_equal(s, SIMIL_ERR_OUT_OF_MEMORY);
        assert_null(bo);
        assert_null(cand);
        failures++;
    }
    /* votes, marks, touched, rows, sets x 2, candidates, block offsets x 2,
     * and the growth of the candidates (6 -> 12 -> 24) and of the blocks
     * (7 -> 14, two arrays) */
    assert_int_equal(failures, 13);
}

static void check_exact(simil_metric metric, const char *index, int64_t nprobe, int64_t dim,
                        int64_t batch)
{
    enum { n = 500, k = 6 };
    float *x = sml_test_blobs(n, dim, 9, 0.4f, 17);
    int64_t *ids = sml_test_malloc(sizeof(int64_t) * n * k);
    int64_t *ref_ids = sml_test_malloc(sizeof(int64_t) * n * k);
    float *dist = sml_test_malloc(sizeof(float) * n * k);
    float *ref_dist = sml_test_malloc(sizeof(float) * n * k);
    float *xn = sml_test_malloc(sizeof(float) * n * (size_t)dim);
    memcpy(xn, x, sizeof(float) * n * (size_t)dim);
    if (metric == SIMIL_METRIC_COSINE)
        for (int64_t i = 0; i < n; i++) {
            double s = 0;
            for (int64_t j = 0; j < dim; j++) s += (double)xn[i * dim + j] * xn[i * dim + j];
            for (int64_t j = 0; j < dim; j++) xn[i * dim + j] = (float)(xn[i * dim + j] / sqrt(s));
        }
    simil_knn_graph_params p = join_params(index, nprobe);
    p.metric = metric;
    p.batch = batch;
    p.max_train = 300;
    simil_knn_graph_stats st;
    SML_ASSERT_OK(simil_knn_graph(&p, n, dim, x, k, ids, dist, &st));
    assert_string_equal(st.method, "join");
    simil_metric ref_metric = metric == SIMIL_METRIC_L2 ? SIMIL_METRIC_L2 : SIMIL_METRIC_IP;
    sml_test_reference_graph(xn, n, dim, k, ref_metric, ref_ids, ref_dist);
    char ctx[160];
    snprintf(ctx, sizeof ctx, "%s nprobe %lld, %s (blobs seed 17, n=%d dim=%lld k=%d batch=%lld)",
             index, (long long)nprobe, simil_metric_name(metric), n, (long long)dim, k,
             (long long)batch);
    sml_test_check_same(ctx, xn, n, xn, n, dim, k, ref_metric, dist, ids, ref_dist, ref_ids,
                        1e-4);
    if (metric == SIMIL_METRIC_L2)
        for (int64_t i = 0; i < n * k; i++)
            if (ids[i] == i / k) fail_msg("%s: row %lld lists itself", ctx, (long long)(i / k));
    free(xn);
    free(ref_dist);
    free(dist);
    free(ref_ids);
    free(ids);
    free(x);
}

/* Lists planned by several threads, each its own run of lists, give the
 * blocks, candidates and row order one thread gives: random probes over
 * lists of uneven sizes (some empty, one huge), nprobe 3. */
static void test_blocks_threads(void **state)
{
    (void)state;
    enum { nlist = 200, nprobe = 3 };
    int64_t offset[nlist + 1];
    uint64_t z = 12345;
    offset[0] = 0;
    for (int64_t l = 0; l < nlist; l++) {
        z = z * 6364136223846793005ULL + 1442695040888963407ULL;
        int64_t size = l % 17 == 3 ? 0 : l == 50 ? 4000 : (int64_t)(z >> 33) % 300;
        offset[l + 1] = offset[l] + size;
    }
    const int64_t n = offset[nlist];
    int64_t *probes = sml_test_malloc(sizeof(int64_t) * (size_t)(n * nprobe));
    int64_t *order1 = sml_test_malloc(sizeof(int64_t) * (size_t)n);
    int64_t *order2 = sml_test_malloc(sizeof(int64_t) * (size_t)n);
    for (int64_t l = 0; l < nlist; l++)
        for (int64_t r = offset[l]; r < offset[l + 1]; r++) {
            probes[r * nprobe] = l;
            for (int64_t t = 1; t < nprobe; t++) {
                z = z * 6364136223846793005ULL + 1442695040888963407ULL;
                /* mostly nearby lists, so some lists are popular */
                int64_t near = l + (int64_t)((z >> 33) % 9) - 4;
                probes[r * nprobe + t] = near < 0 ? 0 : near >= nlist ? nlist - 1 : near;
            }
        }
    const int threads[] = {2, 5, 64};
    int64_t nb1, *bo1, *co1, *cand1;
    for (int64_t r = 0; r < n; r++) order1[r] = r;
    SML_ASSERT_OK(sml_knn_join_blocks_threads(nlist, offset, order1, probes, nprobe, 0.02, 1,
                                              &nb1, &bo1, &co1, &cand1));
    for (int i = 0; i < 3; i++) {
        int64_t nb2, *bo2, *co2, *cand2;
        for (int64_t r = 0; r < n; r++) order2[r] = r;
        SML_ASSERT_OK(sml_knn_join_blocks_threads(nlist, offset, order2, probes, nprobe, 0.02,
                                                  threads[i], &nb2, &bo2, &co2, &cand2));
        assert_int_equal(nb2, nb1);
        assert_memory_equal(bo2, bo1, sizeof(int64_t) * (size_t)(nb1 + 1));
        assert_memory_equal(co2, co1, sizeof(int64_t) * (size_t)(nb1 + 1));
        assert_memory_equal(cand2, cand1, sizeof(int64_t) * (size_t)co1[nb1]);
        assert_memory_equal(order2, order1, sizeof(int64_t) * (size_t)n);
        free_plan(bo2, co2, cand2);
    }
    assert_int_equal(bo1[0], 0);
    assert_int_equal(bo1[nb1], n);
    free_plan(bo1, co1, cand1);
    /* an allocation failing in one of the threads: an error, nothing out */
    int64_t nb2 = 7, *bo2 = (int64_t *)1, *co2 = (int64_t *)1, *cand2 = (int64_t *)1;
    for (int64_t r = 0; r < n; r++) order2[r] = r;
    sml_alloc_fail_at(12, 0);
    simil_status st = sml_knn_join_blocks_threads(nlist, offset, order2, probes, nprobe, 0.02, 5,
                                                  &nb2, &bo2, &co2, &cand2);
    sml_alloc_fail_at(0, 0);
    assert_int_equal(st, SIMIL_ERR_OUT_OF_MEMORY);
    /* the failing thread's own message, carried out of it */
    if (strstr(simil_last_error(), "out of host memory") == NULL)
        fail_msg("a failed plan says: '%s'", simil_last_error());
    assert_null(bo2);
    assert_null(co2);
    assert_null(cand2);
    assert_int_equal(nb2, 0);
    free(probes);
    free(order1);
    free(order2);
}

/* The rows ordered by first probe on several threads equal a plain
 * one-thread counting sort, on rows enough for the threaded path (200,000
 * in 1,000 lists, every seventh empty); a bad probe is an error naming the
 * first row that has one, wherever the threads' slices fall. */
static void test_order(void **state)
{
    (void)state;
    enum { n = 200000, nlist = 1000, nprobe = 2 };
    int64_t *probes = sml_test_malloc(sizeof(int64_t) * n * nprobe);
    int64_t *order = sml_test_malloc(sizeof(int64_t) * n);
    int64_t *ref_order = sml_test_malloc(sizeof(int64_t) * n);
    int64_t offset[nlist + 1], ref_offset[nlist + 1];
    uint64_t z = 777;
    for (int64_t r = 0; r < n; r++) {
        z = z * 6364136223846793005ULL + 1442695040888963407ULL;
        int64_t l = (int64_t)((z >> 33) % nlist);
        if (l % 7 == 3) l--;
        probes[r * nprobe] = l;
        probes[r * nprobe + 1] = (int64_t)((z >> 13) % nlist);
    }
    memset(ref_offset, 0, sizeof ref_offset);
    for (int64_t r = 0; r < n; r++) ref_offset[probes[r * nprobe] + 1]++;
    for (int64_t l = 0; l < nlist; l++) ref_offset[l + 1] += ref_offset[l];
    int64_t fill[nlist];
    memcpy(fill, ref_offset, sizeof fill);
    for (int64_t r = 0; r < n; r++) ref_order[fill[probes[r * nprobe]]++] = r;
    assert_int_equal(ref_offset[4], ref_offset[3]); /* list 3 is empty */
    const int threads[] = {0, 1, 2, 3, 7};
    for (int i = 0; i < 5; i++) {
        memset(order, 0xff, sizeof(int64_t) * n);
        SML_ASSERT_OK(sml_knn_join_order(n, nlist, probes, nprobe, threads[i], offset, order));
        assert_memory_equal(offset, ref_offset, sizeof offset);
        assert_memory_equal(order, ref_order, sizeof(int64_t) * n);
    }
    /* bad probes in the second and third of three slices: the earlier row */
    probes[190001 * nprobe] = -1;
    probes[120007 * nprobe + 1] = nlist;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(sml_knn_join_order(n, nlist, probes, nprobe, threads[i], offset, order),
                         SIMIL_ERR_INTERNAL);
        if (strstr(simil_last_error(), "row 120007 was given list 1000") == NULL)
            fail_msg("a bad probe says: '%s'", simil_last_error());
    }
    /* and one in the first slice, in the row's first probe */
    probes[5 * nprobe] = nlist + 5;
    assert_int_equal(sml_knn_join_order(n, nlist, probes, nprobe, 3, offset, order),
                     SIMIL_ERR_INTERNAL);
    if (strstr(simil_last_error(), "row 5 was given list 1005") == NULL)
        fail_msg("a bad probe says: '%s'", simil_last_error());
    /* the per-thread counts not allocated: an error (the probes good again,
     * so that the check passes) */
    probes[5 * nprobe] = probes[190001 * nprobe] = probes[120007 * nprobe + 1] = 0;
    sml_alloc_fail_at(1, 0);
    simil_status st = sml_knn_join_order(n, nlist, probes, nprobe, 3, offset, order);
    sml_alloc_fail_at(0, 0);
    assert_int_equal(st, SIMIL_ERR_OUT_OF_MEMORY);
    free(probes);
    free(order);
    free(ref_order);
}

static void test_exact(void **state)
{
    (void)state;
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP, SIMIL_METRIC_COSINE};
    for (int m = 0; m < 3; m++) {
        /* Flat: every row against every row */
        check_exact(metrics[m], "Flat", 0, 13, 200000);
        check_exact(metrics[m], "Flat", 0, 13, 77);
        /* the join of every list with every list */
        check_exact(metrics[m], "IVF8,Flat", 8, 13, 200000);
        check_exact(metrics[m], "IVF8,Flat", 8, 13, 64);
    }
    check_exact(SIMIL_METRIC_L2, "Flat", 0, 1, 100);
    check_exact(SIMIL_METRIC_L2, "IVF5,Flat", 5, 3, 100);
    check_exact(SIMIL_METRIC_L2, "IVF4,Flat", 9, 100, 100); /* nprobe beyond nlist */
}

/* The join compares each row with every row of its nprobe nearest lists and
 * more; the search with exactly those, under the same lists (same k-means,
 * same sample).  So at every rank the join's distance is at most the
 * search's (up to rounding), and its quality at least as high. */
static void test_join_covers_search(void **state)
{
    (void)state;
    enum { n = 3000, dim = 20, k = 10 };
    float *x = sml_test_blobs(n, dim, 12, 0.6f, 41);
    int64_t *jids = sml_test_malloc(sizeof(int64_t) * n * k);
    int64_t *sids = sml_test_malloc(sizeof(int64_t) * n * k);
    float *jd = sml_test_malloc(sizeof(float) * n * k);
    float *sd = sml_test_malloc(sizeof(float) * n * k);
    for (int64_t nprobe = 1; nprobe <= 3; nprobe++) {
        simil_knn_graph_params p = join_params("IVF24,Flat", nprobe);
        p.max_train = 2000;
        p.quality = 1;
        p.batch = 700;
        simil_knn_graph_stats js, ss;
        SML_ASSERT_OK(simil_knn_graph(&p, n, dim, x, k, jids, jd, &js));
        p.method = SIMIL_KNN_GRAPH_SEARCH;
        SML_ASSERT_OK(simil_knn_graph(&p, n, dim, x, k, sids, sd, &ss));
        assert_string_equal(ss.method, "search");
        for (int64_t i = 0; i < n * k; i++) {
            if (sids[i] < 0) continue;
            if (!(jd[i] <= sd[i] + 1e-4 * (fabs(sd[i]) + 1)))
                fail_msg("nprobe %lld, row %lld rank %lld: join %.9g > search %.9g (blobs seed "
                         "41, n=%d dim=%d, IVF24)",
                         (long long)nprobe, (long long)(i / k), (long long)(i % k), jd[i], sd[i],
                         n, dim);
        }
        if (!(js.quality >= ss.quality))
            fail_msg("nprobe %lld: join quality %g below the search's %g", (long long)nprobe,
                     js.quality, ss.quality);
        if (!(js.pairs > 0)) fail_msg("nprobe %lld: join pairs %g", (long long)nprobe, js.pairs);
        assert_true(ss.pairs == 0);
    }
    free(sd);
    free(jd);
    free(sids);
    free(jids);
    free(x);
}

/* A stated quality on clustered data: 40 blobs of 150 rows, 64 lists (about
 * 1.6 per blob), nprobe 2.  The measure is the build's own (10-intersection
 * on every node). */
static void test_quality(void **state)
{
    (void)state;
    enum { n = 6000, dim = 32, k = 10 };
    float *x = sml_test_blobs(n, dim, 40, 0.9f, 5);
    int64_t *ids = sml_test_malloc(sizeof(int64_t) * n * k);
    float *dist = sml_test_malloc(sizeof(float) * n * k);
    simil_knn_graph_params p = join_params("IVF64,Flat", 2);
    p.quality = 1;
    simil_knn_graph_stats st;
    SML_ASSERT_OK(simil_knn_graph(&p, n, dim, x, k, ids, dist, &st));
    if (!(st.quality >= 0.95))
        fail_msg("IVF64,Flat nprobe 2 join (blobs seed 5, n=%d dim=%d): quality %.4f < 0.95", n,
                 dim, st.quality);
    /* and the pairs it computed are far fewer than all pairs */
    if (!(st.pairs < 0.5 * (double)n * n))
        fail_msg("join computed %g pairs of %g", st.pairs, (double)n * n);
    print_message("join quality %.4f, %.1f%% of all pairs\n", st.quality,
                  100.0 * st.pairs / ((double)n * n));
    free(dist);
    free(ids);
    free(x);
}

static void test_duplicates_and_k_beyond_n(void **state)
{
    (void)state;
    enum { n = 40, d = 5, k = 45 };
    float x[n * d];
    sml_test_fill_uniform(x, n * d, 8, 0, 1);
    for (int i = 20; i < n; i++) memcpy(x + i * d, x + (i - 20) * d, sizeof(float) * d);
    int64_t *ids = sml_test_malloc(sizeof(int64_t) * n * k);
    float *dist = sml_test_malloc(sizeof(float) * n * k);
    const char *indexes[] = {"Flat", "IVF4,Flat"};
    for (int t = 0; t < 2; t++) {
        simil_knn_graph_params p = join_params(indexes[t], 4);
        SML_ASSERT_OK(simil_knn_graph(&p, n, d, x, k, ids, dist, NULL));
        for (int64_t i = 0; i < n; i++) {
            /* the copy first, at distance 0, never the row itself */
            if (ids[i * k] != (i + 20) % 40 || !(fabsf(dist[i * k]) < 1e-5f))
                fail_msg("%s: row %lld: first %lld at %g, want its copy %lld at 0", indexes[t],
                         (long long)i, (long long)ids[i * k], dist[i * k],
                         (long long)((i + 20) % 40));
            for (int64_t j = 0; j < k; j++) {
                if (ids[i * k + j] == i) fail_msg("%s: row %lld lists itself", indexes[t],
                                                  (long long)i);
                if (j >= n - 1 && (ids[i * k + j] != -1 || !isinf(dist[i * k + j])))
                    fail_msg("%s: row %lld rank %lld: %lld, want an empty slot", indexes[t],
                             (long long)i, (long long)j, (long long)ids[i * k + j]);
            }
        }
    }
    free(dist);
    free(ids);
}

/* A source of rows that counts its calls, and a sink of graph rows. */
typedef struct counted_reader {
    const float *x;
    int64_t dim, calls;
} counted_reader;

static simil_status read_counted(void *user, int64_t first, int64_t count, float *out)
{
    counted_reader *r = user;
    memcpy(out, r->x + first * r->dim, sizeof(float) * (size_t)(count * r->dim));
    r->calls++;
    return SIMIL_OK;
}

/* The rows sorted by list on the backend after one pass over the source,
 * and where the sorted copy finds no memory (its allocation made to fail:
 * the one failure the build gets past), placed by a second pass: the same
 * graph bit for bit, the same quality (its sample captured in the first
 * pass either way), the second read every chunk once more. */
static void check_one_pass_equals_two(simil_metric metric, int64_t nprobe)
{
    enum { n = 1500, dim = 24, k = 8, batch = 200, chunks = (n + batch - 1) / batch };
    float *x = sml_test_blobs(n, dim, 10, 0.5f, 23);
    int64_t *ids1 = sml_test_malloc(sizeof(int64_t) * n * k);
    int64_t *ids2 = sml_test_malloc(sizeof(int64_t) * n * k);
    float *dist1 = sml_test_malloc(sizeof(float) * n * k);
    float *dist2 = sml_test_malloc(sizeof(float) * n * k);
    simil_knn_graph_params p = join_params("IVF16,Flat", nprobe);
    p.metric = metric;
    p.batch = batch;
    p.max_train = 1000;
    p.quality = 1;
    p.quality_sample = 300;
    char ctx[128];
    snprintf(ctx, sizeof ctx, "%s, IVF16 nprobe %lld (blobs seed 23, n=%d dim=%d batch=%d)",
             simil_metric_name(metric), (long long)nprobe, n, dim, batch);
    counted_reader r1 = {x, dim, 0};
    sml_test_sink s1 = {ids1, dist1, 0};
    simil_knn_graph_stats st1, st2;
    SML_ASSERT_OK(simil_knn_graph_stream(&p, n, dim, read_counted, &r1, k, sml_test_sink_rows, &s1,
                                         &st1));
    assert_int_equal(s1.next, n);
    int64_t at = 1;
    counted_reader r2;
    for (;; at++) {
        r2 = (counted_reader){x, dim, 0};
        sml_test_sink s2 = {ids2, dist2, 0};
        sml_alloc_fail_at(at, 0);
        simil_status s = simil_knn_graph_stream(&p, n, dim, read_counted, &r2, k,
                                                sml_test_sink_rows, &s2, &st2);
        int64_t made = sml_alloc_fail_at(0, 0);
        if (s == SIMIL_OK) {
            if (made < at) fail_msg("%s: no failing allocation the build got past", ctx);
            assert_int_equal(s2.next, n);
            break;
        }
        if (s != SIMIL_ERR_OUT_OF_MEMORY)
            fail_msg("%s: allocation %lld failing gave %s (%s)", ctx, (long long)at,
                     simil_status_name(s), simil_last_error());
    }
    if (r2.calls != r1.calls + chunks)
        fail_msg("%s: %lld reads with the fallback (allocation %lld failing), %lld without; "
                 "want %d more",
                 ctx, (long long)r2.calls, (long long)at, (long long)r1.calls, chunks);
    assert_memory_equal(ids2, ids1, sizeof(int64_t) * n * k);
    assert_memory_equal(dist2, dist1, sizeof(float) * n * k);
    if (st1.quality != st2.quality || !(st1.quality > 0.5))
        fail_msg("%s: quality %.17g in one pass, %.17g in two", ctx, st1.quality, st2.quality);
    assert_true(st1.pairs == st2.pairs);
    free(dist2);
    free(dist1);
    free(ids2);
    free(ids1);
    free(x);
}

static void test_one_pass_equals_two(void **state)
{
    (void)state;
    check_one_pass_equals_two(SIMIL_METRIC_L2, 2);
    check_one_pass_equals_two(SIMIL_METRIC_COSINE, 2);
    check_one_pass_equals_two(SIMIL_METRIC_IP, 3);
}

static void test_refused(void **state)
{
    (void)state;
    enum { n = 60, d = 8, k = 3 };
    float x[n * d];
    int64_t ids[n * k];
    float dist[n * k];
    sml_test_fill_uniform(x, n * d, 3, 0, 1);
    simil_knn_graph_params p = join_params("IVF4,PQ2x4", 2);
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_knn_graph(&p, n, d, x, k, ids, dist, NULL));
    assert_non_null(strstr(simil_last_error(), "list join takes Flat or IVF<n>,Flat"));
    /* AUTO takes the search for it */
    simil_knn_graph_stats st;
    p.method = SIMIL_KNN_GRAPH_AUTO;
    p.max_train = n;
    SML_ASSERT_OK(simil_knn_graph(&p, n, d, x, k, ids, dist, &st));
    assert_string_equal(st.method, "search");
    /* several devices: the search too */
    p.index = "Flat";
    p.device = "cpu:2";
    SML_ASSERT_OK(simil_knn_graph(&p, n, d, x, k, ids, dist, &st));
    assert_string_equal(st.method, "search");
    p.method = SIMIL_KNN_GRAPH_JOIN;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_knn_graph(&p, n, d, x, k, ids, dist, NULL));
    p.device = "cpu";
    p.method = (simil_knn_graph_method)7;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_knn_graph(&p, n, d, x, k, ids, dist, NULL));
    assert_non_null(strstr(simil_last_error(), "unknown method 7"));
    /* more lists than training rows */
    p = join_params("IVF64,Flat", 2);
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_knn_graph(&p, n, d, x, k, ids, dist, NULL));
    /* bad values, in the first chunk or a later one */
    p = join_params("IVF4,Flat", 2);
    p.batch = 16;
    x[50 * d + 3] = NAN;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_knn_graph(&p, n, d, x, k, ids, dist, NULL));
    p.index = "Flat";
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT, simil_knn_graph(&p, n, d, x, k, ids, dist, NULL));
    x[50 * d + 3] = 0.5f;
    /* an empty dataset is an empty graph */
    SML_ASSERT_OK(simil_knn_graph(&p, 0, d, NULL, k, NULL, NULL, &st));
    assert_string_equal(st.method, "join");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks),
        cmocka_unit_test(test_blocks_threads),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_exact),
        cmocka_unit_test(test_join_covers_search),
        cmocka_unit_test(test_quality),
        cmocka_unit_test(test_duplicates_and_k_beyond_n),
        cmocka_unit_test(test_one_pass_equals_two),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, free_params);
}
