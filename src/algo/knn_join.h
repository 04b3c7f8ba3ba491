/* knn_join.h: k-NN graphs by joining inverted lists (knn_join.c), the same
 * on every backend; docs/knn-graph.md ("the list join") says why.
 *
 * With lists, the rows are clustered (k-means, as an IVF's coarse quantizer
 * is trained), each row goes to the list of its nearest centroid, the rows
 * are laid out in backend memory sorted by list, and every list is joined
 * with the candidate lists of its rows (sml_knn_join_blocks): each row is
 * compared with every row of its own nprobe nearest lists at least, as an
 * IVF search with nprobe would, but a block of rows at a time, as dense
 * GEMM tiles (the backend's knn_join).  Without lists (nlist = 0) the graph is exact: every row is
 * searched against all rows with the backend's exact k-NN.
 *
 * A build goes through these calls in order; rows come in chunks of at most
 * `batch`, prepared (checked, normalized for cosine) by the caller:
 *   create; with lists: train, then assign every chunk (pass 1), then plan,
 *   then sort, and only where sort could not place the rows, place every
 *   chunk (pass 2); without lists: place every chunk; run; then rows for
 *   every chunk.
 * A failed call leaves the join to be destroyed. */
#ifndef SML_ALGO_KNN_JOIN_H
#define SML_ALGO_KNN_JOIN_H

#include "core/backend.h"
#include "simil/kmeans.h"

typedef struct sml_knn_join sml_knn_join;

/* n rows of dim floats on backend b (which stays the caller's), metric L2 or
 * IP, nlist lists (0: the exact graph) of which each row is joined with its
 * nprobe (1..nlist) nearest at least. */
simil_status sml_knn_join_create(sml_backend *b, int64_t n, int64_t dim, simil_metric metric,
                                 int64_t nlist, int64_t nprobe, int64_t batch, int threads,
                                 sml_knn_join **out);
void sml_knn_join_destroy(sml_knn_join *j);

/* The lists' centroids: k-means with params (params->k is set to nlist) on m
 * rows (host). */
simil_status sml_knn_join_train(sml_knn_join *j, const simil_kmeans_params *params, int64_t m,
                                const float *sample);

/* Pass 1: rows [first, first + count) (host) into backend memory as they
 * come (their own order), and their nprobe nearest lists, searched there. */
simil_status sml_knn_join_assign(sml_knn_join *j, int64_t first, int64_t count,
                                 const float *rows);

/* After pass 1: the rows' order by list, and each list's candidate lists. */
simil_status sml_knn_join_plan(sml_knn_join *j);

/* After the plan: the rows of pass 1 put in list order on the backend,
 * through a second copy of them (n x dim more backend memory for a moment);
 * *placed = 1.  Where the backend has no memory for it (or, on the CPU,
 * the copy would pass 1 GiB), *placed = 0 and the rows must come again
 * through place (pass 2).  Progress: stage "knn-graph
 * add", one unit per row put in order. */
simil_status sml_knn_join_sort(sml_knn_join *j, int *placed);

/* Pass 2 (or without lists, the only pass): rows [first, first + count)
 * (host) into their places in backend memory. */
simil_status sml_knn_join_place(sml_knn_join *j, int64_t first, int64_t count,
                                const float *rows);

/* With the rows in place: the join, for k neighbours of each row besides itself.
 * Progress: stage "knn-graph", one unit per row joined (with lists). */
simil_status sml_knn_join_run(sml_knn_join *j, int64_t k);

/* Graph rows [first, first + count) into ids and distances (count x k; see
 * simil_knn_graph for their order, self and empty slots).  Without lists,
 * the chunk is searched now. */
simil_status sml_knn_join_rows(sml_knn_join *j, int64_t first, int64_t count, int64_t *ids,
                               float *distances);

/* (row, candidate) distances computed so far: the join's work. */
double sml_knn_join_pairs(const sml_knn_join *j);

/* The rows ordered by their nearest list (their first probe), after
 * checking that every probe (n x nprobe) is in [0, nlist): rows of list l
 * are order[offset[l] .. offset[l + 1]), ascending (offset: nlist + 1,
 * order: n).  A bad probe is SIMIL_ERR_INTERNAL naming the first row that
 * has one.  On `threads` threads (0: as many as the machine has for a large
 * join, one for a small one); the result does not depend on them.  Exposed
 * for tests. */
simil_status sml_knn_join_order(int64_t n, int64_t nlist, const int64_t *probes, int64_t nprobe,
                                int threads, int64_t *offset, int64_t *order);

/* The blocks of rows a join searches, and their candidate lists.  Rows of
 * list l are order[offset[l] .. offset[l + 1]); probes (n x nprobe) are each
 * row's nearest lists.  A list is one block joined with every list that one
 * of its rows probes (their union), except where fewer than share of its
 * rows name a list: then the rows that probe only lists named at least that
 * often come first (order is permuted within the list) and form a block
 * joined with those lists alone, and the other rows a second block joined
 * with everything they probe and those lists, when that saves a tenth of the
 * list's work.  Where that would still cost more than four times the
 * per-row search over the list's rows, its rows are grouped by probe set
 * instead, one block per set joined with exactly that set.  Either way every
 * row meets every row of its nprobe lists.  *block_offset and *cand_offset
 * (nblock + 1 each) and *cand_lists (ascending within a block) are
 * allocated here (sml_free).  Exposed for tests. */
simil_status sml_knn_join_blocks(int64_t nlist, const int64_t *offset, int64_t *order,
                                 const int64_t *probes, int64_t nprobe, double share,
                                 int64_t *nblock, int64_t **block_offset, int64_t **cand_offset,
                                 int64_t **cand_lists);

/* The same planned by `threads` threads (0: as many as the machine has for a
 * large join, one for a small one); the result does not depend on them. */
simil_status sml_knn_join_blocks_threads(int64_t nlist, const int64_t *offset, int64_t *order,
                                         const int64_t *probes, int64_t nprobe, double share,
                                         int threads, int64_t *nblock, int64_t **block_offset,
                                         int64_t **cand_offset, int64_t **cand_lists);

#endif
