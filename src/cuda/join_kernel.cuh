// join_kernel.cuh: the fused list join (cuda_join.cu): every block of a call
// in one launch, no gathering, the top k kept per row in shared memory.
//
// The work is a list of items, each up to kRows rows of one block (rows are
// contiguous in the list-ordered x).  One CTA of kThreads threads takes one
// item and walks the block's candidate spans (its candidate lists, each a
// contiguous range of rows of x, read in place) in tiles of kCols columns:
//   - device: one CTA per item (grid = items);
//   - block: the item's rows and a tile's columns go through shared memory
//     kDepth dimensions at a time, transposed (rows_s[d][r], cols_s[d][c]);
//   - warp w owns rows 4w .. 4w + 3 of the item: its lanes compute their 4 x 8
//     dot products in fp32 (SIMT FMA, the same sums as the CPU's sgemm up to
//     their order), and only warp w touches those rows' top-k lists, so the
//     selection needs no CTA-wide synchronization;
//   - thread: lane l holds columns 4l .. 4l + 3 and 128 + 4l .. 128 + 4l + 3
//     (per dimension, two float4 reads of cols_s, conflict-free, and one
//     broadcast float4 read of rows_s: 9 shared-memory wavefronts per 32
//     FMAs, so shared memory, not the FMA units, bounds the tile loop at
//     about 3/4 of the fp32 peak).
// Selection per row (a threshold and a sorted list, as the CPU's top-k): the
// keys of the tile that can enter the list (key <= threshold) are inserted
// one at a time by the warp, each insertion a rank (a warp-wide count) and
// a shift of the sorted (key, position) list in shared memory; after each
// insertion the lanes drop their candidates above the new threshold.  While
// a row's list is not yet full and k + 1 <= 32, the threshold is bounded by
// the (k + 1)-th smallest of the 32 lanes' minima (k + 1 distinct keys are at
// most that), so the first tile inserts about k + 1 keys instead of all 256.
// Each thread loads the next step's tile elements into registers while the
// CTA computes the current step.
//
// Keys as the CPU's: ||y||^2 - 2 <x, y> for L2 (||x||^2 added at the end,
// clamped at 0), -<x, y> for IP; order (key, label), NaN never enters.
#pragma once

#include <math_constants.h>
#include <stdint.h>

#include "cuda/cuda_util.cuh"

namespace sml {
namespace join {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = 4;
constexpr int kRows = kWarps * kRowsPerWarp;  // rows per item
constexpr int kColsPerLane = 8;
constexpr int kCols = 32 * kColsPerLane;      // columns per tile
constexpr int kDepth = 16;                    // dimensions per shared-memory step
constexpr int kRowStride = kRows + 4;         // float4 reads aligned, stores
constexpr int kColStride = kCols + 4;         // conflict-free (tile_coord)
static_assert(kColsPerLane == 8 && kRowsPerWarp == 4, "the float4 reads of the tile loop");
static_assert(kDepth % 8 == 0 && kRows % 4 == 0 && kCols % 4 == 0, "tile_coord's 4 x 8 groups");

// Up to kRows rows [row0, row0 + rows) of x, of the call's block `block`.
struct Item {
    int64_t block;
    int64_t row0;
    int64_t rows;
};

// Rows [src, src + rows) of x: one candidate list of a block.
struct Span {
    int64_t src;
    int64_t rows;
};

struct Args {
    const float *x;        // n x dim, list order
    const float *norms;    // n (L2), NULL for IP
    const int64_t *ids;    // n labels
    int dim;               // < 2^31, as n
    int kk;                // results per row
    const Item *items;
    const int64_t *span_first;  // block i's spans are [span_first[i], span_first[i + 1])
    const Span *spans;
    int64_t first_row;     // row first_row of x is row 0 of the outputs
    float *out_dist;       // rows x kk
    int64_t *out_labels;
};

// Dynamic shared memory of a CTA: the two tiles, then kRows lists of kk
// (key, position) pairs.
inline size_t shared_bytes(int kk)
{
    return sizeof(float) * (size_t)(kDepth * kColStride + kDepth * kRowStride) +
           (sizeof(float) + sizeof(int)) * (size_t)kRows * (size_t)kk;
}

// (ka, label of row pa) before (kb, label of row pb); labels are read only
// on equal keys, which are rare.
__device__ __forceinline__ bool before(float ka, int pa, float kb, int pb, const int64_t *ids)
{
    return ka < kb || (ka == kb && ids[pa] < ids[pb]);
}

// Ascending bitonic sort of one value per lane (no NaN: fminf and fmaxf
// would duplicate the other value).
__device__ __forceinline__ float warp_sort(float v, int lane)
{
#pragma unroll
    for (int size = 2; size <= 32; size <<= 1)
#pragma unroll
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            const float o = __shfl_xor_sync(kFullMask, v, stride);
            const bool up = (lane & size) == 0, low = (lane & stride) == 0;
            v = (low == up) ? fminf(v, o) : fmaxf(v, o);
        }
    return v;
}

// Warp: insert (key, pos) into the sorted list keys/pos of count entries
// (capacity kk) unless it is not before the last of a full list.  Every
// lane passes the same arguments.
__device__ __forceinline__ void list_insert(float *keys, int *pos, int &count, int kk, float key,
                                            int p, const int64_t *ids, int lane)
{
    const int cnt = count;
    int rank = 0;
    for (int b = 0; b < cnt; b += 32) {
        const int e = b + lane;
        const bool less = e < cnt && before(keys[e], pos[e], key, p, ids);
        rank += __popc(__ballot_sync(kFullMask, less));
    }
    if (rank >= kk) return;
    // entries [rank, last) move up one, top chunk first, so that no chunk
    // overwrites entries that a lower chunk has yet to read
    const int last = cnt < kk ? cnt : kk - 1;
    for (int hi = last; hi > rank; hi -= 32) {
        const int e = hi - 1 - lane;
        const bool on = e >= rank;
        float k2 = 0.0f;
        int p2 = 0;
        if (on) {
            k2 = keys[e];
            p2 = pos[e];
        }
        __syncwarp();
        if (on) {
            keys[e + 1] = k2;
            pos[e + 1] = p2;
        }
        __syncwarp();
    }
    if (lane == 0) {
        keys[rank] = key;
        pos[rank] = p;
    }
    __syncwarp();
    count = cnt < kk ? cnt + 1 : kk;
}

// Column of x's tile held in a lane's slot j.
__device__ __forceinline__ int slot_col(int lane, int j)
{
    return (j < 4 ? 0 : kCols / 2 - 4) + 4 * lane + j;
}

// Warp: the keys of one row of the tile (v, a lane's 8 slots) into its list.
__device__ __forceinline__ void row_select(const float (&v)[kColsPerLane], float *keys, int *pos,
                                           int &count, int kk, int64_t col0, const int64_t *ids,
                                           int lane)
{
    float thr = count == kk ? keys[kk - 1] : CUDART_INF_F;
    if (count < kk && kk <= 32) {
        float m = CUDART_INF_F;
#pragma unroll
        for (int j = 0; j < kColsPerLane; ++j) m = fminf(m, v[j]);  // NaN stays out: m <= +inf
        thr = __shfl_sync(kFullMask, warp_sort(m, lane), kk - 1);
    }
    unsigned bits = 0;
#pragma unroll
    for (int j = 0; j < kColsPerLane; ++j)
        if (v[j] <= thr) bits |= 1u << j;
    for (;;) {
        const unsigned any = __ballot_sync(kFullMask, bits != 0);
        if (any == 0) break;
        const int leader = __ffs(any) - 1;
        const int j = bits ? __ffs(bits) - 1 : 0;
        float mine = 0.0f;
#pragma unroll
        for (int t = 0; t < kColsPerLane; ++t)
            if (t == j) mine = v[t];
        const float key = __shfl_sync(kFullMask, mine, leader);
        const int jl = __shfl_sync(kFullMask, j, leader);
        if (lane == leader) bits &= bits - 1;
        list_insert(keys, pos, count, kk, key, (int)(col0 + slot_col(leader, jl)), ids, lane);
        if (count == kk) thr = fminf(thr, keys[kk - 1]);
#pragma unroll
        for (int t = 0; t < kColsPerLane; ++t)
            if (!(v[t] <= thr)) bits &= ~(1u << t);
    }
}

// Element e of a tile of vectors x kDepth dimensions, for its load and
// transposed store: lanes of a warp take 4 vectors x 8 dimensions (four
// 32-byte sectors of x), and with a stride of (a multiple of 32) + 4 floats
// their stores at d * stride + v fall in 32 different banks.
__device__ __forceinline__ void tile_coord(int e, int *v, int *d)
{
    const int lane = e & 31, group = e >> 5;
    *v = group / (kDepth / 8) * 4 + (lane & 3);
    *d = group % (kDepth / 8) * 8 + (lane >> 2);
}

constexpr int kRowLoads = kRows * kDepth / kThreads;  // per thread and step
constexpr int kColLoads = kCols * kDepth / kThreads;
static_assert(kRows * kDepth % kThreads == 0 && kCols * kDepth % kThreads == 0, "even loads");

// One step of the tile loop: dimensions [d0, d0 + kDepth) of the columns
// [c0, c0 + cols) of x, cols <= kCols, from span s of the item's block
// (32-bit: the caller holds fewer than 2^31 rows, spans and dimensions).
struct Step {
    int s;
    int c0;
    int d0;
    int cols;
};

// The step after t; t.s reaches `end` after the last one.
__device__ __forceinline__ Step next_step(const Args &a, Step t, int end)
{
    t.d0 += kDepth;
    if (t.d0 < a.dim) return t;
    t.d0 = 0;
    Span sp = a.spans[t.s];
    t.c0 += kCols;
    if (t.c0 >= sp.src + sp.rows) {
        if (++t.s == end) return t;
        sp = a.spans[t.s];
        t.c0 = (int)sp.src;
    }
    t.cols = (int)min((int64_t)kCols, sp.src + sp.rows - t.c0);
    return t;
}

__device__ __forceinline__ Step first_step(const Args &a, int s, int end)
{
    Step t{s, 0, 0, 0};
    if (s < end) {
        const Span sp = a.spans[s];
        t.c0 = (int)sp.src;
        t.cols = (int)min((int64_t)kCols, sp.rows);
    }
    return t;
}

// Thread: its elements of step t's tiles into registers (zeros past the
// ends), loaded while the CTA computes the step before.
__device__ __forceinline__ void fetch(const Args &a, const Item &it, const Step &t,
                                      float (&pr)[kRowLoads], float (&pc)[kColLoads])
{
#pragma unroll
    for (int m = 0; m < kRowLoads; ++m) {
        int r, d;
        tile_coord((int)threadIdx.x + m * kThreads, &r, &d);
        pr[m] = (r < it.rows && t.d0 + d < a.dim)
                    ? a.x[(it.row0 + r) * a.dim + t.d0 + d]
                    : 0.0f;
    }
#pragma unroll
    for (int m = 0; m < kColLoads; ++m) {
        int c, d;
        tile_coord((int)threadIdx.x + m * kThreads, &c, &d);
        pc[m] = (c < t.cols && t.d0 + d < a.dim)
                    ? a.x[(int64_t)(t.c0 + c) * a.dim + t.d0 + d]
                    : 0.0f;
    }
}

// Thread: the fetched elements to rows_s and cols_s, transposed.
__device__ __forceinline__ void store(const float (&pr)[kRowLoads], const float (&pc)[kColLoads],
                                      float *rows_s, float *cols_s)
{
#pragma unroll
    for (int m = 0; m < kRowLoads; ++m) {
        int r, d;
        tile_coord((int)threadIdx.x + m * kThreads, &r, &d);
        rows_s[d * kRowStride + r] = pr[m];
    }
#pragma unroll
    for (int m = 0; m < kColLoads; ++m) {
        int c, d;
        tile_coord((int)threadIdx.x + m * kThreads, &c, &d);
        cols_s[d * kColStride + c] = pc[m];
    }
}

// Warp: acc[i][j] += <row 4w + i, column slot_col(lane, j)> over the kDepth
// dimensions in shared memory.
__device__ __forceinline__ void tile_fma(const float *rows_s, const float *cols_s, int warp,
                                         int lane, float (&acc)[kRowsPerWarp][kColsPerLane])
{
#pragma unroll 8
    for (int d = 0; d < kDepth; ++d) {
        const float4 r4 =
            *reinterpret_cast<const float4 *>(rows_s + d * kRowStride + warp * kRowsPerWarp);
        const float rv[kRowsPerWarp] = {r4.x, r4.y, r4.z, r4.w};
        const float4 lo = *reinterpret_cast<const float4 *>(cols_s + d * kColStride + 4 * lane);
        const float4 hi =
            *reinterpret_cast<const float4 *>(cols_s + d * kColStride + kCols / 2 + 4 * lane);
        const float cv[kColsPerLane] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i)
#pragma unroll
            for (int j = 0; j < kColsPerLane; ++j) acc[i][j] = fmaf(rv[i], cv[j], acc[i][j]);
    }
}

// Grid: one CTA per item; kThreads threads; shared_bytes(a.kk) of dynamic
// shared memory.  The steps of all the item's spans form one loop, so that
// the next step's loads (the next tile's first, at a tile's last step) are
// in flight while this one computes; they reach shared memory before the
// selection, which then needs no registers for them.
__global__ void __launch_bounds__(kThreads, 2) join_kernel(Args a)
{
    extern __shared__ float4 smem4[];
    float *cols_s = reinterpret_cast<float *>(smem4);
    float *rows_s = cols_s + kDepth * kColStride;
    float *keys_s = rows_s + kDepth * kRowStride;
    int *pos_s = reinterpret_cast<int *>(keys_s + kRows * a.kk);
    const Item it = a.items[blockIdx.x];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const bool l2 = a.norms != nullptr;
    int count[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) count[i] = 0;

    const int end = (int)a.span_first[it.block + 1];
    Step t = first_step(a, (int)a.span_first[it.block], end);
    float pr[kRowLoads], pc[kColLoads];
    if (t.s < end) {
        fetch(a, it, t, pr, pc);
        store(pr, pc, rows_s, cols_s);
    }
    __syncthreads();
    float acc[kRowsPerWarp][kColsPerLane];
    while (t.s < end) {
        const Step u = next_step(a, t, end);
        if (u.s < end) fetch(a, it, u, pr, pc);  // in flight during the FMAs
        if (t.d0 == 0) {
#pragma unroll
            for (int i = 0; i < kRowsPerWarp; ++i)
#pragma unroll
                for (int j = 0; j < kColsPerLane; ++j) acc[i][j] = 0.0f;
        }
        tile_fma(rows_s, cols_s, warp, lane, acc);
        __syncthreads();  // every warp is done with t's tiles
        if (u.s < end) store(pr, pc, rows_s, cols_s);
        __syncthreads();
        if (u.d0 == 0) {
            // the tile is done: dot products to keys; columns past the tile
            // get NaN, which never enters (+inf would, into a list not yet
            // full)
#pragma unroll
            for (int j = 0; j < kColsPerLane; ++j) {
                const int c = slot_col(lane, j);
                const float yn = (l2 && c < t.cols) ? a.norms[t.c0 + c] : 0.0f;
#pragma unroll
                for (int i = 0; i < kRowsPerWarp; ++i)
                    acc[i][j] = c >= t.cols
                                    ? CUDART_NAN_F
                                    : (l2 ? fmaf(-2.0f, acc[i][j], yn) : -acc[i][j]);
            }
#pragma unroll
            for (int i = 0; i < kRowsPerWarp; ++i) {
                const int r = warp * kRowsPerWarp + i;
                if (r >= it.rows) break;  // the same in every lane
                row_select(acc[i], keys_s + r * a.kk, pos_s + r * a.kk, count[i], a.kk, t.c0,
                           a.ids, lane);
            }
        }
        t = u;
    }
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
        const int r = warp * kRowsPerWarp + i;
        if (r >= it.rows) break;
        const int64_t row = it.row0 + r, out = (row - a.first_row) * a.kk;
        const float xn = l2 ? a.norms[row] : 0.0f;
        for (int e = lane; e < a.kk; e += 32) {
            float d = l2 ? CUDART_INF_F : -CUDART_INF_F;
            int64_t label = -1;
            if (e < count[i]) {
                const float key = keys_s[r * a.kk + e];
                d = l2 ? fmaxf(key + xn, 0.0f) : -key;
                label = a.ids[pos_s[r * a.kk + e]];
            }
            a.out_dist[out + e] = d;
            a.out_labels[out + e] = label;
        }
    }
}

}  // namespace join
}  // namespace sml
