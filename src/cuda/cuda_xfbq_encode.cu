// cuda_xfbq_encode.cu: the XFBQ codes of vectors on the GPU (the backend op
// xfbq_encode): one thread per vector and word, the host encoder's
// arithmetic from core/xfbq_code.h, bit for bit; on the host they were a
// noticeable share of a search (docs/benchmarks.md, "XFBQ").
#include "core/xfbq_code.h"
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

// RR's rotation of rows: a block takes 16 rows and 128 components; each
// thread keeps its component of the 16 rows in registers, so each element of
// r is read once per 16 rows, and runs each chain over i in order (the
// rows' pieces of 64 components staged in shared memory between).
constexpr int kRotRows = 16, kRotCols = 128, kRotStep = 64;

__global__ void __launch_bounds__(kRotCols) xfbq_rotate_kernel(const float *x, const float *r,
                                                               int dim, long long n, float *y)
{
    __shared__ float xs[kRotRows][kRotStep];
    const int j = blockIdx.x * kRotCols + threadIdx.x;
    const long long q0 = (long long)blockIdx.y * kRotRows;
    float acc[kRotRows];
#pragma unroll
    for (int t = 0; t < kRotRows; ++t) acc[t] = 0.0f;
    for (int i0 = 0; i0 < dim; i0 += kRotStep) {
        __syncthreads();  // the last piece's readers are done
        for (int e = threadIdx.x; e < kRotRows * kRotStep; e += kRotCols) {
            const int t = e / kRotStep, i = i0 + e % kRotStep;
            xs[t][e % kRotStep] = q0 + t < n && i < dim ? x[(q0 + t) * dim + i] : 0.0f;
        }
        __syncthreads();
        if (j < dim) {
            const int len = min(kRotStep, dim - i0);
            for (int i = 0; i < len; ++i) {
                const float rij = r[(long long)(i0 + i) * dim + j];
#pragma unroll
                for (int t = 0; t < kRotRows; ++t) acc[t] = fmaf(xs[t][i], rij, acc[t]);
            }
        }
    }
    if (j < dim)
#pragma unroll
        for (int t = 0; t < kRotRows; ++t)
            if (q0 + t < n) y[(q0 + t) * dim + j] = acc[t];
}

}  // namespace

simil_status launch_xfbq_rotate(const float *x, const float *r, int dim, long long n, float *y,
                                cudaStream_t st)
{
    if (n == 0) return SIMIL_OK;
    const dim3 grid((unsigned)((dim + kRotCols - 1) / kRotCols),
                    (unsigned)((n + kRotRows - 1) / kRotRows));
    xfbq_rotate_kernel<<<grid, kRotCols, 0, st>>>(x, r, dim, n, y);
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
