// cuda_xfbq_encode.cu: the XFBQ codes of vectors on the GPU (the backend op
// xfbq_encode): one thread per vector and word, the host encoder's
// arithmetic from core/xfbq_code.h, bit for bit; on the host they were a
// noticeable share of a search (docs/benchmarks.md, "XFBQ").
#include "core/xfbq_code.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_util.cuh"

namespace sml {
namespace {

// One thread per (vector, word): the vector's scale, then its word of every
// plane, with the host's arithmetic (core/xfbq_code.h).
__global__ void xfbq_encode_kernel(const sml_xfbq_encode_args a)
{
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= a.n * a.words) return;
    const long long r = t / a.words;
    const float *row = a.x + r * a.dim;
    const float scale = sml_xfbq_row_scale(row, a.dim, a.alpha, a.normalize);
    sml_xfbq_encode_word(row, a.dim, scale, a.bits, a.words, t - r * a.words,
                         a.codes + r * a.bits * a.words);
}

// RR's rotation of rows, y = x r, as a tiled product: a block of 128
// threads takes 32 rows and 128 components, a thread 4 rows by 8 components
// (4 + 64 apart), each a chain over i in order as
// sml_xfbq_rotated_component's, in registers.  Pieces of 16 i of the rows and
// of r go through shared memory, the next piece's loads in flight while a
// piece runs.  Zeros pad the last piece: fma(0, 0, acc) is acc, as a chain
// from +0 never holds -0.  2,048 queries of 784 dimensions: 0.13 ms (H200,
// ncu at base clocks), where two components of 16 rows a thread with r read
// from global memory in the loop took 0.20 ms, its loads' latency exposed.
constexpr int kRotRows = 32, kRotCols = 128, kRotStep = 16, kRotThreads = 128;

__global__ void __launch_bounds__(kRotThreads) xfbq_rotate_kernel(const float *x, const float *r,
                                                                  int dim, long long n, float *y)
{
    // xs[i][row] (rows padded to 36: two-way conflicts at most on the stores)
    __shared__ __align__(16) float xs[kRotStep][kRotRows + 4];
    __shared__ __align__(16) float rs[kRotStep][kRotCols];
    const int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;
    const int col0 = blockIdx.x * kRotCols;
    const long long q0 = (long long)blockIdx.y * kRotRows;
    // this thread's loads of a piece: 4 of x (row e / 16, i e % 16), 16 of r (i u, column tid)
    float px[4], pr[kRotStep];
    auto load = [&](int i0) {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int e = tid + u * kRotThreads, row = e / kRotStep, i = i0 + e % kRotStep;
            px[u] = q0 + row < n && i < dim ? x[(q0 + row) * dim + i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kRotStep; ++u) {
            const int i = i0 + u, j = col0 + tid;
            pr[u] = i < dim && j < dim ? r[(long long)i * dim + j] : 0.0f;
        }
    };
    float acc[4][8];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[a][c] = 0.0f;
    load(0);
    for (int i0 = 0; i0 < dim; i0 += kRotStep) {
        __syncthreads();  // the last piece's readers are done
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int e = tid + u * kRotThreads;
            xs[e % kRotStep][e / kRotStep] = px[u];
        }
#pragma unroll
        for (int u = 0; u < kRotStep; ++u) rs[u][tid] = pr[u];
        __syncthreads();
        if (i0 + kRotStep < dim) load(i0 + kRotStep);
#pragma unroll
        for (int i = 0; i < kRotStep; ++i) {
            const float4 v = *reinterpret_cast<const float4 *>(&xs[i][4 * tr]);
            const float4 b0 = *reinterpret_cast<const float4 *>(&rs[i][4 * tc]);
            const float4 b1 = *reinterpret_cast<const float4 *>(&rs[i][64 + 4 * tc]);
            const float va[4] = {v.x, v.y, v.z, v.w};
            const float vb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int c = 0; c < 8; ++c) acc[a][c] = fmaf(va[a], vb[c], acc[a][c]);
        }
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        const long long q = q0 + 4 * tr + a;
        if (q >= n) continue;
#pragma unroll
        for (int c = 0; c < 8; ++c) {
            const int j = col0 + (c < 4 ? 4 * tc + c : 64 + 4 * tc + c - 4);
            if (j < dim) y[q * dim + j] = acc[a][c];
        }
    }
}

}  // namespace

simil_status launch_xfbq_rotate(const float *x, const float *r, int dim, long long n, float *y,
                                cudaStream_t st)
{
    if (n == 0) return SIMIL_OK;
    const dim3 grid((unsigned)((dim + kRotCols - 1) / kRotCols),
                    (unsigned)((n + kRotRows - 1) / kRotRows));
    xfbq_rotate_kernel<<<grid, kRotThreads, 0, st>>>(x, r, dim, n, y);
    return cuda_status(cudaGetLastError(), "xfbq_rotate_kernel", __FILE__, __LINE__);
}

simil_status launch_xfbq_encode(const sml_xfbq_encode_args *a, cudaStream_t st)
{
    const long long threads = a->n * a->words;
    if (threads == 0) return SIMIL_OK;
    xfbq_encode_kernel<<<(unsigned)((threads + 255) / 256), 256, 0, st>>>(*a);
    return cuda_status(cudaGetLastError(), "xfbq_encode_kernel", __FILE__, __LINE__);
}

simil_status cuda_xfbq_encode(sml_backend *be, const sml_xfbq_encode_args *a)
{
    if (a->n * a->words == 0) return SIMIL_OK;
    Device *dev = device_of(be);
    pthread_mutex_lock(&dev->lock);
    simil_status s = cuda_status(cudaSetDevice(dev->gpu), "cudaSetDevice", __FILE__, __LINE__);
    if (s == SIMIL_OK) s = device_join_caller(dev);
    if (s == SIMIL_OK) s = launch_xfbq_encode(a, dev->stream[0]);
    if (s == SIMIL_OK)
        s = cuda_status(cudaStreamSynchronize(dev->stream[0]), "XFBQ codes", __FILE__, __LINE__);
    pthread_mutex_unlock(&dev->lock);
    return s;
}

}  // namespace sml

extern "C" simil_status sml_cuda_xfbq_rotate(const float *d_x, const float *d_r, int64_t dim,
                                             int64_t n, float *d_y)
{
    SML_RETURN_IF(dim < 1 || dim >= INT32_MAX || n < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "XFBQ rotation: dim=%lld n=%lld", (long long)dim, (long long)n);
    SML_TRY(sml::launch_xfbq_rotate(d_x, d_r, (int)dim, n, d_y, 0));
    SML_CUDA_TRY(cudaDeviceSynchronize());
    return SIMIL_OK;
}
