// warp_sort.cuh: sorting networks over (key, index) pairs held in the
// registers of one warp (the GPU paper, section 4, "k-selection").
//
// A sequence of L = 32 * N pairs lives "lane-strided": element e sits in lane
// e % 32, register slot e / 32.  Compare-exchanges between elements 32 or more
// apart stay inside one lane (register swaps); closer ones go across lanes with
// __shfl_xor_sync.  Every loop has compile-time bounds and is unrolled, so the
// register arrays are only indexed by constants and never spill to local memory.
//
// Pairs are ordered by key, then index: that total order makes every result
// deterministic, ties included.  All 32 lanes must take part.
#pragma once

#include <cuda_runtime.h>

#include "cuda/cuda_util.cuh"

namespace sml {

__device__ __forceinline__ bool kv_less(float ka, int va, float kb, int vb)
{
    return ka < kb || (ka == kb && va < vb);
}

__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }

// Inside one lane: registers a (earlier) and b (later); afterwards a <= b when
// ascending, a >= b otherwise.
__device__ __forceinline__ void cas_regs(float &ka, int &va, float &kb, int &vb, bool ascending)
{
    bool swap = ascending ? kv_less(kb, vb, ka, va) : kv_less(ka, va, kb, vb);
    if (swap) {
        float tk = ka;
        ka = kb;
        kb = tk;
        int tv = va;
        va = vb;
        vb = tv;
    }
}

// Across lanes at distance stride: the lower lane of each pair ends with the
// smaller pair when ascending.
__device__ __forceinline__ void cas_lanes(float &k, int &v, int stride, bool ascending)
{
    float ok = __shfl_xor_sync(kFullMask, k, stride);
    int ov = __shfl_xor_sync(kFullMask, v, stride);
    bool lower = (lane_id() & stride) == 0;
    bool keep_min = lower == ascending;
    bool take = keep_min ? kv_less(ok, ov, k, v) : kv_less(k, v, ok, ov);
    if (take) {
        k = ok;
        v = ov;
    }
}

template <int N>
struct Log2 {
    static constexpr int value = 1 + Log2<N / 2>::value;
};
template <>
struct Log2<1> {
    static constexpr int value = 0;
};

// Sort a bitonic sequence of 32 * N pairs ascending.
template <int N>
__device__ __forceinline__ void warp_bitonic_merge(float (&k)[N], int (&v)[N])
{
    constexpr int kLogL = Log2<N>::value + 5;
#pragma unroll
    for (int lt = kLogL - 1; lt >= 0; --lt) {
        const int stride = 1 << lt;
        if (stride >= 32) {
            const int rs = stride >> 5;
#pragma unroll
            for (int r = 0; r < N; ++r)
                if ((r & rs) == 0) cas_regs(k[r], v[r], k[r | rs], v[r | rs], true);
        } else {
#pragma unroll
            for (int r = 0; r < N; ++r) cas_lanes(k[r], v[r], stride, true);
        }
    }
}

// Sort 32 * N pairs ascending (N a power of two).
template <int N>
__device__ __forceinline__ void warp_bitonic_sort(float (&k)[N], int (&v)[N])
{
    constexpr int kLogL = Log2<N>::value + 5;
    const int lane = lane_id();
#pragma unroll
    for (int ls = 1; ls <= kLogL; ++ls) {
        const int size = 1 << ls;
#pragma unroll
        for (int lt = ls - 1; lt >= 0; --lt) {
            const int stride = 1 << lt;
#pragma unroll
            for (int r = 0; r < N; ++r) {
                // direction of the block of `size` that element r*32+lane is in
                const bool ascending =
                    size >= 32 ? ((r & (size >> 5)) == 0) : ((lane & size) == 0);
                if (stride >= 32) {
                    const int rs = stride >> 5;
                    if ((r & rs) == 0) cas_regs(k[r], v[r], k[r | rs], v[r | rs], ascending);
                } else {
                    cas_lanes(k[r], v[r], stride, ascending);
                }
            }
        }
    }
}

}  // namespace sml
