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
#include "cuda/odd_network.cuh"

namespace sml {

__device__ __forceinline__ bool kv_less(float ka, int va, float kb, int vb)
{
    return ka < kb || (ka == kb && va < vb);
}

__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }

// Floats as uint32s in the same order (-0 below +0).
__device__ __forceinline__ unsigned to_ordered(float f)
{
    unsigned u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float from_ordered(unsigned u)
{
    return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}

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

// Runs the odd-size networks of odd_network.cuh on N lane-strided registers
// of pairs.  Register indices are constants once the recursion is inlined, so
// the arrays stay in registers.
template <int N>
struct RegNet {
    float (&k)[N];
    int (&v)[N];

    __device__ __forceinline__ void cas_regs(int a, int b)
    {
        sml::cas_regs(k[a], v[a], k[b], v[b], true);
    }

    __device__ __forceinline__ void cas_lanes(int r, int mask)
    {
        const float ok = __shfl_xor_sync(kFullMask, k[r], mask);
        const int ov = __shfl_xor_sync(kFullMask, v[r], mask);
        // the lane below its partner is the one without mask's top bit
        const bool lower = (lane_id() & (mask & ~(mask >> 1))) == 0;
        const bool take = lower ? kv_less(ok, ov, k[r], v[r]) : kv_less(k[r], v[r], ok, ov);
        if (take) {
            k[r] = ok;
            v[r] = ov;
        }
    }

    // Lane l holds a@l and b@l; it takes the smaller of a@l and b@(31-l) into
    // a and the larger of a@(31-l) and b@l into b, from the values before.
    __device__ __forceinline__ void cas_cross(int a, int b)
    {
        const float ka = __shfl_xor_sync(kFullMask, k[a], 31);
        const int va = __shfl_xor_sync(kFullMask, v[a], 31);
        const float kb = __shfl_xor_sync(kFullMask, k[b], 31);
        const int vb = __shfl_xor_sync(kFullMask, v[b], 31);
        if (kv_less(kb, vb, k[a], v[a])) {
            k[a] = kb;
            v[a] = vb;
        }
        if (kv_less(k[b], v[b], ka, va)) {
            k[b] = ka;
            v[b] = va;
        }
    }
};

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
