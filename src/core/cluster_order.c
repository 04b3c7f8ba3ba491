/* cluster_order.c: counting sort of rows by cluster label. */
#include "core/cluster_order.h"

#include <string.h>

#include "core/error.h"

simil_status sml_cluster_order(int64_t n, const int64_t *labels, int64_t k, int64_t *offsets,
                               int64_t *order)
{
    memset(offsets, 0, sizeof *offsets * (size_t)(k + 1));
    for (int64_t i = 0; i < n; i++) {
        SML_RETURN_IF(labels[i] < 0 || labels[i] >= k, SIMIL_ERR_INTERNAL,
                      "cluster label %" PRId64 " outside [0, %" PRId64 ")", labels[i], k);
        offsets[labels[i] + 1]++;
    }
    for (int64_t c = 0; c < k; c++) offsets[c + 1] += offsets[c];
    /* fill: a running cursor per cluster, rows visited in order */
    for (int64_t i = 0; i < n; i++) order[offsets[labels[i]]++] = i;
    for (int64_t c = k; c > 0; c--) offsets[c] = offsets[c - 1];
    offsets[0] = 0;
    return SIMIL_OK;
}
