/* graph_build.c: what the two k-NN graph builders share (graph_build.h):
 * graph_api.c searches every row through an index and graph_join.c joins
 * inverted lists; both read rows from a source, capture the quality sample
 * on the way and hand graph rows to the caller's sink.  Kept apart from
 * graph_api.c so that the join does not call back into the driver that
 * chose it. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "index/graph_build.h"

double sml_graph_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- where rows come from ---- */

simil_status sml_source_rows(sml_source *s, int64_t first, int64_t count, const float **rows)
{
    if (s->x != NULL) {
        *rows = s->x + first * s->dim;
        return SIMIL_OK;
    }
    sml_error_clear();
    simil_status st = s->read(s->user, first, count, s->buf);
    if (st != SIMIL_OK && simil_last_error()[0] == '\0')
        return sml_error(st, "the row reader failed on rows %" PRId64 " to %" PRId64 " (%s)",
                         first, first + count - 1, simil_status_name(st));
    *rows = s->buf;
    return st;
}

simil_status sml_source_gather(sml_source *s, int64_t m, const int64_t *nodes, float *out)
{
    size_t row = sizeof(float) * (size_t)s->dim;
    int64_t next = 0;
    for (int64_t first = 0; first < s->n && next < m; first += s->batch) {
        int64_t count = s->n - first < s->batch ? s->n - first : s->batch;
        if (nodes[next] >= first + count) continue;
        const float *rows = NULL;
        SML_TRY(sml_source_rows(s, first, count, &rows));
        for (; next < m && nodes[next] < first + count; next++)
            memcpy(out + next * s->dim, rows + (nodes[next] - first) * s->dim, row);
    }
    return SIMIL_OK;
}

void sml_graph_capture_x(sml_graph_build *g, int64_t first, int64_t count, const float *rows)
{
    size_t row = sizeof(float) * (size_t)g->src.dim;
    for (; g->next_x < g->m && g->nodes[g->next_x] < first + count; g->next_x++) {
        int64_t i = g->nodes[g->next_x] - first;
        memcpy(g->sample_x + g->next_x * g->src.dim, rows + i * g->src.dim, row);
    }
}

void sml_graph_capture_ids(sml_graph_build *g, int64_t first, int64_t count)
{
    for (; g->next_ids < g->m && g->nodes[g->next_ids] < first + count; g->next_ids++) {
        int64_t i = g->nodes[g->next_ids] - first;
        memcpy(g->sample_ids + g->next_ids * g->r, g->out_ids + i * g->k,
               sizeof(int64_t) * (size_t)g->r);
    }
}

simil_status sml_graph_deliver(sml_graph_build *g, int64_t first, int64_t count)
{
    sml_error_clear();
    simil_status st = g->sink(g->sink_user, first, count, g->k, g->out_ids, g->out_dist);
    if (st != SIMIL_OK && simil_last_error()[0] == '\0')
        return sml_error(st, "the graph sink failed on rows %" PRId64 " to %" PRId64 " (%s)",
                         first, first + count - 1, simil_status_name(st));
    return st;
}
