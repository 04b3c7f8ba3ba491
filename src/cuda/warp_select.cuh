// warp_select.cuh: WarpSelect and BlockSelect, k-selection in registers (the
// GPU paper, section 4).
//
// One warp streams a row once and keeps the k smallest (key, index) pairs:
//   - a thread queue per lane: T pairs sorted largest first, filled with
//     pairs below both its head and the warp's current k-th smallest;
//   - a warp queue: K pairs (K = k rounded up to a power of two >= 32), sorted,
//     lane-strided (warp_sort.cuh).
// After every element a warp vote asks whether some lane's thread queue is full
// of pairs below the k-th; if so, the thread queues are sorted together and
// merged into the warp queue (keep the K smallest, warp_sort.cuh), and the
// thread queues restart empty.  T follows the paper: 2 for K <= 32, 3 for
// K <= 128, 4 for K <= 256, 8 above.
//
// Keys come from a SelectJob: key(i, j) = add[j] + row_scale[i] * scale[j] *
// score[i][j], each factor optional, so the same kernel reads a GEMM tile and
// finishes the distance on the way (the paper's fused kernel: ||y||^2 added and
// selection in one pass).  NaN keys count as +inf.
#pragma once

#include <cuda_fp16.h>
#include <limits.h>
#include <math.h>

#include "cuda/warp_sort.cuh"

namespace sml {

// What to select.  Keys ascend; select the largest by negating row_scale.
struct SelectJob {
    const void *scores;       // rows x cols, row stride ld (float or __half)
    long long ld;
    const float *add;         // per column, or null
    const float *scale;       // per column, or null
    const float *row_scale;   // per row, or null for row_scale_const
    float row_scale_const;
    const int *in_idx;        // rows x cols (stride ld) indices to report, or null
    int idx_base;             // reported index of column j: idx_base + j (no in_idx)
    int rows;
    int cols;
    int k;                    // 1 <= k <= K
    float *out_keys;          // rows x k, stride out_ld; empty slots (+inf, -1)
    int *out_idx;
    long long out_ld;
};

constexpr int kEmptyIdx = INT_MAX;

template <int K>
struct ThreadQueueLength {
    static constexpr int value = K <= 32 ? 2 : K <= 128 ? 3 : K <= 256 ? 4 : 8;
};

template <int K>
struct WarpSelect {
    static constexpr int N = K / 32;
    static constexpr int T = ThreadQueueLength<K>::value;
    static constexpr int TP = T <= 2 ? 2 : T <= 4 ? 4 : 8;  // sorted as a power of two

    float wk[N];
    int wv[N];
    float tk[T];
    int tv[T];
    float kth_k;
    int kth_v;
    int k;

    __device__ __forceinline__ void init(int k_)
    {
        k = k_;
#pragma unroll
        for (int r = 0; r < N; ++r) {
            wk[r] = INFINITY;
            wv[r] = kEmptyIdx;
        }
#pragma unroll
        for (int t = 0; t < T; ++t) {
            tk[t] = INFINITY;
            tv[t] = kEmptyIdx;
        }
        kth_k = INFINITY;
        kth_v = kEmptyIdx;
    }

    // Lane-local: offer one pair.
    __device__ __forceinline__ void add(float key, int idx)
    {
        if (kv_less(key, idx, tk[0], tv[0]) && kv_less(key, idx, kth_k, kth_v)) {
            tk[0] = key;
            tv[0] = idx;
#pragma unroll
            for (int t = 0; t + 1 < T; ++t) cas_regs(tk[t], tv[t], tk[t + 1], tv[t + 1], false);
        }
    }

    // Warp-wide: is some lane's thread queue full of pairs below the k-th?
    __device__ __forceinline__ bool need_merge() const
    {
        return __any_sync(kFullMask, kv_less(tk[0], tv[0], kth_k, kth_v));
    }

    // Warp-wide: fold a sorted run of 32 * M pairs (M slots) into the warp queue.
    template <int M>
    __device__ __forceinline__ void merge_sorted(const float (&sk)[M], const int (&sv)[M])
    {
        // Against the warp queue's tail, the run reversed: elementwise minima of
        // an ascending and a descending sequence are the K smallest of both,
        // and form a bitonic sequence.
        constexpr int P = M < N ? M : N;
        const int mirror = 31 - lane_id();
#pragma unroll
        for (int r = N - P; r < N; ++r) {
            float ok = __shfl_sync(kFullMask, sk[N - 1 - r], mirror);
            int ov = __shfl_sync(kFullMask, sv[N - 1 - r], mirror);
            if (kv_less(ok, ov, wk[r], wv[r])) {
                wk[r] = ok;
                wv[r] = ov;
            }
        }
        warp_bitonic_merge<N>(wk, wv);
        update_kth();
    }

    __device__ __forceinline__ void merge()
    {
        float sk[TP];
        int sv[TP];
#pragma unroll
        for (int t = 0; t < TP; ++t) {
            sk[t] = t < T ? tk[t] : INFINITY;
            sv[t] = t < T ? tv[t] : kEmptyIdx;
        }
        warp_bitonic_sort<TP>(sk, sv);
        merge_sorted<TP>(sk, sv);
#pragma unroll
        for (int t = 0; t < T; ++t) {
            tk[t] = INFINITY;
            tv[t] = kEmptyIdx;
        }
    }

    // Warp-wide: fold in K sorted pairs stored contiguously (shared memory),
    // reading each reversed element straight from memory.
    __device__ __forceinline__ void merge_memory(const float *sk, const int *sv)
    {
        const int lane = lane_id();
#pragma unroll
        for (int r = 0; r < N; ++r) {
            const int e = K - 1 - (r * 32 + lane);
            if (kv_less(sk[e], sv[e], wk[r], wv[r])) {
                wk[r] = sk[e];
                wv[r] = sv[e];
            }
        }
        warp_bitonic_merge<N>(wk, wv);
        update_kth();
    }

    __device__ __forceinline__ void update_kth()
    {
        const int slot = (k - 1) >> 5;
        float key = wk[0];
        int idx = wv[0];
#pragma unroll
        for (int r = 1; r < N; ++r)
            if (r == slot) {
                key = wk[r];
                idx = wv[r];
            }
        kth_k = __shfl_sync(kFullMask, key, (k - 1) & 31);
        kth_v = __shfl_sync(kFullMask, idx, (k - 1) & 31);
    }

    // Write the k smallest, ascending; empty slots get (+inf, -1).
    __device__ __forceinline__ void write(float *keys, int *idx) const
    {
        const int lane = lane_id();
#pragma unroll
        for (int r = 0; r < N; ++r) {
            int e = r * 32 + lane;
            if (e < k) {
                keys[e] = wk[r];
                idx[e] = wv[r] == kEmptyIdx ? -1 : wv[r];
            }
        }
    }
};

template <typename S>
__device__ __forceinline__ float score_at(const S *row, int j);
template <>
__device__ __forceinline__ float score_at<float>(const float *row, int j)
{
    return row[j];
}
template <>
__device__ __forceinline__ float score_at<__half>(const __half *row, int j)
{
    return __half2float(row[j]);
}

template <typename S>
__device__ __forceinline__ void job_pair(const SelectJob &job, int row, float row_scale, int j,
                                         float &key, int &idx)
{
    if (j >= job.cols) {
        key = INFINITY;
        idx = kEmptyIdx;
        return;
    }
    const S *scores = static_cast<const S *>(job.scores) + (long long)row * job.ld;
    float s = score_at<S>(scores, j) * row_scale;
    if (job.scale) s *= job.scale[j];
    key = job.add ? job.add[j] + s : s;
    if (key != key) key = INFINITY;
    idx = job.in_idx ? job.in_idx[(long long)row * job.ld + j] : job.idx_base + j;
    if (idx < 0) {  // an empty slot of an earlier pass
        key = INFINITY;
        idx = kEmptyIdx;
    }
}

// Stream columns [begin, cols) with step `step` (a multiple of 32) through ws.
template <int K, typename S>
__device__ __forceinline__ void select_stream(WarpSelect<K> &ws, const SelectJob &job, int row,
                                              int begin, int step)
{
    const float row_scale = job.row_scale ? job.row_scale[row] : job.row_scale_const;
    const int lane = lane_id();
    constexpr int kUnroll = 4;
    for (int j0 = begin; j0 < job.cols; j0 += step * kUnroll) {
        float key[kUnroll];
        int idx[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
            job_pair<S>(job, row, row_scale, j0 + u * step + lane, key[u], idx[u]);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            ws.add(key[u], idx[u]);
            if (ws.need_merge()) ws.merge();
        }
    }
    ws.merge();
}

// WarpSelect: one warp per row, 4 rows per block of 128 threads.
template <int K, typename S>
__global__ void __launch_bounds__(128) warp_select_kernel(SelectJob job)
{
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= job.rows) return;  // the whole warp leaves together
    WarpSelect<K> ws;
    ws.init(job.k);
    select_stream<K, S>(ws, job, row, 0, 32);
    ws.write(job.out_keys + row * job.out_ld, job.out_idx + row * job.out_ld);
}

template <int K>
struct BlockSelectWarps {
    static constexpr int value = K <= 1024 ? 4 : 2;  // W * K pairs fit 32 KB of shared memory
};

// BlockSelect: one block of W warps per row, for long rows and few of them.
// Warp w reads the columns w*32 + lane + i*W*32; at the end the warp queues
// meet in shared memory and warp 0 merges them.
template <int K, typename S>
__global__ void __launch_bounds__(32 * BlockSelectWarps<K>::value)
block_select_kernel(SelectJob job)
{
    constexpr int W = BlockSelectWarps<K>::value;
    __shared__ float smem_k[W][K];
    __shared__ int smem_v[W][K];
    const int row = blockIdx.x;
    const int warp = threadIdx.x >> 5;
    const int lane = lane_id();
    WarpSelect<K> ws;
    ws.init(job.k);
    select_stream<K, S>(ws, job, row, warp * 32, W * 32);
#pragma unroll
    for (int r = 0; r < WarpSelect<K>::N; ++r) {
        smem_k[warp][r * 32 + lane] = ws.wk[r];
        smem_v[warp][r * 32 + lane] = ws.wv[r];
    }
    __syncthreads();
    if (warp != 0) return;
    for (int w = 1; w < W; ++w) ws.merge_memory(smem_k[w], smem_v[w]);
    ws.write(job.out_keys + row * job.out_ld, job.out_idx + row * job.out_ld);
}

}  // namespace sml
