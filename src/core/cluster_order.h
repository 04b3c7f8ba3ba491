/* cluster_order.h: rows grouped by cluster label (a counting sort), the
 * deterministic order in which every backend sums k-means clusters. */
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

#ifdef __cplusplus
}
#endif
#endif
