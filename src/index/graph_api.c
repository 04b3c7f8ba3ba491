/* graph_api.c: k-NN graphs (simil/graph.h) built through the public index API.
 *
 * One driver serves the in-memory, streaming and file variants: rows come
 * from a "source" (the caller's array, or a read callback filling a chunk
 * buffer) and graph rows go to a sink chunk by chunk.  The build creates the
 * index, trains it on a seeded sample, adds the rows in chunks of
 * params->batch, then queries them in the same chunks with k + 1 neighbours
 * and drops each row's self (algo/knn_graph.c), as the Faiss reference does.
 *
 * The quality measure never holds the dataset: a Flat index of one chunk at
 * a time is searched with the sampled nodes, and each node's running top
 * r + 1 is merged with the chunk's. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "algo/knn_graph.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/vectors.h"
#include "index/graph_build.h"
#include "simil/dataset.h"
#include "simil/graph.h"

enum { SML_QUALITY_R = 10 };

void simil_knn_graph_params_init(simil_knn_graph_params *params)
{
    if (params == NULL) return;
    memset(params, 0, sizeof *params);
    params->index = "Flat";
    params->metric = SIMIL_METRIC_L2;
    params->device = "auto";
    params->search = NULL;
    params->batch = 200000;
    params->max_train = 500000;
    params->quality = 0;
    params->quality_sample = 10000;
    params->seed = 1234;
}

/* ---- the build ---- */

static void sml_graph_build_free(sml_graph_build *g)
{
    simil_index_destroy(g->index);
    sml_free(g->ids);
    sml_free(g->res_ids);
    sml_free(g->res_dist);
    sml_free(g->out_ids);
    sml_free(g->out_dist);
    sml_free(g->nodes);
    sml_free(g->sample_x);
    sml_free(g->sample_ids);
    sml_free(g->src.buf);
}

static simil_status sml_graph_check(const simil_knn_graph_params *p, int64_t n, int64_t dim,
                                    int64_t k)
{
    SML_RETURN_IF(p == NULL, SIMIL_ERR_INVALID_ARGUMENT, "k-NN graph: params is NULL");
    SML_RETURN_IF(n < 0, SIMIL_ERR_INVALID_ARGUMENT, "k-NN graph: n=%" PRId64 " is negative", n);
    SML_RETURN_IF(dim < 1, SIMIL_ERR_INVALID_ARGUMENT,
                  "k-NN graph: dim=%" PRId64 " must be >= 1", dim);
    SML_RETURN_IF(k < 1 || k >= INT32_MAX, SIMIL_ERR_INVALID_ARGUMENT,
                  "k-NN graph: k=%" PRId64 " must be in [1, 2^31-2]", k);
    SML_RETURN_IF(p->batch < 1 || p->max_train < 1 || p->quality_sample < 1,
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "k-NN graph: batch=%" PRId64 ", max_train=%" PRId64
                  " and quality_sample=%" PRId64 " must be >= 1",
                  p->batch, p->max_train, p->quality_sample);
    SML_RETURN_IF((k + 1) > ((int64_t)1 << 40) / (p->batch < n ? p->batch : (n > 0 ? n : 1)),
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "k-NN graph: batch=%" PRId64 " x (k+1)=%" PRId64
                  " results per search is too many; lower the batch",
                  p->batch, k + 1);
    SML_RETURN_IF(!sml_product_fits(n, dim, SML_MAX_FLOATS) ||
                      !sml_product_fits(n, k, SML_MAX_FLOATS / 2),
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "k-NN graph: %" PRId64 " vectors of dimension %" PRId64 " with k=%" PRId64
                  " exceed the address space",
                  n, dim, k);
    return SIMIL_OK;
}

static simil_status sml_graph_alloc(sml_graph_build *g)
{
    size_t b = (size_t)g->src.batch, k = (size_t)g->k;
    SML_TRY(sml_alloc((void **)&g->res_ids, b * (k + 1), sizeof *g->res_ids, "k-NN results"));
    SML_TRY(sml_alloc((void **)&g->res_dist, b * (k + 1), sizeof *g->res_dist, "k-NN results"));
    SML_TRY(sml_alloc((void **)&g->out_ids, b * k, sizeof *g->out_ids, "k-NN graph rows"));
    SML_TRY(sml_alloc((void **)&g->out_dist, b * k, sizeof *g->out_dist, "k-NN graph rows"));
    if (g->src.x == NULL) {
        SML_TRY(sml_alloc((void **)&g->src.buf, b, sizeof(float) * (size_t)g->src.dim,
                          "a chunk of rows"));
        SML_TRY(sml_alloc((void **)&g->ids, b, sizeof *g->ids, "k-NN graph ids"));
    }
    if (!g->p->quality) return SIMIL_OK;
    int64_t n = g->src.n;
    g->m = n < g->p->quality_sample ? n : g->p->quality_sample;
    g->r = g->k < SML_QUALITY_R ? g->k : SML_QUALITY_R;
    if (g->r > n - 1) g->r = n - 1;
    if (g->m == 0 || g->r <= 0) return SIMIL_OK;
    SML_TRY(sml_alloc((void **)&g->nodes, (size_t)g->m, sizeof *g->nodes, "a node sample"));
    SML_TRY(sml_alloc((void **)&g->sample_x, (size_t)g->m, sizeof(float) * (size_t)g->src.dim,
                      "a node sample"));
    SML_TRY(sml_alloc((void **)&g->sample_ids, (size_t)(g->m * g->r), sizeof *g->sample_ids,
                      "a node sample"));
    sml_knn_graph_sample(n, g->m, g->p->seed, g->nodes);
    return SIMIL_OK;
}

/* Train on min(n, max_train) rows sampled with the seed (all rows in order
 * when they are few enough). */
static simil_status sml_graph_train(sml_graph_build *g)
{
    if (simil_index_is_trained(g->index)) return SIMIL_OK;
    sml_source *s = &g->src;
    int64_t m = s->n < g->p->max_train ? s->n : g->p->max_train;
    if (m == s->n && s->x != NULL) return simil_index_train(g->index, s->n, s->x);
    int64_t *nodes = NULL;
    float *x = NULL;
    simil_status st = sml_alloc((void **)&nodes, (size_t)(m > 0 ? m : 1), sizeof *nodes,
                                "a training sample");
    if (st == SIMIL_OK)
        st = sml_alloc((void **)&x, (size_t)(m > 0 ? m : 1), sizeof(float) * (size_t)s->dim,
                       "a training sample");
    if (st == SIMIL_OK) {
        sml_knn_graph_sample(s->n, m, g->p->seed + 1, nodes);
        st = sml_source_gather(s, m, nodes, x);
    }
    if (st == SIMIL_OK) st = simil_index_train(g->index, m, x);
    sml_free(x);
    sml_free(nodes);
    return st;
}

/* Rows in memory go in with one call (numbered 0..n-1 by the fresh index),
 * streamed rows chunk by chunk with their row numbers as ids. */
static simil_status sml_graph_add(sml_graph_build *g)
{
    sml_source *s = &g->src;
    if (s->x != NULL) return simil_index_add(g->index, s->n, s->x, NULL);
    for (int64_t first = 0; first < s->n; first += s->batch) {
        int64_t count = s->n - first < s->batch ? s->n - first : s->batch;
        const float *rows = NULL;
        SML_TRY(sml_source_rows(s, first, count, &rows));
        for (int64_t i = 0; i < count; i++) g->ids[i] = first + i;
        sml_progress_mute();
        simil_status st = simil_index_add(g->index, count, rows, g->ids);
        sml_progress_unmute();
        SML_TRY(st);
        sml_progress("knn-graph add", first + count, s->n);
    }
    return SIMIL_OK;
}

static simil_status sml_graph_query(sml_graph_build *g)
{
    sml_source *s = &g->src;
    for (int64_t first = 0; first < s->n; first += s->batch) {
        int64_t count = s->n - first < s->batch ? s->n - first : s->batch;
        const float *rows = NULL;
        SML_TRY(sml_source_rows(s, first, count, &rows));
        SML_TRY(simil_index_search(g->index, count, rows, g->k + 1, g->p->search, g->res_dist,
                                   g->res_ids));
        sml_knn_graph_drop_self(count, first, NULL, g->k, g->res_ids, g->res_dist, g->out_ids,
                                g->out_dist);
        if (g->nodes != NULL) {
            sml_graph_capture_x(g, first, count, rows);
            sml_graph_capture_ids(g, first, count);
        }
        SML_TRY(sml_graph_deliver(g, first, count));
        sml_progress("knn-graph", first + count, s->n);
    }
    return SIMIL_OK;
}

/* ---- quality ---- */

/* Scratch of the exact search: one chunk's results for the sample, the
 * chunk's ids, and room for one merge. */
typedef struct sml_quality_scratch {
    int64_t *c_ids, *ids, *tmp_ids;
    float *c_dist, *tmp_dist;
} sml_quality_scratch;

static void sml_quality_scratch_free(sml_quality_scratch *q)
{
    sml_free(q->c_ids);
    sml_free(q->ids);
    sml_free(q->tmp_ids);
    sml_free(q->c_dist);
    sml_free(q->tmp_dist);
}

static simil_status sml_quality_scratch_alloc(sml_quality_scratch *q, int64_t m, int64_t w,
                                              int64_t batch)
{
    const char *what = "the quality measure";
    SML_TRY(sml_alloc((void **)&q->c_ids, (size_t)(m * w), sizeof *q->c_ids, what));
    SML_TRY(sml_alloc((void **)&q->c_dist, (size_t)(m * w), sizeof *q->c_dist, what));
    SML_TRY(sml_alloc((void **)&q->ids, (size_t)batch, sizeof *q->ids, what));
    SML_TRY(sml_alloc((void **)&q->tmp_ids, (size_t)w, sizeof *q->tmp_ids, what));
    SML_TRY(sml_alloc((void **)&q->tmp_dist, (size_t)w, sizeof *q->tmp_dist, what));
    return SIMIL_OK;
}

/* Merge the exact w nearest rows of [first, first + count) into each sample
 * vector's running lists, through the Flat index flat (emptied first). */
static simil_status sml_quality_chunk(const simil_knn_graph_params *p, sml_source *s,
                                      simil_index *flat, int64_t first, int64_t count, int64_t m,
                                      const float *sample_x, int64_t w, int64_t *true_ids,
                                      float *true_dist, sml_quality_scratch *q)
{
    int largest = p->metric != SIMIL_METRIC_L2;
    const float *rows = NULL;
    for (int64_t i = 0; i < count; i++) q->ids[i] = first + i;
    SML_TRY(sml_source_rows(s, first, count, &rows));
    SML_TRY(simil_index_reset(flat));
    SML_TRY(simil_index_add(flat, count, rows, q->ids));
    SML_TRY(simil_index_search(flat, m, sample_x, w, NULL, q->c_dist, q->c_ids));
    for (int64_t i = 0; i < m; i++)
        sml_knn_graph_merge(w, largest, true_ids + i * w, true_dist + i * w, q->c_ids + i * w,
                            q->c_dist + i * w, q->tmp_ids, q->tmp_dist);
    return SIMIL_OK;
}

/* The exact w nearest rows of each sample vector (m x dim) into true_ids and
 * true_dist (m x w), one chunk of the source at a time. */
static simil_status sml_quality_exact(const simil_knn_graph_params *p, sml_source *s, int64_t m,
                                      const float *sample_x, int64_t w, int64_t *true_ids,
                                      float *true_dist)
{
    for (int64_t i = 0; i < m * w; i++) {
        true_ids[i] = -1;
        true_dist[i] = p->metric != SIMIL_METRIC_L2 ? -INFINITY : INFINITY;
    }
    sml_quality_scratch q = {0};
    simil_index *flat = NULL;
    simil_status st = sml_quality_scratch_alloc(&q, m, w, s->batch);
    if (st == SIMIL_OK) st = simil_index_create(&flat, s->dim, "Flat", p->metric, p->device);
    for (int64_t first = 0; st == SIMIL_OK && first < s->n; first += s->batch) {
        int64_t count = s->n - first < s->batch ? s->n - first : s->batch;
        st = sml_quality_chunk(p, s, flat, first, count, m, sample_x, w, true_ids, true_dist, &q);
        if (st == SIMIL_OK) sml_progress("knn-graph quality", first + count, s->n);
    }
    simil_index_destroy(flat);
    sml_quality_scratch_free(&q);
    return st;
}

/* The quality of a graph given by its rows for the sampled nodes (m x r). */
static simil_status sml_quality_run(const simil_knn_graph_params *p, sml_source *s, int64_t m,
                                    const int64_t *nodes, const float *sample_x,
                                    const int64_t *sample_ids, int64_t r, double *quality)
{
    if (m == 0 || r <= 0) {
        *quality = 1.0;
        return SIMIL_OK;
    }
    int64_t w = r + 1, *true_ids = NULL, *truth = NULL;
    float *true_dist = NULL;
    const char *what = "the quality measure";
    simil_status st = sml_alloc((void **)&true_ids, (size_t)(m * w), sizeof *true_ids, what);
    if (st == SIMIL_OK) st = sml_alloc((void **)&true_dist, (size_t)(m * w), sizeof(float), what);
    if (st == SIMIL_OK) st = sml_alloc((void **)&truth, (size_t)(m * r), sizeof *truth, what);
    if (st == SIMIL_OK) st = sml_quality_exact(p, s, m, sample_x, w, true_ids, true_dist);
    if (st == SIMIL_OK) {
        sml_knn_graph_drop_self(m, 0, nodes, r, true_ids, NULL, truth, NULL);
        double sum = 0;
        for (int64_t i = 0; i < m; i++)
            sum += (double)sml_knn_graph_overlap(sample_ids + i * r, truth + i * r, r) / (double)r;
        *quality = sum / (double)m;
    }
    sml_free(truth);
    sml_free(true_dist);
    sml_free(true_ids);
    return st;
}

/* ---- the public functions ---- */

static simil_status sml_graph_stages(sml_graph_build *g)
{
    const simil_knn_graph_params *p = g->p;
    simil_knn_graph_stats *stats = g->stats;
    int join;
    int64_t nlist;
    SML_TRY(sml_graph_join_applies(p, g->src.dim, &join, &nlist));
    SML_TRY(sml_graph_alloc(g));
    snprintf(stats->method, sizeof stats->method, "%s", join ? "join" : "search");
    if (join) return sml_graph_join_stages(g, nlist);
    SML_TRY(simil_index_create(&g->index, g->src.dim, p->index, p->metric, p->device));
    snprintf(stats->index, sizeof stats->index, "%s", simil_index_description(g->index));
    snprintf(stats->backend, sizeof stats->backend, "%s", simil_backend_name(g->index));
    if (g->src.n == 0) return SIMIL_OK;
    double t0 = sml_graph_now();
    SML_TRY(sml_graph_train(g));
    double t1 = sml_graph_now();
    SML_TRY(sml_graph_add(g));
    double t2 = sml_graph_now();
    SML_TRY(sml_graph_query(g));
    double t3 = sml_graph_now();
    stats->train_seconds = t1 - t0;
    stats->add_seconds = t2 - t1;
    stats->search_seconds = t3 - t2;
    return SIMIL_OK;
}

static simil_status sml_graph_build_run(sml_graph_build *g)
{
    simil_knn_graph_stats local;
    if (g->stats == NULL) g->stats = &local;
    memset(g->stats, 0, sizeof *g->stats);
    g->stats->quality = -1;
    simil_status st = sml_graph_stages(g);
    /* The index goes before the quality's Flat chunks arrive on the device. */
    simil_index_destroy(g->index);
    g->index = NULL;
    if (st == SIMIL_OK && g->p->quality) {
        double t0 = sml_graph_now();
        st = sml_quality_run(g->p, &g->src, g->nodes ? g->m : 0, g->nodes, g->sample_x,
                             g->sample_ids, g->r, &g->stats->quality);
        g->stats->quality_seconds = sml_graph_now() - t0;
    }
    sml_graph_build_free(g);
    return st;
}

static int64_t sml_graph_batch(const simil_knn_graph_params *p, int64_t n)
{
    return p->batch < n ? p->batch : (n > 0 ? n : 1);
}

typedef struct sml_memory_sink {
    int64_t *ids;
    float *distances;
} sml_memory_sink;

static simil_status sml_memory_sink_rows(void *user, int64_t first, int64_t count, int64_t k,
                                         const int64_t *ids, const float *distances)
{
    sml_memory_sink *m = user;
    /* by every thread: the caller's arrays are often touched first here */
    sml_copy_parallel(m->ids + first * k, ids, sizeof *ids * (size_t)(count * k));
    if (m->distances != NULL)
        sml_copy_parallel(m->distances + first * k, distances,
                          sizeof *distances * (size_t)(count * k));
    return SIMIL_OK;
}

simil_status simil_knn_graph(const simil_knn_graph_params *params, int64_t n, int64_t dim,
                             const float *x, int64_t k, int64_t *ids, float *distances,
                             simil_knn_graph_stats *stats)
{
    SML_TRY(sml_graph_check(params, n, dim, k));
    SML_RETURN_IF(n > 0 && (x == NULL || ids == NULL), SIMIL_ERR_INVALID_ARGUMENT,
                  "k-NN graph: x and ids must not be NULL");
    /* every byte of the outputs is written here, most often their first touch */
    sml_huge_pages(ids, sizeof *ids * (size_t)(n * k));
    if (distances != NULL) sml_huge_pages(distances, sizeof *distances * (size_t)(n * k));
    sml_memory_sink sink = {ids, distances};
    sml_graph_build g = {.p = params, .k = k, .sink = sml_memory_sink_rows, .sink_user = &sink,
                         .stats = stats};
    g.src = (sml_source){n, dim, sml_graph_batch(params, n), x, NULL, NULL, NULL};
    return sml_graph_build_run(&g);
}

simil_status simil_knn_graph_stream(const simil_knn_graph_params *params, int64_t n,
                                    int64_t dim, simil_rows_fn read, void *read_user, int64_t k,
                                    simil_graph_rows_fn sink, void *sink_user,
                                    simil_knn_graph_stats *stats)
{
    SML_TRY(sml_graph_check(params, n, dim, k));
    SML_RETURN_IF(read == NULL || sink == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "k-NN graph: the read and sink functions must not be NULL");
    sml_graph_build g = {.p = params, .k = k, .sink = sink, .sink_user = sink_user,
                         .stats = stats};
    g.src = (sml_source){n, dim, sml_graph_batch(params, n), NULL, read, read_user, NULL};
    return sml_graph_build_run(&g);
}

/* ---- files ---- */

typedef struct sml_file_graph {
    const char *data_path;
    sml_graph_file *ids, *distances;
} sml_file_graph;

static simil_status sml_file_read_rows(void *user, int64_t first, int64_t count, float *out)
{
    const sml_file_graph *f = user;
    simil_matrix m;
    SML_TRY(simil_matrix_read_float(f->data_path, first, count, &m));
    memcpy(out, m.data, sizeof(float) * (size_t)(m.rows * m.cols));
    simil_matrix_free(&m);
    return SIMIL_OK;
}

static simil_status sml_file_sink_rows(void *user, int64_t first, int64_t count, int64_t k,
                                       const int64_t *ids, const float *distances)
{
    sml_file_graph *f = user;
    (void)first;
    (void)k;
    SML_TRY(sml_graph_file_rows(f->ids, count, ids));
    if (f->distances != NULL) SML_TRY(sml_graph_file_rows(f->distances, count, distances));
    return SIMIL_OK;
}

simil_status simil_knn_graph_file(const simil_knn_graph_params *params, const char *data_path,
                                  int64_t k, const char *ids_path, const char *distances_path,
                                  simil_knn_graph_stats *stats)
{
    SML_RETURN_IF(data_path == NULL || ids_path == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "k-NN graph: the data and ids file names must not be NULL");
    int64_t n, dim;
    SML_TRY(simil_matrix_info(data_path, &n, &dim, NULL));
    SML_RETURN_IF(n == 0, SIMIL_ERR_INVALID_ARGUMENT, "k-NN graph: '%s' holds no vectors",
                  data_path);
    SML_TRY(sml_graph_check(params, n, dim, k));
    sml_file_graph f = {data_path, NULL, NULL};
    simil_status st = sml_graph_file_open(&f.ids, ids_path, 1, n, k);
    if (st == SIMIL_OK && distances_path != NULL)
        st = sml_graph_file_open(&f.distances, distances_path, 0, n, k);
    if (st == SIMIL_OK)
        st = simil_knn_graph_stream(params, n, dim, sml_file_read_rows, &f, k,
                                    sml_file_sink_rows, &f, stats);
    if (st == SIMIL_OK) {
        st = sml_graph_file_commit(f.ids);
        f.ids = NULL;
    }
    if (st == SIMIL_OK && f.distances != NULL) {
        st = sml_graph_file_commit(f.distances);
        f.distances = NULL;
    }
    sml_graph_file_abort(f.ids);
    sml_graph_file_abort(f.distances);
    return st;
}

simil_status simil_graph_quality(const simil_knn_graph_params *params, int64_t n, int64_t dim,
                                 const float *x, const int64_t *ids, int64_t k, double *quality)
{
    SML_TRY(sml_graph_check(params, n, dim, k));
    SML_RETURN_IF(quality == NULL || (n > 0 && (x == NULL || ids == NULL)),
                  SIMIL_ERR_INVALID_ARGUMENT, "graph quality: x, ids and quality must not be NULL");
    int64_t m = n < params->quality_sample ? n : params->quality_sample;
    int64_t r = k < SML_QUALITY_R ? k : SML_QUALITY_R;
    if (r > n - 1) r = n - 1;
    if (m == 0 || r <= 0) {
        *quality = 1.0;
        return SIMIL_OK;
    }
    int64_t *nodes = NULL, *sample_ids = NULL;
    float *sample_x = NULL;
    simil_status st = sml_alloc((void **)&nodes, (size_t)m, sizeof *nodes, "a node sample");
    if (st == SIMIL_OK)
        st = sml_alloc((void **)&sample_ids, (size_t)(m * r), sizeof *sample_ids, "a node sample");
    if (st == SIMIL_OK)
        st = sml_alloc((void **)&sample_x, (size_t)m, sizeof(float) * (size_t)dim, "a node sample");
    if (st == SIMIL_OK) {
        sml_source s = {n, dim, sml_graph_batch(params, n), x, NULL, NULL, NULL};
        sml_knn_graph_sample(n, m, params->seed, nodes);
        for (int64_t i = 0; i < m; i++) {
            memcpy(sample_x + i * dim, x + nodes[i] * dim, sizeof(float) * (size_t)dim);
            memcpy(sample_ids + i * r, ids + nodes[i] * k, sizeof(int64_t) * (size_t)r);
        }
        st = sml_quality_run(params, &s, m, nodes, sample_x, sample_ids, r, quality);
    }
    sml_free(sample_x);
    sml_free(sample_ids);
    sml_free(nodes);
    return st;
}
