// knn_device.cuh: device code shared by the exact search paths (the batch
// path of cuda_knn.cu and the small-batch path of cuda_knn_small.cu), so that
// both prove their candidates with the same bound and return the same bits:
//   - the fast path's candidate count and its error bound E(x)
//     (docs/gpu-exact-search.md derives it);
//   - the exact fp32 key of one (query, vector) pair, computed by one warp;
//   - one row of final results (distances, labels, ties ordered by label).
#pragma once

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_util.cuh"

namespace sml {

// Approximate candidates the fast path keeps per query for a top k: 2k, at
// least 64 (32 for k <= 4), rounded up to a WarpSelect queue size.  With
// fewer, a few percent of the queries on uniform data fail the bound at
// k = 10; for k <= 4 (an IVF's list assignment: k = 1) 32 suffice, and on
// short rows the smaller queue warms up far sooner.
__host__ __device__ inline int fast_candidates(long long k)
{
    const long long want = k * 2 > (k <= 4 ? 32 : 64) ? k * 2 : (k <= 4 ? 32 : 64);
    int q = 32;
    while (q < want) q <<= 1;
    return q;
}

// The factor of a query row in the approximate key: key = add[j] +
// row_scale * inv_scale[j] * <x^, y^_j> (add = ||y_j||^2 for L2, none for IP).
// inv: 1 / s_x.
__device__ __forceinline__ float fast_row_scale(float inv, bool l2)
{
    return l2 ? -2.0f * inv : -inv;
}

// E(x): every approximate key of a query of norm ||x|| (not squared) is
// within this of its exact key, for base rows of norm at most max_norm.
__device__ __forceinline__ float fast_bound(float norm, float max_norm, bool l2, int dim)
{
    const float c = 0x1p-10f + 0x1p-11f + 0x1p-17f + dim * 0x1p-20f;
    const float xy = norm * max_norm;
    if (l2)
        return 2.0f * c * xy + 0x1p-22f * (max_norm * max_norm + 2.0f * xy) +
               dim * 0x1p-23f * max_norm * max_norm;
    return c * xy + 0x1p-22f * xy;
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
    return v;
}

// warp_sum of four values at once, each with warp_sum's bits: returns in
// lane l the sum of s[l >> 3].  warp_sum adds at each level the partial
// sums of lanes l and l ^ o; here, at the levels o = 16 and 8, the lane that
// keeps a value adds the same two partial sums (in the other order, which
// float addition does not see), so every sum is the same tree of the same
// leaves.  6 shuffles, where four warp_sums take 20.
__device__ __forceinline__ float warp_sum4(const float (&s)[4])
{
    const int lane = threadIdx.x & 31;
    // o = 16: lanes below 16 keep s[0] and s[1], the others s[2] and s[3]
    const bool hi = lane & 16;
    const float a = (hi ? s[2] : s[0]) + __shfl_xor_sync(kFullMask, hi ? s[0] : s[2], 16);
    const float b = (hi ? s[3] : s[1]) + __shfl_xor_sync(kFullMask, hi ? s[1] : s[3], 16);
    // o = 8: lanes with bit 3 clear keep a, the others b
    const bool odd = lane & 8;
    float v = (odd ? b : a) + __shfl_xor_sync(kFullMask, odd ? a : b, 8);
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
    return v;
}

// ||r|| (not squared) over dim floats, in every lane; all 32 lanes call it,
// and the sum runs in one fixed order (lane j sums elements j, j + 32, ...),
// so launch_scale_to_half and the one-launch small path get the same bits.
__device__ __forceinline__ float warp_norm(const float *r, int dim)
{
    float s = 0;
    for (int j = threadIdx.x & 31; j < dim; j += 32) s = fmaf(r[j], r[j], s);
    return sqrtf(warp_sum(s));
}

// The fp16 scale of a row of norm ||x||: a power of two putting the norm in
// [64, 128), 1 for a zero row (launch_scale_to_half).
__device__ __forceinline__ float half_scale(float norm)
{
    int exponent = 0;
    frexpf(norm, &exponent);  // norm = m * 2^exponent, m in [0.5, 1)
    return norm > 0 ? ldexpf(1.0f, 7 - exponent) : 1.0f;
}

// One dimension's term of an exact key, added to s: (x - y)^2 (l2) or x y,
// fused.  exact_key and the coarse searches' kernels (cuda_ivf_small.cu),
// which must give its bits, all add their terms with it.
__device__ __forceinline__ float key_term(float x, float y, float s, bool l2)
{
    if (l2) {
        const float d = x - y;
        return fmaf(d, d, s);
    }
    return fmaf(x, y, s);
}

// The exact key of query x against row y (dim floats each), in every lane:
// ||x - y||^2 (l2) or -<x, y>.  All 32 lanes call it; the sum runs in a fixed
// order, so every caller gets the same bits.
__device__ __forceinline__ float exact_key(const float *x, const float *y, int dim, bool l2)
{
    const int lane = threadIdx.x & 31;
    float s = 0;
    if (l2) {
        for (int j = lane; j < dim; j += 32) s = key_term(x[j], y[j], s, true);
    } else {
        for (int j = lane; j < dim; j += 32) s = key_term(x[j], y[j], s, false);
    }
    s = warp_sum(s);
    return l2 ? s : -s;
}

// One row of final results from k sorted (key, position) pairs, entry j:
// distance = key + (query_norm ? *query_norm clamped at 0 : 0) for l2, -key
// for ip; label = ids[position] (or -1 and +-inf for an empty slot).
__device__ __forceinline__ void finish_entry(int j, const float *keys, const int *pos, bool l2,
                                             const float *query_norm, const int64_t *ids,
                                             float *distance, int64_t *label)
{
    // +inf: a row a filter refuses (cuda_filter.cuh), which is no result
    const int p = keys[j] == INFINITY ? -1 : pos[j];
    float d = keys[j];
    if (p < 0) {
        d = INFINITY;
    } else if (l2 && query_norm) {
        d = fmaxf(d + *query_norm, 0.0f);
    }
    *distance = l2 ? d : -d;
    *label = p < 0 ? -1 : ids[p];
}

// Runs of equal distances of a finished row ordered by label (insertion
// sort, cheap on rows already sorted by distance; empty slots, label -1,
// come last).  One thread.
__device__ __forceinline__ void order_ties(int k, const float *distances, int64_t *labels)
{
    for (int j = 1; j < k; ++j) {
        const float d = distances[j];
        const int64_t l = labels[j];
        if (l < 0) break;
        int i = j;
        while (i > 0 && distances[i - 1] == d && labels[i - 1] > l) {
            labels[i] = labels[i - 1];
            --i;
        }
        labels[i] = l;
    }
}

// One row of final results (finish_entry, then order_ties).  One thread.
__device__ __forceinline__ void finish_row(int k, const float *keys, const int *pos, bool l2,
                                           const float *query_norm, const int64_t *ids,
                                           float *distances, int64_t *labels)
{
    for (int j = 0; j < k; ++j)
        finish_entry(j, keys, pos, l2, query_norm, ids, distances + j, labels + j);
    order_ties(k, distances, labels);
}

// finish_row by a whole warp (every lane calls it), with the same values:
// each lane finishes every 32nd entry (the ids looked up at once, not one
// after the other), and one lane orders ties only where two neighbouring
// entries tie, which is rare.  A lone thread doing it all, each step's loads
// waiting for the last one's stores, took 10-15 us of a one-query search.
__device__ __forceinline__ void finish_row_warp(int k, const float *keys, const int *pos, bool l2,
                                                const float *query_norm, const int64_t *ids,
                                                float *distances, int64_t *labels)
{
    const int lane = threadIdx.x & 31;
    bool tie = false;
    float carry = 0;  // the distance before this round's lane 0
    for (int j0 = 0; j0 < k; j0 += 32) {
        const int j = j0 + lane;
        float d = INFINITY;
        int64_t label = -1;
        if (j < k) {
            finish_entry(j, keys, pos, l2, query_norm, ids, &d, &label);
            distances[j] = d;
            labels[j] = label;
        }
        float before = __shfl_up_sync(kFullMask, d, 1);
        if (lane == 0) before = carry;
        // where no entry ties with the one before it, order_ties moves nothing
        if (j < k && j > 0 && label >= 0 && d == before) tie = true;
        carry = __shfl_sync(kFullMask, d, 31);
    }
    if (!__any_sync(kFullMask, tie)) return;
    __syncwarp();  // the lanes' entries are visible to lane 0
    if (lane == 0) order_ties(k, distances, labels);
    __syncwarp();
}

}  // namespace sml
