// cuda_knn.cu: exact k-NN on the GPU (the GPU paper, section 5.1, "exact
// search"), with a tensor-core fast path that stays exact.
//
// Plain fp32 path.  For a tile of queries and a tile of the base, cuBLAS gives
// -2<x, y> (or -<x, y> for IP); the fused select kernel adds ||y||^2 and keeps
// the k best of the tile in registers (warp_select.cuh).  Two passes over the
// distance matrix: the GEMM writes it, the selection reads it.  Base tiles
// alternate between two streams, so one tile's GEMM overlaps the other's
// selection; the per-tile lists of a query are merged by one more selection
// every `group` tiles, and the running k-th bounds the tiles after.
// ||x||^2 is added at the end.  k > 2048 takes whole rows
// through radix selection (radix_select.cu).
//
// Fast path (default when k <= 1024).  The same layout on fp16 tensor cores:
// rows scaled by powers of two to norms in [64, 128), rounded to fp16 (the
// index's shadow, cuda_shadow.cu), fp16 GEMM output.  Every approximate key is
// within E(x) of the true one, with the bound
//     E = 2 c ||x|| Ymax + 2^-22 (Ymax^2 + 2 ||x|| Ymax) + dim 2^-23 Ymax^2   (L2)
//     E =   c ||x|| Ymax + 2^-22 ||x|| Ymax                                   (IP)
//     c = 2^-10 (input rounding) + 2^-11 (output rounding) + 2^-17
//         (subnormals) + dim 2^-20 (fp32 accumulation, generously)
// where Ymax is the largest base norm (docs/gpu-exact-search.md derives it).
// Each query keeps its k2 = 2k (at least 64) best approximate keys.  If the
// k2-th exceeds the k-th by more than 2E, every true top-k vector is among the
// k2 (a true top-k key is at most the true k-th <= approx k-th + E, so its
// approximate key is at most approx k-th + 2E), and re-ranking the k2 exactly
// in fp32 gives the exact answer.  Queries that fail the test are searched
// again on the fp32 path, so the result is exact either way.
//
// Small batches (up to 64 queries by default) go to cuda_knn_small.cu, which
// streams the shadow once with distances and selection fused.
#include <math.h>

#include <atomic>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/vectors.h"
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_filter.cuh"
#include "cuda/cuda_kernels.cuh"
#include "cuda/cuda_knn_small.cuh"
#include "cuda/cuda_util.cuh"
#include "cuda/cuda_workspace.cuh"
#include "cuda/knn_device.cuh"
#include "cuda/select.cuh"

namespace sml {
namespace {

constexpr int kMaxQueryTile = 16384;
// Tiles between merges.  Small, because each merge hands the next tiles a
// bound (the running k-th), and a tile that starts with a good bound keeps
// almost nothing.
constexpr int kMaxGroup = 2;
constexpr size_t kScoresBudget = (size_t)3 << 30;   // both streams' GEMM tiles
constexpr size_t kWorkspaceCap = (size_t)12 << 30;

std::atomic<long long> fallback_queries{0};

struct Search {
    Device *dev;
    const sml_knn_args *a;
    const Shadow *shadow;
    bool l2;
    const float *add;  // per base row, added to its key: norms (L2), refused rows +inf
    bool filtered;     // a filter made add (cuda_filter.cuh)
    bool queries_on_device;
    bool outputs_on_device;
    bool redo;  // buffers for re-running fast-path queries in fp32
    int max_query_tile;
    bool results_direct;  // host results copied straight to the caller (one tile)
};

// What one query tile needs.
struct Plan {
    int qt;      // queries per tile
    int dt;      // base rows per tile
    int kk;      // pairs kept per query and base tile
    int group;   // base tiles between merges
    bool fast;
    bool radix;
};

struct Buffers {
    float *queries;      // qt x dim fp32 (a copy of host queries)
    float *query_norms;  // qt: ||x||^2 (fp32 path), ||x|| (fast path)
    __half *queries_h;   // qt x dim
    float *query_inv;    // qt
    float *row_scale;    // qt
    float *bound;        // qt
    int *ok;             // qt
    void *scores[2];     // qt x dt each
    float *part_keys;    // qt x (group + 1) x kk
    int *part_idx;
    int *candidates;     // qt x kk (fast path: positions to re-rank)
    float *exact_keys;   // qt x kk (fast path: their exact keys)
    int64_t *redo_rows;  // qt (fp32 redo: which queries of the fast tile)
    float *final_keys;   // qt x k
    int *final_idx;
    float *out_dist;     // qt x k, when the caller's outputs are on the host
    int64_t *out_labels;
    void *radix;         // radix-select scratch
    size_t radix_bytes;
};

size_t carve(const Search &s, const Plan &p, char *base, Buffers *b)
{
    const sml_knn_args *a = s.a;
    Carve c(base);
    const size_t qt = (size_t)p.qt, k = (size_t)a->k;
    const bool own_queries = !s.queries_on_device || s.redo;
    b->queries = own_queries ? c.take<float>(qt * a->dim) : nullptr;
    b->redo_rows = s.redo ? c.take<int64_t>(qt) : nullptr;
    b->query_norms = c.take<float>(qt);
    if (p.fast) {
        b->queries_h = c.take<__half>(qt * a->dim);
        b->query_inv = c.take<float>(qt);
        b->row_scale = c.take<float>(qt);
        b->bound = c.take<float>(qt);
        b->ok = c.take<int>(qt);
        b->candidates = c.take<int>(qt * p.kk);
        b->exact_keys = c.take<float>(qt * p.kk);
    }
    const size_t score_bytes = p.fast ? 2 : 4;
    // radix selection takes whole rows from one GEMM; tiles alternate streams
    for (int i = 0; i < (p.radix ? 1 : 2); ++i)
        b->scores[i] = c.take<char>(qt * (size_t)p.dt * score_bytes);
    if (p.radix) {
        b->radix_bytes = select_rows_radix_workspace(p.qt, p.dt, a->k);
        b->radix = c.take<char>(b->radix_bytes);
    } else {
        const size_t part = qt * (size_t)(p.group + 1) * p.kk;
        b->part_keys = c.take<float>(part);
        b->part_idx = c.take<int>(part);
    }
    b->final_keys = c.take<float>(qt * k);
    b->final_idx = c.take<int>(qt * k);
    if (!s.outputs_on_device || s.redo) {
        b->out_dist = c.take<float>(qt * k);
        b->out_labels = c.take<int64_t>(qt * k);
    }
    return c.used();
}

// Largest tiles that fit in budget bytes.
simil_status plan_search(const Search &s, bool fast, size_t budget, Plan *out)
{
    const sml_knn_args *a = s.a;
    Plan p{};
    p.fast = fast;
    p.radix = a->k > kMaxWarpSelectK;
    p.kk = fast ? fast_candidates(a->k) : (int)a->k;
    const size_t score_bytes = fast ? 2 : 4;
    for (p.qt = (int)(a->nq < s.max_query_tile ? a->nq : s.max_query_tile); p.qt >= 1;
         p.qt /= 2) {
        if (p.radix) {
            p.dt = (int)a->n;  // whole rows: the k best of a row need all of it
            p.group = 1;
        } else {
            size_t dt = kScoresBudget / (2 * (size_t)p.qt * score_bytes);
            dt = dt / 256 * 256;
            if (dt < 1024) dt = 1024;
            if (dt > (size_t)a->n) dt = (size_t)a->n;
            p.dt = (int)dt;
            const int tiles = (int)((a->n + p.dt - 1) / p.dt);
            p.group = tiles < kMaxGroup ? tiles : kMaxGroup;
        }
        Buffers b;
        size_t need = carve(s, p, nullptr, &b);
        // Fewer tiles per merge before fewer queries per tile.
        while (need > budget && p.group > 1) {
            p.group /= 2;
            need = carve(s, p, nullptr, &b);
        }
        if (need <= budget) {
            *out = p;
            return SIMIL_OK;
        }
    }
    return sml_error(SIMIL_ERR_OUT_OF_MEMORY,
                     "out of GPU memory: exact search of k=%lld over %lld vectors needs more "
                     "scratch than the %.2f GiB free; use a smaller k or fewer vectors per GPU",
                     (long long)a->k, (long long)a->n, budget / 1073741824.0);
}

// ---- the fp32 path --------------------------------------------------------

// Merge the tile lists of one query tile into slot 0.
simil_status merge_tiles(const Search &s, const Plan &p, const Buffers &b, int rows, int slots,
                         bool have_running)
{
    SelectJob job{};
    const long long ld = (long long)(p.group + 1) * p.kk;
    const int first = have_running ? 0 : 1;
    job.scores = b.part_keys + (size_t)first * p.kk;
    job.ld = ld;
    job.row_scale_const = 1.0f;
    job.in_idx = b.part_idx + (size_t)first * p.kk;
    job.rows = rows;
    job.cols = (slots + (have_running ? 1 : 0)) * p.kk;
    job.k = p.kk;
    job.out_keys = b.part_keys;
    job.out_idx = b.part_idx;
    job.out_ld = ld;
    return select_rows(job, ScoreType::f32, s.dev->stream[0]);
}

// Make `waiter` wait for everything queued on `other` so far.
simil_status stream_join(Device *dev, int waiter, int other)
{
    SML_CUDA_TRY(cudaEventRecord(dev->done[other], dev->stream[other]));
    SML_CUDA_TRY(cudaStreamWaitEvent(dev->stream[waiter], dev->done[other], 0));
    return SIMIL_OK;
}

// Top kk of rows queries (device) against the whole base, into slot 0 of the
// partial lists (fp32 or fast keys, per plan).
simil_status scan_tiles(const Search &s, const Plan &p, const Buffers &b, const float *queries,
                        int rows)
{
    const sml_knn_args *a = s.a;
    Device *dev = s.dev;
    const int tiles = (int)((a->n + p.dt - 1) / p.dt);
    const long long ld = (long long)(p.group + 1) * p.kk;
    bool have_running = false;
    int in_group = 0;
    // One tile: its list is the result, written straight into slot 0.
    const bool single = tiles == 1;
    SML_TRY(stream_join(dev, 1, 0));
    for (int t = 0; t < tiles; ++t) {
        const int st = t & 1;
        const long long off = (long long)t * p.dt;
        const int w = (int)(a->n - off < p.dt ? a->n - off : p.dt);
        SelectJob job{};
        job.ld = p.dt;
        job.idx_base = (int)off;
        job.rows = rows;
        job.cols = w;
        job.k = p.kk < w ? p.kk : w;
        if (have_running) {
            job.bound_key = b.part_keys + p.kk - 1;
            job.bound_idx = b.part_idx + p.kk - 1;
            job.bound_ld = ld;
        }
        const size_t slot = single ? 0 : (size_t)(1 + in_group);
        job.out_keys = b.part_keys + slot * p.kk;
        job.out_idx = b.part_idx + slot * p.kk;
        job.out_ld = ld;
        job.scores = b.scores[st];
        if (p.fast) {
            SML_TRY(blas_gemm_f16(dev->blas[st], rows, w, (int)a->dim, 1.0f, b.queries_h,
                                  (int)a->dim, s.shadow->rows + off * a->dim, (int)a->dim, 0.0f,
                                  static_cast<__half *>(b.scores[st]), p.dt));
            trace_mark(dev->stream[st], "knn: fp16 GEMM of a tile");
            job.add = s.add ? s.add + off : nullptr;
            job.scale = s.shadow->inv_scale + off;
            job.row_scale = b.row_scale;
            SML_TRY(select_rows(job, ScoreType::f16, dev->stream[st]));
            trace_mark(dev->stream[st], "knn: selection in a tile");
        } else {
            SML_TRY(blas_gemm_f32(dev->blas[st], rows, w, (int)a->dim, s.l2 ? -2.0f : -1.0f,
                                  queries, (int)a->dim, a->base + off * a->dim, (int)a->dim, 0.0f,
                                  static_cast<float *>(b.scores[st]), p.dt));
            job.add = s.add ? s.add + off : nullptr;
            job.row_scale_const = 1.0f;
            SML_TRY(select_rows(job, ScoreType::f32, dev->stream[st]));
        }
        if (job.k < p.kk) {
            // a short last tile: pad its list so the merge reads no garbage
            SML_CUDA_TRY(cudaMemset2DAsync(job.out_idx + job.k, ld * sizeof(int), 0xff,
                                           (p.kk - job.k) * sizeof(int), rows, dev->stream[st]));
        }
        ++in_group;
        if (!single && (in_group == p.group || t == tiles - 1)) {
            SML_TRY(stream_join(dev, 0, 1));
            SML_TRY(merge_tiles(s, p, b, rows, in_group, have_running));
            SML_TRY(stream_join(dev, 1, 0));
            have_running = true;
            in_group = 0;
        }
    }
    return SIMIL_OK;
}

// k > 2048: whole rows through radix selection, into final.
simil_status scan_radix(const Search &s, const Plan &p, const Buffers &b, const float *queries,
                        int rows)
{
    const sml_knn_args *a = s.a;
    Device *dev = s.dev;
    SML_TRY(blas_gemm_f32(dev->blas[0], rows, (int)a->n, (int)a->dim, s.l2 ? -2.0f : -1.0f,
                          queries, (int)a->dim, a->base, (int)a->dim, 0.0f,
                          static_cast<float *>(b.scores[0]), p.dt));
    // k > n: select all n; the ranks past n stay empty (-1)
    SML_CUDA_TRY(cudaMemsetAsync(b.final_idx, 0xff, sizeof(int) * (size_t)rows * a->k,
                                 dev->stream[0]));
    SelectJob job{};
    job.scores = b.scores[0];
    job.ld = p.dt;
    job.add = s.add;
    job.row_scale_const = 1.0f;
    job.rows = rows;
    job.cols = (int)a->n;
    job.k = (int)(a->k < a->n ? a->k : a->n);
    job.out_keys = b.final_keys;
    job.out_idx = b.final_idx;
    job.out_ld = a->k;
    return select_rows_radix(job, ScoreType::f32, b.radix, b.radix_bytes, dev->stream[0]);
}

// Copy rows of k pairs from slot 0 of the partial lists to final.
simil_status take_final(const Search &s, const Plan &p, const Buffers &b, int rows)
{
    const size_t ld = (size_t)(p.group + 1) * p.kk;
    const size_t k = (size_t)s.a->k;
    cudaStream_t st = s.dev->stream[0];
    SML_CUDA_TRY(cudaMemcpy2DAsync(b.final_keys, k * 4, b.part_keys, ld * 4, k * 4, rows,
                                   cudaMemcpyDeviceToDevice, st));
    SML_CUDA_TRY(cudaMemcpy2DAsync(b.final_idx, k * 4, b.part_idx, ld * 4, k * 4, rows,
                                   cudaMemcpyDeviceToDevice, st));
    return SIMIL_OK;
}

// fp32 exact search of rows device queries; results (keys without ||x||^2,
// positions) land in b.final_*, query norms in b.query_norms.
simil_status search_fp32(const Search &s, const Plan &p, const Buffers &b, const float *queries,
                         int rows)
{
    if (s.l2)
        SML_TRY(launch_row_norms(rows, (int)s.a->dim, queries, b.query_norms, s.dev->stream[0]));
    if (p.radix) return scan_radix(s, p, b, queries, rows);
    SML_TRY(scan_tiles(s, p, b, queries, rows));
    return take_final(s, p, b, rows);
}

// ---- the fast path --------------------------------------------------------

__global__ void fast_prepare_kernel(int rows, const float *inv, const float *norm, bool l2,
                                    float max_norm, int dim, float *row_scale, float *bound)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows) return;
    row_scale[i] = fast_row_scale(inv[i], l2);
    bound[i] = fast_bound(norm[i], max_norm, l2, dim);
}

// ok[i]: the k2 approximate candidates of query i provably hold its exact top k.
__global__ void fast_check_kernel(int rows, int k, int kk, const float *keys, const int *idx,
                                  long long ld, const float *bound, int *ok)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows) return;
    const float *r = keys + (long long)i * ld;
    // a refused row's key is +inf (cuda_filter.cuh): the allowed rows are all in
    const bool all_taken = idx[(long long)i * ld + kk - 1] < 0 || r[kk - 1] == INFINITY;
    ok[i] = all_taken || r[kk - 1] > r[k - 1] + 2.0f * bound[i];
}

// A candidate refused by the filter keeps its +inf key through the re-rank.
__global__ void keep_refused_kernel(int rows, int kk, const float *approx, long long ld,
                                    float *exact)
{
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long long)rows * kk) return;
    const long long i = e / kk, c = e % kk;
    if (approx[i * ld + c] == INFINITY) exact[e] = INFINITY;
}

simil_status search_fast(const Search &s, const Plan &p, const Buffers &b, const float *queries,
                         int rows)
{
    const sml_knn_args *a = s.a;
    cudaStream_t st = s.dev->stream[0];
    SML_TRY(launch_scale_to_half(rows, (int)a->dim, queries, b.queries_h, b.query_inv,
                                 b.query_norms, nullptr, st));
    fast_prepare_kernel<<<(rows + 127) / 128, 128, 0, st>>>(
        rows, b.query_inv, b.query_norms, s.l2, s.shadow->max_norm, (int)a->dim, b.row_scale,
        b.bound);
    SML_LAUNCH_TRY("fast_prepare_kernel");
    SML_TRY(scan_tiles(s, p, b, queries, rows));
    trace_mark(st, "knn: fp16 scan and select");
    const long long ld = (long long)(p.group + 1) * p.kk;
    fast_check_kernel<<<(rows + 127) / 128, 128, 0, st>>>(rows, (int)a->k, p.kk, b.part_keys,
                                                          b.part_idx, ld, b.bound, b.ok);
    SML_LAUNCH_TRY("fast_check_kernel");
    // Re-rank the candidates exactly.
    SML_CUDA_TRY(cudaMemcpy2DAsync(b.candidates, p.kk * 4, b.part_idx, ld * 4, p.kk * 4, rows,
                                   cudaMemcpyDeviceToDevice, st));
    SML_TRY(launch_rerank(rows, (int)a->dim, queries, a->base, b.candidates, p.kk, s.l2,
                          b.exact_keys, st));
    if (s.filtered) {
        const long long n = (long long)rows * p.kk;
        keep_refused_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(rows, p.kk, b.part_keys,
                                                                         ld, b.exact_keys);
        SML_LAUNCH_TRY("keep_refused_kernel");
    }
    SelectJob job{};
    job.scores = b.exact_keys;
    job.ld = p.kk;
    job.row_scale_const = 1.0f;
    job.in_idx = b.candidates;
    job.rows = rows;
    job.cols = p.kk;
    job.k = (int)a->k;
    job.out_keys = b.final_keys;
    job.out_idx = b.final_idx;
    job.out_ld = a->k;
    SML_TRY(select_rows(job, ScoreType::f32, st));
    trace_mark(st, "knn: exact re-rank");
    return SIMIL_OK;
}

// ---- driving the query tiles ---------------------------------------------
//
// Queries and results in host memory go through two pinned slots: while the
// GPU works on one tile, the host copies the next tile's queries into the
// other slot and the last tile's results out of it.  Copies between the
// device and pinned memory are truly asynchronous, so the GPU is never left
// waiting for the host, and the host never waits for a tile it does not need
// yet.  Tiles stay as large as the plan makes them (cutting a batch into
// more tiles to overlap more would leave the selection kernels too few rows
// to fill the GPU); the slots only cap them for large k.  A batch of one
// tile has nothing to overlap, and its results go straight to the caller:
// the driver pipelines a copy to pageable memory in chunks, where the slot
// would add a second, serial copy.
// (Both were measured: docs/benchmarks.md, "Tried and dropped".)

constexpr size_t kPinnedCap = (size_t)1 << 30;  // both slots together

// One pinned slot: a query tile on its way in, its results on their way out.
struct Slot {
    float *queries;    // qt x dim, when the caller's queries are on the host
    float *dist;       // qt x k, when the caller's outputs are on the host
    int64_t *labels;
    int *ok;           // qt: fast-path bound held (see fast_check_kernel)
    int64_t *bad;      // qt: the rows whose bound failed
    cudaEvent_t done;  // recorded after the tile's last copy to the host
    long long q0;
    int rows;
    bool pending;
};

size_t carve_slot(const Search &s, int qt, char *base, Slot *slot)
{
    const sml_knn_args *a = s.a;
    Carve c(base);
    const size_t q = (size_t)qt, k = (size_t)a->k;
    slot->queries = s.queries_on_device ? nullptr : c.take<float>(q * a->dim);
    const bool via_slot = !s.outputs_on_device && !s.results_direct;
    slot->dist = via_slot ? c.take<float>(q * k) : nullptr;
    slot->labels = via_slot ? c.take<int64_t>(q * k) : nullptr;
    slot->ok = c.take<int>(q);
    slot->bad = c.take<int64_t>(q);
    return c.used();
}

// Largest query tile whose two slots fit in kPinnedCap.
int staged_tile_cap(const Search &s)
{
    const sml_knn_args *a = s.a;
    const size_t per_row = (s.queries_on_device ? 0 : sizeof(float) * (size_t)a->dim) +
                           (s.outputs_on_device ? 0 : 12 * (size_t)a->k) + 12;
    const size_t qt = kPinnedCap / 2 / per_row;
    if (qt >= (size_t)kMaxQueryTile) return kMaxQueryTile;
    return qt >= 256 ? (int)(qt / 256 * 256) : (int)(qt > 1 ? qt : 1);
}

// Finish rows queries starting at q0 on the GPU and queue their results for
// the caller: straight into its device arrays, or into the slot.
simil_status deliver(const Search &s, const Buffers &b, const Slot &slot, long long q0, int rows,
                     bool fast)
{
    const sml_knn_args *a = s.a;
    cudaStream_t st = s.dev->stream[0];
    const size_t k = (size_t)a->k;
    float *dist = s.outputs_on_device ? a->distances + q0 * k : b.out_dist;
    int64_t *lab = s.outputs_on_device ? a->labels + q0 * k : b.out_labels;
    SML_TRY(launch_finish(rows, (int)k, b.final_keys, b.final_idx, s.l2,
                          fast ? nullptr : b.query_norms, a->base_ids, dist, lab, st));
    if (!s.outputs_on_device) {
        float *to_dist = s.results_direct ? a->distances + q0 * k : slot.dist;
        int64_t *to_lab = s.results_direct ? a->labels + q0 * k : slot.labels;
        SML_CUDA_TRY(cudaMemcpyAsync(to_dist, dist, rows * k * 4, cudaMemcpyDeviceToHost, st));
        SML_CUDA_TRY(cudaMemcpyAsync(to_lab, lab, rows * k * 8, cudaMemcpyDeviceToHost, st));
    }
    if (fast)
        SML_CUDA_TRY(cudaMemcpyAsync(slot.ok, b.ok, sizeof(int) * rows, cudaMemcpyDeviceToHost,
                                     st));
    return SIMIL_OK;
}

// Search again in fp32 the queries of a fast tile whose candidates failed the
// bound (slot.ok), and overwrite their results.  Rare by design.  Runs after
// the tile's results reached the caller, and fetches the queries again from
// the caller's array, as the tile's device copy may hold the next tile now.
simil_status redo_fp32(const Search &s32, const Plan &p32, const Buffers &b32, const Slot &slot)
{
    const sml_knn_args *a = s32.a;
    cudaStream_t st = s32.dev->stream[0];
    int nbad = 0;
    for (int i = 0; i < slot.rows; ++i)
        if (!slot.ok[i]) slot.bad[nbad++] = i;
    if (nbad == 0) return SIMIL_OK;
    fallback_queries.fetch_add(nbad);
    const size_t k = (size_t)a->k, row_bytes = sizeof(float) * (size_t)a->dim;
    const float *tile = a->queries + slot.q0 * a->dim;
    for (int c0 = 0; c0 < nbad; c0 += p32.qt) {
        const int m = nbad - c0 < p32.qt ? nbad - c0 : p32.qt;
        if (s32.queries_on_device) {
            SML_CUDA_TRY(cudaMemcpyAsync(b32.redo_rows, slot.bad + c0, sizeof(int64_t) * m,
                                         cudaMemcpyHostToDevice, st));
            SML_TRY(launch_move_rows(b32.queries, nullptr, tile, b32.redo_rows, row_bytes, m,
                                     st));
        } else {
            for (int i = 0; i < m; ++i)
                SML_CUDA_TRY(cudaMemcpyAsync(b32.queries + (size_t)i * a->dim,
                                             tile + slot.bad[c0 + i] * a->dim, row_bytes,
                                             cudaMemcpyHostToDevice, st));
        }
        SML_TRY(search_fp32(s32, p32, b32, b32.queries, m));
        SML_TRY(launch_finish(m, (int)k, b32.final_keys, b32.final_idx, s32.l2, b32.query_norms,
                              a->base_ids, b32.out_dist, b32.out_labels, st));
        const cudaMemcpyKind kind =
            s32.outputs_on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost;
        for (int i = 0; i < m; ++i) {
            const long long q = slot.q0 + slot.bad[c0 + i];
            SML_CUDA_TRY(cudaMemcpyAsync(a->distances + q * k, b32.out_dist + i * k, k * 4, kind,
                                         st));
            SML_CUDA_TRY(cudaMemcpyAsync(a->labels + q * k, b32.out_labels + i * k, k * 8, kind,
                                         st));
        }
        SML_CUDA_TRY(cudaStreamSynchronize(st));
    }
    return SIMIL_OK;
}

// Wait for a slot's tile, hand its results to the caller, redo what failed.
simil_status drain(const Search &s, const Search &s32, const Plan &p32, const Buffers &b32,
                   bool fast, Slot *slot)
{
    if (!slot->pending) return SIMIL_OK;
    slot->pending = false;
    SML_CUDA_TRY(cudaEventSynchronize(slot->done));
    if (!s.outputs_on_device && !s.results_direct) {
        const size_t k = (size_t)s.a->k;
        sml_copy_parallel(s.a->distances + slot->q0 * k, slot->dist,
                          sizeof(float) * slot->rows * k);
        sml_copy_parallel(s.a->labels + slot->q0 * k, slot->labels,
                          sizeof(int64_t) * slot->rows * k);
    }
    if (!fast) return SIMIL_OK;
    SML_TRY(redo_fp32(s32, p32, b32, *slot));
    trace_mark(s.dev->stream[0], "knn: results out, failed queries redone in fp32");
    return SIMIL_OK;
}

simil_status run_tiles(const Search &s, Slot slots[2])
{
    const sml_knn_args *a = s.a;
    Device *dev = s.dev;
    size_t budget = device_free_bytes(dev);
    if (budget > kWorkspaceCap) budget = kWorkspaceCap;
    const bool fast = s.shadow != nullptr && a->k * 2 <= kMaxWarpSelectK;
    // The fast path keeps fp32 buffers beside its own, to redo failed queries.
    sml_knn_args a32 = *a;
    Search s32 = s;
    s32.a = &a32;
    s32.redo = true;
    Plan p{}, p32{};
    Buffers b{}, b32{};
    size_t need32 = 0;
    if (fast) {
        a32.nq = a->nq < 1024 ? a->nq : 1024;
        SML_TRY(plan_search(s32, false, budget / 4, &p32));
        need32 = carve(s32, p32, nullptr, &b32);
    }
    SML_TRY(plan_search(s, fast, budget - need32, &p));
    const size_t need = carve(s, p, nullptr, &b);
    char *ws;
    SML_TRY(device_workspace(dev, need + need32, reinterpret_cast<void **>(&ws)));
    carve(s, p, ws, &b);
    if (fast) carve(s32, p32, ws + need, &b32);
    Search sd = s;
    sd.results_direct = !s.outputs_on_device && a->nq <= p.qt;
    const size_t slot_bytes = carve_slot(sd, p.qt, nullptr, &slots[0]);
    char *pinned;
    SML_TRY(device_pinned(dev, 2 * slot_bytes, reinterpret_cast<void **>(&pinned)));
    for (int i = 0; i < 2; ++i) carve_slot(sd, p.qt, pinned + i * slot_bytes, &slots[i]);
    trace_mark(dev->stream[0], "knn: plan, workspace and slots");
    int t = 0;
    for (long long q0 = 0; q0 < a->nq; q0 += p.qt, ++t) {
        Slot *slot = &slots[t & 1];
        SML_TRY(drain(sd, s32, p32, b32, fast, slot));
        const int rows = (int)(a->nq - q0 < p.qt ? a->nq - q0 : p.qt);
        const float *queries = a->queries + q0 * a->dim;
        if (!s.queries_on_device) {
            const size_t bytes = sizeof(float) * rows * a->dim;
            sml_copy_parallel(slot->queries, queries, bytes);
            SML_CUDA_TRY(cudaMemcpyAsync(b.queries, slot->queries, bytes,
                                         cudaMemcpyHostToDevice, dev->stream[0]));
            queries = b.queries;
        }
        if (fast)
            SML_TRY(search_fast(s, p, b, queries, rows));
        else
            SML_TRY(search_fp32(s, p, b, queries, rows));
        SML_TRY(deliver(sd, b, *slot, q0, rows, fast));
        SML_CUDA_TRY(cudaEventRecord(slot->done, dev->stream[0]));
        slot->q0 = q0;
        slot->rows = rows;
        slot->pending = true;
    }
    // the older tile first: its slot comes next in turn
    SML_TRY(drain(sd, s32, p32, b32, fast, &slots[t & 1]));
    SML_TRY(drain(sd, s32, p32, b32, fast, &slots[(t + 1) & 1]));
    SML_CUDA_TRY(cudaStreamSynchronize(dev->stream[0]));
    SML_CUDA_TRY(cudaStreamSynchronize(dev->stream[1]));
    return SIMIL_OK;
}

simil_status run(const Search &s)
{
    Slot slots[2] = {};
    simil_status st = SIMIL_OK;
    for (int i = 0; i < 2 && st == SIMIL_OK; ++i)
        st = cuda_status(cudaEventCreateWithFlags(&slots[i].done, cudaEventDisableTiming),
                         "cudaEventCreate", __FILE__, __LINE__);
    if (st == SIMIL_OK) st = run_tiles(s, slots);
    for (int i = 0; i < 2; ++i)
        if (slots[i].done) cudaEventDestroy(slots[i].done);
    return st;
}

}  // namespace

simil_status knn_locked(Device *dev, const sml_knn_args *a)
{
    SML_RETURN_IF(a->n >= INT32_MAX || a->dim >= INT32_MAX, SIMIL_ERR_UNSUPPORTED,
                  "a GPU index holds fewer than 2^31 vectors; shard larger sets");
    Search s{};
    s.dev = dev;
    s.a = a;
    s.shadow = static_cast<const Shadow *>(a->base_shadow);
    s.l2 = a->metric == SIMIL_METRIC_L2;
    s.add = s.l2 ? a->base_norms : nullptr;
    // what the caller knows is not asked again (sml_knn_args)
    s.queries_on_device = !a->queries_host && is_device_pointer(a->queries);
    s.outputs_on_device = !a->outputs_host && is_device_pointer(a->distances);
    SML_RETURN_IF(!a->outputs_host && s.outputs_on_device != is_device_pointer(a->labels),
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "search: distances and labels must both be in host or both in GPU memory");
    if (a->nq == 0) return SIMIL_OK;
    simil_status st = SIMIL_OK;
    const bool small = knn_small_takes(a);
    const uint32_t *bits = nullptr;
    if (a->filter != nullptr) {
        // the small path skips the refused rows by their bits; the batch
        // path's GEMM reads every row, and their keys go to +inf through
        // the per-column term
        void *add;
        st = rows_allowed(dev, a->filter, a->base_ids, a->n,
                          small ? 0 : sizeof(float) * (size_t)a->n, &bits, &add);
        if (st == SIMIL_OK && !small) {
            st = launch_filter_add(a->n, s.add, bits, static_cast<float *>(add), dev->stream[0]);
            s.add = static_cast<const float *>(add);
            s.filtered = true;
        }
    }
    if (st != SIMIL_OK) {
    } else if (small) {
        st = knn_small(dev, a, s.add, bits, s.queries_on_device, s.outputs_on_device);
    } else {
        s.max_query_tile = s.queries_on_device && s.outputs_on_device ? kMaxQueryTile
                                                                      : staged_tile_cap(s);
        st = run(s);
    }
    if (st != SIMIL_OK) {
        // leave the streams idle for the next call
        cudaStreamSynchronize(dev->stream[0]);
        cudaStreamSynchronize(dev->stream[1]);
        cudaGetLastError();
    }
    return st;
}

simil_status cuda_knn(sml_backend *backend, const sml_knn_args *a)
{
    Device *dev = device_of(backend);
    pthread_mutex_lock(&dev->lock);
    simil_status st = cuda_status(cudaSetDevice(dev->gpu), "cudaSetDevice", __FILE__, __LINE__);
    if (st == SIMIL_OK) st = device_join_caller(dev);
    if (st == SIMIL_OK) st = knn_locked(dev, a);
    pthread_mutex_unlock(&dev->lock);
    return st;
}

void knn_count_fallbacks(long long n) { fallback_queries.fetch_add(n); }

}  // namespace sml

extern "C" long long sml_cuda_fallback_queries(void) { return sml::fallback_queries.load(); }
