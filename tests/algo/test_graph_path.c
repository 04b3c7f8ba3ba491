/* test_graph_path.c: bottleneck paths through k-NN graphs: optimal against a
 * brute force over every simple path of small random graphs (L2 and IP, ties,
 * empty slots, self-loops, edges that exist in one direction only), with ties
 * of the bottleneck going to the fewest hops, then the smallest sum of steps;
 * hand-made graphs, k-NN graphs of clumped points against a Kruskal oracle,
 * disconnected graphs, bad arguments and allocation failures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "util/test_util.h"

enum { MAXN = 8 };

typedef struct graph {
    int64_t n, k;
    int64_t ids[MAXN * 4];
    float dist[MAXN * 4];
} graph;

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Edge key as the search sees it: smaller is better. */
static float key_of(float d, simil_metric metric) { return metric == SIMIL_METRIC_L2 ? d : -d; }

/* The best cost of a path: the largest key, then the hops, then the sum of
 * the keys (added from the start, in double, as the search adds them). */
typedef struct cost {
    float worst;
    int64_t hops;
    double sum;
} cost;

static int cost_less(cost a, cost b)
{
    if (a.worst != b.worst) return a.worst < b.worst;
    if (a.hops != b.hops) return a.hops < b.hops;
    return a.sum < b.sum;
}

/* Best cost over the simple paths from u to `to`, given the nodes already on
 * the path; worst = INFINITY if none. */
static cost brute(const graph *g, simil_metric metric, int64_t u, int64_t to, cost so_far,
                  int *on_path)
{
    if (u == to) return so_far;
    cost best = {INFINITY, 0, 0};
    on_path[u] = 1;
    for (int64_t a = 0; a < g->n; a++)
        for (int64_t j = 0; j < g->k; j++) {
            int64_t b = g->ids[a * g->k + j], v;
            if (b < 0 || a == b) continue;
            if (a == u) v = b;
            else if (b == u) v = a;
            else continue;
            if (on_path[v]) continue;
            float key = key_of(g->dist[a * g->k + j], metric);
            cost next = {key > so_far.worst ? key : so_far.worst, so_far.hops + 1,
                         so_far.sum + (double)key};
            cost c = brute(g, metric, v, to, next, on_path);
            if (cost_less(c, best)) best = c;
        }
    on_path[u] = 0;
    return best;
}

/* 1 if the graph stores an edge u - v (either direction) of distance d. */
static int has_edge(const graph *g, int64_t u, int64_t v, float d)
{
    for (int64_t j = 0; j < g->k; j++)
        if ((g->ids[u * g->k + j] == v && g->dist[u * g->k + j] == d) ||
            (g->ids[v * g->k + j] == u && g->dist[v * g->k + j] == d))
            return 1;
    return 0;
}

static void check_pair(const graph *g, simil_metric metric, int64_t from, int64_t to,
                       const char *ctx)
{
    int on_path[MAXN] = {0};
    cost best = {-INFINITY, 0, 0};
    if (from != to) best = brute(g, metric, from, to, best, on_path);
    float want = best.worst;
    int64_t path[MAXN], len = -1;
    float steps[MAXN];
    simil_status s = simil_graph_path(g->ids, g->dist, g->n, g->k, metric, from, to, path, steps,
                                      &len);
    if (isinf(want) && want > 0) {
        if (s != SIMIL_ERR_INVALID_ARGUMENT || !strstr(simil_last_error(), "different components"))
            fail_msg("%s: %lld -> %lld: no path exists, got %s (%s)", ctx, (long long)from,
                     (long long)to, simil_status_name(s), simil_last_error());
        return;
    }
    if (s != SIMIL_OK)
        fail_msg("%s: %lld -> %lld: %s (%s)", ctx, (long long)from, (long long)to,
                 simil_status_name(s), simil_last_error());
    if (len < 1 || path[0] != from || path[len - 1] != to)
        fail_msg("%s: %lld -> %lld: path of %lld nodes from %lld to %lld", ctx, (long long)from,
                 (long long)to, (long long)len, (long long)path[0], (long long)path[len - 1]);
    float worst = -INFINITY;
    double sum = 0;
    int seen[MAXN] = {0};
    for (int64_t i = 0; i < len; i++) {
        if (seen[path[i]]) fail_msg("%s: node %lld visited twice", ctx, (long long)path[i]);
        seen[path[i]] = 1;
        if (i + 1 == len) break;
        if (!has_edge(g, path[i], path[i + 1], steps[i]))
            fail_msg("%s: step %lld -> %lld of %g is not an edge", ctx, (long long)path[i],
                     (long long)path[i + 1], steps[i]);
        float key = key_of(steps[i], metric);
        if (key > worst) worst = key;
        sum += (double)key;
    }
    if (worst != want)
        fail_msg("%s: %lld -> %lld: largest step key %g, optimum %g", ctx, (long long)from,
                 (long long)to, worst, want);
    if (len - 1 != best.hops || sum != best.sum)
        fail_msg("%s: %lld -> %lld: %lld hops of key sum %.17g; the fewest hops at that "
                 "bottleneck are %lld, with the smallest sum %.17g",
                 ctx, (long long)from, (long long)to, (long long)(len - 1), sum,
                 (long long)best.hops, best.sum);
}

static void random_graph(graph *g, uint64_t *rng, int ties)
{
    g->n = 2 + (int64_t)(rng_next(rng) % (MAXN - 1));
    g->k = 1 + (int64_t)(rng_next(rng) % 3);
    for (int64_t i = 0; i < g->n * g->k; i++) {
        uint64_t r = rng_next(rng);
        g->ids[i] = r % 5 == 0 ? -1 : (int64_t)(r / 5 % (uint64_t)g->n);
        r = rng_next(rng);
        g->dist[i] = ties ? (float)(r % 4) : (float)((double)(r >> 11) * 0x1.0p-53 * 10.0 - 2.0);
    }
}

static void test_brute_force(void **state)
{
    (void)state;
    uint64_t rng = 12345;
    const simil_metric metrics[] = {SIMIL_METRIC_L2, SIMIL_METRIC_IP};
    for (int trial = 0; trial < 600; trial++) {
        graph g;
        random_graph(&g, &rng, trial % 2);
        simil_metric metric = metrics[trial % 4 / 2];
        char ctx[96];
        snprintf(ctx, sizeof ctx, "seed 12345 trial %d (n=%lld k=%lld %s)", trial,
                 (long long)g.n, (long long)g.k, simil_metric_name(metric));
        for (int64_t a = 0; a < g.n; a++)
            for (int64_t b = 0; b < g.n; b++) check_pair(&g, metric, a, b, ctx);
    }
}

static void test_hand_made(void **state)
{
    (void)state;
    /* 0-1-2-3 with steps 1, 2, 1, and a direct 0-3 of 5: the long way wins;
     * the edges are stored on one side only (2 -> 1, 3 -> 2). */
    graph g = {4, 2, {1, 3, -1, -1, 1, -1, 2, -1}, {1, 5, 0, 0, 2, 0, 1, 0}};
    int64_t path[4], len;
    float steps[4];
    SML_ASSERT_OK(simil_graph_path(g.ids, g.dist, 4, 2, SIMIL_METRIC_L2, 0, 3, path, steps, &len));
    assert_int_equal(len, 4);
    int64_t want[] = {0, 1, 2, 3};
    float want_steps[] = {1, 2, 1};
    assert_memory_equal(path, want, sizeof want);
    assert_memory_equal(steps, want_steps, sizeof want_steps);
    /* backwards too */
    SML_ASSERT_OK(simil_graph_path(g.ids, g.dist, 4, 2, SIMIL_METRIC_L2, 3, 0, path, steps, &len));
    assert_int_equal(len, 4);
    assert_int_equal(path[0], 3);
    assert_int_equal(path[3], 0);
    /* as similarities the direct edge (5) is the best one */
    SML_ASSERT_OK(simil_graph_path(g.ids, g.dist, 4, 2, SIMIL_METRIC_IP, 0, 3, path, steps, &len));
    assert_int_equal(len, 2);
    assert_true(steps[0] == 5);
    /* from == to */
    SML_ASSERT_OK(simil_graph_path(g.ids, g.dist, 4, 2, SIMIL_METRIC_L2, 2, 2, path, NULL, &len));
    assert_int_equal(len, 1);
    assert_int_equal(path[0], 2);
}

/* A chain of 12 hops whose every step is 1, beside a way of 3 hops through
 * the same largest step 1 and a way of 3 hops through steps that add up to
 * less: the second search picks the 3 hops, then the smaller sum.  The ids
 * are laid so that the bottleneck search alone walks the chain: its nodes
 * come first by (bottleneck, id). */
static void test_fewest_hops(void **state)
{
    (void)state;
    enum { n = 17, k = 1 };
    int64_t ids[n];
    float dist[n];
    /* chain 0-1-2-...-12, then 12 is the target */
    for (int64_t i = 0; i < 12; i++) {
        ids[i] = i + 1;
        dist[i] = 1;
    }
    /* 0 - 13 - 14, steps 1 and 1, stored as 13 -> 0 and 14 -> 13 */
    ids[12] = -1;
    dist[12] = 0;
    ids[13] = 0;
    dist[13] = 1;
    ids[14] = 13;
    dist[14] = 1;
    /* 0 - 15 - 16, steps 0.25 and 1 */
    ids[15] = 0;
    dist[15] = 0.25f;
    ids[16] = 15;
    dist[16] = 1;
    int64_t path[n], len;
    float steps[n];
    /* without the 15-16 way: 14 -> 12 is missing, so the chain is the only way */
    SML_ASSERT_OK(simil_graph_path(ids, dist, n, k, SIMIL_METRIC_L2, 0, 12, path, steps, &len));
    assert_int_equal(len, 13);
    /* join 14 and 16 to 12 (steps 1 and 0.25) through a second column: two ways
     * of 3 hops at bottleneck 1, the one through 15 and 16 of the smaller sum */
    enum { k2 = 2 };
    int64_t ids2[n * k2];
    float dist2[n * k2];
    for (int64_t i = 0; i < n; i++) {
        ids2[i * k2] = ids[i];
        dist2[i * k2] = dist[i];
        ids2[i * k2 + 1] = -1;
        dist2[i * k2 + 1] = 0;
    }
    ids2[12 * k2] = 14;
    dist2[12 * k2] = 1;
    ids2[12 * k2 + 1] = 16;
    dist2[12 * k2 + 1] = 0.25f;
    SML_ASSERT_OK(simil_graph_path(ids2, dist2, n, k2, SIMIL_METRIC_L2, 0, 12, path, steps, &len));
    int64_t want[] = {0, 15, 16, 12};
    float want_steps[] = {0.25f, 1, 0.25f};
    assert_int_equal(len, 4);
    assert_memory_equal(path, want, sizeof want);
    assert_memory_equal(steps, want_steps, sizeof want_steps);
    /* and backwards */
    SML_ASSERT_OK(simil_graph_path(ids2, dist2, n, k2, SIMIL_METRIC_L2, 12, 0, path, steps, &len));
    int64_t back[] = {12, 16, 15, 0};
    assert_int_equal(len, 4);
    assert_memory_equal(path, back, sizeof back);
}

static void test_disconnected(void **state)
{
    (void)state;
    /* {0, 1, 2} and {3, 4} */
    int64_t ids[] = {1, 2, 0, 4, 3};
    float dist[] = {1, 1, 1, 1, 1};
    int64_t path[5], len = 99;
    SML_ASSERT_STATUS(SIMIL_ERR_INVALID_ARGUMENT,
                      simil_graph_path(ids, dist, 5, 1, SIMIL_METRIC_L2, 0, 4, path, NULL, &len));
    assert_string_equal(simil_last_error(),
                        "no path from 0 to 4: they are in different components of the k-NN "
                        "graph; use a larger k");
    assert_int_equal(len, 99);
    SML_ASSERT_OK(simil_graph_path(ids, dist, 5, 1, SIMIL_METRIC_L2, 4, 3, path, NULL, &len));
    assert_int_equal(len, 2);
}

/* Union-find for the oracle below. */
static int64_t find_root(int64_t *parent, int64_t a)
{
    while (parent[a] != a) a = parent[a] = parent[parent[a]];
    return a;
}

typedef struct edge {
    float d;
    int64_t u, v;
} edge;

static int edge_cmp(const void *pa, const void *pb)
{
    const edge *a = pa, *b = pb;
    return (a->d > b->d) - (a->d < b->d);
}

/* The best largest step between from and to is the distance at which they
 * join when the edges are added shortest first (Kruskal); INFINITY if never. */
static float kruskal_bottleneck(const int64_t *ids, const float *dist, int64_t n, int64_t k,
                                int64_t from, int64_t to)
{
    edge *e = sml_test_malloc(sizeof *e * (size_t)(n * k));
    int64_t *parent = sml_test_malloc(sizeof *parent * (size_t)n), m = 0;
    for (int64_t i = 0; i < n * k; i++)
        if (ids[i] >= 0) e[m++] = (edge){dist[i], i / k, ids[i]};
    qsort(e, (size_t)m, sizeof *e, edge_cmp);
    for (int64_t i = 0; i < n; i++) parent[i] = i;
    float at = INFINITY;
    for (int64_t i = 0; i < m && find_root(parent, from) != find_root(parent, to); i++) {
        parent[find_root(parent, e[i].u)] = find_root(parent, e[i].v);
        at = e[i].d;
    }
    if (find_root(parent, from) != find_root(parent, to)) at = INFINITY;
    free(parent);
    free(e);
    return at;
}

static void test_knn_graph_paths(void **state)
{
    (void)state;
    /* 2-d points in clumps, their exact 4-NN graph (several components), and
     * paths between many pairs against the Kruskal oracle */
    enum { n = 400, d = 2, k = 4 };
    float x[n * d];
    int64_t ids[n * k], path[n], len;
    float dist[n * k], steps[n];
    sml_test_fill_uniform(x, n * d, 31, 0, 1);
    for (int i = 0; i < n; i++) x[i * d] += (float)(i % 5) * 3.0f;
    simil_knn_graph_params p;
    simil_knn_graph_params_init(&p);
    p.device = "cpu";
    SML_ASSERT_OK(simil_knn_graph(&p, n, d, x, k, ids, dist, NULL));
    uint64_t rng = 5;
    int reached = 0, apart = 0;
    for (int t = 0; t < 200; t++) {
        int64_t from = (int64_t)(rng_next(&rng) % n), to = (int64_t)(rng_next(&rng) % n);
        float want = kruskal_bottleneck(ids, dist, n, k, from, to);
        simil_status s =
            simil_graph_path(ids, dist, n, k, SIMIL_METRIC_L2, from, to, path, steps, &len);
        if (isinf(want)) {
            assert_int_equal(s, SIMIL_ERR_INVALID_ARGUMENT);
            apart++;
            continue;
        }
        if (s != SIMIL_OK) fail_msg("seed 31, %lld -> %lld: %s", (long long)from, (long long)to,
                                    simil_last_error());
        float worst = from == to ? INFINITY : 0;
        for (int64_t i = 0; i + 1 < len; i++) worst = fmaxf(worst, steps[i]);
        if (worst != want)
            fail_msg("seed 31, %lld -> %lld: largest step %g, Kruskal says %g", (long long)from,
                     (long long)to, worst, want);
        assert_int_equal(path[0], from);
        assert_int_equal(path[len - 1], to);
        reached++;
    }
    assert_true(reached > 20 && apart > 20); /* both cases were exercised */
}

static void test_bad_arguments(void **state)
{
    (void)state;
    int64_t ids[] = {1, 0, 1};
    float dist[] = {1, 1, 1};
    int64_t path[3], len;
    const simil_status bad = SIMIL_ERR_INVALID_ARGUMENT;
    SML_ASSERT_STATUS(bad, simil_graph_path(ids, dist, 3, 1, SIMIL_METRIC_L2, 0, 3, path, NULL, &len));
    SML_ASSERT_STATUS(bad, simil_graph_path(ids, dist, 3, 1, SIMIL_METRIC_L2, -1, 0, path, NULL, &len));
    SML_ASSERT_STATUS(bad, simil_graph_path(ids, dist, 0, 1, SIMIL_METRIC_L2, 0, 0, path, NULL, &len));
    SML_ASSERT_STATUS(bad, simil_graph_path(NULL, dist, 3, 1, SIMIL_METRIC_L2, 0, 1, path, NULL, &len));
    SML_ASSERT_STATUS(bad, simil_graph_path(ids, dist, 3, 1, SIMIL_METRIC_L2, 0, 1, NULL, NULL, &len));
    SML_ASSERT_STATUS(bad, simil_graph_path(ids, dist, 3, 1, (simil_metric)7, 0, 1, path, NULL, &len));
    ids[2] = 3; /* outside the graph */
    SML_ASSERT_STATUS(bad, simil_graph_path(ids, dist, 3, 1, SIMIL_METRIC_L2, 0, 1, path, NULL, &len));
    assert_non_null(strstr(simil_last_error(), "ids[2][0]=3"));
    ids[2] = 1;
    dist[1] = NAN;
    SML_ASSERT_STATUS(bad, simil_graph_path(ids, dist, 3, 1, SIMIL_METRIC_L2, 0, 1, path, NULL, &len));
    assert_non_null(strstr(simil_last_error(), "NaN"));
    dist[1] = 1;
    /* k = 0: only the trivial path */
    SML_ASSERT_OK(simil_graph_path(NULL, NULL, 3, 0, SIMIL_METRIC_L2, 1, 1, path, NULL, &len));
    SML_ASSERT_STATUS(bad, simil_graph_path(NULL, NULL, 3, 0, SIMIL_METRIC_L2, 1, 2, path, NULL, &len));
}

static void test_alloc_failures(void **state)
{
    (void)state;
    graph g = {4, 2, {1, 3, -1, -1, 1, -1, 2, -1}, {1, 5, 0, 0, 2, 0, 1, 0}};
    int64_t path[4], len;
    int failures = 0;
    for (int64_t at = 1; at < 100; at++) {
        sml_alloc_fail_at(at, 0);
        simil_status s = simil_graph_path(g.ids, g.dist, 4, 2, SIMIL_METRIC_L2, 0, 3, path, NULL,
                                          &len);
        sml_alloc_fail_at(0, 0);
        if (s == SIMIL_OK) break;
        assert_int_equal(s, SIMIL_ERR_OUT_OF_MEMORY);
        failures++;
    }
    assert_int_equal(failures, 11); /* 4 for the graph, 7 for the searches */
    assert_int_equal(len, 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_brute_force),
        cmocka_unit_test(test_hand_made),
        cmocka_unit_test(test_fewest_hops),
        cmocka_unit_test(test_disconnected),
        cmocka_unit_test(test_knn_graph_paths),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
