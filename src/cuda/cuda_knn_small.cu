// cuda_knn_small.cu: exact search of small batches (1 to 64 queries by
// default), streaming the base once with distances and top-k fused.
//
// The batch path (cuda_knn.cu) writes a distance matrix with a GEMM and reads
// it back to select; for a handful of queries the GEMM has too few rows to be
// efficient, and one warp or block per query row leaves most of the GPU idle:
// one query took more than ten times as long as reading the fp16 shadow once
// (docs/benchmarks.md, "Online search").  Here the base is cut into slices, about
// as many blocks as fit on the GPU at once, and each block streams its slice
// of the fp16 shadow once for a group of up to 8 queries:
//
//   scan (small_scan_kernel, 256 threads): each lane stands for one base row
//       at a time.  Where the dimension is a multiple of 16, a warp's 32 rows
//       meet the group's queries on tensor cores (mma m16n8k16: fp16 in, fp32
//       sums; the products of two fp16 values are exact in fp32, so only the
//       order of the sums differs from CUDA cores), and the 32 x 8 sums pass
//       through shared memory to the lanes of their rows.  Otherwise the
//       group's queries sit in shared memory as fp32 (the fp16-rounded scaled
//       values, exactly); each lane reads its row with 16-byte loads and
//       accumulates the dot products with all the group's queries in fp32.
//       The approximate key is that of the batch path (docs/gpu-exact-search.md)
//       with fp32 instead of fp16 output, so the same bound E(x) holds with
//       room to spare.  Each warp keeps, per query, its best kk keys
//       (BufferedWarpSelect, warp_select.cuh); at the end the block's warps
//       merge their lists into one list per (query, slice).  Blocks of one
//       slice are numbered together, so the groups of a larger batch read
//       the slice at about the same time, from L2.
//   finish (small_finish_kernel, one block per query): merges the slices'
//       lists into the kk best approximate candidates (offering only the
//       pairs at or under a key that bounds the kk-th, finish_bound),
//       checks the bound (the kk-th must exceed the k-th by more than 2E),
//       re-ranks the candidates with exact fp32 keys (exact_key, as the
//       batch path's rerank) and writes the k best as final rows
//       (finish_row_warp).
//   one query (small_one_kernel): a single host query is sent with the scan's
//       launch (OneQuery); each block scales it to the same halves the
//       scaling kernel gives (warp_norm, half_scale), and the last block to
//       finish its slice (last_block.cuh) runs the finish: one launch, and
//       one synchronization, a call.
//
// A query whose candidates fail the bound is searched again on the fp32
// path, as in the batch path.  Every surviving result is computed by the same
// device code as the batch path's, so both paths return the same bits
// (candidates differ only in their approximate keys, and each set provably
// holds the exact top k).  Queries in host memory travel as the arguments of
// the kernel that scales them where they fit (SentRows, 952 floats), else in
// one copy through the device's pinned buffer; the finish writes the results
// into that buffer, which the device reaches at its host address.  The
// workspace and the pinned buffer are reused from call to call, so a call
// allocates nothing once they are large enough.
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "core/alloc.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_kernels.cuh"
#include "cuda/cuda_knn_small.cuh"
#include "cuda/cuda_util.cuh"
#include "cuda/knn_device.cuh"
#include "cuda/last_block.cuh"
#include "cuda/warp_select.cuh"

namespace sml {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxCandidates = 256;        // kk, so k <= 128
constexpr int kMaxGroup = 8;               // queries per block
constexpr long long kMinSliceRows = 512;   // rows per block, at least
constexpr size_t kSmemCap = (size_t)160 << 10;
constexpr long long kDefaultMaxQueries = 64;
// Each warp asks L2 for the rows of its next step (kThreads rows on) while it
// scores this one, so that HBM stays busy through the mmas and the selection:
// one query on mix10M (H200) 0.614-0.620 -> 0.592 ms; 2 and 4 steps ahead
// evicted rows before their use (0.833 and 0.948 ms).
constexpr int kPrefetchSteps = 1;
static_assert(kPrefetchSteps > 0, "the scan always asks ahead");

// Ask L2 for the 128-byte line that holds p (no wait, no registers).
__device__ __forceinline__ void prefetch_l2(const char *p)
{
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// A row of `bytes` bytes (bytes >= 1) lies on at most row_lines(bytes)
// lines of 128, whatever its alignment; prefetch_row_line(row, bytes, l) asks
// for the one at offset 128 l, or for l = row_lines - 1 the one of its last
// byte, so that l from 0 to row_lines - 1 asks for every line it touches.
__device__ __forceinline__ int row_lines(long long bytes) { return (int)((bytes + 127) / 128) + 1; }

__device__ __forceinline__ void prefetch_row_line(const char *row, long long bytes, int l)
{
    prefetch_l2(row + (l * 128ll < bytes ? l * 128ll : bytes - 1));
}

std::atomic<long long> max_queries{kDefaultMaxQueries};
std::atomic<bool> tensor_cores{true};  // off: CUDA cores only (sml_cuda_knn_small_tensor)
std::atomic<bool> one_launch{true};    // off: one query scaled, scanned, finished apart
                                       // (sml_cuda_knn_small_one_launch)

// Queries per block for kk candidates: the warp queues of a group live in
// registers (kk / 32 pairs per lane and query).
int group_cap(int kk) { return kk <= 64 ? kMaxGroup : kk == 128 ? 4 : 2; }

// The tensor-core scan: a query's row of halves in shared memory is padded to
// 32 mod 64 halves, so that the two queries a quarter-warp reads at once fall
// in different banks; the warp's 32 x 8 sums go through a buffer of rows of
// kSumStride floats (16-byte aligned, and rows 0..7 in distinct banks).
constexpr int kMmaQueries = 8;  // the n of m16n8k16: the group's queries, padded
constexpr int kSumStride = 12;

__host__ __device__ inline int mma_stride(int dim) { return dim + (32 - dim % 64 + 64) % 64; }

// Dynamic shared memory of a scan block: the group's queries (dim x qg
// floats, or kMmaQueries padded rows of halves on tensor cores), later reused
// for the warps' lists of the block merge.
size_t scan_smem(int dim, int qg, int kk, bool mma)
{
    const size_t queries = mma ? sizeof(__half) * (size_t)mma_stride(dim) * kMmaQueries
                               : sizeof(float) * (size_t)dim * qg;
    const size_t lists = (size_t)qg * kWarps * kk * (sizeof(float) + sizeof(int));
    return queries > lists ? queries : lists;
}

// Whether the scan runs on tensor cores: 16 | dim, and the padded queries fit.
bool use_mma(int dim)
{
    return dim % 16 == 0 && scan_smem(dim, 1, kMaxCandidates, true) <= kSmemCap;
}

struct ScanArgs {
    const __half *rows;       // n x dim: the shadow
    const float *inv_scale;   // n
    const float *add;         // n: added to the keys (squared norms for L2), or null
    const uint32_t *allow;    // bit r: a filter allows row r (cuda_filter.cuh), or null: all
    long long n;
    int dim;
    int width;                // halves per load: 8, 4, 2 or 1, dividing dim
    const __half *queries;    // nq x dim, scaled and rounded
    const float *query_inv;   // nq: 1 / s_x
    int nq;
    bool l2;
    int slices;
    int groups;
    long long slice_rows;     // a multiple of 32
    float *part_keys;         // nq x slices x kk
    int *part_idx;
};

// Query values of dimension d for the group: QG consecutive floats.
template <int QG>
__device__ __forceinline__ void group_values(const float *p, float (&v)[QG])
{
    if constexpr (QG % 4 == 0) {
#pragma unroll
        for (int t = 0; t < QG / 4; ++t) {
            const float4 f = reinterpret_cast<const float4 *>(p)[t];
            v[4 * t] = f.x, v[4 * t + 1] = f.y, v[4 * t + 2] = f.z, v[4 * t + 3] = f.w;
        }
    } else if constexpr (QG == 2) {
        const float2 f = *reinterpret_cast<const float2 *>(p);
        v[0] = f.x, v[1] = f.y;
    } else {
        v[0] = p[0];
    }
}

// W halves of a row from one load (W * 2 bytes, aligned).
template <int W>
__device__ __forceinline__ void load_halves(const __half *p, float (&h)[W])
{
    if constexpr (W == 8) {
        const uint4 raw = __ldg(reinterpret_cast<const uint4 *>(p));
        const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&w[i]));
            h[2 * i] = f.x, h[2 * i + 1] = f.y;
        }
    } else if constexpr (W == 4) {
        const uint2 raw = __ldg(reinterpret_cast<const uint2 *>(p));
        const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&raw.x));
        const float2 b = __half22float2(*reinterpret_cast<const __half2 *>(&raw.y));
        h[0] = a.x, h[1] = a.y, h[2] = b.x, h[3] = b.y;
    } else if constexpr (W == 2) {
        const unsigned raw = __ldg(reinterpret_cast<const unsigned *>(p));
        const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&raw));
        h[0] = a.x, h[1] = a.y;
    } else {
        h[0] = __half2float(p[0]);
    }
}

// acc[q] += <row, query q> over dim, in fp32, W halves per load.  qs holds
// the group's queries dimension by dimension (dim x QG).
template <int QG, int W>
__device__ __forceinline__ void dot_row(const __half *row, const float *qs, int dim,
                                        float (&acc)[QG])
{
#pragma unroll 4
    for (int c = 0; c < dim; c += W) {
        float h[W];
        load_halves<W>(row + c, h);
#pragma unroll
        for (int e = 0; e < W; ++e) {
            float v[QG];
            group_values<QG>(qs + (c + e) * QG, v);
#pragma unroll
            for (int q = 0; q < QG; ++q) acc[q] = fmaf(h[e], v[q], acc[q]);
        }
    }
}

// c += a b on tensor cores: a 16 x 16 tile of rows (fp16), b 16 x 8 (fp16),
// c 16 x 8 (fp32); the fragments as PTX lays them out for m16n8k16.
__device__ __forceinline__ void mma16816(float (&c)[4], unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
        "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// acc[q] = <row first + lane, query q> for the warp's 32 rows [first, first +
// 32) whose bit (row - first) is set in live (the others, rows past the
// slice and those a filter refuses, are not read: zeros), on tensor cores.
// Lane (g, t) = (lane / 4, lane % 4) feeds rows first + g + 8i, i < 4: two
// m16n8k16 tiles.  A dot product may sum its dimensions in any order, so the
// k of a fragment need not be consecutive dimensions: per 32 dimensions d..,
// lane t loads the 8 halves d + 8t.. of each of its rows (one 16-byte load)
// and of query g (from qh), and the fragments' k slots (2t, 2t + 1, 2t + 8,
// 2t + 9) of the two mmas take halves 0-3 and 4-7 of them.  A last 16
// dimensions take 4 halves per lane.  sums: the warp's 32 x kSumStride
// buffer, through which each lane gets its own row's sums.
template <int QG>
__device__ __forceinline__ void dot_rows_mma(const __half *rows, int dim, long long first,
                                             unsigned live, const __half *qh, int qstride,
                                             float *sums, float (&acc)[QG])
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const __half *r[4];
    bool read[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        read[i] = (live >> (g + 8 * i)) & 1u;
        r[i] = rows + (first + g + 8 * i) * dim;
    }
    const __half *q = qh + g * qstride;
    float c0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int d = 0;
#pragma unroll 2
    for (; d + 32 <= dim; d += 32) {
        uint4 x[4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
            x[i] = read[i] ? __ldg(reinterpret_cast<const uint4 *>(r[i] + d + 8 * t))
                           : make_uint4(0, 0, 0, 0);
        const uint4 b = *reinterpret_cast<const uint4 *>(q + d + 8 * t);
        mma16816(c0, x[0].x, x[1].x, x[0].y, x[1].y, b.x, b.y);
        mma16816(c0, x[0].z, x[1].z, x[0].w, x[1].w, b.z, b.w);
        mma16816(c1, x[2].x, x[3].x, x[2].y, x[3].y, b.x, b.y);
        mma16816(c1, x[2].z, x[3].z, x[2].w, x[3].w, b.z, b.w);
    }
    if (d < dim) {  // 16 left
        uint2 x[4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
            x[i] = read[i] ? __ldg(reinterpret_cast<const uint2 *>(r[i] + d + 4 * t))
                           : make_uint2(0, 0);
        const uint2 b = *reinterpret_cast<const uint2 *>(q + d + 4 * t);
        mma16816(c0, x[0].x, x[1].x, x[0].y, x[1].y, b.x, b.y);
        mma16816(c1, x[2].x, x[3].x, x[2].y, x[3].y, b.x, b.y);
    }
    // c: rows g and g + 8 of its tile, queries 2t and 2t + 1
    __syncwarp();  // the lanes have read the previous rows' sums
    *reinterpret_cast<float2 *>(sums + g * kSumStride + 2 * t) = make_float2(c0[0], c0[1]);
    *reinterpret_cast<float2 *>(sums + (g + 8) * kSumStride + 2 * t) = make_float2(c0[2], c0[3]);
    *reinterpret_cast<float2 *>(sums + (g + 16) * kSumStride + 2 * t) = make_float2(c1[0], c1[1]);
    *reinterpret_cast<float2 *>(sums + (g + 24) * kSumStride + 2 * t) = make_float2(c1[2], c1[3]);
    __syncwarp();
    group_values<QG>(sums + lane * kSumStride, acc);
}

struct FinishArgs {
    const float *part_keys;   // nq x slices x kk
    const int *part_idx;
    int slices;
    const float *queries;     // nq x dim, fp32
    const float *base;        // n x dim, fp32
    int dim;
    bool l2;
    const float *query_norm;  // nq: ||x|| (not squared)
    float max_norm;           // of the base rows
    int k;
    const int64_t *ids;       // n
    float *distances;         // nq x k
    int64_t *labels;
    int *ok;                  // nq: 1 when the bound proved the candidates
};

// One query sent with the launch of small_one_kernel: its fp32 values (the
// scan scales them in each block, the finish re-ranks with them), and what
// the last block needs to finish it.  With ScanArgs, under the 4 KB of
// arguments that every architecture takes.
struct OneQuery {
    static constexpr int kMaxDim = 768;
    float x[kMaxDim];
    unsigned *ticket;  // device_tickets: zero, left zero
    FinishArgs fin;    // queries and query_norm unused: x
};

// Blocks an SM holds of a scan (124 registers).  Bounding one-query scans
// at 3 (80 registers, no spills) made one query of mix10M take 0.90-0.93 ms
// against 0.578-0.585 ms at 2 (H200, 2026-11-29).
constexpr int kScanBlocks = 2;

// The scan of one block: slices x groups blocks of kThreads (block b: slice
// b / groups, group b % groups), dynamic shared memory scan_smem(dim, QG, K).
// Each lane takes one row per step, each warp 32 consecutive rows; the
// warps' queues (K pairs per query) merge into the block's list of the
// (query, slice).  The group's queries are the scaled ones of a.queries, or
// one's (QG = 1, one group), scaled here to the same halves.
template <int QG, int K, bool MMA>
__device__ __forceinline__ void scan_block(const ScanArgs &a, const OneQuery *one)
{
    extern __shared__ float4 dynamic_smem[];
    float *qs = reinterpret_cast<float *>(dynamic_smem);
    __half *qh = reinterpret_cast<__half *>(dynamic_smem);
    __shared__ float slot_k[kWarps][QG][32];
    __shared__ int slot_v[kWarps][QG][32];
    __shared__ __align__(16) float sums[MMA ? kWarps : 1][32 * kSumStride];
    const int group = blockIdx.x % a.groups, slice = blockIdx.x / a.groups;
    const int q0 = group * QG;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int qstride = MMA ? mma_stride(a.dim) : 0;
    float row_scale[QG];
    if (one != nullptr) {
        assert(QG == 1 && a.groups == 1 && a.nq == 1 && a.dim <= OneQuery::kMaxDim);
        __shared__ float sent_scale;
        if (warp == 0) {
            const float scale = half_scale(warp_norm(one->x, a.dim));
            if (lane == 0) sent_scale = scale;
        }
        __syncthreads();
        const float scale = sent_scale;
        if constexpr (MMA) {
            for (int e = threadIdx.x; e < qstride * kMmaQueries; e += kThreads)
                qh[e] = e < a.dim ? __float2half_rn(one->x[e] * scale) : __float2half(0.0f);
        } else {
            for (int e = threadIdx.x; e < a.dim; e += kThreads)
                qs[e] = __half2float(__float2half_rn(one->x[e] * scale));
        }
        row_scale[0] = fast_row_scale(1.0f / scale, a.l2);
    } else if constexpr (MMA) {
        // kMmaQueries padded rows; the queries past the group's are zeros
        for (int e = threadIdx.x; e < qstride * kMmaQueries; e += kThreads) {
            const int q = e / qstride, d = e % qstride;
            qh[e] = q < QG && q0 + q < a.nq && d < a.dim
                        ? a.queries[(long long)(q0 + q) * a.dim + d]
                        : __float2half(0.0f);
        }
    } else {
        for (int e = threadIdx.x; e < a.dim * QG; e += kThreads) {
            const int d = e / QG, q = e % QG;
            qs[e] = q0 + q < a.nq ? __half2float(a.queries[(long long)(q0 + q) * a.dim + d])
                                  : 0.0f;
        }
    }
    if (one == nullptr) {
#pragma unroll
        for (int q = 0; q < QG; ++q)
            row_scale[q] = q0 + q < a.nq ? fast_row_scale(a.query_inv[q0 + q], a.l2) : 0.0f;
    }
    __syncthreads();
    BufferedWarpSelect<K> ws[QG];
#pragma unroll
    for (int q = 0; q < QG; ++q) ws[q].init(K, INFINITY, kEmptyIdx, slot_k[warp][q], slot_v[warp][q]);
    const long long r0 = (long long)slice * a.slice_rows;
    const long long r1 = min(a.n, r0 + a.slice_rows);
    // A warp's 32 rows start at a multiple of 32 (slice_rows is one), so
    // their bits are one word of allow.
    auto live_rows = [&](long long first) {
        const unsigned in = r1 - first >= 32 ? ~0u : (1u << (r1 - first)) - 1;
        return a.allow != nullptr ? in & a.allow[first >> 5] : in;
    };
    for (long long first = r0 + warp * 32; first < r1; first += kThreads) {
        const long long ahead = first + (long long)kPrefetchSteps * kThreads;
        if (ahead < r1) {
            const char *p = reinterpret_cast<const char *>(a.rows + ahead * a.dim);
            if (a.allow == nullptr) {
                const long long end = (min(ahead + 32, r1) - ahead) * a.dim * 2;
                for (long long off = lane * 128; off < end; off += 32 * 128) prefetch_l2(p + off);
            } else if ((live_rows(ahead) >> lane) & 1u) {
                // under a filter, only the allowed rows, each lane its own:
                // every line the row touches
                const long long bytes = 2ll * a.dim;
                for (int l = 0; l < row_lines(bytes); ++l)
                    prefetch_row_line(p + lane * bytes, bytes, l);
            }
        }
        // rows past the slice and those a filter refuses are not read, and
        // a warp with none to read skips the step (its lanes agree)
        const unsigned live = live_rows(first);
        if (live == 0) continue;
        const long long j = first + lane;
        const bool valid = (live >> lane) & 1u;
        float acc[QG];
#pragma unroll
        for (int q = 0; q < QG; ++q) acc[q] = 0.0f;
        float add = 0.0f, scale = 0.0f;
        // every lane of the warp takes part in the mmas, valid or not
        if constexpr (MMA) dot_rows_mma<QG>(a.rows, a.dim, first, live, qh, qstride, sums[warp], acc);
        if (valid) {
            if constexpr (!MMA) {
                const __half *row = a.rows + j * a.dim;
                switch (a.width) {
                case 8: dot_row<QG, 8>(row, qs, a.dim, acc); break;
                case 4: dot_row<QG, 4>(row, qs, a.dim, acc); break;
                case 2: dot_row<QG, 2>(row, qs, a.dim, acc); break;
                default: dot_row<QG, 1>(row, qs, a.dim, acc); break;
                }
            }
            scale = a.inv_scale[j];
            if (a.add) add = a.add[j];
        }
#pragma unroll
        for (int q = 0; q < QG; ++q) {
            if (q0 + q >= a.nq) continue;  // the same in every lane
            float key = INFINITY;
            int idx = kEmptyIdx;
            if (valid) {
                // the batch path's key (RowReader::finish), from an fp32 dot product
                float s = acc[q] * row_scale[q];
                s *= scale;
                key = a.add ? add + s : s;
                if (key != key) key = INFINITY;
                idx = key == INFINITY ? kEmptyIdx : (int)j;
            }
            ws[q].offer(key, idx);
        }
    }
#pragma unroll
    for (int q = 0; q < QG; ++q)
        if (q0 + q < a.nq) ws[q].flush();
    __syncthreads();  // every warp is done with the queries: their memory takes the lists
    float *list_k = qs;
    int *list_v = reinterpret_cast<int *>(qs + QG * kWarps * K);
#pragma unroll
    for (int q = 0; q < QG; ++q)
        if (q0 + q < a.nq)
            ws[q].q.write(list_k + (q * kWarps + warp) * K, list_v + (q * kWarps + warp) * K);
    __syncthreads();
    for (int q = warp; q < QG; q += kWarps) {
        if (q0 + q >= a.nq) continue;
        BufferedWarpSelect<K> m;
        m.init(K, INFINITY, kEmptyIdx, slot_k[warp][0], slot_v[warp][0]);
        const float *keys = list_k + q * kWarps * K;
        const int *idx = list_v + q * kWarps * K;
        for (int e = lane; e < kWarps * K; e += 32) {
            const int i = idx[e];
            m.offer(i < 0 ? INFINITY : keys[e], i < 0 ? kEmptyIdx : i);
        }
        m.flush();
        const long long out = ((long long)(q0 + q) * a.slices + slice) * K;
        m.q.write(a.part_keys + out, a.part_idx + out);
    }
}

template <int QG, int K, bool MMA>
__global__ void __launch_bounds__(kThreads, kScanBlocks)
small_scan_kernel(const __grid_constant__ ScanArgs a)
{
    scan_block<QG, K, MMA>(a, nullptr);
}


// Slices whose first keys finish_bound ranks at most: 2 KB of shared memory.
constexpr int kRankSlices = 512;

// A key no lower than the K-th best of the slices' lists (each ascending, K
// pairs, empty slots last as (+inf, -1)), so that the finish need offer only
// the pairs at or under it: the least of the lists' K-th keys (each list
// holds K pairs at or under its own), and the K-th least of their first keys
// (K lists each hold one pair at or under it; K <= slices <= kRankSlices).
// The first keys are ranked by (key, slice), so exactly one has rank K - 1.
// On one query of mix10M (264 lists of 64), offering every pair instead, the
// finish took 60.7 us against 34.2 us (ncu, base clocks, H200) of a 0.6 ms
// search.  Every thread calls it; all get the bound.
template <int K>
__device__ float finish_bound(const float *keys, int slices)
{
    __shared__ float first[kRankSlices];
    __shared__ float least[kWarps];
    __shared__ float kth;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    assert(slices >= K && slices <= kRankSlices);
    float last = INFINITY;
    if (threadIdx.x == 0) kth = INFINITY;
    for (int s = threadIdx.x; s < slices; s += kThreads) {
        last = fminf(last, __ldcg(keys + (long long)s * K + K - 1));
        first[s] = __ldcg(keys + (long long)s * K);
    }
    for (int o = 16; o > 0; o >>= 1) last = fminf(last, __shfl_xor_sync(kFullMask, last, o));
    if (lane == 0) least[warp] = last;
    __syncthreads();
    for (int s = threadIdx.x; s < slices; s += kThreads) {
        const float v = first[s];
        int below = 0;
        for (int t = 0; t < slices; ++t) {
            const float u = first[t];
            below += u < v || (u == v && t < s);
        }
        if (below == K - 1) kth = v;
    }
    __syncthreads();
    float bound = kth;
    for (int w = 0; w < kWarps; ++w) bound = fminf(bound, least[w]);
    return bound;
}

// Offers ws, a warp of a block of kThreads, the pairs of the slices' lists
// (as finish_bound's) at or under bound: each thread walks the list of its
// slices until a key over the bound, an empty slot or the list's end, the
// warp's lanes side by side.  The lists are read through L2 (__ldcg).
template <int K>
__device__ void offer_under(BufferedWarpSelect<K> &ws, const float *keys, const int *idx,
                            int slices, float bound)
{
    for (int s0 = 0; s0 < slices; s0 += kThreads) {
        const int s = s0 + threadIdx.x;
        bool more = s < slices;
        int i = 0;
        while (__any_sync(kFullMask, more)) {
            float key = INFINITY;
            int v = kEmptyIdx;
            if (more) {
                const long long e = (long long)s * K + i;
                key = __ldcg(keys + e);
                v = key <= bound ? __ldcg(idx + e) : -1;
                more = v >= 0 && ++i < K;
                if (v < 0) key = INFINITY, v = kEmptyIdx;
            }
            ws.offer(key, v);
        }
    }
}

// Query q's finish, by one block of kThreads.  With at least K lists, each
// thread walks the lists of its slices while their keys are at or under
// finish_bound (offer_under), else the threads offer every pair; warp 0
// merges the warps' lists into the K candidates (the K best of all the
// lists: at least K pairs are at or under the bound, and the selection's
// order is (key, index), so the K are those of a merge of every pair).  The
// bound is checked, the warps re-rank the candidates (against x, the query's
// fp32 values, of norm query_norm) in turn, their fp32 rows asked of L2 all
// at once first, and warp 0 selects and writes the k best.  The parts are
// read through L2 (__ldcg), so that the last block of a scan may finish what
// the others wrote.
template <int K>
__device__ void finish_query(const FinishArgs &a, int q, const float *x, float query_norm)
{
    __shared__ float slot_k[kWarps][32];
    __shared__ int slot_v[kWarps][32];
    __shared__ float list_k[kWarps][K];
    __shared__ int list_v[kWarps][K];
    __shared__ float exact[K];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float *keys = a.part_keys + (long long)q * a.slices * K;
    const int *idx = a.part_idx + (long long)q * a.slices * K;
    BufferedWarpSelect<K> ws;
    if (a.slices < K || a.slices > kRankSlices) {
        // Few lists: the bound is their last keys alone, each list holds
        // many pairs under it, and a thread's walk down its list would wait
        // a latency per pair (Flat over 1,024 vectors, two lists: a call took
        // 0.073 against 0.045 ms, H200).  Every pair is offered, the
        // threads side by side.
        ws.init(K, INFINITY, kEmptyIdx, slot_k[warp], slot_v[warp]);
        offer_parts<8>(ws, keys, idx, a.slices * K, kThreads);
    } else {
        const float bound = finish_bound<K>(keys, a.slices);
        // the bound (key, kEmptyIdx) lets every pair at or under the key in
        ws.init(K, bound, kEmptyIdx, slot_k[warp], slot_v[warp]);
        offer_under<K>(ws, keys, idx, a.slices, bound);
    }
    block_merge<K, kWarps>(ws, K, list_k, list_v, slot_k, slot_v);
    // the K candidates: warp 0's merge, in its list
    float *cand_k = list_k[0];
    int *cand_v = list_v[0];
    __syncthreads();
    if (threadIdx.x == 0) {
        // as fast_check_kernel: every row is a candidate, or the bound holds
        const float bound = fast_bound(query_norm, a.max_norm, a.l2, a.dim);
        a.ok[q] = cand_v[K - 1] < 0 || cand_k[K - 1] > cand_k[a.k - 1] + 2.0f * bound;
    }
    // the candidates' fp32 rows, none of them read by the scan: their lines
    // asked of L2 together, rather than one row's latency after another
    {
        const long long bytes = 4ll * a.dim;
        const int lines = row_lines(bytes);
        for (int e = threadIdx.x; e < K * lines; e += kThreads) {
            const int i = cand_v[e / lines];
            if (i >= 0)
                prefetch_row_line(reinterpret_cast<const char *>(a.base + (long long)i * a.dim),
                                  bytes, e % lines);
        }
    }
    for (int c = warp; c < K; c += kWarps) {
        const int i = cand_v[c];
        const float key = i >= 0 ? exact_key(x, a.base + (long long)i * a.dim, a.dim, a.l2)
                                 : INFINITY;
        if (lane == 0) exact[c] = key;
    }
    __syncthreads();
    if (warp != 0) return;
    BufferedWarpSelect<K> f;
    f.init(a.k, INFINITY, kEmptyIdx, slot_k[0], slot_v[0]);
    for (int c = lane; c < K; c += 32) {
        const int i = cand_v[c];
        float key = exact[c];
        if (key != key) key = INFINITY;
        f.offer(i < 0 ? INFINITY : key, i < 0 ? kEmptyIdx : i);
    }
    f.flush();
    // the k best, in the candidates' memory (read by no one any more)
    __syncwarp();
    f.q.write(cand_k, cand_v);
    __syncwarp();
    finish_row_warp(a.k, cand_k, cand_v, a.l2, nullptr, a.ids, a.distances + (long long)q * a.k,
                    a.labels + (long long)q * a.k);
}

// Launch: one block of kThreads per query.
template <int K>
__global__ void __launch_bounds__(kThreads) small_finish_kernel(const __grid_constant__ FinishArgs a)
{
    const int q = blockIdx.x;
    finish_query<K>(a, q, a.queries + (long long)q * a.dim, a.query_norm[q]);
}

// One query in one launch: the scan (grid and shared memory as
// small_scan_kernel's, one group), then the last block to finish finishes
// the query.  No scaling kernel, no finish kernel.
template <int K, bool MMA>
__global__ void __launch_bounds__(kThreads, kScanBlocks)
small_one_kernel(const __grid_constant__ ScanArgs a, const __grid_constant__ OneQuery one)
{
    scan_block<1, K, MMA>(a, &one);
    if (!last_block(one.ticket, gridDim.x)) return;
    finish_query<K>(one.fin, 0, one.x, warp_norm(one.x, a.dim));
}

using ScanKernel = void (*)(const ScanArgs);
using FinishKernel = void (*)(const FinishArgs);

template <bool MMA>
ScanKernel scan_kernel(int qg, int kk)
{
    switch (kk) {
    case 32:
        return qg == 1 ? small_scan_kernel<1, 32, MMA> : qg == 2 ? small_scan_kernel<2, 32, MMA>
             : qg == 4 ? small_scan_kernel<4, 32, MMA> : small_scan_kernel<8, 32, MMA>;
    case 64:
        return qg == 1 ? small_scan_kernel<1, 64, MMA> : qg == 2 ? small_scan_kernel<2, 64, MMA>
             : qg == 4 ? small_scan_kernel<4, 64, MMA> : small_scan_kernel<8, 64, MMA>;
    case 128:
        return qg == 1 ? small_scan_kernel<1, 128, MMA> : qg == 2 ? small_scan_kernel<2, 128, MMA>
                                                          : small_scan_kernel<4, 128, MMA>;
    default:
        return qg == 1 ? small_scan_kernel<1, 256, MMA> : small_scan_kernel<2, 256, MMA>;
    }
}

using OneKernel = void (*)(const ScanArgs, const OneQuery);

template <bool MMA>
OneKernel one_kernel(int kk)
{
    switch (kk) {
    case 32: return small_one_kernel<32, MMA>;
    case 64: return small_one_kernel<64, MMA>;
    case 128: return small_one_kernel<128, MMA>;
    default: return small_one_kernel<256, MMA>;
    }
}

FinishKernel finish_kernel(int kk)
{
    switch (kk) {
    case 32: return small_finish_kernel<32>;
    case 64: return small_finish_kernel<64>;
    case 128: return small_finish_kernel<128>;
    default: return small_finish_kernel<256>;
    }
}

// Blocks of a scan kernel an SM holds at once, asked of CUDA once per
// kernel and shared-memory size: the answer is the same every call (the
// build targets one architecture), and asking costs host time per call.
simil_status blocks_per_sm(const void *kernel, size_t smem, int *out)
{
    struct Entry {
        std::atomic<const void *> kernel;
        std::atomic<size_t> smem;
        std::atomic<int> blocks;
    };
    static Entry cache[32];
    for (Entry &e : cache)
        if (e.kernel.load() == kernel && e.smem.load() == smem) {
            const int blocks = e.blocks.load();
            if (blocks > 0) {
                *out = blocks;
                return SIMIL_OK;
            }
        }
    SML_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(out, kernel, kThreads, smem));
    for (Entry &e : cache) {
        const void *none = nullptr;
        if (e.kernel.compare_exchange_strong(none, kernel)) {
            e.smem.store(smem);
            e.blocks.store(*out);
            break;
        }
    }
    return SIMIL_OK;
}

// How a search is cut up.
struct Plan {
    int kk;          // candidates per query
    int qg;          // queries per block
    int groups;
    int slices;
    long long slice_rows;
    size_t smem;
    ScanKernel scan;
    OneKernel one;   // the one-launch kernel, or null (scan, then finish)
};

// one: the search is one query sent with the launch (small_one_kernel).
simil_status make_plan(const Device *dev, const sml_knn_args *a, bool one, Plan *p)
{
    p->kk = fast_candidates(a->k);
    p->qg = 1;
    const int dim = (int)a->dim;
    const bool mma = use_mma(dim) && tensor_cores.load();
    const int cap = group_cap(p->kk);
    while (p->qg < a->nq && p->qg < cap && scan_smem(dim, 2 * p->qg, p->kk, mma) <= kSmemCap)
        p->qg *= 2;
    p->groups = (int)((a->nq + p->qg - 1) / p->qg);
    p->smem = scan_smem(dim, p->qg, p->kk, mma);
    p->scan = mma ? scan_kernel<true>(p->qg, p->kk) : scan_kernel<false>(p->qg, p->kk);
    assert(!one || (a->nq == 1 && a->dim <= OneQuery::kMaxDim));
    p->one = !one ? nullptr : mma ? one_kernel<true>(p->kk) : one_kernel<false>(p->kk);
    const void *kernel = p->one ? reinterpret_cast<const void *>(p->one)
                                : reinterpret_cast<const void *>(p->scan);
    // Over 48 KB of shared memory, static and dynamic together, needs the
    // opt-in; it is per device, so every call sets it, always to kSmemCap so
    // that no call lowers it under another's launch.
    SML_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)kSmemCap));
    int per_sm = 0;
    SML_TRY(blocks_per_sm(kernel, p->smem, &per_sm));
    SML_RETURN_IF(per_sm < 1, SIMIL_ERR_INTERNAL,
                  "small-batch exact search: no block of %d queries fits on an SM", p->qg);
    // Enough slices to fill the GPU once (the groups of a slice run side by
    // side), none shorter than kMinSliceRows.
    long long slices = (long long)per_sm * dev->sm_count / p->groups;
    const long long most = (a->n + kMinSliceRows - 1) / kMinSliceRows;
    if (slices > most) slices = most;
    if (slices < 1) slices = 1;
    p->slice_rows = (a->n + slices - 1) / slices;
    p->slice_rows = (p->slice_rows + 31) / 32 * 32;
    p->slices = (int)((a->n + p->slice_rows - 1) / p->slice_rows);
    return SIMIL_OK;
}

size_t up(size_t x) { return (x + 255) / 256 * 256; }

// Device memory of one search (in the workspace) and its host side (in the
// pinned buffer).  The results travel as one block: labels, distances, ok.
struct Buffers {
    float *queries;      // nq x dim fp32, when the caller's are on the host
    __half *queries_h;
    float *query_inv;
    float *query_norm;
    float *part_keys;    // nq x slices x kk
    int *part_idx;
    size_t out_bytes;    // pinned: labels (nq x k int64), distances (nq x k float), ok (nq int)
};

size_t carve(const sml_knn_args *a, const Plan &p, bool host_queries, char *base, Buffers *b)
{
    size_t at = 0;
    auto take = [&](size_t bytes) {
        char *ptr = base ? base + at : nullptr;
        at += up(bytes);
        return ptr;
    };
    const size_t nq = (size_t)a->nq, dim = (size_t)a->dim, k = (size_t)a->k;
    const size_t parts = nq * p.slices * p.kk;
    b->queries = host_queries ? reinterpret_cast<float *>(take(4 * nq * dim)) : nullptr;
    b->queries_h = reinterpret_cast<__half *>(take(2 * nq * dim));
    b->query_inv = reinterpret_cast<float *>(take(4 * nq));
    b->query_norm = reinterpret_cast<float *>(take(4 * nq));
    b->part_keys = reinterpret_cast<float *>(take(4 * parts));
    b->part_idx = reinterpret_cast<int *>(take(4 * parts));
    b->out_bytes = 12 * nq * k + 4 * nq;
    return at;
}

// The queries that failed the bound, again on the fp32 path, one by one
// (rare by design): their rows of the caller's results are overwritten.
simil_status redo_failed(Device *dev, const sml_knn_args *a, const int *ok)
{
    long long bad = 0;
    for (long long i = 0; i < a->nq; ++i) bad += !ok[i];
    if (bad == 0) return SIMIL_OK;
    knn_count_fallbacks(bad);
    // the fp32 search reuses the pinned buffer that holds ok: keep a copy
    long long *rows;
    SML_TRY(sml_alloc(reinterpret_cast<void **>(&rows), (size_t)bad, sizeof *rows,
                      "queries to search again"));
    long long n = 0;
    for (long long i = 0; i < a->nq; ++i)
        if (!ok[i]) rows[n++] = i;
    simil_status s = SIMIL_OK;
    for (long long r = 0; r < n && s == SIMIL_OK; ++r) {
        const long long i = rows[r];
        sml_knn_args one = *a;
        one.base_shadow = nullptr;  // the plain fp32 path
        one.queries = a->queries + i * a->dim;
        one.nq = 1;
        one.distances = a->distances + i * a->k;
        one.labels = a->labels + i * a->k;
        s = knn_locked(dev, &one);
    }
    sml_free(rows);
    return s;
}

}  // namespace

bool knn_small_takes(const sml_knn_args *a)
{
    return a->base_shadow != nullptr && a->n >= 1 && a->nq >= 1 &&
           a->nq <= max_queries.load() && fast_candidates(a->k) <= kMaxCandidates &&
           scan_smem((int)a->dim, 1, kMaxCandidates, false) <= kSmemCap &&
           (a->metric == SIMIL_METRIC_L2 || a->metric == SIMIL_METRIC_IP);
}

simil_status knn_small(Device *dev, const sml_knn_args *a, const float *add,
                       const uint32_t *allow, bool queries_on_device, bool outputs_on_device)
{
    const Shadow *shadow = static_cast<const Shadow *>(a->base_shadow);
    const bool l2 = a->metric == SIMIL_METRIC_L2;
    cudaStream_t st = dev->stream[0];
    // One host query: one launch (small_one_kernel), which scales it, scans
    // and finishes.
    const bool one = one_launch.load() && a->nq == 1 && !queries_on_device &&
                     a->dim <= OneQuery::kMaxDim;
    Plan p;
    SML_TRY(make_plan(dev, a, one, &p));
    Buffers b;
    const size_t need = carve(a, p, !queries_on_device, nullptr, &b);
    char *ws;
    SML_TRY(device_workspace(dev, need, reinterpret_cast<void **>(&ws)));
    carve(a, p, !queries_on_device, ws, &b);
    // Other queries that fit travel as the arguments of the kernel that
    // scales them (no copy); others through the pinned buffer, in one copy.
    const bool sent = !one && !queries_on_device && sent_rows_fit(a->nq, (int)a->dim);
    const size_t q_bytes = queries_on_device || sent || one ? 0 : 4 * (size_t)a->nq * a->dim;
    char *pinned;
    SML_TRY(device_pinned(dev, up(q_bytes) + b.out_bytes, reinterpret_cast<void **>(&pinned)));
    char *pinned_out = pinned + up(q_bytes);
    const float *queries = queries_on_device ? a->queries : b.queries;
    if (sent) {
        SML_TRY(launch_scale_sent_to_half((int)a->nq, (int)a->dim, a->queries, b.queries,
                                          b.queries_h, b.query_inv, b.query_norm, st));
    } else if (!one) {
        if (!queries_on_device) {
            memcpy(pinned, a->queries, q_bytes);
            SML_CUDA_TRY(cudaMemcpyAsync(b.queries, pinned, q_bytes, cudaMemcpyHostToDevice, st));
        }
        SML_TRY(launch_scale_to_half(a->nq, (int)a->dim, queries, b.queries_h, b.query_inv,
                                     b.query_norm, nullptr, st));
    }
    const int dim = (int)a->dim;
    ScanArgs scan{shadow->rows, shadow->inv_scale, add, allow, a->n, dim,
                  dim % 8 == 0 ? 8 : dim % 4 == 0 ? 4 : dim % 2 == 0 ? 2 : 1, b.queries_h,
                  b.query_inv, (int)a->nq, l2, p.slices, p.groups, p.slice_rows,
                  b.part_keys, b.part_idx};
    // The finish writes the results (unless they go to the device) and the
    // ok flags straight into the pinned buffer, which the device reaches at
    // its host address: no copy back.
    const size_t k = (size_t)a->k, nq = (size_t)a->nq;
    int64_t *labels = reinterpret_cast<int64_t *>(pinned_out);
    float *dist = reinterpret_cast<float *>(pinned_out + 8 * nq * k);
    int *ok = reinterpret_cast<int *>(pinned_out + 12 * nq * k);
    FinishArgs fin{b.part_keys, b.part_idx, p.slices, queries, a->base, dim, l2,
                   b.query_norm, shadow->max_norm, (int)a->k, a->base_ids,
                   outputs_on_device ? a->distances : dist,
                   outputs_on_device ? a->labels : labels, ok};
    if (one) {
        OneQuery o{};
        memcpy(o.x, a->queries, sizeof(float) * (size_t)dim);
        SML_TRY(device_tickets(dev, 1, &o.ticket));
        o.fin = fin;
        o.fin.queries = nullptr;
        o.fin.query_norm = nullptr;
        p.one<<<p.slices, kThreads, p.smem, st>>>(scan, o);
        SML_LAUNCH_TRY("small_one_kernel");
        // a kernel stopped part way may leave its ticket counted
        const simil_status s = cuda_status(cudaStreamSynchronize(st), "cudaStreamSynchronize",
                                           __FILE__, __LINE__);
        if (s != SIMIL_OK) {
            device_tickets_reset(dev);
            return s;
        }
    } else {
        p.scan<<<p.slices * p.groups, kThreads, p.smem, st>>>(scan);
        SML_LAUNCH_TRY("small_scan_kernel");
        finish_kernel(p.kk)<<<a->nq, kThreads, 0, st>>>(fin);
        SML_LAUNCH_TRY("small_finish_kernel");
        SML_CUDA_TRY(cudaStreamSynchronize(st));
    }
    if (!outputs_on_device) {
        memcpy(a->labels, labels, 8 * nq * k);
        memcpy(a->distances, dist, 4 * nq * k);
    }
    return redo_failed(dev, a, ok);
}

}  // namespace sml

extern "C" void sml_cuda_knn_small_max(long long nq)
{
    sml::max_queries.store(nq < 0 ? sml::kDefaultMaxQueries : nq);
}

extern "C" void sml_cuda_knn_small_tensor(int on) { sml::tensor_cores.store(on != 0); }

extern "C" void sml_cuda_knn_small_one_launch(int on) { sml::one_launch.store(on != 0); }
