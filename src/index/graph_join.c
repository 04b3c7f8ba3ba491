/* graph_join.c: k-NN graphs by the list join (algo/knn_join.h), driven from
 * a source of rows to a sink of graph rows as graph_api.c drives the
 * per-query build.
 *
 * Stages, each a pass over the source in chunks of params->batch rows:
 *   train  (IVF<n>,Flat): k-means on a seeded sample of at most max_train
 *          rows, with the settings an IVF index trains with, so that the
 *          lists are those of the per-query build's index;
 *   add    (IVF<n>,Flat) pass 1: the rows into backend memory as they
 *          come, and each row's nprobe nearest lists; then the rows sorted
 *          by list there, or where the backend has no room for a sorted
 *          copy, pass 2: the rows again, each into its place (Flat: one
 *          pass, the rows into backend memory as they come);
 *   search the join (or for Flat, each chunk against all rows), and the
 *          graph rows handed to the sink in order.
 * Rows are checked and, for cosine, normalized chunk by chunk on the way in,
 * as an index prepares them. */
#include <stdio.h>
#include <string.h>

#include "algo/knn_graph.h"
#include "algo/knn_join.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/trace.h"
#include "core/progress.h"
#include "core/vectors.h"
#include "index/graph_build.h"
#include "index/index_internal.h"
#include "index/index_spec.h"
#include "index/ivf.h"

simil_status sml_graph_join_applies(const simil_knn_graph_params *p, int64_t dim, int *join,
                                    int64_t *nlist)
{
    *join = 0;
    *nlist = 0;
    SML_RETURN_IF(p->method != SIMIL_KNN_GRAPH_AUTO && p->method != SIMIL_KNN_GRAPH_JOIN &&
                      p->method != SIMIL_KNN_GRAPH_SEARCH,
                  SIMIL_ERR_INVALID_ARGUMENT, "k-NN graph: unknown method %d", (int)p->method);
    if (p->method == SIMIL_KNN_GRAPH_SEARCH) return SIMIL_OK;
    sml_index_spec spec;
    sml_placement place;
    simil_status s = sml_index_spec_parse(p->index, dim, &spec);
    int fits = s == SIMIL_OK && spec.shards == 0 && spec.opq_m == 0 && !spec.refine &&
               spec.encoding == SML_ENCODING_FLAT;
    if (s == SIMIL_OK) s = sml_device_placement(p->device, &place);
    fits = fits && s == SIMIL_OK && place.count == 1 && place.replicas == 1;
    if (p->method == SIMIL_KNN_GRAPH_AUTO) {
        sml_error_clear(); /* the search build reports a bad index or device itself */
        /* The join wins on the CPU and, since it runs as one fused launch per
         * call, on a GPU too (H100, 2026-11-25, docs/knn-graph.md: mix10M
         * IVF4096,Flat joined at nprobe 2 in 6.20 s at quality 0.996, searched
         * at nprobe 4 in 7.16 s at 0.958). */
        *join = fits;
    } else {
        SML_TRY(s);
        SML_RETURN_IF(!fits, SIMIL_ERR_INVALID_ARGUMENT,
                      "k-NN graph: the list join takes Flat or IVF<n>,Flat on one device, not "
                      "'%s' on '%s'; use the search method for other indexes",
                      p->index, p->device ? p->device : "auto");
        *join = 1;
    }
    if (*join) *nlist = spec.ivf_nlist;
    return SIMIL_OK;
}

/* Everything the join's driver holds besides the build. */
typedef struct sml_join_build {
    sml_graph_build *g;
    sml_backend *b;
    sml_knn_join *join;
    int cosine;
    float *prep; /* batch x dim: a chunk normalized (cosine) */
} sml_join_build;

/* Rows [first, first + count): *raw as the source gives them, *rows as the
 * join takes them (checked, and normalized for cosine). */
static simil_status sml_join_rows(sml_join_build *j, int64_t first, int64_t count,
                                  const float **raw, const float **rows)
{
    sml_source *s = &j->g->src;
    SML_TRY(sml_source_rows(s, first, count, raw));
    if (!j->cosine) {
        SML_TRY(sml_vectors_check_from(*raw, count, s->dim, 1, "k-NN graph", first));
        *rows = *raw;
        return SIMIL_OK;
    }
    SML_TRY(sml_vectors_check_normalize(*raw, count, s->dim, "k-NN graph", first, j->prep));
    *rows = j->prep;
    return SIMIL_OK;
}

/* k-means on min(n, max_train) rows drawn with seed + 1, as the per-query
 * build samples its index's training rows. */
static simil_status sml_join_train(sml_join_build *j, int64_t nlist)
{
    const simil_knn_graph_params *p = j->g->p;
    sml_source *s = &j->g->src;
    int64_t m = s->n < p->max_train ? s->n : p->max_train;
    SML_RETURN_IF(m < nlist, SIMIL_ERR_INVALID_ARGUMENT,
                  "k-NN graph: IVF%" PRId64 " needs at least %" PRId64
                  " training vectors (one per list), got %" PRId64
                  "; raise max_train or use fewer lists",
                  nlist, nlist, m);
    int64_t *nodes = NULL;
    float *x = NULL;
    simil_status st = sml_alloc((void **)&nodes, (size_t)m, sizeof *nodes, "a training sample");
    if (st == SIMIL_OK)
        st = sml_alloc((void **)&x, (size_t)m, sizeof(float) * (size_t)s->dim,
                       "a training sample");
    if (st == SIMIL_OK) {
        sml_knn_graph_sample(s->n, m, p->seed + 1, nodes);
        st = sml_source_gather(s, m, nodes, x);
    }
    if (st == SIMIL_OK)
        st = j->cosine ? sml_vectors_check_normalize(x, m, s->dim, "k-NN graph", 0, x)
                       : sml_vectors_check(x, m, s->dim, 1, "k-NN graph");
    if (st == SIMIL_OK) {
        simil_kmeans_params kp;
        sml_ivf_kmeans_params(nlist, j->cosine, &kp);
        st = sml_knn_join_train(j->join, &kp, m, x);
    }
    sml_free(x);
    sml_free(nodes);
    return st;
}

/* What a pass over the source does with each chunk. */
typedef enum {
    SML_JOIN_ASSIGN, /* into backend memory as it comes, and each row's nearest lists */
    SML_JOIN_PLACE,  /* each row into its place (without lists: as it comes) */
} sml_join_pass_kind;

/* One pass over the source.  The first pass takes the quality measure's
 * rows as the caller gave them. */
static simil_status sml_join_pass(sml_join_build *j, sml_join_pass_kind kind, int first_pass)
{
    sml_source *s = &j->g->src;
    for (int64_t first = 0; first < s->n; first += s->batch) {
        int64_t count = s->n - first < s->batch ? s->n - first : s->batch;
        const float *raw, *rows;
        SML_TRY(sml_join_rows(j, first, count, &raw, &rows));
        sml_trace_mark("join: rows read and checked");
        if (kind == SML_JOIN_ASSIGN) {
            SML_TRY(sml_knn_join_assign(j->join, first, count, rows));
            sml_trace_mark("join: rows assigned to lists");
        } else {
            SML_TRY(sml_knn_join_place(j->join, first, count, rows));
            sml_trace_mark("join: rows placed");
        }
        if (first_pass && j->g->nodes != NULL) sml_graph_capture_x(j->g, first, count, raw);
        sml_progress(kind == SML_JOIN_ASSIGN ? "knn-graph assign" : "knn-graph add",
                     first + count, s->n);
    }
    return SIMIL_OK;
}

/* Pass 1, then with lists the plan and the rows put in list order. */
static simil_status sml_join_add(sml_join_build *j, int lists)
{
    SML_TRY(sml_join_pass(j, lists ? SML_JOIN_ASSIGN : SML_JOIN_PLACE, 1));
    if (!lists) return SIMIL_OK;
    SML_TRY(sml_knn_join_plan(j->join));
    sml_trace_mark("join: blocks planned");
    int placed;
    SML_TRY(sml_knn_join_sort(j->join, &placed));
    if (placed) {
        sml_trace_mark("join: rows put in list order");
        return SIMIL_OK;
    }
    /* pass 2: each row again from the source, into its place */
    sml_trace_mark("join: rows not sorted on the backend");
    return sml_join_pass(j, SML_JOIN_PLACE, 0);
}

/* The join, then the graph rows to the sink in order (Flat: each chunk
 * searched on the way, with its progress). */
static simil_status sml_join_search(sml_join_build *j, int lists)
{
    sml_graph_build *g = j->g;
    sml_source *s = &g->src;
    SML_TRY(sml_knn_join_run(j->join, g->k));
    sml_trace_mark(NULL);
    for (int64_t first = 0; first < s->n; first += s->batch) {
        int64_t count = s->n - first < s->batch ? s->n - first : s->batch;
        SML_TRY(sml_knn_join_rows(j->join, first, count, g->out_ids, g->out_dist));
        if (g->nodes != NULL) sml_graph_capture_ids(g, first, count);
        SML_TRY(sml_graph_deliver(g, first, count));
        if (!lists) sml_progress("knn-graph", first + count, s->n);
    }
    sml_trace_mark("join: graph rows to the sink");
    return SIMIL_OK;
}

static simil_status sml_join_stages(sml_join_build *j, int64_t nlist)
{
    sml_graph_build *g = j->g;
    const simil_knn_graph_params *p = g->p;
    simil_knn_graph_stats *stats = g->stats;
    int64_t nprobe = 1, threads = 0;
    if (p->search != NULL) {
        SML_TRY(simil_search_params_get_int(p->search, "nprobe", &nprobe));
        SML_TRY(simil_search_params_get_int(p->search, "threads", &threads));
    }
    if (nprobe > nlist) nprobe = nlist;
    SML_TRY(sml_device_open(p->device, &j->b));
    if (nlist > 0)
        snprintf(stats->index, sizeof stats->index, "IVF%" PRId64 ",Flat", nlist);
    else
        snprintf(stats->index, sizeof stats->index, "Flat");
    snprintf(stats->backend, sizeof stats->backend, "%.95s", j->b->name);
    if (g->src.n == 0) return SIMIL_OK;
    if (j->cosine)
        SML_TRY(sml_alloc((void **)&j->prep, (size_t)g->src.batch,
                          sizeof(float) * (size_t)g->src.dim, "a chunk of rows"));
    simil_metric metric = p->metric == SIMIL_METRIC_L2 ? SIMIL_METRIC_L2 : SIMIL_METRIC_IP;
    SML_TRY(sml_knn_join_create(j->b, g->src.n, g->src.dim, metric, nlist, nprobe, g->src.batch,
                                (int)threads, &j->join));
    double t0 = sml_graph_now();
    sml_trace_mark(NULL);
    if (nlist > 0) SML_TRY(sml_join_train(j, nlist));
    sml_trace_mark("join: trained");
    double t1 = sml_graph_now();
    SML_TRY(sml_join_add(j, nlist > 0));
    double t2 = sml_graph_now();
    SML_TRY(sml_join_search(j, nlist > 0));
    double t3 = sml_graph_now();
    stats->train_seconds = t1 - t0;
    stats->add_seconds = t2 - t1;
    stats->search_seconds = t3 - t2;
    stats->pairs = sml_knn_join_pairs(j->join);
    return SIMIL_OK;
}

simil_status sml_graph_join_stages(sml_graph_build *g, int64_t nlist)
{
    sml_join_build j = {.g = g, .cosine = g->p->metric == SIMIL_METRIC_COSINE};
    simil_status st = sml_join_stages(&j, nlist);
    sml_knn_join_destroy(j.join);
    sml_backend_close(j.b);
    sml_free(j.prep);
    return st;
}
