// cuda_shadow.cu: the fp16 shadow of a stored matrix (cuda_device.cuh), kept
// in step with the index by shadow_sync: appended rows are scaled and rounded;
// anything else rebuilds it.  A failed sync leaves the old shadow intact.
#include "core/alloc.h"
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_kernels.cuh"
#include "cuda/cuda_util.cuh"

namespace sml {

void shadow_free(sml_backend *b, void *p)
{
    Shadow *sh = static_cast<Shadow *>(p);
    if (sh == nullptr) return;
    cudaSetDevice(b->gpu);
    device_free(sh->rows);
    device_free(sh->inv_scale);
    sml_free(sh);
}

namespace {

// A shadow with room for capacity rows, holding the first `keep` rows of old.
simil_status shadow_grow(Device *dev, const Shadow *old, long long keep, long long capacity,
                         long long dim, Shadow **out)
{
    Shadow *sh;
    SML_TRY(sml_calloc(reinterpret_cast<void **>(&sh), 1, sizeof *sh, "a GPU shadow"));
    sh->capacity = capacity;
    sh->dim = dim;
    sh->n = keep;
    sh->max_norm = old ? old->max_norm : 0;
    cudaError_t err = device_malloc(&sh->rows, sizeof(__half) * (size_t)(capacity * dim));
    if (err == cudaSuccess)
        err = device_malloc(&sh->inv_scale, sizeof(float) * (size_t)capacity);
    if (err == cudaSuccess && keep > 0) {
        err = cudaMemcpyAsync(sh->rows, old->rows, sizeof(__half) * (size_t)(keep * dim),
                              cudaMemcpyDeviceToDevice, dev->stream[0]);
        if (err == cudaSuccess)
            err = cudaMemcpyAsync(sh->inv_scale, old->inv_scale, sizeof(float) * (size_t)keep,
                                  cudaMemcpyDeviceToDevice, dev->stream[0]);
    }
    if (err != cudaSuccess) {
        device_free(sh->rows);
        device_free(sh->inv_scale);
        sml_free(sh);
        return cuda_status(err, "growing the fp16 copy of the index", __FILE__, __LINE__);
    }
    *out = sh;
    return SIMIL_OK;
}

// Scale rows [from, n) of base into sh, raising its max norm.
simil_status shadow_fill(Device *dev, Shadow *sh, const float *base, long long from, long long n)
{
    float *d_max;
    SML_CUDA_TRY(device_malloc(&d_max, sizeof(float)));
    simil_status s = cuda_status(
        cudaMemcpyAsync(d_max, &sh->max_norm, sizeof(float), cudaMemcpyHostToDevice,
                        dev->stream[0]),
        "shadow max norm", __FILE__, __LINE__);
    if (s == SIMIL_OK)
        s = launch_scale_to_half(n - from, (int)sh->dim, base + from * sh->dim,
                                 sh->rows + from * sh->dim, sh->inv_scale + from, nullptr, d_max,
                                 dev->stream[0]);
    float max_norm = sh->max_norm;
    if (s == SIMIL_OK)
        s = cuda_status(cudaMemcpyAsync(&max_norm, d_max, sizeof(float), cudaMemcpyDeviceToHost,
                                        dev->stream[0]),
                        "shadow max norm", __FILE__, __LINE__);
    if (s == SIMIL_OK)
        s = cuda_status(cudaStreamSynchronize(dev->stream[0]), "shadow", __FILE__, __LINE__);
    device_free(d_max);
    if (s == SIMIL_OK) {
        sh->max_norm = max_norm;
        sh->n = n;
    }
    return s;
}

}  // namespace

simil_status shadow_sync(sml_backend *b, void **shadow, const float *base, int64_t have,
                         int64_t n, int64_t dim, simil_metric metric)
{
    Device *dev = device_of(b);
    SML_CUDA_TRY(cudaSetDevice(b->gpu));
    Shadow *old = static_cast<Shadow *>(*shadow);
    if (old != nullptr && (old->dim != dim || old->n < have)) have = 0;
    if (old == nullptr) have = 0;
    if (old != nullptr && have > 0 && n <= old->capacity) {
        // append in place: rows past old->n are not read by anyone yet
        long long keep_n = old->n;
        float keep_max = old->max_norm;
        old->n = have;
        simil_status s = shadow_fill(dev, old, base, have, n);
        if (s != SIMIL_OK) {
            old->n = keep_n;
            old->max_norm = keep_max;
        }
        return s;
    }
    // room for half as many again where it grows, as the row stores do; a
    // first shadow is exactly the rows' size, as a row store's first block is
    // (a single add of 10M x 96 rows kept 0.96 GB of fp16 rows it never used)
    long long capacity = old != nullptr ? n + n / 2 : n;
    if (old != nullptr && have == 0 && old->capacity >= n && old->dim == dim) capacity = old->capacity;
    Shadow *sh;
    SML_TRY(shadow_grow(dev, have > 0 ? old : nullptr, have, capacity > 0 ? capacity : 1, dim, &sh));
    if (have == 0) sh->max_norm = 0;
    simil_status s = shadow_fill(dev, sh, base, have, n);
    if (s != SIMIL_OK) {
        shadow_free(b, sh);
        return s;
    }
    shadow_free(b, old);
    *shadow = sh;
    return SIMIL_OK;
}

}  // namespace sml
