// cuda_ivf_pq.cuh: what IVF-PQ's driver (cuda_ivf_pq.cu) and its two scan
// kernels share: the fused scan (cuda_ivf_pq_fused.cu) and the pair scan
// (cuda_ivf_pq_pairs.cu).  Lookup tables, their fills and the sums of a
// row's entries are device functions here, the same arithmetic in both.
//
// Tables are
//   L2, term 1 in the rows: term 3 of the query, -2<x_i, q_ij>; a row's key is
//                           term 2 (the coarse key) + its term 1 + m entries,
//   IP:                     term 3 of the query, -<x_i, q_ij>, plus -<x, c>,
//   residual (L2):          ||(x - c)_i - q_ij||^2, one table per (query, list),
// in fp32, or in fp16 where the table is large: then the block finds the
// table's minimum and range, stores (v - min) * s with s a power of two that
// keeps every entry under 2^14, and adds the entries up in fp32, so raw data
// with large distances cannot overflow (where Faiss's fp16 tables do).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <stdint.h>

#include "core/backend.h"
#include "cuda/cuda_filter.cuh"
#include "cuda/cuda_ivf.cuh"
#include "cuda/cuda_util.cuh"

namespace sml {

enum class Table { term3, residual };

// Tables of term 3 alone (L2 with term 1 in the rows, IP), or of residuals.
inline Table table_kind(const sml_ivf_pq_scan_args *a)
{
    return a->scan.metric == SIMIL_METRIC_L2 && a->term1_at == 0 ? Table::residual : Table::term3;
}

inline float term3_scale(const sml_ivf_pq_scan_args *a)
{
    return a->scan.metric == SIMIL_METRIC_L2 ? -2.0f : -1.0f;
}

constexpr int kPqThreads = 256;

constexpr int kPqWarps = kPqThreads / 32;

// Entry e = i * ksub + j of query x's term 3 (the table by sub-quantizer):
// scale * <x_i, q_ij>.
__device__ __forceinline__ float term3_entry(const float *x, const float *codebooks, int ksub,
                                             int dsub, float scale, int e)
{
    return table_entry(QueryTable{codebooks, 0, ksub, dsub, false, scale}, x, e);
}

__device__ __forceinline__ float block_reduce(float v, bool max, float *shared)
{
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(kFullMask, v, o);
        v = max ? fmaxf(v, w) : fminf(v, w);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = shared[lane < (int)(blockDim.x >> 5) ? lane : 0];
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(kFullMask, v, o);
        v = max ? fmaxf(v, w) : fminf(v, w);
    }
    return v;
}

// Fill the block's table (entries from `entry`) in fp32, or in fp16 as
// (v - min) * scale; returns what turns a sum of m fp16 entries back into a
// sum of the values: key = sum * inv_scale + offset.  Called by the whole block.
template <bool FP16, typename Entry>
__device__ __forceinline__ void fill_table(void *table, int entries, int m, Entry entry,
                                           float *reduce, float &inv_scale, float &offset)
{
    inv_scale = 1.0f;
    offset = 0.0f;
    if (!FP16) {
        float *lut = static_cast<float *>(table);
        for (int e = threadIdx.x; e < entries; e += blockDim.x) lut[e] = entry(e);
        return;
    }
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int e = threadIdx.x; e < entries; e += blockDim.x) {
        const float v = entry(e);
        lo = fminf(lo, v);
        hi = fmaxf(hi, v);
    }
    lo = block_reduce(lo, false, reduce);
    hi = block_reduce(hi, true, reduce);
    int exponent = 0;
    frexpf(hi - lo, &exponent);  // hi - lo < 2^exponent
    const float scale = hi > lo ? ldexpf(1.0f, 14 - exponent) : 1.0f;
    __half *lut = static_cast<__half *>(table);
    for (int e = threadIdx.x; e < entries; e += blockDim.x)
        lut[e] = __float2half_rn((entry(e) - lo) * scale);
    offset = m * lo;
    inv_scale = 1.0f / scale;
}

// Sum of a row's m table entries (codes one byte per sub-quantizer, read as
// 32-bit words), in order.  KSUB = 256 (8-bit codes) makes each entry's offset
// within its word's four sub-tables a constant, so a lookup is a byte
// extract, an address and one shared load; KSUB = 0 reads ksub at run time.
template <bool FP16, int KSUB>
__device__ __forceinline__ float row_sum(const uint8_t *row, int m, int ksub_rt, const void *table)
{
    const int ksub = KSUB ? KSUB : ksub_rt;
    const uint32_t *word = reinterpret_cast<const uint32_t *>(row);
    const auto entry = [&](int e) {
        return FP16 ? __half2float(static_cast<const __half *>(table)[e])
                    : static_cast<const float *>(table)[e];
    };
    float acc = 0;
    const int full = m / 4;
#pragma unroll 4
    for (int u = 0; u < full; ++u) {
        const uint32_t w = word[u];
        const int t = u * 4 * ksub;
#pragma unroll
        for (int b = 0; b < 4; ++b) acc += entry(t + b * ksub + ((w >> (8 * b)) & 0xff));
    }
    for (int i = full * 4; i < m; ++i) acc += entry(i * ksub + row[i]);
    return acc;
}

template <bool FP16>
__device__ __forceinline__ float row_sum(const uint8_t *row, int m, int ksub, const void *table)
{
    return ksub == 256 ? row_sum<FP16, 256>(row, m, ksub, table)
                       : row_sum<FP16, 0>(row, m, ksub, table);
}

// A row's term 1 (L2 with term-3 tables), stored after its code; else 0.
__device__ __forceinline__ float row_term1(const uint8_t *row, int term1_at)
{
    return term1_at ? *reinterpret_cast<const float *>(row + term1_at) : 0.0f;
}

// ---- the pair scan (cuda_ivf_pq_pairs.cu) -------------------------------

// One (query, list) pair against up to kPqItemVectors vectors.
struct PqItem {
    int pair;
    int vector0;
};

// Large enough that one block usually covers a whole list, so that each
// pair's table is built once.
constexpr int kPqItemVectors = 8192;

// A batch's pairs and work in device memory (cuda_ivf.cuh, PairPlan).
struct PqBatch {
    const PqItem *items;
    int nitems;
    const int *pair_query;      // query of each pair, within the batch
    const int *pair_list;
    const int *pair_cols;       // vectors in the pair's list
    const int *pair_base;       // first arena row of the list
    const long long *pair_out;  // where the pair's distances start
    const float *pair_key;      // coarse key (term 2)
    int nq;
    const float *queries;       // the batch's first query (device)
};

// Scratch floats the pair scan needs for a batch of nq queries.
size_t pq_scratch_floats(const sml_ivf_pq_scan_args *a, int nq);

// Distances of every pair's vectors into distances (and, when rows is not
// null, their arena rows), through lookup tables.
simil_status launch_pq_distances(const sml_ivf_pq_scan_args *a, const PqBatch &batch,
                                 float *scratch, float *distances, int *rows, cudaStream_t st);

// ---- the fused scan (cuda_ivf_pq_fused.cu) ------------------------------

// The fused scan (one block per query, selection in registers) serves
// searches with term-3 tables and k up to this.
constexpr int kPqFusedMaxK = 256;

// Everything the fused kernel reads: a batch of queries and their probes in
// device memory, the search's codes and codebooks, the outputs.
struct PqQueryScan {
    const float *queries;        // the batch's first query
    const int64_t *probes;       // nq x nprobe lists, -1 for none
    const float *probe_keys;     // nq x nprobe coarse keys (term 2, or -<x, c>) ...
    float probe_key_sign;        // ... times this (-1: <x, c> from the coarse search)
    int nprobe;
    const int64_t *list_offset;  // as the search has them (sml_ivf_lists)
    const int64_t *list_size;
    int splits;                  // blocks per query (each scans a share of every list)
    float *out_keys;             // nq x splits x k, ascending per part
    int *out_idx;                // nq x splits x k arena rows, -1 past the candidates
    int dim;
    const float *codebooks;
    int m, ksub, dsub;
    float term3_scale;
    const uint8_t *codes;
    int code_size;
    int term1_at;
    int k;                       // <= kPqFusedMaxK
    const float *codebooks_by_codeword;  // swizzled: the index's codebooks, ksub x m x dsub
    // nq x m * ksub: each query's term 3 from the coarse search (QueryTable;
    // by codeword where swizzled), or null: each block computes its own
    const float *tables;
    RowFilter allowed;           // the arena rows a filter allows (cuda_filter.cuh)
    SmallOut out;                // splits > 1: the results, from each query's last block
};

// The fused scan of nq queries; swizzled: the table by codeword (fp32, m a
// power of two from 4 to 64, k <= 64), else by sub-quantizer (fp32 or fp16).
simil_status launch_pq_fused(const PqQueryScan &scan, bool fp16, bool swizzled, int nq,
                             cudaStream_t st);

}  // namespace sml
