// block_select.cuh: BlockSelect, several warps per row, for long rows, few
// rows and large k.  Two designs:
//
// The threshold BlockSelect (block_select_kernel), one block of 256 threads
// per row:
//
// The block keeps a threshold, the k-th smallest pair kept so far (or the
// row's bound), and a buffer of candidates in shared memory.  Each step, every
// thread reads 8 columns (two 16-byte loads where aligned) and the pairs below
// the threshold are appended to the buffer, one atomic per warp (ballot, then
// a prefix count).  When the buffer could overflow in the next step, it is
// sorted (bitonic, in shared memory) and cut back to the k smallest, which
// lowers the threshold.  A stream of n uniform keys appends about
// k (1 + ln(n / k)) pairs, so only a handful of sorts happen per row and the
// kernel streams at close to memory speed, for any k up to 2048.  The warp
// queues of WarpSelect, merged every few dozen appends, are cheaper for small
// k and many rows; select_dispatch.cu picks.
//
// Launch: one block of kBlockSelectThreads per row, dynamic shared memory of
// block_select_capacity(k) pairs.
//
// The paper's BlockSelect (warps_block_select_kernel), one block of 1 to 8
// warps per row: each warp streams its share of the row into its own warp
// queue in registers (the paper's thread queues, QueueWarpSelect, or the
// 32-slot buffer of BufferedWarpSelect), and at the end the warps' queues
// are merged in shared memory.  One departure: each warp's k-th is also a
// bound on the whole row's (the warp holds k pairs below it), so the warps
// share the lowest k-th they know through one 64-bit word in shared memory,
// and each warp drops what is above it.
#pragma once

#include "cuda/warp_select.cuh"

namespace sml {

constexpr int kBlockSelectThreads = 256;
constexpr int kBlockSelectStep = kBlockSelectThreads * 4 * kSelectUnroll;  // columns per step

// Buffer slots: room for k kept pairs plus one full step, as a power of two.
inline int block_select_capacity(int k)
{
    int c = 1024;
    while (c < 2 * k + kBlockSelectStep) c <<= 1;
    return c;
}

struct BlockSelectShared {
    int count;
    float thr_k;
    int thr_v;
};

// Sort the first n buffered pairs, keep the `keep` smallest, lower the
// threshold to the keep-th.  Called by the whole block.
__device__ __forceinline__ void block_compact(float *bk, int *bv, BlockSelectShared &sh,
                                              int keep)
{
    const int n = sh.count;
    int p = 1;
    while (p < n) p <<= 1;
    for (int i = n + threadIdx.x; i < p; i += blockDim.x) {
        bk[i] = INFINITY;
        bv[i] = kEmptyIdx;
    }
    __syncthreads();
    for (int size = 2; size <= p; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < p / 2; i += blockDim.x) {
                // stride is a power of two: i / stride and i % stride by masks
                const int lo = ((i & ~(stride - 1)) << 1) | (i & (stride - 1));
                const int hi = lo + stride;
                const bool ascending = (lo & size) == 0;
                const bool swap = ascending ? kv_less(bk[hi], bv[hi], bk[lo], bv[lo])
                                            : kv_less(bk[lo], bv[lo], bk[hi], bv[hi]);
                if (swap) {
                    const float tk = bk[lo];
                    bk[lo] = bk[hi];
                    bk[hi] = tk;
                    const int tv = bv[lo];
                    bv[lo] = bv[hi];
                    bv[hi] = tv;
                }
            }
            __syncthreads();
        }
    }
    if (threadIdx.x == 0) {
        if (n >= keep && kv_less(bk[keep - 1], bv[keep - 1], sh.thr_k, sh.thr_v)) {
            sh.thr_k = bk[keep - 1];
            sh.thr_v = bv[keep - 1];
        }
        sh.count = n < keep ? n : keep;
    }
    __syncthreads();
}

template <typename S, bool Vec>
__global__ void __launch_bounds__(kBlockSelectThreads) block_select_kernel(const __grid_constant__ SelectJob job,
                                                                           int capacity)
{
    extern __shared__ float block_select_smem[];
    float *bk = block_select_smem;
    int *bv = reinterpret_cast<int *>(block_select_smem + capacity);
    __shared__ BlockSelectShared sh;
    const int row = blockIdx.x;
    const int lane = lane_id();
    RowReader<S, Vec> rd(job, row);
    if (threadIdx.x == 0) {
        sh.count = 0;
        rd.bound(sh.thr_k, sh.thr_v);
    }
    __syncthreads();
    const unsigned lanes_below = (1u << lane) - 1;
    for (int j0 = 0; j0 < rd.cols; j0 += kBlockSelectStep) {
        const float tk = sh.thr_k;
        const int tv = sh.thr_v;
        float key[kSelectUnroll][4];
        int idx[kSelectUnroll][4];
        bool any = false;
#pragma unroll
        for (int u = 0; u < kSelectUnroll; ++u) {
            rd.load4(j0 + (u * kBlockSelectThreads + threadIdx.x) * 4, key[u], idx[u]);
#pragma unroll
            for (int e = 0; e < 4; ++e) any |= kv_less(key[u][e], idx[u][e], tk, tv);
        }
        if (__any_sync(kFullMask, any)) {
#pragma unroll
            for (int u = 0; u < kSelectUnroll; ++u)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const bool take = kv_less(key[u][e], idx[u][e], tk, tv);
                    const unsigned m = __ballot_sync(kFullMask, take);
                    if (m == 0) continue;
                    int base = 0;
                    if (lane == 0) base = atomicAdd(&sh.count, __popc(m));
                    base = __shfl_sync(kFullMask, base, 0);
                    if (take) {
                        const int pos = base + __popc(m & lanes_below);
                        bk[pos] = key[u][e];
                        bv[pos] = idx[u][e];
                    }
                }
        }
        __syncthreads();  // every append of this step is done
        // thread 0 reads the count while nobody appends; all learn its verdict
        if (__syncthreads_or(threadIdx.x == 0 && sh.count > capacity - kBlockSelectStep))
            block_compact(bk, bv, sh, job.k);
    }
    block_compact(bk, bv, sh, job.k);
    const long long out = job.out_rows ? job.out_rows[row] : row;
    float *out_k = job.out_keys + out * job.out_ld;
    int *out_v = job.out_idx + out * job.out_ld;
    for (int i = threadIdx.x; i < job.k; i += blockDim.x) {
        const bool real = i < sh.count && bv[i] != kEmptyIdx;
        out_k[i] = real ? bk[i] : INFINITY;
        out_v[i] = real ? bv[i] : -1;
    }
}

// ---- the paper's BlockSelect ----

constexpr int kMaxRowWarps = 8;

// Dynamic shared memory of warps_block_select_kernel: each warp's 32 slots
// (BufferedWarpSelect's), then room for warps / 2 warp queues of K pairs
// for the merge.
inline size_t warps_block_smem(int K, int warps)
{
    return (size_t)warps * 32 * 8 + (size_t)(warps / 2) * K * 8;
}

// A pair as one 64-bit word in (key, index) order, but -0 below +0: any
// word kept is still some warp's k-th, so the order of the two zeros only
// decides which of two valid bounds wins.
__device__ __forceinline__ unsigned long long pack_pair(float key, int idx)
{
    return (unsigned long long)to_ordered(key) << 32 | (unsigned)idx;
}

// Publish the warp's k-th to the row's shared bound and adopt a lower one
// that another warp published.  Atomics both ways (racecheck sees no race).
template <class WS>
__device__ __forceinline__ void share_bound(WS &q, unsigned long long *shared)
{
    const unsigned long long mine = pack_pair(q.kth_k, q.kth_v);
    unsigned long long old = 0;
    if (lane_id() == 0) old = atomicMin(shared, mine);
    old = __shfl_sync(kFullMask, old, 0);
    if (old < mine) q.tighten(from_ordered((unsigned)(old >> 32)), (int)(unsigned)old);
}

// Merge the warps' queues, a tree of log2(warps) rounds through shared
// memory: in round s, warp w + s hands its queue to warp w (w a multiple of
// 2s).  Warp 0 ends with the row's K smallest.  Called by the whole block.
template <class WS>
__device__ __forceinline__ void merge_warp_queues(WS &q, float *tree_k, int *tree_v, int warps)
{
    constexpr int K = WS::N * 32;
    const int warp = threadIdx.x >> 5, lane = lane_id();
    for (int s = 1; s < warps; s *= 2) {
        const int slot = warp / (2 * s);
        if (warp % (2 * s) == s) {
#pragma unroll
            for (int r = 0; r < WS::N; ++r) {
                tree_k[slot * K + r * 32 + lane] = q.wk[r];
                tree_v[slot * K + r * 32 + lane] = q.wv[r];
            }
        }
        __syncthreads();
        if (warp % (2 * s) == 0 && warp + s < warps)
            q.merge_sorted_shared(tree_k + slot * K, tree_v + slot * K);
        __syncthreads();
    }
}

// Launch: one block of 32 * warps threads per row (1 <= warps <=
// kMaxRowWarps), warps_block_smem(K, warps) bytes of dynamic shared memory.
// Step by step the block reads warps * kQueueStep contiguous columns, warp w
// the w-th kQueueStep of them.  Q: QueueWarpSelect<K> or
// BufferedWarpSelect<K, true>.
template <int K, typename S, bool Vec, class Q>
__global__ void __launch_bounds__(kMaxRowWarps * 32)
    warps_block_select_kernel(const __grid_constant__ SelectJob job)
{
    extern __shared__ __align__(16) float warps_block_smem_base[];
    __shared__ unsigned long long shared_bound;
    const int warps = blockDim.x >> 5, warp = threadIdx.x >> 5;
    const int row = blockIdx.x;
    RowReader<S, Vec> rd(job, row);
    float bk;
    int bv;
    rd.bound(bk, bv);
    if (threadIdx.x == 0) shared_bound = pack_pair(bk, bv);
    __syncthreads();
    float *slot_k = warps_block_smem_base;
    int *slot_v = reinterpret_cast<int *>(slot_k + warps * 32);
    float *tree_k = warps_block_smem_base + warps * 64;
    int *tree_v = reinterpret_cast<int *>(tree_k + (warps / 2) * K);
    Q sel;
    sel.init(job.k, bk, bv, slot_k + warp * 32, slot_v + warp * 32);
    for (int j0 = warp * kQueueStep; j0 < rd.cols; j0 += warps * kQueueStep) {
        share_bound(sel.q, &shared_bound);
        select_step(rd, sel, j0);
    }
    sel.flush();
    merge_warp_queues(sel.q, tree_k, tree_v, warps);
    if (warp != 0) return;
    const long long out = job.out_rows ? job.out_rows[row] : row;
    sel.q.write(job.out_keys + out * job.out_ld, job.out_idx + out * job.out_ld);
}

}  // namespace sml
