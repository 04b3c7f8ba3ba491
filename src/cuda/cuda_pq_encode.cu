// cuda_pq_encode.cu: IVF-PQ's encoder on the GPU: the residual of each
// vector against its list's centroid, coded with the PQ codebooks.
//
// Encode: one thread per (vector, sub-quantizer), nearest codeword by
// exhaustive search, residual slices staged through shared memory into
// registers, codebook in shared memory when it fits (pq_encode_kernel).
#include <float.h>

#include "cuda/cuda_device.cuh"
#include "cuda/cuda_util.cuh"
#include "cuda/cuda_workspace.cuh"

namespace sml {
namespace {

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
    // the workspace: the vectors (unless on the device), lists, codes
    const auto carve = [&](void *base, float **x, int64_t **lists, uint8_t **codes) {
        Carve c(base);
        *x = c.take<float>(x_bytes / sizeof(float));
        *lists = c.take<int64_t>((size_t)a->n);
        *codes = c.take<uint8_t>(c_bytes);
        return c.used();
    };
    float *x_copy;
    int64_t *d_lists;
    uint8_t *d_codes;
    char *ws;
    SML_TRY(device_workspace(dev, carve(nullptr, &x_copy, &d_lists, &d_codes),
                             reinterpret_cast<void **>(&ws)));
    carve(ws, &x_copy, &d_lists, &d_codes);
    const float *d_x = x_on_device ? a->x : x_copy;
    SML_TRY(device_join_caller(dev));
    if (!x_on_device)
        SML_CUDA_TRY(cudaMemcpyAsync(x_copy, a->x, x_bytes, cudaMemcpyHostToDevice, st));
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
