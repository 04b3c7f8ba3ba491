/* cluster_order.h: items grouped by label, a stable counting sort: the
 * deterministic order in which every backend sums k-means clusters, the
 * places of rows appended to inverted lists (index/ivf.c) and the list
 * join's order of rows by list (algo/knn_join.c). */
#ifndef SML_CLUSTER_ORDER_H
#define SML_CLUSTER_ORDER_H

#include <stdint.h>

#include "simil/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* offsets: k + 1 entries; order: n entries.  The rows of cluster c are
 * order[offsets[c] .. offsets[c + 1]), ascending.  labels in [0, k). */
simil_status sml_cluster_order(int64_t n, const int64_t *labels, int64_t k, int64_t *offsets,
                               int64_t *order);

/* The threads of a pass over n items: threads, or where that is 0, all the
 * machine's from 2^16 items on and one below, where waking a team costs more
 * than it saves. */
int sml_pass_threads(int threads, int64_t n);

/* The same sort in full.  Item i's label is labels[i * stride], in [0, k).
 * Items of one label keep their order, and label c's take the places from
 * start[c] on (start NULL: packed from 0 in label order).  Any of these may
 * be NULL: counts (k: items per label), offsets (k + 1: where each label's
 * items start when packed), order (order[place] = item), place_of
 * (place_of[i] = item i's place).  The work is split into contiguous slices
 * of the items, a thread each: sml_pass_threads(threads, n) of them, and at
 * most n / (8 k), so that the table of counts per
 * slice and label, summed on one thread, stays small beside the items.  The
 * result does not depend on the number of threads.  A label outside [0, k)
 * is SIMIL_ERR_INTERNAL, with *bad (if not NULL) the first such item, and
 * nothing is placed. */
simil_status sml_cluster_order_by(int64_t n, const int64_t *labels, int64_t stride, int64_t k,
                                  int threads, const int64_t *start, int64_t *counts,
                                  int64_t *offsets, int64_t *order, int64_t *place_of,
                                  int64_t *bad);

#ifdef __cplusplus
}
#endif
#endif
