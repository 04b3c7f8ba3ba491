/* knn_join.c: k-NN graphs by joining inverted lists (knn_join.h).
 *
 * Host memory holds, with lists, each row's nprobe nearest lists (n x nprobe
 * ids), the order of the rows by list (2n ids), the candidate lists, and the
 * join's results in that order, n x (k + 1) ids and distances; backend
 * memory holds the rows in list order, their norms, labels and shadow.
 *
 * With lists the rows cross to the backend once: pass 1 uploads them in
 * their own order and finds their lists there, and sml_knn_join_sort
 * gathers them into list order in a second copy (twice the rows in backend
 * memory for a moment).  Where that copy does not fit, a second pass brings
 * them again, a chunk at a time through a staging buffer, each row straight
 * to its place (the peak stays near the rows' size).
 *
 * Each row is searched with k + 1 neighbours and its own id is dropped
 * (sml_knn_graph_drop_self), as the per-query build does.  The labels of the
 * sorted rows are their original row numbers, so that ties between equal
 * distances go to the smaller row number there too. */
#include "algo/knn_join.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/kmeans.h"
#include "algo/knn_graph.h"
#include "core/alloc.h"
#include "core/cluster_order.h"
#include "core/error.h"
#include "core/trace.h"
#include "core/progress.h"

/* Rows joined per call of the backend, at least: progress and the caller's
 * interrupts come between calls. */
enum { SML_JOIN_CALL_ROWS = 1 << 18 };

/* Rows gathered into list order per call of the backend's mem_move_rows,
 * at most: a GPU backend copies their indices to the device (8 MiB). */
enum { SML_JOIN_MOVE_ROWS = 1 << 20 };

/* The largest sorted copy of the rows made in host memory (CPU backend). */
static const size_t SML_JOIN_HOST_SORT_BYTES = (size_t)1 << 30;

/* A list whose rows' probes name another list fewer times than this share
 * of its rows joins that list only with the rows that probe it (see
 * sml_knn_join_blocks).  On mix10M-like clusters most second probes beyond
 * a cluster's own lists are such strays, each named by a few rows; joining
 * them whole made the union four times the per-query work. */
static const double sml_join_share = 0.02;

/* A list whose blocks would cost more than this many times the per-row
 * search over its rows is cut into blocks by probe set instead: lists much
 * coarser than the data's clusters have rows whose probes spread over many
 * lists, each named often (mix at 200,000 rows in 82 lists, nprobe 2: the
 * union joined 46.5% of all pairs, against about 2.5% for the search). */
static const double sml_join_max_work = 4.0;

struct sml_knn_join {
    sml_backend *b;
    int64_t n, dim, nlist, nprobe, batch, k;
    simil_metric metric;
    int threads;
    double pairs;
    /* lists */
    float *c_mem;       /* backend: nlist x dim centroids, norms, ids 0..nlist-1, shadow */
    float *c_norms_mem;
    int64_t *c_ids_mem;
    void *c_shadow;
    int64_t *probes;    /* host: n x nprobe */
    float *probe_dist;  /* host: batch x nprobe scratch */
    int64_t *offset;    /* host: nlist + 1; list l is sorted rows [offset[l], offset[l + 1]) */
    int64_t *order;     /* host: n, the row at each sorted position */
    int64_t *pos;       /* host: n, the sorted position of each row */
    int64_t nblock;     /* host: the blocks of rows joined and their candidates */
    int64_t *block_offset, *cand_offset, *cand_lists;
    int64_t *res_ids;   /* host: n x (k + 1), sorted order */
    float *res_dist;
    /* the rows (sorted by list when there are lists) */
    float *x_mem;       /* backend: n x dim */
    float *norms_mem;   /* backend: n (L2) */
    int64_t *ids_mem;   /* backend: n labels */
    void *shadow;
    float *stage_mem;   /* backend: batch x dim, for a second pass (made on its first chunk) */
    int64_t *tmp_ids;   /* host: batch x (k + 1), without lists */
    float *tmp_dist;
};

static void sml_mem_release(sml_backend *b, void *mem)
{
    if (mem != NULL) b->ops->mem_free(b, mem);
}

void sml_knn_join_destroy(sml_knn_join *j)
{
    if (j == NULL) return;
    sml_backend *b = j->b;
    if (j->c_shadow != NULL) b->ops->shadow_free(b, j->c_shadow);
    if (j->shadow != NULL) b->ops->shadow_free(b, j->shadow);
    sml_mem_release(b, j->c_mem);
    sml_mem_release(b, j->c_norms_mem);
    sml_mem_release(b, j->c_ids_mem);
    sml_mem_release(b, j->x_mem);
    sml_mem_release(b, j->norms_mem);
    sml_mem_release(b, j->ids_mem);
    sml_mem_release(b, j->stage_mem);
    sml_free(j->probes);
    sml_free(j->probe_dist);
    sml_free(j->offset);
    sml_free(j->order);
    sml_free(j->pos);
    sml_free(j->block_offset);
    sml_free(j->cand_offset);
    sml_free(j->cand_lists);
    sml_free(j->res_ids);
    sml_free(j->res_dist);
    sml_free(j->tmp_ids);
    sml_free(j->tmp_dist);
    sml_free(j);
}

static simil_status sml_knn_join_alloc(sml_knn_join *j)
{
    sml_backend *b = j->b;
    size_t row = sizeof(float) * (size_t)j->dim, n = (size_t)(j->n > 0 ? j->n : 1);
    SML_TRY(b->ops->mem_alloc(b, row * n, (void **)&j->x_mem));
    if (j->metric == SIMIL_METRIC_L2)
        SML_TRY(b->ops->mem_alloc(b, sizeof(float) * n, (void **)&j->norms_mem));
    SML_TRY(b->ops->mem_alloc(b, sizeof(int64_t) * n, (void **)&j->ids_mem));
    if (j->nlist == 0) return SIMIL_OK;
    const char *what = "the list join";
    SML_TRY(sml_alloc((void **)&j->probes, n * (size_t)j->nprobe, sizeof *j->probes, what));
    SML_TRY(sml_alloc((void **)&j->probe_dist, (size_t)(j->batch * j->nprobe),
                      sizeof *j->probe_dist, what));
    SML_TRY(sml_alloc((void **)&j->offset, (size_t)j->nlist + 1, sizeof *j->offset, what));
    SML_TRY(sml_alloc((void **)&j->order, n, sizeof *j->order, what));
    SML_TRY(sml_alloc((void **)&j->pos, n, sizeof *j->pos, what));
    return SIMIL_OK;
}

simil_status sml_knn_join_create(sml_backend *b, int64_t n, int64_t dim, simil_metric metric,
                                 int64_t nlist, int64_t nprobe, int64_t batch, int threads,
                                 sml_knn_join **out)
{
    *out = NULL;
    assert(metric == SIMIL_METRIC_L2 || metric == SIMIL_METRIC_IP);
    SML_RETURN_IF(nlist < 0 || (nlist > 0 && (nprobe < 1 || nprobe > nlist)),
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "list join: nprobe=%" PRId64 " must be in [1, nlist=%" PRId64 "]", nprobe,
                  nlist);
    SML_RETURN_IF(nlist > n, SIMIL_ERR_INVALID_ARGUMENT,
                  "list join: %" PRId64 " lists need at least as many vectors, got %" PRId64
                  "; use fewer lists",
                  nlist, n);
    sml_knn_join *j;
    SML_TRY(sml_calloc((void **)&j, 1, sizeof *j, "a list join"));
    *j = (sml_knn_join){.b = b, .n = n, .dim = dim, .nlist = nlist, .nprobe = nprobe,
                        .batch = batch < n ? batch : (n > 0 ? n : 1), .metric = metric,
                        .threads = threads};
    simil_status s = sml_knn_join_alloc(j);
    if (s != SIMIL_OK) {
        sml_knn_join_destroy(j);
        return s;
    }
    *out = j;
    return SIMIL_OK;
}

/* ---- lists ---- */

simil_status sml_knn_join_train(sml_knn_join *j, const simil_kmeans_params *params, int64_t m,
                                const float *sample)
{
    sml_backend *b = j->b;
    size_t cbytes = sizeof(float) * (size_t)(j->nlist * j->dim);
    simil_kmeans_params p = *params;
    p.k = j->nlist;
    float *centroids;
    SML_TRY(sml_alloc((void **)&centroids, cbytes, 1, "list centroids"));
    simil_status s = sml_kmeans_run(b, &p, m, j->dim, sample, centroids, NULL, NULL);
    if (s == SIMIL_OK) s = b->ops->mem_alloc(b, cbytes, (void **)&j->c_mem);
    if (s == SIMIL_OK) s = b->ops->mem_upload(b, j->c_mem, centroids, cbytes);
    if (s == SIMIL_OK && j->metric == SIMIL_METRIC_L2) {
        s = b->ops->mem_alloc(b, sizeof(float) * (size_t)j->nlist, (void **)&j->c_norms_mem);
        if (s == SIMIL_OK) s = b->ops->row_norms(b, j->nlist, j->dim, j->c_mem, j->c_norms_mem);
    }
    int64_t *ids = NULL;
    if (s == SIMIL_OK) s = sml_alloc((void **)&ids, (size_t)j->nlist, sizeof *ids, "list ids");
    if (s == SIMIL_OK) {
        for (int64_t l = 0; l < j->nlist; l++) ids[l] = l;
        s = b->ops->mem_alloc(b, sizeof *ids * (size_t)j->nlist, (void **)&j->c_ids_mem);
    }
    if (s == SIMIL_OK) s = b->ops->mem_upload(b, j->c_ids_mem, ids, sizeof *ids * (size_t)j->nlist);
    if (s == SIMIL_OK && b->ops->shadow_sync != NULL)
        s = b->ops->shadow_sync(b, &j->c_shadow, j->c_mem, 0, j->nlist, j->dim, j->metric);
    sml_free(ids);
    sml_free(centroids);
    return s;
}

simil_status sml_knn_join_assign(sml_knn_join *j, int64_t first, int64_t count,
                                 const float *rows)
{
    assert(j->nlist > 0 && count <= j->batch && first + count <= j->n);
    sml_backend *b = j->b;
    /* in source order, where sml_knn_join_sort finds them; the search reads
     * them there too, as it read them from a staging buffer before */
    float *at = j->x_mem + first * j->dim;
    SML_TRY(b->ops->mem_upload(b, at, rows, sizeof(float) * (size_t)(count * j->dim)));
    const sml_knn_args args = {.base = j->c_mem,
                               .base_norms = j->c_norms_mem,
                               .base_ids = j->c_ids_mem,
                               .base_shadow = j->c_shadow,
                               .n = j->nlist,
                               .dim = j->dim,
                               .queries = at,
                               .nq = count,
                               .k = j->nprobe,
                               .metric = j->metric,
                               .distances = j->probe_dist,
                               .labels = j->probes + first * j->nprobe,
                               .threads = j->threads};
    return b->ops->knn(b, &args);
}

/* One row's probe set, sorted, for grouping rows by it. */
typedef struct sml_join_set {
    const int64_t *lists; /* nprobe list numbers, ascending */
    int64_t row, nprobe;
} sml_join_set;

/* The planner's scratch: per list, the votes of the current list's rows
 * and a mark; the lists touched, to reset; row buffers; and the blocks and
 * candidate lists written so far. */
typedef struct sml_join_planner {
    int64_t *votes, *mark, *touched, *rows;
    int64_t ntouched;
    int64_t *sorted;      /* largest x nprobe: probe sets */
    sml_join_set *sets;   /* largest */
    int64_t *out;         /* candidate lists */
    int64_t used, cap;
    int64_t *block_offset, *cand_offset; /* nblock + 1 used */
    int64_t nblock, block_cap;
} sml_join_planner;

static simil_status sml_join_push(sml_join_planner *q, int64_t list)
{
    if (q->used == q->cap) {
        SML_TRY(sml_grow((void **)&q->out, sizeof *q->out * (size_t)q->used,
                         sizeof *q->out * (size_t)(2 * q->cap), "candidate lists"));
        q->cap *= 2;
    }
    q->out[q->used++] = list;
    return SIMIL_OK;
}

/* Close a block that ends before row `end`, with the candidates pushed since
 * `start`, sorted (a block has few, often nearly in order). */
static simil_status sml_join_close(sml_join_planner *q, int64_t start, int64_t end)
{
    for (int64_t a = start + 1; a < q->used; a++) {
        int64_t v = q->out[a], i = a;
        for (; i > start && q->out[i - 1] > v; i--) q->out[i] = q->out[i - 1];
        q->out[i] = v;
    }
    if (q->nblock + 1 == q->block_cap) {
        size_t keep = sizeof(int64_t) * (size_t)q->block_cap;
        size_t grown = 2 * keep;
        SML_TRY(sml_grow((void **)&q->block_offset, keep, grown, "join blocks"));
        SML_TRY(sml_grow((void **)&q->cand_offset, keep, grown, "join blocks"));
        q->block_cap *= 2;
    }
    q->block_offset[++q->nblock] = end;
    q->cand_offset[q->nblock] = q->used;
    return SIMIL_OK;
}

/* Whether row r has a probe that is not popular. */
static int sml_join_needs_more(const sml_join_planner *q, const int64_t *probes, int64_t nprobe,
                               int64_t r, int64_t popular)
{
    for (int64_t t = 0; t < nprobe; t++)
        if (probes[r * nprobe + t] >= 0 && q->votes[probes[r * nprobe + t]] < popular) return 1;
    return 0;
}

static int sml_join_set_cmp(const void *pa, const void *pb)
{
    const sml_join_set *a = pa, *b = pb;
    for (int64_t t = 0; t < a->nprobe; t++)
        if (a->lists[t] != b->lists[t]) return a->lists[t] < b->lists[t] ? -1 : 1;
    return (a->row > b->row) - (a->row < b->row);
}

/* Rows [lo, hi) grouped by their probe sets, one block per set joined with
 * exactly that set: the per-row search's work, in blocks. */
static simil_status sml_join_plan_sets(sml_join_planner *q, int64_t lo, int64_t hi,
                                       int64_t *order, const int64_t *probes, int64_t nprobe)
{
    int64_t size = hi - lo;
    for (int64_t i = 0; i < size; i++) {
        int64_t *set = q->sorted + i * nprobe;
        memcpy(set, probes + order[lo + i] * nprobe, sizeof *set * (size_t)nprobe);
        for (int64_t a = 1; a < nprobe; a++) {
            int64_t v = set[a], t = a;
            for (; t > 0 && set[t - 1] > v; t--) set[t] = set[t - 1];
            set[t] = v;
        }
        q->sets[i] = (sml_join_set){set, order[lo + i], nprobe};
    }
    qsort(q->sets, (size_t)size, sizeof *q->sets, sml_join_set_cmp);
    for (int64_t i = 0; i < size; i++) order[lo + i] = q->sets[i].row;
    for (int64_t i = 0; i < size;) {
        int64_t e = i + 1, start = q->used;
        while (e < size && !memcmp(q->sets[e].lists, q->sets[i].lists,
                                   sizeof(int64_t) * (size_t)nprobe))
            e++;
        for (int64_t t = 0; t < nprobe; t++) {
            int64_t c = q->sets[i].lists[t];
            if (c >= 0 && (t == 0 || c != q->sets[i].lists[t - 1])) SML_TRY(sml_join_push(q, c));
        }
        SML_TRY(sml_join_close(q, start, lo + e));
        i = e;
    }
    return SIMIL_OK;
}

/* List l: count the votes, put the rows that probe only popular lists first,
 * and append its blocks (see sml_knn_join_blocks). */
static simil_status sml_join_plan_list(sml_join_planner *q, int64_t l, const int64_t *offset,
                                       int64_t *order, const int64_t *probes, int64_t nprobe,
                                       double share)
{
    int64_t lo = offset[l], hi = offset[l + 1], size = hi - lo;
    if (size == 0) return SIMIL_OK;
    q->ntouched = 0;
    double search = 0; /* the per-row search's work over these rows */
    for (int64_t p = lo; p < hi; p++)
        for (int64_t t = 0; t < nprobe; t++) {
            int64_t c = probes[order[p] * nprobe + t];
            if (c < 0) continue;
            search += (double)(offset[c + 1] - offset[c]);
            if (q->votes[c]++ == 0) q->touched[q->ntouched++] = c;
        }
    int64_t popular = (int64_t)ceil(share * (double)size);
    if (popular < 1) popular = 1;
    /* stable partition: rows needing only popular lists, then the others */
    int64_t g1 = 0, g2 = 0;
    for (int64_t p = lo; p < hi; p++)
        if (!sml_join_needs_more(q, probes, nprobe, order[p], popular)) order[lo + g1++] = order[p];
        else q->rows[g2++] = order[p];
    memcpy(order + lo + g1, q->rows, sizeof *order * (size_t)g2);
    /* candidate rows of the popular lists (P) and of all the lists the other
     * rows probe (W) */
    int64_t p_rows = 0, w_rows = 0;
    for (int64_t i = 0; i < q->ntouched; i++) {
        int64_t c = q->touched[i], rows = offset[c + 1] - offset[c];
        if (q->votes[c] >= popular) p_rows += rows;
    }
    w_rows = p_rows;
    for (int64_t p = lo + g1; p < hi; p++)
        for (int64_t t = 0; t < nprobe; t++) {
            int64_t c = probes[order[p] * nprobe + t];
            if (c < 0 || q->votes[c] >= popular || q->mark[c] == l) continue;
            q->mark[c] = l;
            w_rows += offset[c + 1] - offset[c];
        }
    /* two blocks when that saves a tenth of the work, else one over W */
    int split = g1 > 0 && g2 > 0 &&
                (double)g1 * (double)(w_rows - p_rows) >= 0.1 * (double)size * (double)w_rows;
    double work = split ? (double)g1 * (double)p_rows + (double)g2 * (double)w_rows
                        : (double)size * (double)w_rows;
    simil_status s = SIMIL_OK;
    if (work > sml_join_max_work * search) {
        /* coarse lists whose rows probe many popular lists: blocks by probe set */
        s = sml_join_plan_sets(q, lo, hi, order, probes, nprobe);
    } else {
        int64_t start = q->used;
        if (split || g2 == 0) {
            for (int64_t i = 0; i < q->ntouched && s == SIMIL_OK; i++)
                if (q->votes[q->touched[i]] >= popular) s = sml_join_push(q, q->touched[i]);
            if (s == SIMIL_OK) s = sml_join_close(q, start, lo + g1);
            start = q->used;
        }
        for (int64_t i = 0; g2 > 0 && i < q->ntouched && s == SIMIL_OK; i++) {
            int64_t c = q->touched[i];
            if (q->votes[c] >= popular || q->mark[c] == l) s = sml_join_push(q, c);
        }
        if (g2 > 0 && s == SIMIL_OK) s = sml_join_close(q, start, hi);
    }
    for (int64_t i = 0; i < q->ntouched; i++) q->votes[q->touched[i]] = 0;
    return s;
}

static void sml_join_planner_free(sml_join_planner *q)
{
    sml_free(q->votes);
    sml_free(q->mark);
    sml_free(q->touched);
    sml_free(q->rows);
    sml_free(q->sorted);
    sml_free(q->sets);
    sml_free(q->out);
    sml_free(q->block_offset);
    sml_free(q->cand_offset);
}

/* A planner for lists whose first row is first_row; its first block starts
 * there. */
static simil_status sml_join_planner_init(sml_join_planner *q, int64_t nlist, int64_t largest,
                                          int64_t nprobe, int64_t first_row)
{
    q->cap = nlist > 0 ? nlist : 1;
    q->block_cap = nlist + 1;
    const char *what = "join blocks";
    SML_TRY(sml_calloc((void **)&q->votes, (size_t)nlist, sizeof *q->votes, what));
    SML_TRY(sml_alloc((void **)&q->mark, (size_t)nlist, sizeof *q->mark, what));
    SML_TRY(sml_alloc((void **)&q->touched, (size_t)nlist, sizeof *q->touched, what));
    SML_TRY(sml_alloc((void **)&q->rows, (size_t)largest, sizeof *q->rows, what));
    SML_TRY(sml_alloc((void **)&q->sorted, (size_t)(largest * nprobe), sizeof *q->sorted, what));
    SML_TRY(sml_alloc((void **)&q->sets, (size_t)largest, sizeof *q->sets, what));
    SML_TRY(sml_alloc((void **)&q->out, (size_t)q->cap, sizeof *q->out, what));
    SML_TRY(sml_alloc((void **)&q->block_offset, (size_t)q->block_cap, sizeof(int64_t), what));
    SML_TRY(sml_alloc((void **)&q->cand_offset, (size_t)q->block_cap, sizeof(int64_t), what));
    for (int64_t l = 0; l < nlist; l++) q->mark[l] = -1;
    q->block_offset[0] = first_row;
    q->cand_offset[0] = 0;
    return SIMIL_OK;
}

/* Lists [l0, l1) into q's blocks, in order. */
static simil_status sml_join_plan_range(sml_join_planner *q, int64_t l0, int64_t l1,
                                        const int64_t *offset, int64_t *order,
                                        const int64_t *probes, int64_t nprobe, double share)
{
    for (int64_t l = l0; l < l1; l++)
        SML_TRY(sml_join_plan_list(q, l, offset, order, probes, nprobe, share));
    return SIMIL_OK;
}

/* The parts' blocks and candidates, end to end: each part's first block
 * starts where the part before it ended. */
static simil_status sml_join_concat(const sml_join_planner *parts, int nparts, int64_t *nblock,
                                    int64_t **block_offset, int64_t **cand_offset,
                                    int64_t **cand_lists)
{
    int64_t blocks = 0, used = 0;
    for (int t = 0; t < nparts; t++) {
        blocks += parts[t].nblock;
        used += parts[t].used;
    }
    const char *what = "join blocks";
    SML_TRY(sml_alloc((void **)block_offset, (size_t)(blocks + 1), sizeof(int64_t), what));
    SML_TRY(sml_alloc((void **)cand_offset, (size_t)(blocks + 1), sizeof(int64_t), what));
    SML_TRY(sml_alloc((void **)cand_lists, (size_t)(used > 0 ? used : 1), sizeof(int64_t), what));
    (*block_offset)[0] = parts[0].block_offset[0];
    (*cand_offset)[0] = 0;
    int64_t b = 0, c = 0;
    for (int t = 0; t < nparts; t++) {
        const sml_join_planner *q = &parts[t];
        assert(q->block_offset[0] == (*block_offset)[b]);
        for (int64_t i = 1; i <= q->nblock; i++) {
            (*block_offset)[b + i] = q->block_offset[i];
            (*cand_offset)[b + i] = c + q->cand_offset[i];
        }
        memcpy(*cand_lists + c, q->out, sizeof(int64_t) * (size_t)q->used);
        b += q->nblock;
        c += q->used;
    }
    *nblock = blocks;
    return SIMIL_OK;
}

simil_status sml_knn_join_blocks_threads(int64_t nlist, const int64_t *offset, int64_t *order,
                                         const int64_t *probes, int64_t nprobe, double share,
                                         int threads, int64_t *nblock, int64_t **block_offset,
                                         int64_t **cand_offset, int64_t **cand_lists)
{
    *nblock = 0;
    *block_offset = *cand_offset = *cand_lists = NULL;
    int64_t largest = 1;
    for (int64_t l = 0; l < nlist; l++)
        if (offset[l + 1] - offset[l] > largest) largest = offset[l + 1] - offset[l];
    const int64_t rows = offset[nlist];
    threads = sml_pass_threads(threads, rows);
    if (threads > nlist) threads = nlist > 0 ? (int)nlist : 1;
    if (threads <= 1) {
        sml_join_planner q = {0};
        simil_status s = sml_join_planner_init(&q, nlist, largest, nprobe, 0);
        if (s == SIMIL_OK) s = sml_join_plan_range(&q, 0, nlist, offset, order, probes, nprobe,
                                                   share);
        if (s == SIMIL_OK) {
            *nblock = q.nblock;
            *block_offset = q.block_offset;
            *cand_offset = q.cand_offset;
            *cand_lists = q.out;
            q.block_offset = q.cand_offset = q.out = NULL;
        }
        sml_join_planner_free(&q);
        return s;
    }
    /* Lists in `threads` runs of about equal rows, each planned by its own
     * planner (lists are planned independently, each permuting only its own
     * rows of order), then put end to end: the same blocks as one planner
     * makes.  One thread over mix10M's 4,096 lists took 0.8 s. */
    sml_join_planner *parts;
    int64_t *first_list;
    SML_TRY(sml_calloc((void **)&parts, (size_t)threads, sizeof *parts, "join planners"));
    simil_status s = sml_alloc((void **)&first_list, (size_t)threads + 1, sizeof *first_list,
                               "join planners");
    if (s == SIMIL_OK) {
        int64_t l = 0;
        for (int t = 0; t < threads; t++) {
            first_list[t] = l;
            const int64_t until = rows / threads * (t + 1);
            while (l < nlist && (t == threads - 1 || offset[l + 1] <= until)) l++;
        }
        first_list[threads] = nlist;
    }
    simil_status failed = SIMIL_OK;
    char message[256] = "";
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (s == SIMIL_OK)
    for (int t = 0; t < threads; t++) {
        if (s != SIMIL_OK) continue;
        const int64_t l0 = first_list[t], l1 = first_list[t + 1];
        simil_status st = sml_join_planner_init(&parts[t], nlist, largest, nprobe, offset[l0]);
        if (st == SIMIL_OK)
            st = sml_join_plan_range(&parts[t], l0, l1, offset, order, probes, nprobe, share);
        if (st != SIMIL_OK) {
            /* the message is the thread's own: carry it out */
#pragma omp critical(sml_join_blocks)
            if (failed == SIMIL_OK) {
                failed = st;
                snprintf(message, sizeof message, "%s", simil_last_error());
            }
        }
    }
    if (s == SIMIL_OK && failed != SIMIL_OK) s = sml_error(failed, "%s", message);
    if (s == SIMIL_OK) s = sml_join_concat(parts, threads, nblock, block_offset, cand_offset,
                                           cand_lists);
    if (s != SIMIL_OK) {
        sml_free(*block_offset);
        sml_free(*cand_offset);
        sml_free(*cand_lists);
        *block_offset = *cand_offset = *cand_lists = NULL;
        *nblock = 0;
    }
    for (int t = 0; t < threads; t++) sml_join_planner_free(&parts[t]);
    sml_free(parts);
    sml_free(first_list);
    return s;
}

simil_status sml_knn_join_blocks(int64_t nlist, const int64_t *offset, int64_t *order,
                                 const int64_t *probes, int64_t nprobe, double share,
                                 int64_t *nblock, int64_t **block_offset, int64_t **cand_offset,
                                 int64_t **cand_lists)
{
    return sml_knn_join_blocks_threads(nlist, offset, order, probes, nprobe, share, 0, nblock,
                                       block_offset, cand_offset, cand_lists);
}

simil_status sml_knn_join_order(int64_t n, int64_t nlist, const int64_t *probes, int64_t nprobe,
                                int threads, int64_t *offset, int64_t *order)
{
    assert(nlist > 0 && nprobe > 0);
    /* every probe in range, the first bad one named; on one thread the check
     * and the sort took 0.27-0.33 s of a 10M-row plan on the GPU machine's
     * host */
    const int64_t entries = n * nprobe;
    int64_t first_bad = INT64_MAX;
#pragma omp parallel for schedule(static) reduction(min : first_bad) \
    num_threads(sml_pass_threads(threads, n))
    for (int64_t p = 0; p < entries; p++)
        if ((probes[p] < 0 || probes[p] >= nlist) && p < first_bad) first_bad = p;
    SML_RETURN_IF(first_bad != INT64_MAX, SIMIL_ERR_INTERNAL,
                  "list join: row %" PRId64 " was given list %" PRId64, first_bad / nprobe,
                  probes[first_bad]);
    /* by nearest list, each row's first probe */
    return sml_cluster_order_by(n, probes, nprobe, nlist, threads, NULL, NULL, offset, order,
                                NULL, NULL);
}

simil_status sml_knn_join_plan(sml_knn_join *j)
{
    assert(j->nlist > 0);
    SML_TRY(sml_knn_join_order(j->n, j->nlist, j->probes, j->nprobe, j->threads, j->offset,
                               j->order));
    sml_trace_mark("join plan: probes checked, rows ordered by list");
    SML_TRY(sml_knn_join_blocks_threads(j->nlist, j->offset, j->order, j->probes, j->nprobe,
                                        sml_join_share, j->threads, &j->nblock,
                                        &j->block_offset, &j->cand_offset, &j->cand_lists));
    sml_trace_mark("join plan: blocks");
    /* each row's place, once the blocks have reordered rows inside their
     * lists (the order pass leaves pos alone: it would be overwritten here) */
    const int64_t n = j->n;
    int64_t *pos = j->pos;
    const int64_t *order = j->order;
#pragma omp parallel for schedule(static) num_threads(sml_pass_threads(j->threads, n))
    for (int64_t p = 0; p < n; p++) pos[order[p]] = p;
    return SIMIL_OK;
}

/* ---- the rows ---- */

simil_status sml_knn_join_sort(sml_knn_join *j, int *placed)
{
    assert(j->nlist > 0 && j->n > 0);
    sml_backend *b = j->b;
    *placed = 0;
    const size_t row = sizeof(float) * (size_t)j->dim;
    /* On the CPU the sorted copy is host memory, whose exhaustion Linux's
     * overcommit may report only by killing the process, not as a failed
     * allocation: past SML_JOIN_HOST_SORT_BYTES the rows come again from
     * the source instead (the GPU's allocations do fail cleanly). */
    if (b->gpu < 0 && row * (size_t)j->n > SML_JOIN_HOST_SORT_BYTES) return SIMIL_OK;
    float *sorted = NULL;
    simil_status s = b->ops->mem_alloc(b, row * (size_t)j->n, (void **)&sorted);
    /* sorted row p = row order[p]: gathered, the indices from the host a
     * call at a time (a GPU backend copies them to the device) */
    for (int64_t p0 = 0; s == SIMIL_OK && p0 < j->n; p0 += SML_JOIN_MOVE_ROWS) {
        const int64_t count = j->n - p0 < SML_JOIN_MOVE_ROWS ? j->n - p0 : SML_JOIN_MOVE_ROWS;
        s = b->ops->mem_move_rows(b, (char *)sorted + row * (size_t)p0, NULL, j->x_mem,
                                  j->order + p0, row, count);
        if (s == SIMIL_OK) sml_progress("knn-graph add", p0 + count, j->n);
    }
    if (s != SIMIL_OK) {
        sml_mem_release(b, sorted);
        /* no room for the copy (or for the gather's indices): the rows in
         * source order stay, for sml_knn_join_place to overwrite */
        if (s != SIMIL_ERR_OUT_OF_MEMORY) return s;
        sml_error_clear();
        return SIMIL_OK;
    }
    sml_mem_release(b, j->x_mem);
    j->x_mem = sorted;
    *placed = 1;
    return SIMIL_OK;
}

simil_status sml_knn_join_place(sml_knn_join *j, int64_t first, int64_t count,
                                const float *rows)
{
    assert(count <= j->batch && first + count <= j->n);
    sml_backend *b = j->b;
    size_t row = sizeof(float) * (size_t)j->dim;
    if (j->nlist == 0)
        return b->ops->mem_upload(b, (char *)j->x_mem + row * (size_t)first, rows,
                                  row * (size_t)count);
    if (j->stage_mem == NULL)
        SML_TRY(b->ops->mem_alloc(b, row * (size_t)j->batch, (void **)&j->stage_mem));
    SML_TRY(b->ops->mem_upload(b, j->stage_mem, rows, row * (size_t)count));
    return b->ops->mem_move_rows(b, j->x_mem, j->pos + first, j->stage_mem, NULL, row, count);
}

/* Labels of the rows as they lie in backend memory: their row numbers. */
static simil_status sml_knn_join_labels(sml_knn_join *j)
{
    sml_backend *b = j->b;
    if (j->nlist > 0)
        return b->ops->mem_upload(b, j->ids_mem, j->order, sizeof(int64_t) * (size_t)j->n);
    int64_t *ids;
    SML_TRY(sml_alloc((void **)&ids, (size_t)j->n, sizeof *ids, "row ids"));
    for (int64_t i = 0; i < j->n; i++) ids[i] = i;
    simil_status s = b->ops->mem_upload(b, j->ids_mem, ids, sizeof *ids * (size_t)j->n);
    sml_free(ids);
    return s;
}

/* The blocks [b0, b1) where b1 is the first block past b0 that ends at least
 * SML_JOIN_CALL_ROWS rows after b0 starts. */
static int64_t sml_knn_join_call_end(const sml_knn_join *j, int64_t b0)
{
    int64_t b1 = b0 + 1;
    while (b1 < j->nblock && j->block_offset[b1] - j->block_offset[b0] < SML_JOIN_CALL_ROWS) b1++;
    return b1;
}

static simil_status sml_knn_join_lists(sml_knn_join *j)
{
    sml_backend *b = j->b;
    int64_t w = j->k + 1;
    const char *what = "the join's results";
    SML_TRY(sml_alloc((void **)&j->res_ids, (size_t)(j->n * w), sizeof *j->res_ids, what));
    SML_TRY(sml_alloc((void **)&j->res_dist, (size_t)(j->n * w), sizeof *j->res_dist, what));
    sml_join_args a = {.x = j->x_mem,
                       .norms = j->norms_mem,
                       .ids = j->ids_mem,
                       .shadow = j->shadow,
                       .n = j->n,
                       .dim = j->dim,
                       .list_offset = j->offset,
                       .nlist = j->nlist,
                       .block_offset = j->block_offset,
                       .nblock = j->nblock,
                       .cand_offset = j->cand_offset,
                       .cand_lists = j->cand_lists,
                       .k = w,
                       .metric = j->metric,
                       .distances = j->res_dist,
                       .labels = j->res_ids,
                       .threads = j->threads};
    for (int64_t b0 = 0; b0 < j->nblock;) {
        a.block_begin = b0;
        a.block_end = sml_knn_join_call_end(j, b0);
        SML_TRY(b->ops->knn_join(b, &a));
        sml_trace_mark("join: a call");
        for (int64_t blk = b0; blk < a.block_end; blk++) {
            int64_t cols = 0;
            for (int64_t c = j->cand_offset[blk]; c < j->cand_offset[blk + 1]; c++)
                cols += j->offset[j->cand_lists[c] + 1] - j->offset[j->cand_lists[c]];
            j->pairs += (double)(j->block_offset[blk + 1] - j->block_offset[blk]) * (double)cols;
        }
        b0 = a.block_end;
        sml_progress("knn-graph", j->block_offset[b0], j->n);
    }
    return SIMIL_OK;
}

simil_status sml_knn_join_run(sml_knn_join *j, int64_t k)
{
    sml_backend *b = j->b;
    j->k = k;
    if (j->n == 0) return SIMIL_OK;
    /* a second pass's staging buffer is done with: room for the shadow */
    sml_mem_release(b, j->stage_mem);
    j->stage_mem = NULL;
    sml_trace_mark(NULL);
    SML_TRY(sml_knn_join_labels(j));
    sml_trace_mark("join: labels up");
    if (j->norms_mem != NULL) SML_TRY(b->ops->row_norms(b, j->n, j->dim, j->x_mem, j->norms_mem));
    sml_trace_mark("join: row norms");
    if (b->ops->shadow_sync != NULL)
        SML_TRY(b->ops->shadow_sync(b, &j->shadow, j->x_mem, 0, j->n, j->dim, j->metric));
    sml_trace_mark("join: fp16 copy");
    if (j->nlist == 0) {
        const char *what = "k-NN results";
        size_t slots = (size_t)(j->batch * (k + 1));
        SML_TRY(sml_alloc((void **)&j->tmp_ids, slots, sizeof *j->tmp_ids, what));
        return sml_alloc((void **)&j->tmp_dist, slots, sizeof *j->tmp_dist, what);
    }
    return sml_knn_join_lists(j);
}

simil_status sml_knn_join_rows(sml_knn_join *j, int64_t first, int64_t count, int64_t *ids,
                               float *distances)
{
    assert(count <= j->batch && first + count <= j->n);
    int64_t w = j->k + 1;
    if (j->nlist == 0) {
        sml_backend *b = j->b;
        const sml_knn_args args = {.base = j->x_mem,
                                   .base_norms = j->norms_mem,
                                   .base_ids = j->ids_mem,
                                   .base_shadow = j->shadow,
                                   .n = j->n,
                                   .dim = j->dim,
                                   .queries = j->x_mem + first * j->dim,
                                   .nq = count,
                                   .k = w,
                                   .metric = j->metric,
                                   .distances = j->tmp_dist,
                                   .labels = j->tmp_ids,
                                   .threads = j->threads};
        SML_TRY(b->ops->knn(b, &args));
        j->pairs += (double)count * (double)j->n;
        sml_knn_graph_drop_self(count, first, NULL, j->k, j->tmp_ids, j->tmp_dist, ids,
                                distances);
        return SIMIL_OK;
    }
    /* rows gather from all over the results (list order): in parallel, the
     * misses overlap (1.4 s of mix10M's join on one thread) */
#pragma omp parallel for schedule(static) if (count > 4096)
    for (int64_t i = 0; i < count; i++) {
        int64_t p = j->pos[first + i], self = first + i;
        sml_knn_graph_drop_self(1, 0, &self, j->k, j->res_ids + p * w, j->res_dist + p * w,
                                ids + i * j->k, distances + i * j->k);
    }
    return SIMIL_OK;
}

double sml_knn_join_pairs(const sml_knn_join *j) { return j->pairs; }
