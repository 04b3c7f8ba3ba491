// cuda_kernels.cu: small kernels around search (see cuda_kernels.cuh).
#include <assert.h>
#include <math.h>
#include <string.h>

#include "cuda/cuda_kernels.cuh"
#include "cuda/cuda_util.cuh"
#include "cuda/knn_device.cuh"

namespace sml {
namespace {

// One warp per row.
__global__ void row_norms_kernel(long long n, int dim, const float *x, float *norms)
{
    const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= n) return;
    const float *r = x + row * dim;
    float s = 0;
    for (int j = threadIdx.x & 31; j < dim; j += 32) s = fmaf(r[j], r[j], s);
    s = warp_sum(s);
    if ((threadIdx.x & 31) == 0) norms[row] = s;
}

__global__ void move_rows_kernel(unsigned *dst, const int64_t *dst_rows, const unsigned *src,
                                 const int64_t *src_rows, long long words, long long n)
{
    const long long total = n * words;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / words, w = i % words;
        const long long to = dst_rows ? dst_rows[r] : r, from = src_rows ? src_rows[r] : r;
        dst[to * words + w] = src[from * words + w];
    }
}

// One warp per row.
// Row r of x (any memory the device reads, the kernel's arguments too) to
// fp16 as launch_scale_to_half describes; one warp, lane = threadIdx.x % 32.
__device__ __forceinline__ void scale_row_to_half(const float *r, int dim, long long row,
                                                  __half *out, float *inv_scale, float *norms,
                                                  float *max_norm)
{
    const int lane = threadIdx.x & 31;
    const float norm = warp_norm(r, dim);
    const float scale = half_scale(norm);
    for (int j = lane; j < dim; j += 32) out[row * dim + j] = __float2half_rn(r[j] * scale);
    if (lane == 0) {
        inv_scale[row] = 1.0f / scale;
        if (norms) norms[row] = norm;
        // norms are non-negative, so their bit patterns order like the values
        if (max_norm) atomicMax(reinterpret_cast<int *>(max_norm), __float_as_int(norm));
    }
}

__global__ void scale_to_half_kernel(long long n, int dim, const float *x, __half *out,
                                     float *inv_scale, float *norms, float *max_norm)
{
    const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= n) return;
    scale_row_to_half(x + row * dim, dim, row, out, inv_scale, norms, max_norm);
}

// The rows sent as the launch's arguments: one warp per row, which it also
// writes to x in fp32.
__global__ void scale_sent_to_half_kernel(const __grid_constant__ SentRows a, float *x, __half *out,
                                          float *inv_scale, float *norms)
{
    const int row = (int)(((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
    if (row >= a.n) return;
    const float *r = a.x + (long long)row * a.dim;
    for (int j = threadIdx.x & 31; j < a.dim; j += 32) x[(long long)row * a.dim + j] = r[j];
    scale_row_to_half(r, a.dim, row, out, inv_scale, norms, nullptr);
}

// One block of 128 threads per query; each warp takes candidates in turn.
__global__ void rerank_kernel(int dim, const float *queries, const float *base, const int *idx,
                              int ncand, bool l2, float *keys)
{
    const int q = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float *x = queries + (long long)q * dim;
    for (int c = warp; c < ncand; c += blockDim.x >> 5) {
        const int i = idx[(long long)q * ncand + c];
        const float key = i >= 0 ? exact_key(x, base + (long long)i * dim, dim, l2) : INFINITY;
        if (lane == 0) keys[(long long)q * ncand + c] = key;
    }
}

// One thread per query row (finish_row), or with Warp one warp per row
// (finish_row_warp): for a few rows, a thread's k steps one after the other
// are the whole kernel's time; for many, threads on consecutive rows read
// and write more of each memory sector.
template <bool Warp>
__global__ void finish_kernel(int nq, int k, const float *keys, const int *pos, bool l2,
                              const float *query_norms, const int64_t *ids, float *distances,
                              int64_t *labels)
{
    const int q = (blockIdx.x * blockDim.x + threadIdx.x) >> (Warp ? 5 : 0);
    if (q >= nq) return;  // with Warp, the whole warp leaves together
    const long long o = (long long)q * k;
    const float *qn = query_norms ? query_norms + q : nullptr;
    if (Warp)
        finish_row_warp(k, keys + o, pos + o, l2, qn, ids, distances + o, labels + o);
    else
        finish_row(k, keys + o, pos + o, l2, qn, ids, distances + o, labels + o);
}

unsigned blocks_for(long long threads, int per_block)
{
    long long b = (threads + per_block - 1) / per_block;
    return (unsigned)(b < 1 ? 1 : b);
}

}  // namespace

simil_status launch_row_norms(long long n, int dim, const float *x, float *norms, cudaStream_t s)
{
    if (n == 0) return SIMIL_OK;
    row_norms_kernel<<<blocks_for(n * 32, 256), 256, 0, s>>>(n, dim, x, norms);
    SML_LAUNCH_TRY("row_norms_kernel");
    return SIMIL_OK;
}

simil_status launch_move_rows(void *dst, const int64_t *dst_rows, const void *src,
                              const int64_t *src_rows, size_t row_bytes, long long n,
                              cudaStream_t s)
{
    if (n == 0) return SIMIL_OK;
    const long long words = (long long)(row_bytes / 4);
    unsigned blocks = blocks_for(n * words, 256);
    if (blocks > 65536) blocks = 65536;
    move_rows_kernel<<<blocks, 256, 0, s>>>(static_cast<unsigned *>(dst), dst_rows,
                                            static_cast<const unsigned *>(src), src_rows, words,
                                            n);
    SML_LAUNCH_TRY("move_rows_kernel");
    return SIMIL_OK;
}

simil_status launch_scale_to_half(long long n, int dim, const float *x, __half *out,
                                  float *inv_scale, float *norms, float *max_norm,
                                  cudaStream_t s)
{
    if (n == 0) return SIMIL_OK;
    scale_to_half_kernel<<<blocks_for(n * 32, 256), 256, 0, s>>>(n, dim, x, out, inv_scale,
                                                                  norms, max_norm);
    SML_LAUNCH_TRY("scale_to_half_kernel");
    return SIMIL_OK;
}

bool sent_rows_fit(long long n, int dim) { return n * dim <= SentRows::kFloats; }

simil_status launch_scale_sent_to_half(int n, int dim, const float *host_x, float *x, __half *out,
                                       float *inv_scale, float *norms, cudaStream_t s)
{
    assert(sent_rows_fit(n, dim));
    if (n == 0) return SIMIL_OK;
    SentRows a;
    a.n = n;
    a.dim = dim;
    memcpy(a.x, host_x, sizeof(float) * (size_t)n * (size_t)dim);
    scale_sent_to_half_kernel<<<blocks_for((long long)n * 32, 256), 256, 0, s>>>(a, x, out,
                                                                                inv_scale, norms);
    SML_LAUNCH_TRY("scale_sent_to_half_kernel");
    return SIMIL_OK;
}

simil_status launch_rerank(int nq, int dim, const float *queries, const float *base,
                           const int *idx, int ncand, bool l2, float *keys, cudaStream_t s)
{
    if (nq == 0) return SIMIL_OK;
    rerank_kernel<<<nq, 128, 0, s>>>(dim, queries, base, idx, ncand, l2, keys);
    SML_LAUNCH_TRY("rerank_kernel");
    return SIMIL_OK;
}

simil_status launch_finish(int nq, int k, const float *keys, const int *pos, bool l2,
                           const float *query_norms, const int64_t *ids, float *distances,
                           int64_t *labels, cudaStream_t s)
{
    if (nq == 0) return SIMIL_OK;
    if (nq <= kFinishWarpRows)
        finish_kernel<true><<<blocks_for(32LL * nq, 128), 128, 0, s>>>(nq, k, keys, pos, l2,
                                                                        query_norms, ids,
                                                                        distances, labels);
    else
        finish_kernel<false><<<blocks_for(nq, 128), 128, 0, s>>>(nq, k, keys, pos, l2,
                                                                  query_norms, ids, distances,
                                                                  labels);
    SML_LAUNCH_TRY("finish_kernel");
    return SIMIL_OK;
}

}  // namespace sml
