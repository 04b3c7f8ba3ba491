/* cpu_join.c: the join of inverted lists on the CPU (sml_join_args), the
 * oracle of the GPU's.
 *
 * The rows of the joined blocks are cut into pieces of at most
 * SML_JOIN_PIECE rows, each inside one block; OpenMP threads take the pieces
 * in turn.  A piece's rows are searched with the GEMM blocks of the exact
 * search (cpu_knn.h) over each of its block's candidate lists in turn, which
 * are contiguous rows of x: no gathering.  Pieces depend only on the block
 * sizes, so results do not change with the thread count. */
#include <omp.h>

#include "core/alloc.h"
#include "core/blas.h"
#include "core/error.h"
#include "cpu/cpu_knn.h"

enum { SML_JOIN_PIECE = 256, SML_JOIN_TILE = 2048 };

/* Pieces of the blocks [begin, end): piece i starts at row starts[i] of
 * block blocks[i].  With starts == NULL, only counts them. */
static int64_t sml_join_pieces(const sml_join_args *a, int64_t *blocks, int64_t *starts)
{
    int64_t count = 0;
    for (int64_t b = a->block_begin; b < a->block_end; b++)
        for (int64_t r = a->block_offset[b]; r < a->block_offset[b + 1]; r += SML_JOIN_PIECE) {
            if (starts != NULL) {
                blocks[count] = b;
                starts[count] = r;
            }
            count++;
        }
    return count;
}

/* One piece: rows [r0, r0 + m) of block b against its candidate lists. */
static void sml_join_piece(const sml_join_args *a, const sml_knn_args *base, int64_t b,
                           int64_t r0, int64_t m, float *scores, sml_topk_pair *storage,
                           sml_topk *lists)
{
    int64_t cap = sml_topk_capacity(a->k);
    const float *rows = a->x + r0 * a->dim;
    for (int64_t i = 0; i < m; i++) sml_topk_reset(&lists[i], storage + i * cap, a->k);
    for (int64_t c = a->cand_offset[b]; c < a->cand_offset[b + 1]; c++) {
        int64_t cl = a->cand_lists[c];
        int64_t first = a->list_offset[cl], count = a->list_offset[cl + 1] - first;
        sml_cpu_knn_block_scan(base, rows, m, first, count, SML_JOIN_TILE, scores, lists);
    }
    sml_cpu_knn_block_finish(base, rows, m, lists, a->distances + r0 * a->k,
                             a->labels + r0 * a->k);
}

simil_status sml_cpu_knn_join(sml_backend *b, const sml_join_args *a)
{
    (void)b;
    SML_RETURN_IF(a->metric != SIMIL_METRIC_L2 && a->metric != SIMIL_METRIC_IP,
                  SIMIL_ERR_INTERNAL, "cpu join called with metric %d", (int)a->metric);
    SML_RETURN_IF(a->dim > INT32_MAX, SIMIL_ERR_UNSUPPORTED,
                  "dimension %" PRId64 " is larger than OpenBLAS supports", a->dim);
    int64_t pieces = sml_join_pieces(a, NULL, NULL);
    if (pieces == 0) return SIMIL_OK;
    int threads = a->threads > 0 ? a->threads : omp_get_max_threads();
    if (threads > pieces) threads = (int)pieces;
    /* under an address-space limit, as many callers as have room */
    SML_TRY(sml_blas_callers(threads, &threads));
    if (sml_cpu_blas_one_caller()) threads = 1;
    int64_t cap = sml_topk_capacity(a->k);
    const sml_knn_args base = {.base = a->x,
                               .base_norms = a->metric == SIMIL_METRIC_L2 ? a->norms : NULL,
                               .base_ids = a->ids,
                               .n = a->n,
                               .dim = a->dim,
                               .k = a->k,
                               .metric = a->metric};
    int64_t *piece_block = NULL, *piece_start = NULL;
    float *scores = NULL;
    sml_topk_pair *storage = NULL;
    sml_topk *lists = NULL;
    const char *what = "the list join";
    simil_status s = sml_alloc((void **)&piece_block, (size_t)pieces, sizeof *piece_block, what);
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&piece_start, (size_t)pieces, sizeof *piece_start, what);
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&scores, (size_t)threads * SML_JOIN_PIECE * SML_JOIN_TILE,
                      sizeof *scores, what);
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&storage, (size_t)(threads * SML_JOIN_PIECE * cap),
                      sizeof *storage, what);
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&lists, (size_t)threads * SML_JOIN_PIECE, sizeof *lists, what);
    if (s == SIMIL_OK) {
        sml_join_pieces(a, piece_block, piece_start);
#pragma omp parallel for num_threads(threads) schedule(dynamic)
        for (int64_t i = 0; i < pieces; i++) {
            omp_set_num_threads(1); /* OpenBLAS single-threaded here (cpu_knn.c) */
            int t = omp_get_thread_num();
            int64_t blk = piece_block[i], r0 = piece_start[i];
            int64_t end = a->block_offset[blk + 1];
            int64_t m = end - r0 < SML_JOIN_PIECE ? end - r0 : SML_JOIN_PIECE;
            sml_join_piece(a, &base, blk, r0, m, scores + (size_t)t * SML_JOIN_PIECE * SML_JOIN_TILE,
                           storage + t * SML_JOIN_PIECE * cap, lists + t * SML_JOIN_PIECE);
        }
    }
    sml_free(lists);
    sml_free(storage);
    sml_free(scores);
    sml_free(piece_start);
    sml_free(piece_block);
    return s;
}
