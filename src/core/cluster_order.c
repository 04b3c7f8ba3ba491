/* cluster_order.c: counting sort of items by label (cluster_order.h). */
#include "core/cluster_order.h"

#include <assert.h>
#include <omp.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

simil_status sml_cluster_order(int64_t n, const int64_t *labels, int64_t k, int64_t *offsets,
                               int64_t *order)
{
    return sml_cluster_order_by(n, labels, 1, k, 1, NULL, NULL, offsets, order, NULL, NULL);
}

int sml_pass_threads(int threads, int64_t n)
{
    if (threads > 0) return threads;
    return n >= ((int64_t)1 << 16) ? omp_get_max_threads() : 1;
}

simil_status sml_cluster_order_by(int64_t n, const int64_t *labels, int64_t stride, int64_t k,
                                  int threads, const int64_t *start, int64_t *counts,
                                  int64_t *offsets, int64_t *order, int64_t *place_of,
                                  int64_t *bad)
{
    assert(n >= 0 && k >= 1 && stride >= 1);
    if (bad != NULL) *bad = -1;
    threads = sml_pass_threads(threads, n);
    const int64_t most = n / (8 * k);
    if (threads > most) threads = most > 1 ? (int)most : 1;
    const int64_t slices = threads;
    /* per slice: its counts per label (then its next place per label), and
     * its first bad item (-1: none) */
    int64_t *next;
    SML_TRY(sml_calloc((void **)&next, (size_t)(slices * (k + 1)), sizeof *next,
                       "counts per label"));
    int64_t *first_bad = next + slices * k;
    /* a slice stops at its first bad label, and the first slice with one
     * has the first of all */
#pragma omp parallel for schedule(static, 1) num_threads(threads)
    for (int64_t t = 0; t < slices; t++) {
        int64_t *count = next + t * k, mine = -1;
        for (int64_t i = n * t / slices; i < n * (t + 1) / slices; i++) {
            const int64_t c = labels[i * stride];
            if (c < 0 || c >= k) {
                mine = i;
                break;
            }
            count[c]++;
        }
        first_bad[t] = mine;
    }
    for (int64_t t = 0; t < slices; t++)
        if (first_bad[t] >= 0) {
            const int64_t i = first_bad[t];
            if (bad != NULL) *bad = i;
            sml_free(next);
            return sml_error(SIMIL_ERR_INTERNAL,
                             "label %" PRId64 " of item %" PRId64 " outside [0, %" PRId64 ")",
                             labels[i * stride], i, k);
        }
    /* counts become each slice's first place per label */
    int64_t at = 0;
    for (int64_t c = 0; c < k; c++) {
        const int64_t first = at;
        if (offsets != NULL) offsets[c] = first;
        int64_t place = start != NULL ? start[c] : first;
        for (int64_t t = 0; t < slices; t++) {
            const int64_t count = next[t * k + c];
            next[t * k + c] = place;
            place += count;
            at += count;
        }
        if (counts != NULL) counts[c] = at - first;
    }
    assert(at == n);
    if (offsets != NULL) offsets[k] = n;
    if (order != NULL || place_of != NULL) {
#pragma omp parallel for schedule(static, 1) num_threads(threads)
        for (int64_t t = 0; t < slices; t++) {
            int64_t *mine = next + t * k;
            for (int64_t i = n * t / slices; i < n * (t + 1) / slices; i++) {
                const int64_t p = mine[labels[i * stride]]++;
                if (order != NULL) order[p] = i;
                if (place_of != NULL) place_of[i] = p;
            }
        }
    }
    sml_free(next);
    return SIMIL_OK;
}
