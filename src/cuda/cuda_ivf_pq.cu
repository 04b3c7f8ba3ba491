// cuda_ivf_pq.cu: IVF-PQ on the GPU: encoding residuals, and scans through
// lookup tables in shared memory (the GPU paper, IVFADC).
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
//
// Fused scan (term-3 tables, k <= kPqFusedMaxK): one block of 256 threads per
// query builds the query's table once, scans every probed list, each warp
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
//
// Pair scan (residual tables, or larger k): one block per (query, list) pair
// and chunk of up to kPqItemVectors of the list's vectors writes every
// distance for the driver's multi-pass selection (cuda_ivf.cu).
//
// Encode: one thread per (vector, sub-quantizer), nearest codeword by
// exhaustive search, residual slices staged through shared memory into
// registers, codebook in shared memory when it fits (pq_encode_kernel).
#include <cuda_fp16.h>
#include <float.h>

#include "core/alloc.h"
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_ivf.cuh"
#include "cuda/cuda_util.cuh"
#include "cuda/warp_select.cuh"

namespace sml {
namespace {

enum class Table { term3, residual };

constexpr int kPqThreads = 256;

// scale * <xi, c> over dsub floats: a term-3 entry.
__device__ __forceinline__ float scaled_dot(const float *xi, const float *c, int dsub, float scale)
{
    float s = 0;
    for (int t = 0; t < dsub; ++t) s = fmaf(xi[t], c[t], s);
    return scale * s;
}

// Entry e = i * ksub + j of query x's term 3: scale * <x_i, q_ij>.
__device__ __forceinline__ float term3_entry(const float *x, const float *codebooks, int ksub,
                                             int dsub, float scale, int e)
{
    return scaled_dot(x + (e / ksub) * dsub, codebooks + (long long)e * dsub, dsub, scale);
}

// term3[q] for the pair scan.  One block per query.
__global__ void pq_term3_kernel(const float *queries, int dim, const float *codebooks, int m,
                                int ksub, int dsub, float scale, float *term3)
{
    const long long q = blockIdx.x;
    for (int e = threadIdx.x; e < m * ksub; e += blockDim.x)
        term3[q * m * ksub + e] = term3_entry(queries + q * dim, codebooks, ksub, dsub, scale, e);
}

struct TableArgs {
    const float *term3;   // nq x m x ksub
    const float *coarse;  // nlist x dim
    const float *codebooks;
    int m, ksub, dsub, dim;
};

template <Table T>
__device__ __forceinline__ float table_entry(const TableArgs &t, int q, int e,
                                             const float *residual)
{
    if (T == Table::term3) return t.term3[(long long)q * t.m * t.ksub + e];
    const int i = e / t.ksub;
    const float *c = t.codebooks + (long long)e * t.dsub;
    float s = 0;
    for (int u = 0; u < t.dsub; ++u) {
        const float d = residual[i * t.dsub + u] - c[u];
        s = fmaf(d, d, s);
    }
    return s;
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

template <Table T, bool FP16>
__global__ void __launch_bounds__(kPqThreads)
pq_distance_kernel(const PqBatch batch, const TableArgs tab, const uint8_t *codes,
                   int code_size, int term1_at, float *distances, int *rows)
{
    extern __shared__ float pq_smem[];
    __shared__ float reduce[32];
    const PqItem item = batch.items[blockIdx.x];
    const int q = batch.pair_query[item.pair], l = batch.pair_list[item.pair];
    float *residual = pq_smem;  // dim floats (residual tables only)
    void *table = pq_smem + (T == Table::residual ? (tab.dim + 3) / 4 * 4 : 0);
    if (T == Table::residual) {
        const float *x = batch.queries + (long long)q * tab.dim;
        const float *c = tab.coarse + (long long)l * tab.dim;
        for (int u = threadIdx.x; u < tab.dim; u += blockDim.x) residual[u] = x[u] - c[u];
        __syncthreads();
    }
    float inv_scale, offset;
    fill_table<FP16>(table, tab.m * tab.ksub, tab.m,
                     [&](int e) { return table_entry<T>(tab, q, e, residual); }, reduce,
                     inv_scale, offset);
    const float base = (T == Table::residual ? 0.0f : batch.pair_key[item.pair]) + offset;
    __syncthreads();
    const int cols = batch.pair_cols[item.pair];
    const int end = min(cols, item.vector0 + kPqItemVectors);
    const long long first_row = batch.pair_base[item.pair];
    const long long out = batch.pair_out[item.pair];
    for (int r = item.vector0 + threadIdx.x; r < end; r += blockDim.x) {
        const uint8_t *row = codes + (first_row + r) * code_size;
        distances[out + r] = base + row_term1(row, term1_at) +
                             row_sum<FP16>(row, tab.m, tab.ksub, table) * inv_scale;
        if (rows) rows[out + r] = (int)(first_row + r);
    }
}

constexpr int kPqWarps = kPqThreads / 32;

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

// codebooks_by_codeword[(j * m + i) * dsub + t] = codebooks[(i * ksub + j) * dsub + t]:
// the order in which fill_swizzled reads them, so that its loads coalesce.
__global__ void pq_codebook_by_codeword_kernel(const float *codebooks, int m, int ksub, int dsub,
                                               float *out)
{
    const int total = m * ksub * dsub;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int t = e % dsub, ij = e / dsub, j = ij / m, i = ij % m;
        out[e] = codebooks[((long long)i * ksub + j) * dsub + t];
    }
}

// The table by codeword: entry (i, j) = scale * <x_i, codeword j of
// sub-quantizer i>, from the codebooks by codeword.  Consecutive threads take
// consecutive sub-quantizers of one codeword: their loads coalesce and their
// writes fall in different banks.
template <int M>
__device__ __forceinline__ void fill_swizzled(float *table, int ksub, int dsub, const float *x,
                                              const float *by_codeword, float scale)
{
    constexpr int W = swizzled_columns(M);
    for (int e = threadIdx.x; e < M * ksub; e += blockDim.x) {
        const int j = e / M, i = e % M;
        const float v = scaled_dot(x + i * dsub, by_codeword + (long long)e * dsub, dsub, scale);
#pragma unroll
        for (int col = i; col < W; col += M) table[j * W + col] = v;
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

// Fused scan: one block per query; out_keys / out_idx get its k best keys
// and arena rows (-1 past the candidates).  Each warp takes 32 rows at a
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
template <int K, bool FP16, int SWZ>
__global__ void __launch_bounds__(kPqThreads, SWZ > 0 ? 5 : 1)
pq_query_kernel(const __grid_constant__ PqQueryScan a)
{
    static_assert(SWZ == 0 || !FP16, "the table by codeword is fp32");
    extern __shared__ float pq_smem[];  // the table, then the warps' queues
    __shared__ float reduce[32];
    const int q = blockIdx.x;
    const float *x = a.queries + (long long)q * a.dim;
    const int m = a.m, ksub = a.ksub, dsub = a.dsub;
    const auto term3 = [&](int e) {
        return term3_entry(x, a.codebooks, ksub, dsub, a.term3_scale, e);
    };
    float inv_scale = 1.0f, offset = 0.0f;
    if constexpr (SWZ > 0)
        fill_swizzled<SWZ>(pq_smem, ksub, dsub, x, a.codebooks_by_codeword, a.term3_scale);
    else
        fill_table<FP16>(pq_smem, m * ksub, m, term3, reduce, inv_scale, offset);
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    WarpSelect<K> ws;
    ws.init(a.k, INFINITY, kEmptyIdx);
    for (int p = 0; p < a.nprobe; ++p) {
        const int64_t l = a.probes[(long long)q * a.nprobe + p];
        if (l < 0) continue;
        const int cols = (int)a.list_size[l];
        const long long first = a.list_offset[l];
        const float base = a.probe_key_sign * a.probe_keys[(long long)q * a.nprobe + p] + offset;
        // every lane of a warp takes the same trips: need_merge is warp-wide
        for (int r0 = warp * 32; r0 < cols; r0 += kPqThreads) {
            float key = INFINITY;
            int idx = kEmptyIdx;
            if (r0 + lane < cols) {
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
    if (warp != 0) return;
    for (int e = K + lane; e < kPqWarps * K; e += 32) {
        ws.add(qk[e], qv[e]);
        if (ws.need_merge()) merge_queue<SWZ>(ws);
    }
    merge_queue<SWZ>(ws);
    ws.write(a.out_keys + (long long)q * a.k, a.out_idx + (long long)q * a.k);
}

template <int K, bool FP16, int SWZ>
simil_status launch_query(const PqQueryScan &a, int nq, cudaStream_t st)
{
    const size_t table = SWZ > 0 ? (size_t)a.ksub * swizzled_columns(SWZ) * 4
                                 : (size_t)query_table_bytes(a.m * a.ksub, FP16);
    const size_t queues = (size_t)kPqWarps * K * 8;
    const size_t smem = table > queues ? table : queues;
    const auto kernel = pq_query_kernel<K, FP16, SWZ>;
    SML_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem));
    kernel<<<nq, kPqThreads, smem, st>>>(a);
    SML_LAUNCH_TRY("pq_query_kernel");
    return SIMIL_OK;
}

// The table by codeword (fp32, m a power of two from 4 to 64, k <= 64).
bool pq_swizzled(const sml_ivf_scan_args *a)
{
    const int64_t m = a->pq_m;
    return !a->lut_fp16 && a->k <= 64 && m >= 4 && m <= 64 && (m & (m - 1)) == 0;
}

template <int K>
simil_status launch_query_k(const PqQueryScan &a, bool fp16, bool swizzled, int nq,
                            cudaStream_t st)
{
    if constexpr (K <= 64) {
        if (swizzled) switch (a.m) {
                case 4: return launch_query<K, false, 4>(a, nq, st);
                case 8: return launch_query<K, false, 8>(a, nq, st);
                case 16: return launch_query<K, false, 16>(a, nq, st);
                case 32: return launch_query<K, false, 32>(a, nq, st);
                default: return launch_query<K, false, 64>(a, nq, st);
            }
    }
    return fp16 ? launch_query<K, true, 0>(a, nq, st) : launch_query<K, false, 0>(a, nq, st);
}

template <Table T, bool FP16>
simil_status launch_table(const PqBatch &batch, const TableArgs &tab, const uint8_t *codes,
                          int code_size, int term1_at, float *distances, int *rows,
                          cudaStream_t st)
{
    const size_t smem = (T == Table::residual ? (size_t)(tab.dim + 3) / 4 * 4 * 4 : 0) +
                        (size_t)tab.m * tab.ksub * (FP16 ? 2 : 4);
    const auto kernel = pq_distance_kernel<T, FP16>;
    SML_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem));
    kernel<<<batch.nitems, kPqThreads, smem, st>>>(batch, tab, codes, code_size, term1_at,
                                                   distances, rows);
    SML_LAUNCH_TRY("pq_distance_kernel");
    return SIMIL_OK;
}

template <Table T>
simil_status launch_precision(bool fp16, const PqBatch &batch, const TableArgs &tab,
                              const uint8_t *codes, int code_size, int term1_at,
                              float *distances, int *rows, cudaStream_t st)
{
    return fp16 ? launch_table<T, true>(batch, tab, codes, code_size, term1_at, distances, rows,
                                        st)
                : launch_table<T, false>(batch, tab, codes, code_size, term1_at, distances, rows,
                                         st);
}

Table table_kind(const sml_ivf_scan_args *a)
{
    return a->metric == SIMIL_METRIC_L2 && a->pq_term1_at == 0 ? Table::residual : Table::term3;
}

float term3_scale(const sml_ivf_scan_args *a) { return a->metric == SIMIL_METRIC_L2 ? -2.0f : -1.0f; }

// Encoding: one thread per (vector, sub-quantizer), 256 vectors per block,
// grid (vector blocks, m).  For sub-vectors of up to 32 floats (MAXD >= dsub,
// unused slots predicated off) the block first writes its vectors' residual
// slices into shared memory with loads that walk each row's slice in order,
// and each thread then keeps its own in registers.  A thread reading its row
// straight from global memory at a stride of dim floats touches one cache
// line per lane, which made the encoder L1-bound at PQ16; wider slices
// (MAXD = 0) fill whole lines and are read in place.
// The codebook, read by every lane at the same address, is a broadcast.  The
// arithmetic is the CPU's: r = x - c, then the sum of (r - q)^2.
constexpr int kEncodeRows = 256;

template <int MAXD>
__global__ void pq_encode_kernel(const float *x, int n, int dim, const int64_t *lists,
                                 const float *coarse, const float *codebooks, int ksub, int dsub,
                                 bool cached, uint8_t *codes, int code_size)
{
    extern __shared__ float smem[];
    const int i = blockIdx.y;
    const int stride = dsub | 1;  // odd: lanes reading their rows hit distinct banks
    const int staged = MAXD > 0 ? kEncodeRows * stride : 0;
    const float *cb = codebooks + (long long)i * ksub * dsub;
    if (cached) {
        float *book = smem + staged;
        for (int e = threadIdx.x; e < ksub * dsub; e += blockDim.x) book[e] = cb[e];
        cb = book;
    }
    const long long r0 = (long long)blockIdx.x * kEncodeRows;
    const int rows = n - r0 < kEncodeRows ? (int)(n - r0) : kEncodeRows;
    const long long r = r0 + threadIdx.x;
    float v[MAXD > 0 ? MAXD : 1];
    if (MAXD > 0) {
        for (int e = threadIdx.x; e < rows * dsub; e += blockDim.x) {
            const int row = e / dsub, u = e - row * dsub;
            const long long at = (long long)i * dsub + u;
            smem[row * stride + u] = x[(r0 + row) * dim + at] - coarse[lists[r0 + row] * dim + at];
        }
        __syncthreads();
        if ((int)threadIdx.x >= rows) return;
#pragma unroll
        for (int u = 0; u < MAXD; ++u) v[u] = u < dsub ? smem[threadIdx.x * stride + u] : 0.0f;
    } else {
        if (cached) __syncthreads();
        if ((int)threadIdx.x >= rows) return;
    }
    const float *xr = x + r * dim + (long long)i * dsub;
    const float *cr = coarse + lists[r] * dim + (long long)i * dsub;
    float best = FLT_MAX;
    int arg = 0;
    for (int j = 0; j < ksub; ++j) {
        const float *q = cb + j * dsub;
        float d = 0;
        if (MAXD > 0) {
#pragma unroll
            for (int u = 0; u < MAXD; ++u)
                if (u < dsub) {
                    const float e = v[u] - q[u];
                    d = fmaf(e, e, d);
                }
        } else {
            for (int u = 0; u < dsub; ++u) {
                const float e = (xr[u] - cr[u]) - q[u];
                d = fmaf(e, e, d);
            }
        }
        if (d < best) {
            best = d;
            arg = j;
        }
    }
    codes[r * code_size + i] = (uint8_t)arg;
}

template <int MAXD>
simil_status launch_encode(const sml_pq_encode_args *a, const float *x, const int64_t *lists,
                           uint8_t *codes, cudaStream_t st)
{
    const size_t staged = MAXD > 0 ? sizeof(float) * kEncodeRows * (size_t)(a->dsub | 1) : 0;
    const size_t book = sizeof(float) * (size_t)(a->ksub * a->dsub);
    const bool cached = staged + book <= 48 * 1024;
    const dim3 grid((unsigned)((a->n + kEncodeRows - 1) / kEncodeRows), (unsigned)a->m);
    pq_encode_kernel<MAXD><<<grid, kEncodeRows, staged + (cached ? book : 0), st>>>(
        x, (int)a->n, (int)a->dim, lists, a->coarse, a->codebooks, (int)a->ksub, (int)a->dsub,
        cached, codes, (int)a->code_size);
    SML_LAUNCH_TRY("pq_encode_kernel");
    return SIMIL_OK;
}

simil_status encode_locked(Device *dev, const sml_pq_encode_args *a)
{
    cudaStream_t st = dev->stream[0];
    const bool x_on_device = is_device_pointer(a->x);
    const size_t x_bytes = x_on_device ? 0 : sizeof(float) * (size_t)(a->n * a->dim);
    const size_t l_bytes = sizeof(int64_t) * (size_t)a->n;
    const size_t c_bytes = a->code_size * (size_t)a->n;
    char *ws;
    SML_TRY(device_workspace(dev, x_bytes + l_bytes + c_bytes + 512,
                             reinterpret_cast<void **>(&ws)));
    const float *d_x = x_on_device ? a->x : reinterpret_cast<float *>(ws);
    int64_t *d_lists = reinterpret_cast<int64_t *>(ws + (x_bytes + 255) / 256 * 256);
    uint8_t *d_codes = reinterpret_cast<uint8_t *>(ws + (x_bytes + 255) / 256 * 256 +
                                                   (l_bytes + 255) / 256 * 256);
    SML_TRY(device_join_caller(dev));
    if (!x_on_device)
        SML_CUDA_TRY(cudaMemcpyAsync(ws, a->x, x_bytes, cudaMemcpyHostToDevice, st));
    SML_CUDA_TRY(cudaMemcpyAsync(d_lists, a->lists, l_bytes, cudaMemcpyHostToDevice, st));
    SML_CUDA_TRY(cudaMemsetAsync(d_codes, 0, c_bytes, st));
    const int d = (int)a->dsub;
    simil_status s = d <= 4    ? launch_encode<4>(a, d_x, d_lists, d_codes, st)
                     : d <= 8  ? launch_encode<8>(a, d_x, d_lists, d_codes, st)
                     : d <= 16 ? launch_encode<16>(a, d_x, d_lists, d_codes, st)
                     : d <= 32 ? launch_encode<32>(a, d_x, d_lists, d_codes, st)
                               : launch_encode<0>(a, d_x, d_lists, d_codes, st);
    SML_TRY(s);
    SML_CUDA_TRY(cudaMemcpyAsync(a->codes, d_codes, c_bytes, cudaMemcpyDeviceToHost, st));
    SML_CUDA_TRY(cudaStreamSynchronize(st));
    return SIMIL_OK;
}

}  // namespace

size_t pq_scratch_floats(const sml_ivf_scan_args *a, int nq)
{
    return table_kind(a) == Table::residual ? 1 : (size_t)nq * a->pq_m * a->pq_ksub;
}

simil_status launch_pq_distances(const sml_ivf_scan_args *a, const PqBatch &batch,
                                 float *scratch, float *distances, int *rows, cudaStream_t st)
{
    const Table kind = table_kind(a);
    const int m = (int)a->pq_m, ksub = (int)a->pq_ksub, dsub = (int)a->pq_dsub;
    if (kind == Table::term3) {
        pq_term3_kernel<<<batch.nq, 256, 0, st>>>(batch.queries, (int)a->dim, a->pq_codebooks, m,
                                                   ksub, dsub, term3_scale(a), scratch);
        SML_LAUNCH_TRY("pq_term3_kernel");
    }
    const TableArgs tab{scratch, a->coarse, a->pq_codebooks, m, ksub, dsub, (int)a->dim};
    const uint8_t *codes = static_cast<const uint8_t *>(a->codes);
    const int cs = (int)a->code_size, t1 = (int)a->pq_term1_at;
    const bool fp16 = a->lut_fp16 != 0;
    if (kind == Table::term3)
        return launch_precision<Table::term3>(fp16, batch, tab, codes, cs, t1, distances, rows, st);
    return launch_precision<Table::residual>(fp16, batch, tab, codes, cs, t1, distances, rows, st);
}

size_t pq_fused_scratch_bytes(const sml_ivf_scan_args *a)
{
    return pq_swizzled(a) ? sizeof(float) * (size_t)(a->pq_m * a->pq_ksub * a->pq_dsub) : 0;
}

bool pq_fused(const sml_ivf_scan_args *a)
{
    return table_kind(a) == Table::term3 && a->k <= kPqFusedMaxK;
}

simil_status launch_pq_fused(const sml_ivf_scan_args *a, PqQueryScan scan, int nq,
                             cudaStream_t st)
{
    scan.dim = (int)a->dim;
    scan.codebooks = a->pq_codebooks;
    scan.m = (int)a->pq_m;
    scan.ksub = (int)a->pq_ksub;
    scan.dsub = (int)a->pq_dsub;
    scan.term3_scale = term3_scale(a);
    scan.codes = static_cast<const uint8_t *>(a->codes);
    scan.code_size = (int)a->code_size;
    scan.term1_at = (int)a->pq_term1_at;
    scan.k = (int)a->k;
    const bool fp16 = a->lut_fp16 != 0, swizzled = pq_swizzled(a);
    if (nq == 0) return SIMIL_OK;
    if (swizzled) {
        pq_codebook_by_codeword_kernel<<<32, 256, 0, st>>>(scan.codebooks, scan.m, scan.ksub,
                                                           scan.dsub, scan.codebooks_by_codeword);
        SML_LAUNCH_TRY("pq_codebook_by_codeword_kernel");
    }
    if (a->k <= 32) return launch_query_k<32>(scan, fp16, swizzled, nq, st);
    if (a->k <= 64) return launch_query_k<64>(scan, fp16, swizzled, nq, st);
    if (a->k <= 128) return launch_query_k<128>(scan, fp16, swizzled, nq, st);
    return launch_query_k<kPqFusedMaxK>(scan, fp16, swizzled, nq, st);
}

simil_status cuda_pq_encode(sml_backend *b, const sml_pq_encode_args *a)
{
    if (a->n == 0) return SIMIL_OK;
    Device *dev = device_of(b);
    pthread_mutex_lock(&dev->lock);
    simil_status s = cuda_status(cudaSetDevice(dev->gpu), "cudaSetDevice", __FILE__, __LINE__);
    if (s == SIMIL_OK) s = encode_locked(dev, a);
    pthread_mutex_unlock(&dev->lock);
    return s;
}

}  // namespace sml
