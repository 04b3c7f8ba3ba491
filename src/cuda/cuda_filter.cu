// cuda_filter.cu: the rows a filtered search may rank (cuda_filter.cuh).
#include <assert.h>
#include <math.h>

#include "cuda/cuda_filter.cuh"
#include "cuda/cuda_util.cuh"

namespace sml {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// What the kernel reads of the caller's filter: its bitset over ids or its
// ascending list, in device memory.
struct DeviceFilter {
    const uint64_t *bits;  // or null: the list
    long long nbits;
    const int64_t *ids;
    long long n;
};

__device__ __forceinline__ bool id_allowed(const DeviceFilter &f, int64_t id)
{
    if (f.bits != nullptr)
        return id >= 0 && id < f.nbits && ((f.bits[id >> 6] >> (id & 63)) & 1u);
    long long lo = 0, hi = f.n;
    while (lo < hi) {
        const long long mid = lo + (hi - lo) / 2;
        if (f.ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < f.n && f.ids[lo] == id;
}

// A thread per row, a warp per word of the result: every lane votes, so no
// lane leaves before the ballot.
__global__ void rows_allowed_kernel(const __grid_constant__ DeviceFilter f, const int64_t *ids,
                                    long long n, uint32_t *bits)
{
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool ok = r < n && id_allowed(f, ids[r]);
    const unsigned word = __ballot_sync(kFullMask, ok);
    if ((threadIdx.x & 31) == 0 && r < n) bits[r >> 5] = word;
}

__global__ void filter_add_kernel(long long n, const float *norms, const uint32_t *bits,
                                  float *add)
{
    for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < n;
         r += (long long)gridDim.x * blockDim.x)
        add[r] = row_allowed(bits, r) ? (norms ? norms[r] : 0.0f) : INFINITY;
}

// A block per segment.
__global__ void mask_pairs_kernel(const long long *pair_out, const int *pair_cols,
                                  const int *pair_base, const uint32_t *bits, float *distances)
{
    const int p = blockIdx.x;
    const long long out = pair_out[p], base = pair_base[p];
    const int cols = pair_cols[p];
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
        if (!row_allowed(bits, base + i)) distances[out + i] = INFINITY;
}

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

}  // namespace

simil_status rows_allowed(Device *dev, const sml_id_filter *f, const int64_t *ids, long long n,
                          size_t extra_bytes, const uint32_t **bits, void **extra)
{
    *bits = nullptr;
    *extra = nullptr;
    if (f == nullptr) return SIMIL_OK;
    assert(n >= 0);
    const size_t bit_bytes = align256(sizeof(uint32_t) * (size_t)((n + 31) / 32));
    const size_t input_bytes = f->bits ? sizeof(uint64_t) * (size_t)((f->nbits + 63) / 64)
                                       : sizeof(int64_t) * (size_t)f->n;
    char *buf;
    SML_TRY(device_filter(dev, bit_bytes + align256(extra_bytes) + input_bytes + 8,
                          reinterpret_cast<void **>(&buf)));
    char *input = buf + bit_bytes + align256(extra_bytes);
    cudaStream_t st = dev->stream[0];
    // from the caller's pageable copy: the driver stages it, and the kernel
    // after it on the stream sees it whole
    if (input_bytes > 0)
        SML_CUDA_TRY(cudaMemcpyAsync(input, f->bits ? (const void *)f->bits : (const void *)f->ids,
                                     input_bytes, cudaMemcpyHostToDevice, st));
    DeviceFilter df{f->bits ? reinterpret_cast<const uint64_t *>(input) : nullptr, f->nbits,
                    f->bits ? nullptr : reinterpret_cast<const int64_t *>(input), f->n};
    uint32_t *out = reinterpret_cast<uint32_t *>(buf);
    if (n > 0) {
        rows_allowed_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(df, ids, n, out);
        SML_LAUNCH_TRY("rows_allowed_kernel");
    }
    *bits = out;
    *extra = buf + bit_bytes;
    return SIMIL_OK;
}

simil_status launch_filter_add(long long n, const float *norms, const uint32_t *bits, float *add,
                               cudaStream_t st)
{
    if (n == 0) return SIMIL_OK;
    const long long blocks = (n + 255) / 256;
    filter_add_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, st>>>(n, norms, bits,
                                                                                  add);
    SML_LAUNCH_TRY("filter_add_kernel");
    return SIMIL_OK;
}

simil_status launch_mask_pairs(int npairs, const long long *pair_out, const int *pair_cols,
                               const int *pair_base, const uint32_t *bits, float *distances,
                               cudaStream_t st)
{
    if (npairs == 0 || bits == nullptr) return SIMIL_OK;
    mask_pairs_kernel<<<npairs, 128, 0, st>>>(pair_out, pair_cols, pair_base, bits, distances);
    SML_LAUNCH_TRY("mask_pairs_kernel");
    return SIMIL_OK;
}

}  // namespace sml
