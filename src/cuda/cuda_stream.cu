// cuda_stream.cu: moving a stream of host data through the GPU
// (index/stream_chunks.c) without stalling the work beside it.
//
// The copier owns a non-blocking stream of its own and one event per lane:
// an upload is a cudaMemcpyAsync from pinned memory on that stream followed
// by the lane's event, so it runs on a copy engine while the search kernels
// run on the device's streams, and waiting for a lane waits for the copies
// queued up to its mark, not for the kernels.  None of these calls takes
// the device lock (a thread that uploads must not wait for a search that
// holds it), and none allocates or frees device memory in steady state:
// cudaFree synchronizes the whole device, which would make every upload wait
// for the search and the reverse.
//
// A copier also checks rows where they landed (copier_check): a kernel on
// its stream, behind the copies, whose verdict comes back to pinned memory
// with the lane's mark, so that reading it costs no extra wait.
#include <cassert>

#include "core/alloc.h"
#include "core/vectors.h"
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_kernels.cuh"
#include "cuda/cuda_stream.cuh"
#include "cuda/cuda_util.cuh"

namespace sml {

namespace {

struct Copier {
    cudaStream_t stream;
    cudaEvent_t lane[SML_COPIER_LANES];
    bool queued[SML_COPIER_LANES];
    // per lane: the first bad row copier_check found (kNoBadRow: none), on
    // the device, then in pinned memory once the lane's mark has passed
    unsigned long long *bad, *bad_host;
};

constexpr unsigned long long kNoBadRow = ~0ULL;

// One warp per row, rows in a grid-stride loop: sml_vectors_check's test, in
// double like it, and the smallest failing row kept.
__global__ void first_bad_row_kernel(long long n, int dim, const float *x, int bound_norms,
                                     unsigned long long *bad)
{
    const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < n;
         row += warps) {
        const float *r = x + row * dim;
        double norm2 = 0, poison = 0;  // v - v: 0 for finite v, NaN for NaN or Inf
        for (int j = threadIdx.x & 31; j < dim; j += 32) {
            const double v = r[j];
            norm2 += v * v;
            poison += v - v;
        }
        for (int o = 16; o > 0; o >>= 1) {
            norm2 += __shfl_xor_sync(0xffffffffu, norm2, o);
            poison += __shfl_xor_sync(0xffffffffu, poison, o);
        }
        if ((threadIdx.x & 31) == 0 && (poison != 0 || (bound_norms && norm2 > SML_NORM2_BOUND)))
            atomicMin(bad, (unsigned long long)row);
    }
}

}  // namespace

simil_status stream_pinned_alloc(sml_backend *b, size_t bytes, void **host)
{
    *host = nullptr;
    SML_CUDA_TRY(cudaSetDevice(b->gpu));
    SML_CUDA_TRY(pinned_malloc(host, bytes ? bytes : 1));
    return SIMIL_OK;
}

void stream_pinned_free(sml_backend *b, void *host)
{
    (void)b;
    pinned_free(host);
}

int stream_host_pinned(sml_backend *b, const void *host, size_t bytes)
{
    (void)b;
    // both ends: a range the caller pinned in one piece (cudaMallocHost,
    // cudaHostRegister) answers the same for every byte; a range pinned in
    // parts and judged pinned here still copies right, only slower
    const char *first = static_cast<const char *>(host);
    for (const char *at : {first, first + (bytes ? bytes - 1 : 0)}) {
        cudaPointerAttributes attr;
        if (host == nullptr || cudaPointerGetAttributes(&attr, at) != cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        if (attr.type != cudaMemoryTypeHost) return 0;
    }
    return 1;
}

void copier_close(sml_backend *b, void *p)
{
    Copier *c = static_cast<Copier *>(p);
    if (c == nullptr) return;
    cudaSetDevice(b->gpu);
    if (c->stream) cudaStreamSynchronize(c->stream);
    for (int i = 0; i < SML_COPIER_LANES; ++i)
        if (c->lane[i]) cudaEventDestroy(c->lane[i]);
    if (c->stream) cudaStreamDestroy(c->stream);
    device_free(c->bad);
    pinned_free(c->bad_host);
    cudaGetLastError();
    sml_free(c);
}

simil_status copier_open(sml_backend *b, void **out)
{
    *out = nullptr;
    Copier *c;
    SML_TRY(sml_calloc(reinterpret_cast<void **>(&c), 1, sizeof *c, "a GPU copier"));
    simil_status s = cuda_status(cudaSetDevice(b->gpu), "cudaSetDevice", __FILE__, __LINE__);
    if (s == SIMIL_OK)
        s = cuda_status(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
                        "cudaStreamCreate", __FILE__, __LINE__);
    for (int i = 0; i < SML_COPIER_LANES && s == SIMIL_OK; ++i)
        s = cuda_status(cudaEventCreateWithFlags(&c->lane[i], cudaEventDisableTiming),
                        "cudaEventCreate", __FILE__, __LINE__);
    // allocated here, once, so that checks in steady state allocate nothing
    if (s == SIMIL_OK)
        s = cuda_status(device_malloc(&c->bad, sizeof *c->bad * SML_COPIER_LANES),
                        "cudaMalloc", __FILE__, __LINE__);
    if (s == SIMIL_OK)
        s = cuda_status(pinned_malloc(reinterpret_cast<void **>(&c->bad_host),
                                      sizeof *c->bad_host * SML_COPIER_LANES),
                        "cudaMallocHost", __FILE__, __LINE__);
    for (int i = 0; i < SML_COPIER_LANES && s == SIMIL_OK; ++i) c->bad_host[i] = kNoBadRow;
    if (s != SIMIL_OK) {
        copier_close(b, c);
        return s;
    }
    *out = c;
    return SIMIL_OK;
}

simil_status copier_upload(sml_backend *b, void *p, int lane, void *mem, const void *host,
                           size_t bytes)
{
    Copier *c = static_cast<Copier *>(p);
    assert(lane >= 0 && lane < SML_COPIER_LANES);
    // the current device is per thread: an uploading thread sets its own
    SML_CUDA_TRY(cudaSetDevice(b->gpu));
    if (bytes > 0)
        SML_CUDA_TRY(cudaMemcpyAsync(mem, host, bytes, cudaMemcpyHostToDevice, c->stream));
    SML_CUDA_TRY(cudaEventRecord(c->lane[lane], c->stream));
    c->queued[lane] = true;
    return SIMIL_OK;
}

simil_status copier_wait(sml_backend *b, void *p, int lane)
{
    Copier *c = static_cast<Copier *>(p);
    assert(lane >= 0 && lane < SML_COPIER_LANES);
    if (!c->queued[lane]) return SIMIL_OK;
    SML_CUDA_TRY(cudaSetDevice(b->gpu));
    SML_CUDA_TRY(cudaEventSynchronize(c->lane[lane]));
    return SIMIL_OK;
}

simil_status copier_check(sml_backend *b, void *p, int lane, const float *mem, int64_t n,
                          int64_t dim, int bound_norms)
{
    Copier *c = static_cast<Copier *>(p);
    assert(lane >= 0 && lane < SML_COPIER_LANES && n >= 0 && dim > 0);
    SML_CUDA_TRY(cudaSetDevice(b->gpu));
    SML_CUDA_TRY(cudaMemsetAsync(c->bad + lane, 0xff, sizeof *c->bad, c->stream));
    if (n > 0) {
        // a few blocks per SM are enough to stream the rows at full bandwidth
        const long long blocks = (n * 32 + 255) / 256;
        first_bad_row_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, c->stream>>>(
            n, (int)dim, mem, bound_norms, c->bad + lane);
        SML_LAUNCH_TRY("first_bad_row_kernel");
    }
    SML_CUDA_TRY(cudaMemcpyAsync(c->bad_host + lane, c->bad + lane, sizeof *c->bad,
                                 cudaMemcpyDeviceToHost, c->stream));
    SML_CUDA_TRY(cudaEventRecord(c->lane[lane], c->stream));
    c->queued[lane] = true;
    return SIMIL_OK;
}

simil_status copier_checked(sml_backend *b, void *p, int lane, int64_t *bad)
{
    Copier *c = static_cast<Copier *>(p);
    *bad = -1;
    SML_TRY(copier_wait(b, p, lane));
    const unsigned long long row = c->bad_host[lane];
    if (row != kNoBadRow) *bad = (int64_t)row;
    return SIMIL_OK;
}

namespace {

simil_status refill_locked(Device *dev, Shadow *sh, const float *base, int64_t n)
{
    cudaStream_t st = dev->stream[0];
    // the device's largest norm goes through the workspace, which only the
    // first chunk of a stream grows (every later request fits)
    float *d_max;
    SML_TRY(device_workspace(dev, sizeof(float), reinterpret_cast<void **>(&d_max)));
    SML_CUDA_TRY(cudaMemsetAsync(d_max, 0, sizeof(float), st));
    SML_TRY(launch_scale_to_half(n, (int)sh->dim, base, sh->rows, sh->inv_scale, nullptr, d_max,
                                 st));
    float max_norm = 0;
    SML_CUDA_TRY(cudaMemcpyAsync(&max_norm, d_max, sizeof(float), cudaMemcpyDeviceToHost, st));
    SML_CUDA_TRY(cudaStreamSynchronize(st));
    sh->max_norm = max_norm;
    sh->n = n;
    return SIMIL_OK;
}

}  // namespace

simil_status shadow_refill(sml_backend *b, void *p, const float *base, int64_t n, int64_t dim)
{
    Shadow *sh = static_cast<Shadow *>(p);
    SML_RETURN_IF(sh == nullptr || sh->dim != dim || sh->capacity < n, SIMIL_ERR_INTERNAL,
                  "refilling an fp16 copy of %lld rows of dimension %lld with %lld of %lld",
                  sh ? sh->capacity : 0LL, sh ? sh->dim : 0LL, (long long)n, (long long)dim);
    Device *dev = device_of(b);
    pthread_mutex_lock(&dev->lock);
    simil_status s = cuda_status(cudaSetDevice(b->gpu), "cudaSetDevice", __FILE__, __LINE__);
    if (s == SIMIL_OK) s = refill_locked(dev, sh, base, n);
    if (s != SIMIL_OK) cudaStreamSynchronize(dev->stream[0]);
    pthread_mutex_unlock(&dev->lock);
    return s;
}

}  // namespace sml
