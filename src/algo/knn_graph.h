/* knn_graph.h: the backend-free pieces of k-NN graph construction
 * (knn_graph.c): dropping each row's self from its search results, seeded
 * node samples, merging top-r lists and counting overlaps for the quality
 * measure, and writing graph files chunk by chunk.  index/graph_api.c drives
 * the indexes with them. */
#ifndef SML_ALGO_KNN_GRAPH_H
#define SML_ALGO_KNN_GRAPH_H

#include <stdint.h>

#include "simil/graph.h"

/* rows search results of k + 1 slots each (in_ids, in_dist) for the queries
 * whose ids are self[i] (or first + i when self is NULL): write k slots per
 * row to out_ids and out_dist (may be NULL) without the query itself: the
 * first slot holding the query's id is dropped, or the last slot when none
 * does. */
void sml_knn_graph_drop_self(int64_t rows, int64_t first, const int64_t *self, int64_t k,
                             const int64_t *in_ids, const float *in_dist, int64_t *out_ids,
                             float *out_dist);

/* m distinct node ids out of [0, n), sorted, drawn uniformly with a seeded
 * generator (m <= n; m == n gives every node). */
void sml_knn_graph_sample(int64_t n, int64_t m, uint64_t seed, int64_t *out);

/* Merge the sorted top-r list (b_ids, b_dist) into (a_ids, a_dist), keeping
 * the r best by distance (ascending, or descending when largest), then by id;
 * id -1 slots lose to everything.  tmp: room for r ids and r floats. */
void sml_knn_graph_merge(int64_t r, int largest, int64_t *a_ids, float *a_dist,
                         const int64_t *b_ids, const float *b_dist, int64_t *tmp_ids,
                         float *tmp_dist);

/* How many of the ids truth[0..r) (>= 0, no repeats) appear in found[0..r). */
int64_t sml_knn_graph_overlap(const int64_t *found, const int64_t *truth, int64_t r);

/* A graph file being written row chunk by chunk (atomically). */
typedef struct sml_graph_file sml_graph_file;

/* Open path for n x k rows: ids (is_ids) to .ivecs (int32) or .npy (int64),
 * distances to .fvecs or .npy (float32). */
simil_status sml_graph_file_open(sml_graph_file **f, const char *path, int is_ids, int64_t n,
                                 int64_t k);
/* Append count rows: int64_t ids or floats, per the file's kind. */
simil_status sml_graph_file_rows(sml_graph_file *f, int64_t count, const void *rows);
/* Check that n rows arrived, then commit; frees f even on failure. */
simil_status sml_graph_file_commit(sml_graph_file *f);
/* Remove the temporary file and free f.  NULL does nothing. */
void sml_graph_file_abort(sml_graph_file *f);

#endif
