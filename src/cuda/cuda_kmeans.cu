// cuda_kmeans.cu: the k-means update on the GPU (cluster_sums of backend.h).
//
// The host groups rows by label with a counting sort (cluster_order.h), the
// same order the CPU uses; then one block per cluster adds its rows in that
// order, in double, threads across dimensions.  No atomics: a seed gives the
// same centroids on every run.
#include "core/alloc.h"
#include "core/cluster_order.h"
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_util.cuh"
#include "cuda/cuda_workspace.cuh"

namespace sml {
namespace {

__global__ void cluster_sums_kernel(int dim, const float *x, const int64_t *offsets,
                                    const int64_t *order, float *sums)
{
    const long long c = blockIdx.x;
    for (int j = threadIdx.x; j < dim; j += blockDim.x) {
        double acc = 0;
        for (long long o = offsets[c]; o < offsets[c + 1]; ++o) acc += x[order[o] * dim + j];
        sums[c * dim + j] = (float)acc;
    }
}

simil_status sums_locked(Device *dev, int64_t n, int64_t dim, const float *x,
                         const int64_t *offsets, const int64_t *order, int64_t k, float *sums)
{
    cudaStream_t st = dev->stream[0];
    const size_t off_bytes = sizeof(int64_t) * (size_t)(k + 1);
    const size_t sums_bytes = sizeof(float) * (size_t)(k * dim);
    int64_t *d_off, *d_order;
    float *d_sums;
    const auto carve = [&](void *base) {
        Carve c(base);
        d_off = c.take<int64_t>((size_t)(k + 1));
        d_order = c.take<int64_t>((size_t)(n > 0 ? n : 1));
        d_sums = c.take<float>((size_t)(k * dim));
        return c.used();
    };
    char *ws;
    SML_TRY(device_workspace(dev, carve(nullptr), reinterpret_cast<void **>(&ws)));
    carve(ws);
    SML_CUDA_TRY(cudaMemcpyAsync(d_off, offsets, off_bytes, cudaMemcpyHostToDevice, st));
    SML_CUDA_TRY(cudaMemcpyAsync(d_order, order, sizeof(int64_t) * (size_t)n,
                                 cudaMemcpyHostToDevice, st));
    const int threads = dim < 128 ? 32 * (int)((dim + 31) / 32) : 128;
    cluster_sums_kernel<<<(unsigned)k, threads, 0, st>>>((int)dim, x, d_off, d_order, d_sums);
    SML_LAUNCH_TRY("cluster_sums_kernel");
    SML_CUDA_TRY(cudaMemcpyAsync(sums, d_sums, sums_bytes, cudaMemcpyDeviceToHost, st));
    SML_CUDA_TRY(cudaStreamSynchronize(st));
    return SIMIL_OK;
}

}  // namespace

simil_status cuda_cluster_sums(sml_backend *b, int64_t n, int64_t dim, const float *x,
                               const int64_t *labels, int64_t k, float *sums, int64_t *counts)
{
    int64_t *offsets, *order;
    SML_TRY(sml_alloc(reinterpret_cast<void **>(&offsets), (size_t)(k + 1), sizeof *offsets,
                      "cluster offsets"));
    simil_status s = sml_alloc(reinterpret_cast<void **>(&order), (size_t)(n > 0 ? n : 1),
                               sizeof *order, "cluster order");
    if (s == SIMIL_OK) s = sml_cluster_order(n, labels, k, offsets, order);
    if (s == SIMIL_OK) {
        for (int64_t c = 0; c < k; c++) counts[c] = offsets[c + 1] - offsets[c];
        Device *dev = device_of(b);
        pthread_mutex_lock(&dev->lock);
        s = cuda_status(cudaSetDevice(dev->gpu), "cudaSetDevice", __FILE__, __LINE__);
        if (s == SIMIL_OK) s = sums_locked(dev, n, dim, x, offsets, order, k, sums);
        pthread_mutex_unlock(&dev->lock);
    }
    sml_free(order);
    sml_free(offsets);
    return s;
}

}  // namespace sml
