/* simil/graph.h: k-nearest-neighbour graphs of a dataset, their quality, and
 * paths through them (the GPU paper, "k-NN graph" and "paths through the
 * graph"; docs/knn-graph.md).
 *
 * A k-NN graph has one row per vector of the dataset: the ids (row numbers)
 * and distances of its k nearest other vectors.  By default they are found
 * by joining inverted lists (simil_knn_graph_method JOIN): each list of
 * vectors is compared with its candidate lists as dense GEMM tiles; or, as
 * the GPU paper does, by querying every vector against an index of the whole
 * dataset (SEARCH).  Either way each vector is searched with k + 1
 * neighbours and itself dropped.  With "Flat" the graph is exact; with
 * "IVF4096,Flat" and nprobe it is approximate, and its quality is measured
 * by simil_graph_quality().
 *
 * Memory: the index (JOIN: the vectors, with a half-size fp16 copy on a GPU)
 * must fit on its device (GPU memory for a GPU, host memory for the CPU).
 * The dataset itself need not fit in host memory: the streaming variants read
 * it in chunks of params->batch rows (SEARCH: once to train on a sample,
 * once to add, once to query; JOIN: once for the sample, once to find each
 * vector's lists, once to lay the vectors out by list), once more to measure
 * quality, and hand the graph out chunk by chunk.  JOIN keeps n x (nprobe +
 * 3 (k + 1) + 2) values of host memory for its lists and results. */
#ifndef SIMIL_GRAPH_H
#define SIMIL_GRAPH_H

#include <stdint.h>

#include "simil/index.h"
#include "simil/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a graph build finds each vector's neighbours (docs/knn-graph.md).
 *   JOIN:   the vectors are clustered into the lists of `index` ("IVF4096,Flat",
 *           k-means as an IVF index trains), and each list is compared with
 *           its candidate lists as dense tiles: the lists that are among the
 *           search.nprobe nearest of any of its vectors.  Every vector is thus
 *           compared with all vectors of its own nprobe nearest lists, and
 *           more: the quality is at least that of SEARCH with the same index
 *           and nprobe.  With "Flat", every vector against every vector (the
 *           exact graph).  One device only; the index must be Flat or
 *           IVF<n>,Flat.
 *   SEARCH: an index of all vectors is built and every vector is searched
 *           in it, as the GPU paper does: any index, any devices.
 *   AUTO:   JOIN where it applies, else SEARCH (the default); the join
 *           measured faster on the CPU and on a GPU (docs/knn-graph.md). */
typedef enum simil_knn_graph_method {
    SIMIL_KNN_GRAPH_AUTO = 0,
    SIMIL_KNN_GRAPH_JOIN = 1,
    SIMIL_KNN_GRAPH_SEARCH = 2
} simil_knn_graph_method;

/* Fill with simil_knn_graph_params_init(), then change what you need. */
typedef struct simil_knn_graph_params {
    simil_knn_graph_method method; /* default SIMIL_KNN_GRAPH_AUTO */
    const char *index;          /* index description; default "Flat" (exact graph) */
    simil_metric metric;        /* default SIMIL_METRIC_L2 */
    const char *device;         /* "auto" (default), "cpu", "gpu" or "gpu:N" */
    const simil_search_params *search; /* nprobe, threads, ... (simil/search_params.h);
                                   NULL (default): the defaults.  Read during the
                                   build; the caller keeps it alive until then */
    int64_t batch;              /* queries per search call, and rows per chunk read or
                                   added when streaming; default 200,000 */
    int64_t max_train;          /* an index that needs training trains on a seeded random
                                   sample of at most this many rows; default 500,000 */
    int quality;                /* 1: also measure the quality (stats->quality); default 0 */
    int64_t quality_sample;     /* nodes sampled for the quality; default 10,000 */
    uint64_t seed;              /* of the training and quality samples; default 1234 */
} simil_knn_graph_params;

SIMIL_API void simil_knn_graph_params_init(simil_knn_graph_params *params);

/* What a graph build did.  Seconds are wall-clock; when streaming they include
 * reading the chunks and handing out the results. */
typedef struct simil_knn_graph_stats {
    double train_seconds;   /* sampling the training rows and training the index
                               (join: the k-means of its lists) */
    double add_seconds;     /* adding every row to the index (join: finding each
                               row's lists and laying the rows out by list) */
    double search_seconds;  /* querying every row and dropping each row's self
                               (join: joining the lists, or for Flat searching
                               every row, and handing out the rows) */
    double quality_seconds; /* 0 unless params->quality */
    double quality;         /* the measure of simil_graph_quality, or -1 if not asked */
    char index[96];         /* the normalized index description */
    char backend[96];       /* what ran, e.g. "cpu (2 threads)" or "cuda:0 (NVIDIA H200)" */
    char method[16];        /* "join" or "search" */
    double pairs;           /* join: (vector, candidate) distances computed; 0 for search */
} simil_knn_graph_stats;

/* Rows [first, first + count) of the dataset into out (count x dim floats).
 * Return SIMIL_OK, or an error status (from a simil call, whose message is
 * kept, or any other negative code); the graph build stops with that status. */
typedef simil_status (*simil_rows_fn)(void *user, int64_t first, int64_t count, float *out);

/* Receives graph rows [first, first + count), in order: ids and distances are
 * count x k.  The pointers are valid during the call only.  Return SIMIL_OK,
 * or an error status that stops the build. */
typedef simil_status (*simil_graph_rows_fn)(void *user, int64_t first, int64_t count, int64_t k,
                                            const int64_t *ids, const float *distances);

/* The k-NN graph of n vectors (x: n x dim floats, host memory).
 * ids, distances: n x k, written; distances may be NULL.  Row i holds the k
 * nearest vectors to vector i other than itself, sorted as search sorts them
 * (L2 distances are squared; IP and cosine give similarities, largest
 * first).  Each row is searched with k + 1 neighbours; the first result whose
 * id is i is dropped, or, when an approximate index did not return i, the
 * last.  Slots that the index could not fill get id -1 and distance +inf
 * (-inf for IP and cosine): with k >= n, or an approximate index visiting too
 * few lists.
 * stats: may be NULL.  With params->quality, stats->quality is measured as
 * simil_graph_quality() does.
 * Progress: stage "knn-graph", one unit per row queried (JOIN with lists:
 * joined), then with params->quality "knn-graph quality", one unit per row
 * searched. */
SIMIL_API simil_status simil_knn_graph(const simil_knn_graph_params *params, int64_t n,
                                       int64_t dim, const float *x, int64_t k, int64_t *ids,
                                       float *distances, simil_knn_graph_stats *stats);

/* simil_knn_graph over a dataset that is read in chunks of params->batch rows
 * through read, with the graph handed to sink chunk by chunk.  Host memory
 * holds about batch x (dim + 3 (k + 1)) values besides the index and the
 * samples (max_train x dim for training, quality_sample x (dim + k) for the
 * quality).  Progress: "knn-graph add", one unit per row added (JOIN with
 * lists: "knn-graph assign" first, one per row given its lists), then
 * "knn-graph", one per row queried or joined. */
SIMIL_API simil_status simil_knn_graph_stream(const simil_knn_graph_params *params, int64_t n,
                                              int64_t dim, simil_rows_fn read, void *read_user,
                                              int64_t k, simil_graph_rows_fn sink,
                                              void *sink_user, simil_knn_graph_stats *stats);

/* The k-NN graph of a vector file (any file simil_matrix_read reads; rows
 * converted to float), streamed from disk as simil_knn_graph_stream does and
 * written chunk by chunk to
 *   ids_path:       .ivecs (int32; fails if an id exceeds INT32_MAX) or .npy (int64);
 *   distances_path: .fvecs or .npy (float32), or NULL to write no distances.
 * Each file is written atomically (a temporary file beside it, renamed at the
 * end): when the build fails, neither path is touched.  A gzipped idx file is
 * read from its start for every chunk: give a batch that covers it, or
 * convert it first. */
SIMIL_API simil_status simil_knn_graph_file(const simil_knn_graph_params *params,
                                            const char *data_path, int64_t k,
                                            const char *ids_path, const char *distances_path,
                                            simil_knn_graph_stats *stats);

/* The quality of a k-NN graph, as the GPU paper measures it: sample
 * params->quality_sample nodes (seeded by params->seed; all nodes when n is
 * not larger), compute each one's exact r = min(10, k, n - 1) nearest other
 * vectors (Flat search on params->device, params->metric), and average over
 * the sample the fraction of the node's first r graph neighbours that are
 * among those true r.  1.0 is a perfect graph.  Only the fields device,
 * metric, batch, quality_sample and seed of params are used.
 * x: n x dim floats; ids: the graph, n x k (-1 for empty slots). */
SIMIL_API simil_status simil_graph_quality(const simil_knn_graph_params *params, int64_t n,
                                           int64_t dim, const float *x, const int64_t *ids,
                                           int64_t k, double *quality);

/* The path from node `from` to node `to` whose largest step is as small as
 * possible (a bottleneck shortest path; the GPU paper's "paths through the
 * graph"), found by a Dijkstra search with a binary heap that keeps, for each
 * node, the smallest largest-step of any path reaching it, then a second
 * search for the fewest hops over the edges no larger than that step.
 * The graph is ids and distances, n x k, as simil_knn_graph writes them, and
 * it is taken as UNDIRECTED: an edge u -> v (v in row u) may be walked from v
 * to u as well, at the same distance.  Slots with id -1 are skipped; an id
 * outside [0, n) or a NaN distance is an error.  metric says how to read the
 * distances: L2 minimizes the largest distance (squared or not, the path is
 * the same); IP and cosine maximize the smallest similarity.
 * path: room for n ids; receives the nodes from `from` to `to`.
 * steps: room for n - 1 floats (may be NULL); steps[i] is the stored distance
 *   of the edge path[i] -> path[i + 1].
 * *length: the number of nodes on the path (1 when from == to).
 * Among the paths of that best largest step, the one with the fewest hops is
 * returned, and among those the one whose steps add up to the least (for IP
 * and cosine: whose similarities add up to the most); remaining ties are
 * broken deterministically.
 * Nodes in different components: SIMIL_ERR_INVALID_ARGUMENT, "no path from A
 * to B: they are in different components of the k-NN graph; use a larger k".
 * Memory: about 56 bytes per node and 24 per edge. */
SIMIL_API simil_status simil_graph_path(const int64_t *ids, const float *distances, int64_t n,
                                        int64_t k, simil_metric metric, int64_t from,
                                        int64_t to, int64_t *path, float *steps,
                                        int64_t *length);

#ifdef __cplusplus
}
#endif
#endif
