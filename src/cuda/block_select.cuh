// block_select.cuh: BlockSelect, one block of 256 threads per row, for long
// rows and for large k.
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

}  // namespace sml
