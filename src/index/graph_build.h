/* graph_build.h: what the two ways of building a k-NN graph share
 * (graph_api.c searches every row through an index, graph_join.c joins
 * inverted lists): where rows come from, where graph rows go, and the
 * capture of the quality sample on the way. */
#ifndef SML_INDEX_GRAPH_BUILD_H
#define SML_INDEX_GRAPH_BUILD_H

#include <stdint.h>

#include "simil/graph.h"

typedef struct sml_source {
    int64_t n, dim, batch; /* batch: rows per chunk, >= 1 */
    const float *x;        /* the caller's rows, or NULL to read them */
    simil_rows_fn read;
    void *user;
    float *buf; /* batch x dim when reading */
} sml_source;

/* Rows [first, first + count) with count <= batch: *rows points into the
 * caller's array or into the chunk buffer, valid until the next call. */
simil_status sml_source_rows(sml_source *s, int64_t first, int64_t count, const float **rows);

/* Copy the rows whose ids are nodes[0..m) (sorted) into out (m x dim), with
 * one pass over the source in chunks. */
simil_status sml_source_gather(sml_source *s, int64_t m, const int64_t *nodes, float *out);

/* Everything one build holds.  The quality sample (nodes, their vectors and
 * their first r graph neighbours) is captured while the rows are queried. */
typedef struct sml_graph_build {
    const simil_knn_graph_params *p;
    sml_source src;
    int64_t k;
    simil_graph_rows_fn sink;
    void *sink_user;
    simil_knn_graph_stats *stats;
    simil_index *index;
    int64_t *ids;       /* batch: ids of a streamed chunk to add */
    int64_t *res_ids;   /* batch x (k + 1) search results */
    float *res_dist;
    int64_t *out_ids;   /* batch x k graph rows */
    float *out_dist;
    int64_t m, r;       /* quality: sample size, neighbours compared */
    int64_t *nodes;     /* m, sorted */
    float *sample_x;    /* m x dim */
    int64_t *sample_ids; /* m x r */
    int64_t next_x, next_ids; /* capture: the first sampled nodes not yet seen */
} sml_graph_build;

/* Keep the vectors (rows: the chunk's, as the source gives them) and the
 * graph rows (out_ids) of the sampled nodes in rows [first, first + count),
 * chunks coming in order. */
void sml_graph_capture_x(sml_graph_build *g, int64_t first, int64_t count, const float *rows);
void sml_graph_capture_ids(sml_graph_build *g, int64_t first, int64_t count);

/* Seconds on a monotonic clock. */
double sml_graph_now(void);

/* Hand graph rows [first, first + count) (out_ids, out_dist) to the sink. */
simil_status sml_graph_deliver(sml_graph_build *g, int64_t first, int64_t count);

/* Whether params ask for the list join (SIMIL_KNN_GRAPH_JOIN, or AUTO with an
 * index and device the join can serve: Flat or IVF<n>,Flat on one device),
 * and its lists (0 for Flat).  An explicit JOIN it cannot serve is an error. */
simil_status sml_graph_join_applies(const simil_knn_graph_params *p, int64_t dim, int *join,
                                    int64_t *nlist);

/* The join's build: train, add and search stages with their stats (see
 * graph_join.c); out_ids and out_dist must be allocated. */
simil_status sml_graph_join_stages(sml_graph_build *g, int64_t nlist);

#endif
