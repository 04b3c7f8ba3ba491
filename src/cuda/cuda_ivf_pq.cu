// cuda_ivf_pq.cu: IVF-PQ on the GPU: encoding residuals, and the distances
// of a scan through lookup tables in shared memory (the GPU paper, IVFADC).
//
// Scan: one block of 256 threads per (query, list) pair and chunk of up to
// kPqItemVectors of the list's vectors.  The block first builds the pair's
// m x ksub table in shared memory, then each thread adds up m entries per code
// for its vectors.  Tables are
//   precomputed (L2): term 1 of the list + term 3 of the query, plus term 2,
//   IP:               term 3 of the query (-<x_i, q_ij>), plus -<x, c>,
//   residual (L2):    ||(x - c)_i - q_ij||^2,
// in fp32, or in fp16 where the table is large: then the block finds the
// table's minimum and range, stores (v - min) * s with s a power of two that
// keeps every entry under 2^14, and adds the entries up in fp32, so raw data
// with large distances cannot overflow (where Faiss's fp16 tables do).
//
// Encode: one thread per (vector, sub-quantizer), codebook in shared memory
// when it fits, nearest codeword by exhaustive search.
#include <cuda_fp16.h>
#include <float.h>

#include "core/alloc.h"
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_ivf.cuh"
#include "cuda/cuda_util.cuh"

namespace sml {
namespace {

enum class Table { precomputed, term3_only, residual };

constexpr int kPqThreads = 256;

// term3[q][i][j] = scale * <x_i, q_ij>.  One block per query.
__global__ void pq_term3_kernel(const float *queries, int dim, const float *codebooks, int m,
                                int ksub, int dsub, float scale, float *term3)
{
    const long long q = blockIdx.x;
    const float *x = queries + q * dim;
    for (int e = threadIdx.x; e < m * ksub; e += blockDim.x) {
        const int i = e / ksub;
        const float *c = codebooks + (long long)e * dsub;
        float s = 0;
        for (int t = 0; t < dsub; ++t) s = fmaf(x[i * dsub + t], c[t], s);
        term3[q * m * ksub + e] = scale * s;
    }
}

struct TableArgs {
    const float *term1;   // nlist x m x ksub
    const float *term3;   // nq x m x ksub
    const float *coarse;  // nlist x dim
    const float *codebooks;
    int m, ksub, dsub, dim;
};

template <Table T>
__device__ __forceinline__ float table_entry(const TableArgs &t, int q, int l, int e,
                                             const float *residual)
{
    const long long per = (long long)t.m * t.ksub;
    if (T == Table::precomputed) return t.term1[l * per + e] + t.term3[q * per + e];
    if (T == Table::term3_only) return t.term3[q * per + e];
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

template <Table T, bool FP16>
__global__ void __launch_bounds__(kPqThreads)
pq_distance_kernel(const PqBatch batch, const TableArgs tab, const uint8_t *codes,
                   int code_size, float *distances, int *rows)
{
    extern __shared__ float pq_smem[];
    __shared__ float reduce[32];
    const PqItem item = batch.items[blockIdx.x];
    const int q = batch.pair_query[item.pair], l = batch.pair_list[item.pair];
    const int entries = tab.m * tab.ksub;
    float *residual = pq_smem;  // dim floats (residual tables only)
    void *table = pq_smem + (T == Table::residual ? (tab.dim + 3) / 4 * 4 : 0);
    if (T == Table::residual) {
        const float *x = batch.queries + (long long)q * tab.dim;
        const float *c = tab.coarse + (long long)l * tab.dim;
        for (int u = threadIdx.x; u < tab.dim; u += blockDim.x) residual[u] = x[u] - c[u];
        __syncthreads();
    }
    float base = T == Table::residual ? 0.0f : batch.pair_key[item.pair];
    float inv_scale = 1.0f;
    if (!FP16) {
        float *lut = static_cast<float *>(table);
        for (int e = threadIdx.x; e < entries; e += blockDim.x)
            lut[e] = table_entry<T>(tab, q, l, e, residual);
    } else {
        float lo = FLT_MAX, hi = -FLT_MAX;
        for (int e = threadIdx.x; e < entries; e += blockDim.x) {
            const float v = table_entry<T>(tab, q, l, e, residual);
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
            lut[e] = __float2half_rn((table_entry<T>(tab, q, l, e, residual) - lo) * scale);
        base += tab.m * lo;
        inv_scale = 1.0f / scale;
    }
    __syncthreads();
    const int cols = batch.pair_cols[item.pair];
    const int end = min(cols, item.vector0 + kPqItemVectors);
    const long long first_row = batch.pair_base[item.pair];
    const long long out = batch.pair_out[item.pair];
    for (int r = item.vector0 + threadIdx.x; r < end; r += blockDim.x) {
        const uint32_t *word = reinterpret_cast<const uint32_t *>(codes + (first_row + r) * code_size);
        float acc = 0;
        for (int i = 0; i < tab.m; i += 4) {
            const uint32_t w = word[i / 4];
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                if (i + b >= tab.m) break;
                const int e = (i + b) * tab.ksub + ((w >> (8 * b)) & 0xff);
                acc += FP16 ? __half2float(static_cast<const __half *>(table)[e])
                            : static_cast<const float *>(table)[e];
            }
        }
        distances[out + r] = base + acc * inv_scale;
        if (rows) rows[out + r] = (int)(first_row + r);
    }
}

template <Table T, bool FP16>
simil_status launch_table(const PqBatch &batch, const TableArgs &tab, const uint8_t *codes,
                          int code_size, float *distances, int *rows, cudaStream_t st)
{
    const size_t smem = (T == Table::residual ? (size_t)(tab.dim + 3) / 4 * 4 * 4 : 0) +
                        (size_t)tab.m * tab.ksub * (FP16 ? 2 : 4);
    const auto kernel = pq_distance_kernel<T, FP16>;
    SML_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem));
    kernel<<<batch.nitems, kPqThreads, smem, st>>>(batch, tab, codes, code_size, distances, rows);
    SML_LAUNCH_TRY("pq_distance_kernel");
    return SIMIL_OK;
}

template <Table T>
simil_status launch_precision(bool fp16, const PqBatch &batch, const TableArgs &tab,
                              const uint8_t *codes, int code_size, float *distances, int *rows,
                              cudaStream_t st)
{
    return fp16 ? launch_table<T, true>(batch, tab, codes, code_size, distances, rows, st)
                : launch_table<T, false>(batch, tab, codes, code_size, distances, rows, st);
}

Table table_kind(const sml_ivf_scan_args *a)
{
    if (a->metric != SIMIL_METRIC_L2) return Table::term3_only;
    return a->pq_term1 ? Table::precomputed : Table::residual;
}

// One thread per (vector, sub-quantizer); grid (vector blocks, m).
__global__ void pq_encode_kernel(const float *x, int n, int dim, const int64_t *lists,
                                 const float *coarse, const float *codebooks, int ksub, int dsub,
                                 bool cached, uint8_t *codes, int code_size)
{
    extern __shared__ float book[];
    const int i = blockIdx.y;
    const float *cb = codebooks + (long long)i * ksub * dsub;
    if (cached) {
        for (int e = threadIdx.x; e < ksub * dsub; e += blockDim.x) book[e] = cb[e];
        __syncthreads();
        cb = book;
    }
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    const float *v = x + (long long)r * dim + i * dsub;
    const float *c = coarse + lists[r] * dim + i * dsub;
    float best = FLT_MAX;
    int arg = 0;
    for (int j = 0; j < ksub; ++j) {
        float d = 0;
        for (int u = 0; u < dsub; ++u) {
            const float e = v[u] - c[u] - cb[j * dsub + u];
            d = fmaf(e, e, d);
        }
        if (d < best) {
            best = d;
            arg = j;
        }
    }
    codes[(long long)r * code_size + i] = (uint8_t)arg;
}

simil_status encode_locked(Device *dev, const sml_pq_encode_args *a)
{
    cudaStream_t st = dev->stream[0];
    const size_t x_bytes = sizeof(float) * (size_t)(a->n * a->dim);
    const size_t l_bytes = sizeof(int64_t) * (size_t)a->n;
    const size_t c_bytes = a->code_size * (size_t)a->n;
    char *ws;
    SML_TRY(device_workspace(dev, x_bytes + l_bytes + c_bytes + 512,
                             reinterpret_cast<void **>(&ws)));
    float *d_x = reinterpret_cast<float *>(ws);
    int64_t *d_lists = reinterpret_cast<int64_t *>(ws + (x_bytes + 255) / 256 * 256);
    uint8_t *d_codes = reinterpret_cast<uint8_t *>(ws + (x_bytes + 255) / 256 * 256 +
                                                   (l_bytes + 255) / 256 * 256);
    SML_CUDA_TRY(cudaMemcpyAsync(d_x, a->x, x_bytes, cudaMemcpyHostToDevice, st));
    SML_CUDA_TRY(cudaMemcpyAsync(d_lists, a->lists, l_bytes, cudaMemcpyHostToDevice, st));
    SML_CUDA_TRY(cudaMemsetAsync(d_codes, 0, c_bytes, st));
    const size_t book = sizeof(float) * (size_t)(a->ksub * a->dsub);
    const bool cached = book <= 48 * 1024;
    const dim3 grid((unsigned)((a->n + 255) / 256), (unsigned)a->m);
    pq_encode_kernel<<<grid, 256, cached ? book : 0, st>>>(
        d_x, (int)a->n, (int)a->dim, d_lists, a->coarse, a->codebooks, (int)a->ksub,
        (int)a->dsub, cached, d_codes, (int)a->code_size);
    SML_LAUNCH_TRY("pq_encode_kernel");
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
    if (kind != Table::residual) {
        const float scale = a->metric == SIMIL_METRIC_L2 ? -2.0f : -1.0f;
        pq_term3_kernel<<<batch.nq, 256, 0, st>>>(batch.queries, (int)a->dim, a->pq_codebooks, m,
                                                   ksub, dsub, scale, scratch);
        SML_LAUNCH_TRY("pq_term3_kernel");
    }
    const TableArgs tab{a->pq_term1, scratch, a->coarse, a->pq_codebooks, m, ksub, dsub,
                        (int)a->dim};
    const uint8_t *codes = static_cast<const uint8_t *>(a->codes);
    const int cs = (int)a->code_size;
    const bool fp16 = a->lut_fp16 != 0;
    switch (kind) {
    case Table::precomputed:
        return launch_precision<Table::precomputed>(fp16, batch, tab, codes, cs, distances, rows, st);
    case Table::term3_only:
        return launch_precision<Table::term3_only>(fp16, batch, tab, codes, cs, distances, rows, st);
    default:
        return launch_precision<Table::residual>(fp16, batch, tab, codes, cs, distances, rows, st);
    }
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
