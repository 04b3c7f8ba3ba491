// cuda_generate.cu: the generators of docs/datasets.md in device memory, bit
// for bit what simil_generate gives (core/synthetic.h shares the hash and
// u(w) with the host).
//
// mix needs the C library's logf and cosf, which the GPU's own do not match;
// their arguments take only 2^24 values each, so the host fills two tables of
// every radius and cosine (sml_gauss_tables, 2 x 64 MiB) when a generator
// opens, and the kernel reads them.  The float steps are the definition's,
// spelled out with _rn intrinsics so that no multiply is fused into an add
// (0.5 g is exact, so even a fused one would round alike).
//
// Launch: one thread per element, grid-stride; a block of 256 threads.
#include "core/alloc.h"
#include "core/synthetic.h"
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_stream.cuh"
#include "cuda/cuda_util.cuh"

namespace sml {

namespace {

struct Generator {
    int kind;
    long long dim;
    uint64_t seed;
    float *radius;   // device: SML_GAUSS_TABLE each (mix)
    float *cosine;
    float *centres;  // device: SML_MIX_CENTRES x dim (mix)
};

__global__ void uniform_kernel(long long first, long long count, long long dim, uint64_t seed,
                               float *out)
{
    const uint64_t base = sml_gen_base(seed), d = (uint64_t)dim;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
         e += (long long)gridDim.x * blockDim.x) {
        const uint64_t r = (uint64_t)e / d, j = (uint64_t)e - r * d;
        out[e] = sml_u01(sml_sm64(base + ((uint64_t)first + r) * d + j));
    }
}

__global__ void mix_kernel(long long first, long long count, long long dim, uint64_t seed,
                           const float *radius, const float *cosine, const float *centres,
                           float *out)
{
    const uint64_t base = sml_gen_base(seed), d = (uint64_t)dim;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
         e += (long long)gridDim.x * blockDim.x) {
        const uint64_t r = (uint64_t)e / d, j = (uint64_t)e - r * d, i = (uint64_t)first + r;
        const uint64_t s = base + i * d + j + 7;
        const float g = __fmul_rn(radius[sml_gauss_word_radius(s) >> 40],
                                  cosine[sml_gauss_word_angle(s) >> 40]);
        out[e] = __fadd_rn(centres[sml_mix_centre(seed, i) * d + j], __fmul_rn(0.5f, g));
    }
}

// Host table of count floats to a new device array.
simil_status upload_table(const float *host, size_t count, float **out)
{
    SML_CUDA_TRY(device_malloc(out, sizeof(float) * count));
    SML_CUDA_TRY(cudaMemcpy(*out, host, sizeof(float) * count, cudaMemcpyHostToDevice));
    return SIMIL_OK;
}

simil_status mix_tables(Generator *g)
{
    float *radius = nullptr, *cosine = nullptr, *centres = nullptr;
    simil_status s = sml_gauss_tables(&radius, &cosine);
    if (s == SIMIL_OK) s = sml_mix_centres(g->dim, &centres);
    if (s == SIMIL_OK) s = upload_table(radius, SML_GAUSS_TABLE, &g->radius);
    if (s == SIMIL_OK) s = upload_table(cosine, SML_GAUSS_TABLE, &g->cosine);
    if (s == SIMIL_OK) s = upload_table(centres, (size_t)SML_MIX_CENTRES * g->dim, &g->centres);
    sml_free(radius);
    sml_free(cosine);
    sml_free(centres);
    return s;
}

simil_status fill_locked(Device *dev, const Generator *g, long long first, long long count,
                         float *mem)
{
    cudaStream_t st = dev->stream[0];
    const long long want = (count + 255) / 256;
    const unsigned blocks = (unsigned)(want < 65536LL * 8 ? want : 65536LL * 8);
    if (g->kind == SML_GEN_UNIFORM)
        uniform_kernel<<<blocks, 256, 0, st>>>(first, count, g->dim, g->seed, mem);
    else
        mix_kernel<<<blocks, 256, 0, st>>>(first, count, g->dim, g->seed, g->radius, g->cosine,
                                           g->centres, mem);
    SML_LAUNCH_TRY("generator kernel");
    SML_CUDA_TRY(cudaStreamSynchronize(st));
    return SIMIL_OK;
}

}  // namespace

void generator_close(sml_backend *b, void *p)
{
    Generator *g = static_cast<Generator *>(p);
    if (g == nullptr) return;
    cudaSetDevice(b->gpu);
    device_free(g->radius);
    device_free(g->cosine);
    device_free(g->centres);
    sml_free(g);
}

simil_status generator_open(sml_backend *b, const char *kind, int64_t dim, uint64_t seed,
                            void **out)
{
    *out = nullptr;
    const int which = sml_gen_kind(kind);
    SML_RETURN_IF(which < 0 || dim < 1, SIMIL_ERR_INVALID_ARGUMENT,
                  "no GPU generator \"%s\" of dimension %lld", kind ? kind : "(null)",
                  (long long)dim);
    Generator *g;
    SML_TRY(sml_calloc(reinterpret_cast<void **>(&g), 1, sizeof *g, "a GPU generator"));
    g->kind = which;
    g->dim = dim;
    g->seed = seed;
    simil_status s = cuda_status(cudaSetDevice(b->gpu), "cudaSetDevice", __FILE__, __LINE__);
    if (s == SIMIL_OK && which == SML_GEN_MIX) s = mix_tables(g);
    if (s != SIMIL_OK) {
        generator_close(b, g);
        return s;
    }
    *out = g;
    return SIMIL_OK;
}

simil_status generator_fill(sml_backend *b, void *p, int64_t first, int64_t n, float *mem)
{
    const Generator *g = static_cast<const Generator *>(p);
    const long long count = (long long)n * g->dim;
    if (count == 0) return SIMIL_OK;
    Device *dev = device_of(b);
    pthread_mutex_lock(&dev->lock);
    simil_status s = cuda_status(cudaSetDevice(b->gpu), "cudaSetDevice", __FILE__, __LINE__);
    if (s == SIMIL_OK) s = fill_locked(dev, g, first, count, mem);
    pthread_mutex_unlock(&dev->lock);
    return s;
}

}  // namespace sml
