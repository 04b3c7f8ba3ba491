/* graph_path.c: simil_graph_path, the path through a k-NN graph whose largest
 * step is as small as possible (the GPU paper's "paths through the graph",
 * which gives smooth transitions between images).
 *
 * The graph rows are turned into an undirected adjacency list (CSR: every
 * stored edge u -> v appears under u and under v), then a Dijkstra search
 * runs with "length" max(bottleneck so far, edge) instead of a sum.  That
 * cost never decreases along a path, so the first time a node leaves the heap
 * its bottleneck is optimal, as for ordinary shortest paths.
 *
 * Many paths usually share the optimal bottleneck B, and the first search
 * returns whichever it met first (on Fashion-MNIST, 36 hops where 8 reach the
 * same B).  A second search keeps only the edges of key <= B and finds the
 * fewest hops, then the smallest sum of keys.  The two cannot be one search
 * with the cost (bottleneck, hops, sum): a path that loses on its bottleneck
 * may win on hops once an edge larger than both bottlenecks is added, so that
 * cost breaks Dijkstra's premise that a better prefix gives a better path.
 * (hops, sum) keeps it: every edge adds one hop, whatever its key's sign.
 *
 * The heap is an indexed binary heap keyed by (cost, node id), so ties are
 * broken the same way on every run.  Edge keys are the distances for L2 and
 * the negated similarities for IP and cosine: minimizing the largest key then
 * maximizes the smallest similarity. */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "simil/graph.h"

typedef struct sml_path_graph {
    int64_t n;
    int64_t *start;  /* n + 1: node u's edges are [start[u], start[u + 1]) */
    int64_t *to;     /* 2 x edges */
    float *key;      /* 2 x edges */
} sml_path_graph;

typedef struct sml_path_search {
    int by_hops;     /* 0: the bottleneck search; 1: hops, then sum, within limit */
    float limit;     /* the second search walks edges of key <= limit */
    float *best;     /* n: smallest largest-key of a path found so far */
    int64_t *hops;   /* n, second search: fewest edges of a path found so far, */
    double *sum;     /*   and the smallest sum of its keys */
    int64_t *parent; /* n: previous node on that path, -1 before reached */
    float *via;      /* n: key of the edge parent -> node */
    int64_t *heap;   /* n nodes */
    int64_t *pos;    /* n: place in heap, -1 not queued, -2 settled */
    int64_t size;
} sml_path_search;

static simil_status sml_path_check(const int64_t *ids, const float *distances, int64_t n,
                                   int64_t k)
{
    for (int64_t u = 0; u < n; u++)
        for (int64_t j = 0; j < k; j++) {
            int64_t v = ids[u * k + j];
            SML_RETURN_IF(v < -1 || v >= n, SIMIL_ERR_INVALID_ARGUMENT,
                          "graph path: ids[%" PRId64 "][%" PRId64 "]=%" PRId64
                          " is outside the %" PRId64 " nodes",
                          u, j, v, n);
            SML_RETURN_IF(v >= 0 && isnan(distances[u * k + j]), SIMIL_ERR_INVALID_ARGUMENT,
                          "graph path: distances[%" PRId64 "][%" PRId64 "] is NaN", u, j);
        }
    return SIMIL_OK;
}

static void sml_path_graph_free(sml_path_graph *g)
{
    sml_free(g->start);
    sml_free(g->to);
    sml_free(g->key);
}

/* The undirected adjacency list of the rows; self-loops and -1 slots left out. */
static simil_status sml_path_graph_build(sml_path_graph *g, const int64_t *ids,
                                         const float *distances, int64_t n, int64_t k,
                                         simil_metric metric)
{
    int64_t *fill = NULL, edges = 0;
    g->n = n;
    SML_TRY(sml_calloc((void **)&g->start, (size_t)n + 1, sizeof *g->start, "a graph"));
    for (int64_t u = 0; u < n; u++)
        for (int64_t j = 0; j < k; j++) {
            int64_t v = ids[u * k + j];
            if (v < 0 || v == u) continue;
            g->start[u + 1]++;
            g->start[v + 1]++;
            edges += 2;
        }
    for (int64_t u = 0; u < n; u++) g->start[u + 1] += g->start[u];
    SML_TRY(sml_alloc((void **)&g->to, (size_t)(edges > 0 ? edges : 1), sizeof *g->to, "a graph"));
    SML_TRY(sml_alloc((void **)&g->key, (size_t)(edges > 0 ? edges : 1), sizeof *g->key,
                      "a graph"));
    SML_TRY(sml_alloc((void **)&fill, (size_t)n, sizeof *fill, "a graph"));
    memcpy(fill, g->start, sizeof *fill * (size_t)n);
    float sign = metric == SIMIL_METRIC_L2 ? 1.0f : -1.0f;
    for (int64_t u = 0; u < n; u++)
        for (int64_t j = 0; j < k; j++) {
            int64_t v = ids[u * k + j];
            if (v < 0 || v == u) continue;
            float key = sign * distances[u * k + j];
            g->to[fill[u]] = v;
            g->key[fill[u]++] = key;
            g->to[fill[v]] = u;
            g->key[fill[v]++] = key;
        }
    sml_free(fill);
    return SIMIL_OK;
}

/* ---- the indexed heap ---- */

static int sml_heap_less(const sml_path_search *s, int64_t a, int64_t b)
{
    if (s->by_hops) {
        if (s->hops[a] != s->hops[b]) return s->hops[a] < s->hops[b];
        if (s->sum[a] != s->sum[b]) return s->sum[a] < s->sum[b];
        return a < b;
    }
    return s->best[a] < s->best[b] || (s->best[a] == s->best[b] && a < b);
}

static void sml_heap_place(sml_path_search *s, int64_t i, int64_t node)
{
    s->heap[i] = node;
    s->pos[node] = i;
}

static void sml_heap_up(sml_path_search *s, int64_t i)
{
    int64_t node = s->heap[i];
    while (i > 0 && sml_heap_less(s, node, s->heap[(i - 1) / 2])) {
        sml_heap_place(s, i, s->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    sml_heap_place(s, i, node);
}

static void sml_heap_down(sml_path_search *s, int64_t i)
{
    int64_t node = s->heap[i];
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= s->size) break;
        if (c + 1 < s->size && sml_heap_less(s, s->heap[c + 1], s->heap[c])) c++;
        if (!sml_heap_less(s, s->heap[c], node)) break;
        sml_heap_place(s, i, s->heap[c]);
        i = c;
    }
    sml_heap_place(s, i, node);
}

static int64_t sml_heap_pop(sml_path_search *s)
{
    int64_t top = s->heap[0];
    s->pos[top] = -2;
    if (--s->size > 0) {
        s->heap[0] = s->heap[s->size];
        sml_heap_down(s, 0);
    }
    return top;
}

/* ---- the search ---- */

static void sml_path_search_free(sml_path_search *s)
{
    sml_free(s->best);
    sml_free(s->hops);
    sml_free(s->sum);
    sml_free(s->parent);
    sml_free(s->via);
    sml_free(s->heap);
    sml_free(s->pos);
}

static void sml_path_search_reset(sml_path_search *s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        s->parent[i] = -1;
        s->pos[i] = -1;
    }
    s->size = 0;
}

static simil_status sml_path_search_alloc(sml_path_search *s, int64_t n)
{
    size_t m = (size_t)n;
    SML_TRY(sml_alloc((void **)&s->best, m, sizeof *s->best, "a path search"));
    SML_TRY(sml_alloc((void **)&s->hops, m, sizeof *s->hops, "a path search"));
    SML_TRY(sml_alloc((void **)&s->sum, m, sizeof *s->sum, "a path search"));
    SML_TRY(sml_alloc((void **)&s->parent, m, sizeof *s->parent, "a path search"));
    SML_TRY(sml_alloc((void **)&s->via, m, sizeof *s->via, "a path search"));
    SML_TRY(sml_alloc((void **)&s->heap, m, sizeof *s->heap, "a path search"));
    SML_TRY(sml_alloc((void **)&s->pos, m, sizeof *s->pos, "a path search"));
    sml_path_search_reset(s, n);
    return SIMIL_OK;
}

/* Offer v the path through u over an edge of key: keep it if v was not
 * reached yet or if it lowers v's cost. */
static void sml_path_relax(sml_path_search *s, int64_t u, int64_t v, float key)
{
    if (s->pos[v] == -2) return;
    if (s->by_hops) {
        if (!(key <= s->limit)) return;
        int64_t hops = s->hops[u] + 1;
        double sum = s->sum[u] + (double)key;
        if (s->pos[v] >= 0 && (hops > s->hops[v] || (hops == s->hops[v] && !(sum < s->sum[v]))))
            return;
        s->hops[v] = hops;
        s->sum[v] = sum;
    } else {
        float cand = key > s->best[u] ? key : s->best[u];
        if (s->pos[v] >= 0 && !(cand < s->best[v])) return;
        s->best[v] = cand;
    }
    s->parent[v] = u;
    s->via[v] = key;
    if (s->pos[v] < 0) {
        s->pos[v] = s->size;
        s->heap[s->size++] = v;
    }
    sml_heap_up(s, s->pos[v]);
}

/* Run until `to` is settled; 1 if it was reached. */
static int sml_path_run(const sml_path_graph *g, sml_path_search *s, int64_t from, int64_t to)
{
    s->best[from] = -INFINITY;
    s->hops[from] = 0;
    s->sum[from] = 0;
    s->pos[from] = 0;
    s->heap[0] = from;
    s->size = 1;
    while (s->size > 0) {
        int64_t u = sml_heap_pop(s);
        if (u == to) return 1;
        for (int64_t e = g->start[u]; e < g->start[u + 1]; e++)
            sml_path_relax(s, u, g->to[e], g->key[e]);
    }
    return 0;
}

/* Walk the parents back from `to` and write the path forwards. */
static void sml_path_write(const sml_path_search *s, int64_t from, int64_t to, float sign,
                           int64_t *path, float *steps, int64_t *length)
{
    int64_t len = 1;
    for (int64_t v = to; v != from; v = s->parent[v]) len++;
    int64_t i = len - 1;
    for (int64_t v = to; ; v = s->parent[v], i--) {
        path[i] = v;
        if (v == from) break;
        if (steps != NULL) steps[i - 1] = sign * s->via[v];
    }
    *length = len;
}

simil_status simil_graph_path(const int64_t *ids, const float *distances, int64_t n, int64_t k,
                              simil_metric metric, int64_t from, int64_t to, int64_t *path,
                              float *steps, int64_t *length)
{
    SML_RETURN_IF(path == NULL || length == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "graph path: path and length must not be NULL");
    SML_RETURN_IF(n < 1 || k < 0 || (k > 0 && n > (INT64_MAX / 4) / k),
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "graph path: n=%" PRId64 " and k=%" PRId64 " must be >= 1 and >= 0", n, k);
    SML_RETURN_IF(k > 0 && (ids == NULL || distances == NULL), SIMIL_ERR_INVALID_ARGUMENT,
                  "graph path: ids and distances must not be NULL");
    SML_RETURN_IF(metric != SIMIL_METRIC_L2 && metric != SIMIL_METRIC_IP &&
                      metric != SIMIL_METRIC_COSINE,
                  SIMIL_ERR_INVALID_ARGUMENT, "graph path: unknown metric %d", (int)metric);
    SML_RETURN_IF(from < 0 || from >= n || to < 0 || to >= n, SIMIL_ERR_INVALID_ARGUMENT,
                  "graph path: nodes %" PRId64 " and %" PRId64 " must be in [0, %" PRId64 ")",
                  from, to, n);
    SML_TRY(sml_path_check(ids, distances, n, k));
    if (from == to) {
        path[0] = from;
        *length = 1;
        return SIMIL_OK;
    }
    sml_path_graph g = {0};
    sml_path_search s = {0};
    simil_status st = sml_path_graph_build(&g, ids, distances, n, k, metric);
    if (st == SIMIL_OK) st = sml_path_search_alloc(&s, n);
    if (st == SIMIL_OK && !sml_path_run(&g, &s, from, to))
        st = sml_error(SIMIL_ERR_INVALID_ARGUMENT,
                       "no path from %" PRId64 " to %" PRId64 ": they are in different "
                       "components of the k-NN graph; use a larger k",
                       from, to);
    if (st == SIMIL_OK) {
        /* the bottleneck is known: now the fewest hops, then the smallest sum */
        s.by_hops = 1;
        s.limit = s.best[to];
        sml_path_search_reset(&s, n);
        int reached = sml_path_run(&g, &s, from, to);
        assert(reached); /* the first search's path qualifies */
        (void)reached;
    }
    if (st == SIMIL_OK)
        sml_path_write(&s, from, to, metric == SIMIL_METRIC_L2 ? 1.0f : -1.0f, path, steps,
                       length);
    sml_path_search_free(&s);
    sml_path_graph_free(&g);
    return st;
}
