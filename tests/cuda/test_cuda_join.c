/* test_cuda_join.c: the list join on the GPU against the CPU backend.
 *   - the backend op on hand-made lists: empty lists, lists of fewer rows than
 *     k, lists cut into two blocks, blocks of one row, rows with fewer
 *     candidates than k, candidates from one row to thousands, several calls
 *     over block ranges, L2, IP and cosine (IP of normalized rows), odd
 *     dimensions, k from 1 to past 32 (the fused kernel's first-tile bound
 *     stops there) and past what its shared memory holds (k = 1000:
 *     the per-block exact search, with the fp16 shadow and without);
 *   - whole graphs: the exact graph (Flat) against the float64 reference, and
 *     IVF joins whose rows are never worse than the GPU's per-query search
 *     with the same index and nprobe, and whose quality is at least its. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "cuda/cuda_backend.h"
#include "util/test_util.h"

static const double rel_tol = 1e-4;

/* The matrix of one join on one backend: rows, norms, labels (row numbers),
 * and the shadow if asked. */
typedef struct side {
    sml_backend *b;
    float *x, *norms;
    int64_t *ids;
    void *shadow;
} side;

static void side_open(side *s, sml_backend *b, const float *x, int64_t n, int64_t dim,
                      simil_metric metric, int shadow)
{
    memset(s, 0, sizeof *s);
    s->b = b;
    size_t nn = (size_t)(n > 0 ? n : 1);
    int64_t *ids = sml_test_malloc(sizeof *ids * nn);
    for (int64_t i = 0; i < n; i++) ids[i] = i;
    SML_ASSERT_OK(b->ops->mem_alloc(b, sizeof(float) * nn * (size_t)dim, (void **)&s->x));
    SML_ASSERT_OK(b->ops->mem_upload(b, s->x, x, sizeof(float) * (size_t)(n * dim)));
    SML_ASSERT_OK(b->ops->mem_alloc(b, sizeof(int64_t) * nn, (void **)&s->ids));
    SML_ASSERT_OK(b->ops->mem_upload(b, s->ids, ids, sizeof(int64_t) * (size_t)n));
    if (metric == SIMIL_METRIC_L2) {
        SML_ASSERT_OK(b->ops->mem_alloc(b, sizeof(float) * nn, (void **)&s->norms));
        SML_ASSERT_OK(b->ops->row_norms(b, n, dim, s->x, s->norms));
    }
    if (shadow && b->ops->shadow_sync != NULL)
        SML_ASSERT_OK(b->ops->shadow_sync(b, &s->shadow, s->x, 0, n, dim, metric));
    free(ids);
}

static void side_close(side *s)
{
    sml_backend *b = s->b;
    if (s->shadow) b->ops->shadow_free(b, s->shadow);
    b->ops->mem_free(b, s->x);
    b->ops->mem_free(b, s->ids);
    if (s->norms) b->ops->mem_free(b, s->norms);
}

/* Run the join of every block in `calls` calls over block ranges. */
static void run_join(const side *s, sml_join_args a, int calls, float *dist, int64_t *labels)
{
    a.x = s->x;
    a.norms = s->norms;
    a.ids = s->ids;
    a.shadow = s->shadow;
    a.distances = dist;
    a.labels = labels;
    for (int c = 0; c < calls; c++) {
        a.block_begin = a.nblock * c / calls;
        a.block_end = a.nblock * (c + 1) / calls;
        SML_ASSERT_OK(s->b->ops->knn_join(s->b, &a));
    }
}

/* nlist lists of random sizes (some empty, some of one row), each joined
 * with itself and up to `extra` random other lists; every third list of 4
 * rows or more is two blocks, its first half joined with itself alone. */
/* With ties != 0 the rows are small integers instead of blobs: many rows
 * are equal and many distances tie, all exact in fp32 whatever the order of
 * the sums, so both backends must return the same labels (ties by label)
 * and the same distances, bit for bit. */
static void check_op(int64_t nlist, int64_t max_list, int64_t extra, int64_t dim, int64_t k,
                     simil_metric metric, int shadow, int ties, uint64_t seed)
{
    const int cosine = metric == SIMIL_METRIC_COSINE;
    if (cosine) metric = SIMIL_METRIC_IP;
    char ctx[192];
    snprintf(ctx, sizeof ctx,
             "join op %s nlist=%lld max_list=%lld extra=%lld dim=%lld k=%lld shadow=%d ties=%d "
             "seed=%llu",
             cosine ? "cosine" : simil_metric_name(metric), (long long)nlist, (long long)max_list,
             (long long)extra, (long long)dim, (long long)k, shadow, ties,
             (unsigned long long)seed);
    uint64_t rng = seed;
    int64_t *offset = sml_test_malloc(sizeof(int64_t) * (size_t)(nlist + 1));
    int64_t *block_offset = sml_test_malloc(sizeof(int64_t) * (size_t)(2 * nlist + 1));
    int64_t *cand_offset = sml_test_malloc(sizeof(int64_t) * (size_t)(2 * nlist + 1));
    int64_t *cand = sml_test_malloc(sizeof(int64_t) * (size_t)(2 * nlist * (extra + 1)));
    int64_t nblock = 0;
    offset[0] = 0;
    block_offset[0] = 0;
    cand_offset[0] = 0;
    for (int64_t l = 0; l < nlist; l++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int64_t size = (int64_t)((rng >> 33) % (uint64_t)(max_list + 1));
        if (l % 7 == 3) size = 0;
        if (l % 7 == 5) size = 1;
        offset[l + 1] = offset[l] + size;
        if (size >= 4 && l % 3 == 0) {
            block_offset[nblock + 1] = offset[l] + size / 2;
            cand[cand_offset[nblock]] = l;
            cand_offset[nblock + 1] = cand_offset[nblock] + 1;
            nblock++;
        }
        /* itself, then distinct others */
        int64_t c = cand_offset[nblock];
        cand[c++] = l;
        for (int64_t e = 0; e < extra; e++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int64_t o = (int64_t)((rng >> 33) % (uint64_t)nlist), dup = 0;
            for (int64_t t = cand_offset[nblock]; t < c; t++) dup |= cand[t] == o;
            if (!dup) cand[c++] = o;
        }
        block_offset[nblock + 1] = offset[l + 1];
        cand_offset[++nblock] = c;
    }
    int64_t n = offset[nlist];
    float *x = sml_test_blobs(n, dim, 5, 0.5f, seed);
    for (int64_t i = 0; ties && i < n * dim; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((rng >> 33) % 5) - 2.0f;
    }
    if (cosine) sml_test_normalize(x, n, dim);
    sml_backend *gpu, *cpu;
    SML_ASSERT_OK(sml_cuda_backend_open(0, &gpu));
    SML_ASSERT_OK(sml_cpu_backend_open(&cpu));
    side g, c;
    side_open(&g, gpu, x, n, dim, metric, shadow);
    side_open(&c, cpu, x, n, dim, metric, 0);
    sml_join_args a = {.n = n, .dim = dim, .list_offset = offset, .nlist = nlist,
                       .block_offset = block_offset, .nblock = nblock,
                       .cand_offset = cand_offset, .cand_lists = cand, .k = k, .metric = metric};
    size_t out = (size_t)(n * k + 1);
    float *dg = sml_test_malloc(sizeof(float) * out), *dc = sml_test_malloc(sizeof(float) * out);
    int64_t *lg = sml_test_malloc(sizeof(int64_t) * out);
    int64_t *lc = sml_test_malloc(sizeof(int64_t) * out);
    run_join(&g, a, 3, dg, lg);
    run_join(&c, a, 1, dc, lc);
    sml_test_check_same(ctx, x, n, x, n, dim, k, metric, dg, lg, dc, lc, rel_tol);
    for (int64_t i = 0; ties && i < n * k; i++)
        if (lg[i] != lc[i] || dg[i] != dc[i])
            fail_msg("%s: row %lld rank %lld: label %lld distance %.9g, cpu %lld %.9g", ctx,
                     (long long)(i / k), (long long)(i % k), (long long)lg[i], dg[i],
                     (long long)lc[i], dc[i]);
    side_close(&g);
    side_close(&c);
    sml_backend_close(gpu);
    sml_backend_close(cpu);
    free(lc);
    free(lg);
    free(dc);
    free(dg);
    free(x);
    free(cand);
    free(cand_offset);
    free(block_offset);
    free(offset);
}

static void test_op(void **state)
{
    (void)state;
    int quick = sml_test_quick();
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP, SIMIL_METRIC_COSINE};
    for (int m = 0; m < 3; m++)
        for (int shadow = 0; shadow < 2; shadow++) {
            check_op(12, 40, 3, 33, 11, metrics[m], shadow, 0, 1);     /* lists smaller than k */
            check_op(12, 8, 0, 7, 11, metrics[m], shadow, 0, 5);       /* every row: < k */
            check_op(30, 300, 4, 96, 11, metrics[m], shadow, 0, 2);
            check_op(9, quick ? 600 : 3000, 2, 1, 5, metrics[m], shadow, 0, 3);
            check_op(20, 200, 3, 50, 1, metrics[m], shadow, 0, 6);
            check_op(20, 300, 3, 40, 32, metrics[m], shadow, 0, 7);
            check_op(20, 300, 3, 40, 33, metrics[m], shadow, 0, 7);
            check_op(10, 600, 2, 24, 200, metrics[m], shadow, 0, 8);
            check_op(6, 1200, 1, 16, 1000, metrics[m], shadow, 0, 9); /* the per-block search */
            if (!quick) check_op(8, 5000, 7, 784, 64, metrics[m], shadow, 0, 4);
            if (m < 2) {
                check_op(15, 400, 3, 8, 11, metrics[m], shadow, 1, 10);
                check_op(15, 400, 3, 8, 40, metrics[m], shadow, 1, 11);
            }
        }
}

/* ---- whole graphs ---- */

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

static simil_knn_graph_params gpu_params(const char *index, int64_t nprobe,
                                         simil_knn_graph_method method)
{
    simil_knn_graph_params p;
    simil_knn_graph_params_init(&p);
    p.method = method;
    p.index = index;
    p.device = "gpu";
    p.search = params_nprobe(nprobe);
    return p;
}

static void test_exact_graph(void **state)
{
    (void)state;
    const int64_t n = sml_test_quick() ? 800 : 4000, dim = 50, k = 10;
    float *x = sml_test_blobs(n, dim, 30, 0.3f, 9);
    int64_t *ids = sml_test_malloc(sizeof(int64_t) * (size_t)(n * k));
    float *dist = sml_test_malloc(sizeof(float) * (size_t)(n * k));
    simil_knn_graph_params p = gpu_params("Flat", 0, SIMIL_KNN_GRAPH_AUTO);
    p.batch = n / 3 + 1; /* several chunks */
    simil_knn_graph_stats st;
    SML_ASSERT_OK(simil_knn_graph(&p, n, dim, x, k, ids, dist, &st));
    assert_string_equal(st.method, "join");
    assert_non_null(strstr(st.backend, "cuda"));
    float *ref_d = sml_test_malloc(sizeof(float) * (size_t)(n * k));
    int64_t *ref_l = sml_test_malloc(sizeof(int64_t) * (size_t)(n * k));
    sml_test_reference_graph(x, n, dim, k, SIMIL_METRIC_L2, ref_l, ref_d);
    char ctx[128];
    snprintf(ctx, sizeof ctx, "gpu exact graph (blobs seed 9, n=%lld dim=%lld k=%lld)",
             (long long)n, (long long)dim, (long long)k);
    sml_test_check_same(ctx, x, n, x, n, dim, k, SIMIL_METRIC_L2, dist, ids, ref_d, ref_l,
                        rel_tol);
    free(ref_l);
    free(ref_d);
    free(dist);
    free(ids);
    free(x);
}

static void test_join_covers_search(void **state)
{
    (void)state;
    const int64_t n = sml_test_quick() ? 3000 : 20000, dim = 96, k = 10;
    float *x = sml_test_blobs(n, dim, 50, 1.0f, 13);
    int64_t *jl = sml_test_malloc(sizeof(int64_t) * (size_t)(n * k));
    int64_t *sl = sml_test_malloc(sizeof(int64_t) * (size_t)(n * k));
    float *jd = sml_test_malloc(sizeof(float) * (size_t)(n * k));
    float *sd = sml_test_malloc(sizeof(float) * (size_t)(n * k));
    for (int64_t nprobe = 1; nprobe <= 2; nprobe++) {
        simil_knn_graph_params p = gpu_params("IVF64,Flat", nprobe, SIMIL_KNN_GRAPH_JOIN);
        p.quality = 1;
        simil_knn_graph_stats js, ss;
        SML_ASSERT_OK(simil_knn_graph(&p, n, dim, x, k, jl, jd, &js));
        p.method = SIMIL_KNN_GRAPH_SEARCH;
        SML_ASSERT_OK(simil_knn_graph(&p, n, dim, x, k, sl, sd, &ss));
        print_message("IVF64,Flat nprobe %lld: join quality %.4f (%.3f s), search %.4f (%.3f s)\n",
                      (long long)nprobe, js.quality, js.search_seconds, ss.quality,
                      ss.search_seconds);
        for (int64_t i = 0; i < n * k; i++) {
            if (sl[i] < 0) continue;
            if (!(jd[i] <= sd[i] + 1e-4 * (fabs(sd[i]) + 1)))
                fail_msg("nprobe %lld, row %lld rank %lld: join %.9g > search %.9g (blobs seed "
                         "13, n=%lld dim=%lld)",
                         (long long)nprobe, (long long)(i / k), (long long)(i % k), jd[i], sd[i],
                         (long long)n, (long long)dim);
        }
        if (!(js.quality >= ss.quality))
            fail_msg("nprobe %lld: join quality %g below the search's %g", (long long)nprobe,
                     js.quality, ss.quality);
    }
    free(sd);
    free(jd);
    free(sl);
    free(jl);
    free(x);
}

int main(void)
{
    sml_test_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op),
        cmocka_unit_test(test_exact_graph),
        cmocka_unit_test(test_join_covers_search),
    };
    return cmocka_run_group_tests(tests, NULL, free_params);
}
