// cuda_ivf_pq_fused.cu: IVF-PQ's fused scan on the GPU (term-3 tables,
// k <= kPqFusedMaxK; cuda_ivf_pq.cuh).
//
// Fused scan (term-3 tables, k <= kPqFusedMaxK): one block of 256 threads per
// query builds the query's table once (a split query's blocks copy it from
// the coarse kernel: PqQueryScan::tables), scans every probed list, each warp
// keeping its k best in a WarpSelect queue, and the block merges its warps'
// queues.  No distance goes to memory, and no table is built per list.  Each
// lane adds up its own row.  With the table by sub-quantizer, the 32 lanes of
// a warp look up 32 random codes of one sub-quantizer at once, which shared
// memory serves in 2.7 wavefronts on average (bank conflicts).  For m a power
// of two from 4 to 64 with fp32 tables and k <= 64 (pq_swizzled) the table is
// laid out by codeword instead, and each lane visits its row's sub-quantizers
// in an order that puts the 32 lanes in 32 different banks: one wavefront per
// lookup.  That kernel also keeps its warp queue in
// registers: the out-of-line merge put the queue in local memory, where every
// offered pair went.  In both layouts each lane reads its row's code words
// where they lie in global memory (see pq_query_kernel).
#include <assert.h>

#include "cuda/cuda_ivf.cuh"
#include "cuda/cuda_ivf_pq.cuh"
#include "cuda/ivf_small_merge.cuh"
#include "cuda/warp_select.cuh"

namespace sml {
namespace {

// ---- the table by codeword (SWZ = m, a power of two from 4 to 64) ----------
//
// Columns: W = max(m, 32).  Codeword j of sub-quantizer i sits at j * W + c
// for every column c with c % m == i (m < 32 repeats each sub-quantizer
// 32 / m times), so the bank of an entry is its column.  At step (u, b) of
// its row (u < m / 4 code words, b < 4 bytes) lane l reads column
// c = l ^ (4u + b): the 32 lanes read 32 different columns, hence banks, and
// over the steps each lane meets every column of its row's sub-quantizers
// once: sub-quantizer c % m = (l % m) ^ (4u + b), whose code is byte
// (l % 4) ^ b of code word (l % m) / 4 ^ u.
__host__ __device__ constexpr int swizzled_columns(int m) { return m > 32 ? m : 32; }

// The table by codeword: entry (i, j) = scale * <x_i, codeword j of
// sub-quantizer i>, from the codebooks by codeword (the index's copy,
// codeword j of every sub-quantizer together).  Consecutive threads take
// consecutive sub-quantizers of one codeword: their loads coalesce and their
// writes fall in different banks.
template <int M>
__device__ __forceinline__ void fill_swizzled(float *table, int ksub, int dsub, const float *x,
                                              const float *by_codeword, float scale)
{
    constexpr int W = swizzled_columns(M);
    const QueryTable t{by_codeword, M, ksub, dsub, true, scale};
    for (int e = threadIdx.x; e < M * ksub; e += blockDim.x) {
        const int j = e / M, i = e % M;
        const float v = table_entry(t, x, e);
#pragma unroll
        for (int col = i; col < W; col += M) table[j * W + col] = v;
    }
}

// The same from the query's entries in global memory (tables: by codeword,
// m * ksub of them), four at a time: one pass of independent loads, where
// the entries' dot products are a chain of loads per entry.
template <int M>
__device__ __forceinline__ void fill_swizzled_from(float *table, int ksub, const float *entries)
{
    constexpr int W = swizzled_columns(M);
    static_assert(M % 4 == 0, "four entries of one codeword");
    const float4 *from = reinterpret_cast<const float4 *>(entries);
    const int quads = M * ksub / 4;
#pragma unroll 4
    for (int f = threadIdx.x; f < quads; f += blockDim.x) {
        const float4 v = __ldg(from + f);
        const int j = 4 * f / M, i = 4 * f % M;
#pragma unroll
        for (int col = i; col < W; col += M)
            *reinterpret_cast<float4 *>(table + j * W + col) = v;
    }
}

// Sum of a row's m entries from the table by codeword (see above); `words`
// is the row's codes in global memory, one byte per sub-quantizer.  Lane l
// takes code word (l % m) / 4 ^ u at step u: global loads have no banks, so
// the lane reads its words in that order (reading them in order and
// permuting them in registers, as when the rows were staged in shared memory,
// was slower; docs/benchmarks.md, "Tried and dropped").
template <int M>
__device__ __forceinline__ float row_sum_swizzled(const uint32_t *words, const float *table,
                                                  int lane)
{
    constexpr int kPitchShift = M > 32 ? 8 : 7;  // log2 of a codeword's bytes
    constexpr int kWords = M / 4;
    const int first = (lane & (M - 1)) >> 2;
    uint32_t w[kWords];
#pragma unroll
    for (int u = 0; u < kWords; ++u) w[u] = __ldg(words + (u ^ first));
    const int r = lane & 3;  // byte b of the permuted word is byte r ^ b of the code word
    const uint32_t order = (uint32_t)(r | (r ^ 1) << 4 | (r ^ 2) << 8 | (r ^ 3) << 12);
    const char *base = reinterpret_cast<const char *>(table);
    const uint32_t lane4 = (uint32_t)lane << 2;
    float acc = 0;
#pragma unroll
    for (int u = 0; u < kWords; ++u) {
        const uint32_t word = __byte_perm(w[u], 0, order);
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            // byte offset of column lane ^ (4u + b) of the codeword
            const uint32_t at = ((((word >> (8 * b)) & 0xff) << kPitchShift) | lane4) ^ (16 * u + 4 * b);
            acc += *reinterpret_cast<const float *>(base + at);
        }
    }
    return acc;
}

// Bytes of the fused kernel's table, padded to 16.
__host__ __device__ __forceinline__ int query_table_bytes(int entries, bool fp16)
{
    return (entries * (fp16 ? 2 : 4) + 15) / 16 * 16;
}

// Fused scan: one block per query, or a.splits (gridDim.y) blocks per query
// for a small batch, block s taking every splits-th run of 256 rows of each
// list from run s; out_keys / out_idx get each block's k best keys and arena
// rows (-1 past the candidates), splits parts per query.  Each warp takes 32 rows at a
// time, and each lane adds up its own row, reading its code words where
// they lie: the 32 rows are contiguous in the arena, so a warp's loads stay
// within 32 x code_size bytes that L1 keeps between them.  The kernel is
// bound by instruction issue, and copying the rows into shared memory first
// (coalesced loads, stores, a sync) cost about 75 instructions per 32 rows,
// a large share of a search (docs/benchmarks.md, "Tried and dropped").
// The kernel with the table by codeword (K <= 64) keeps its queue in
// registers; the other, for k up to kPqFusedMaxK, merges out of line.
template <int SWZ, int K>
__device__ __forceinline__ void merge_queue(WarpSelect<K> &ws)
{
    if constexpr (SWZ > 0)
        ws.merge_inline();
    else
        ws.merge();
}

// SWZ: 0 for the table by sub-quantizer, else m (fp32, table by codeword).
// SPLIT: the query's lists are shared among gridDim.y blocks (a small batch).
template <int K, bool FP16, int SWZ, bool SPLIT>
__global__ void __launch_bounds__(kPqThreads, SWZ > 0 ? 5 : 1)
pq_query_kernel(const __grid_constant__ PqQueryScan a)
{
    static_assert(SWZ == 0 || !FP16, "the table by codeword is fp32");
    extern __shared__ float pq_smem[];  // the table, then the warps' queues
    __shared__ float reduce[32];
    const int q = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
    const float *x = a.queries + (long long)q * a.dim;
    const int m = a.m, ksub = a.ksub, dsub = a.dsub;
    const float *entries = a.tables ? a.tables + (long long)q * m * ksub : nullptr;
    const auto term3 = [&](int e) {
        return entries ? __ldg(entries + e)
                       : term3_entry(x, a.codebooks, ksub, dsub, a.term3_scale, e);
    };
    float inv_scale = 1.0f, offset = 0.0f;
    if constexpr (SWZ > 0) {
        if (entries)
            fill_swizzled_from<SWZ>(pq_smem, ksub, entries);
        else
            fill_swizzled<SWZ>(pq_smem, ksub, dsub, x, a.codebooks_by_codeword, a.term3_scale);
    } else {
        fill_table<FP16>(pq_smem, m * ksub, m, term3, reduce, inv_scale, offset);
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    WarpSelect<K> ws;
    ws.init(a.k, INFINITY, kEmptyIdx);
    // List rows [c0 * kPqThreads, cols), every splits-th run of kPqThreads
    // rows (a chunk: one row per thread).
    const auto scan_list = [&](int cols, long long first, float base, int c0) {
        // every lane of a warp takes the same trips: need_merge is warp-wide
        for (int r0 = c0 * kPqThreads + warp * 32; r0 < cols; r0 += kPqThreads * splits) {
            float key = INFINITY;
            int idx = kEmptyIdx;
            // a row the filter refuses is offered as no row (cuda_filter.cuh)
            if (r0 + lane < cols && row_allowed(a.allowed, first + r0 + lane)) {
                const uint8_t *row = a.codes + (first + r0 + lane) * a.code_size;
                float sum;
                if constexpr (SWZ > 0)
                    sum = row_sum_swizzled<SWZ>(reinterpret_cast<const uint32_t *>(row), pq_smem,
                                                lane);
                else
                    sum = row_sum<FP16>(row, m, ksub, pq_smem) * inv_scale;
                key = base + row_term1(row, a.term1_at) + sum;
                idx = (int)(first + r0 + lane);
            }
            ws.add(key, idx);
            if (ws.need_merge()) merge_queue<SWZ>(ws);
        }
    };
    if constexpr (!SPLIT) {
        for (int p = 0; p < a.nprobe; ++p) {
            const int64_t l = a.probes[(long long)q * a.nprobe + p];
            if (l < 0) continue;
            scan_list((int)a.list_size[l], a.list_offset[l],
                      a.probe_key_sign * a.probe_keys[(long long)q * a.nprobe + p] + offset, 0);
        }
    } else {
        // A query split over blocks: its lists' chunks, counted over all its
        // lists in order, go to the blocks in turn.  (Every splits-th chunk of
        // each list left most blocks idle: a list holds a few chunks.)  The
        // lists' places are staged in shared memory, kPqThreads probes at a
        // time, read at once rather than one list after the other.  (Staged
        // in the one kernel for whole queries too, the 1,024-query batches
        // ran 3.5% slower.)
        __shared__ long long probe_first[kPqThreads];
        __shared__ int probe_cols[kPqThreads];
        __shared__ float probe_base[kPqThreads];
        int before = 0;  // chunks of the lists before the one scanned
        for (int p0 = 0; p0 < a.nprobe; p0 += kPqThreads) {
            const int np = min(kPqThreads, a.nprobe - p0);
            __syncthreads();  // the last round's places are read
            if ((int)threadIdx.x < np) {
                const long long at = (long long)q * a.nprobe + p0 + threadIdx.x;
                const int64_t l = a.probes[at];
                probe_cols[threadIdx.x] = l < 0 ? 0 : (int)a.list_size[l];
                probe_first[threadIdx.x] = l < 0 ? 0 : a.list_offset[l];
                probe_base[threadIdx.x] = a.probe_key_sign * a.probe_keys[at] + offset;
            }
            __syncthreads();
            for (int p = 0; p < np; ++p) {
                const int cols = probe_cols[p];
                // this block's first chunk of the list: (before + c) % splits == split
                scan_list(cols, probe_first[p], probe_base[p],
                          ((split - before) % splits + splits) % splits);
                before += (cols + kPqThreads - 1) / kPqThreads;
            }
        }
    }
    merge_queue<SWZ>(ws);
    __syncthreads();  // the table is done with: its room takes the queues
    float *qk = pq_smem;
    int *qv = reinterpret_cast<int *>(pq_smem + kPqWarps * K);
#pragma unroll
    for (int r = 0; r < WarpSelect<K>::N; ++r) {
        qk[warp * K + r * 32 + lane] = ws.wk[r];
        qv[warp * K + r * 32 + lane] = ws.wv[r];
    }
    __syncthreads();
    if (warp == 0) {
        for (int e = K + lane; e < kPqWarps * K; e += 32) {
            ws.add(qk[e], qv[e]);
            if (ws.need_merge()) merge_queue<SWZ>(ws);
        }
        merge_queue<SWZ>(ws);
        const long long out = ((long long)q * splits + split) * a.k;
        ws.write(a.out_keys + out, a.out_idx + out);
    }
    if constexpr (SPLIT) {
        // the queues' room is free again: the merge's lists and slots go there
        __syncthreads();
        auto *list_k = reinterpret_cast<float (*)[K]>(pq_smem);
        auto *list_v = reinterpret_cast<int (*)[K]>(pq_smem + kPqWarps * K);
        auto *slot_k = reinterpret_cast<float (*)[32]>(pq_smem + 2 * kPqWarps * K);
        auto *slot_v = reinterpret_cast<int (*)[32]>(pq_smem + 2 * kPqWarps * K + kPqWarps * 32);
        merge_if_last<K, kPqWarps>(a.out, q, splits, a.out_keys, a.out_idx, list_k, list_v,
                                   slot_k, slot_v);
    }
}

template <int K, bool FP16, int SWZ, bool SPLIT>
simil_status launch_query(const PqQueryScan &a, int nq, cudaStream_t st)
{
    const size_t table = SWZ > 0 ? (size_t)a.ksub * swizzled_columns(SWZ) * 4
                                 : (size_t)query_table_bytes(a.m * a.ksub, FP16);
    // the queues, or for a split query the merge's lists and slots (SmallOut)
    const size_t queues = (size_t)kPqWarps * (K + (SPLIT ? 32 : 0)) * 8;
    const size_t smem = table > queues ? table : queues;
    assert(SPLIT == (a.splits > 1));
    const auto kernel = pq_query_kernel<K, FP16, SWZ, SPLIT>;
    // the opt-in past 48 KB only: one host call less per small batch
    if (smem > (48 << 10))
        SML_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)smem));
    SML_CUDA_TRY(launch(kernel, dim3((unsigned)nq, (unsigned)a.splits), dim3(kPqThreads), smem,
                        st, a));
    return SIMIL_OK;
}

template <int K, bool SPLIT>
simil_status launch_query_k(const PqQueryScan &a, bool fp16, bool swizzled, int nq,
                            cudaStream_t st)
{
    if constexpr (K <= 64) {
        if (swizzled) switch (a.m) {
                case 4: return launch_query<K, false, 4, SPLIT>(a, nq, st);
                case 8: return launch_query<K, false, 8, SPLIT>(a, nq, st);
                case 16: return launch_query<K, false, 16, SPLIT>(a, nq, st);
                case 32: return launch_query<K, false, 32, SPLIT>(a, nq, st);
                default: return launch_query<K, false, 64, SPLIT>(a, nq, st);
            }
    }
    return fp16 ? launch_query<K, true, 0, SPLIT>(a, nq, st)
                : launch_query<K, false, 0, SPLIT>(a, nq, st);
}

}  // namespace

simil_status launch_pq_fused(const PqQueryScan &scan, bool fp16, bool swizzled, int nq,
                             cudaStream_t st)
{
    if (nq == 0) return SIMIL_OK;
    // split queries have k <= kSmallMaxK (cuda_ivf.cuh)
    assert(scan.splits == 1 || scan.k <= kSmallMaxK);
    if (scan.splits > 1) {
        if (scan.k <= 32) return launch_query_k<32, true>(scan, fp16, swizzled, nq, st);
        if (scan.k <= 64) return launch_query_k<64, true>(scan, fp16, swizzled, nq, st);
        return launch_query_k<kSmallMaxK, true>(scan, fp16, swizzled, nq, st);
    }
    if (scan.k <= 32) return launch_query_k<32, false>(scan, fp16, swizzled, nq, st);
    if (scan.k <= 64) return launch_query_k<64, false>(scan, fp16, swizzled, nq, st);
    if (scan.k <= 128) return launch_query_k<128, false>(scan, fp16, swizzled, nq, st);
    return launch_query_k<kPqFusedMaxK, false>(scan, fp16, swizzled, nq, st);
}

}  // namespace sml
