// cuda_filter.cu: the rows a filtered search may rank (cuda_filter.cuh).
#include <assert.h>
#include <math.h>
#include <string.h>

#include "cuda/cuda_filter.cuh"
#include "cuda/cuda_util.cuh"

namespace sml {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

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
                                  const int *pair_base, const __grid_constant__ RowFilter f,
                                  float *distances)
{
    const int p = blockIdx.x;
    const long long out = pair_out[p], base = pair_base[p];
    const int cols = pair_cols[p];
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
        if (!row_allowed(f, base + i)) distances[out + i] = INFINITY;
}

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

// The largest filter kept on the host as well as on the device (a bitset of
// 512M ids).
constexpr size_t kFilterCopyMax = (size_t)64 << 20;

// f's bytes on the device (*out): those of the last upload where they are
// the same (a service that filters many searches alike sends one filter
// again and again), else uploaded through the pinned copy, which then holds
// them.  A filter with a stamp is known by it (the same stamp, the same
// bytes: id_filter.h), without comparing its bytes on the host (125 KB for
// 10^6 ids, a few us of a one-query search).  A failure forgets the last
// upload.
simil_status send_filter(Device *dev, const sml_id_filter *f, const void **out)
{
    FilterCopy &c = dev->sent;
    const bool bits = f->bits != nullptr;
    const long long count = bits ? f->nbits : f->n;
    const void *from = bits ? (const void *)f->bits : (const void *)f->ids;
    const size_t bytes = bits ? sizeof(uint64_t) * (size_t)((f->nbits + 63) / 64)
                              : sizeof(int64_t) * (size_t)f->n;
    *out = c.device;
    if (bytes == 0) return SIMIL_OK;
    if (c.held == bytes && c.bits == bits && c.count == count &&
        (f->stamp != 0 ? c.stamp == f->stamp : c.stamp == 0 && memcmp(c.host, from, bytes) == 0))
        return SIMIL_OK;
    c.held = 0;
    c.stamp = 0;
    if (bytes > c.device_bytes) {  // cudaFree waits for the kernels that read it
        device_free(c.device);
        c.device = nullptr;
        c.device_bytes = 0;
        SML_CUDA_TRY(device_malloc(&c.device, bytes));
        c.device_bytes = bytes;
    }
    *out = c.device;
    cudaStream_t st = dev->stream[0];
    if (bytes > kFilterCopyMax) {
        // not kept twice: from the caller's pageable copy, which the driver
        // stages; the kernel after it on the stream sees it whole.  Known
        // again by its stamp alone (the pinned copy does not hold it).
        SML_CUDA_TRY(cudaMemcpyAsync(c.device, from, bytes, cudaMemcpyHostToDevice, st));
        if (f->stamp != 0) {
            c.held = bytes;
            c.bits = bits;
            c.count = count;
            c.stamp = f->stamp;
        }
        return SIMIL_OK;
    }
    SML_CUDA_TRY(cudaEventSynchronize(c.copied));  // the last upload may still read the copy
    if (bytes > c.host_bytes) {
        pinned_free(c.host);
        c.host = nullptr;
        c.host_bytes = 0;
        SML_CUDA_TRY(pinned_malloc(&c.host, bytes));
        c.host_bytes = bytes;
    }
    memcpy(c.host, from, bytes);
    SML_CUDA_TRY(cudaMemcpyAsync(c.device, c.host, bytes, cudaMemcpyHostToDevice, st));
    SML_CUDA_TRY(cudaEventRecord(c.copied, st));
    c.held = bytes;
    c.bits = bits;
    c.count = count;
    c.stamp = f->stamp;
    return SIMIL_OK;
}

}  // namespace

simil_status rows_allowed(Device *dev, const sml_id_filter *f, const int64_t *ids, long long n,
                          size_t extra_bytes, const uint32_t **bits, void **extra)
{
    *bits = nullptr;
    *extra = nullptr;
    if (f == nullptr) return SIMIL_OK;
    assert(n >= 0);
    const size_t bit_bytes = align256(sizeof(uint32_t) * (size_t)((n + 31) / 32));
    char *buf;
    SML_TRY(device_filter(dev, bit_bytes + align256(extra_bytes) + 8,
                          reinterpret_cast<void **>(&buf)));
    const void *input;
    SML_TRY(send_filter(dev, f, &input));
    cudaStream_t st = dev->stream[0];
    DeviceFilter df{f->bits ? static_cast<const uint64_t *>(input) : nullptr, f->nbits,
                    f->bits ? nullptr : static_cast<const int64_t *>(input), f->n};
    uint32_t *out = reinterpret_cast<uint32_t *>(buf);
    if (n > 0) {
        rows_allowed_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(df, ids, n, out);
        SML_LAUNCH_TRY("rows_allowed_kernel");
    }
    *bits = out;
    *extra = buf + bit_bytes;
    return SIMIL_OK;
}

simil_status labels_allowed(Device *dev, const sml_id_filter *f, const int64_t *labels,
                            RowFilter *out)
{
    *out = RowFilter{};
    if (f == nullptr) return SIMIL_OK;
    assert(labels != nullptr);
    const void *input;
    SML_TRY(send_filter(dev, f, &input));
    out->by_label = true;
    out->f = DeviceFilter{f->bits ? static_cast<const uint64_t *>(input) : nullptr, f->nbits,
                          f->bits ? nullptr : static_cast<const int64_t *>(input), f->n};
    out->labels = labels;
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
                               const int *pair_base, const RowFilter &f, float *distances,
                               cudaStream_t st)
{
    if (npairs == 0 || (f.rows == nullptr && !f.by_label)) return SIMIL_OK;
    mask_pairs_kernel<<<npairs, 128, 0, st>>>(pair_out, pair_cols, pair_base, f, distances);
    SML_LAUNCH_TRY("mask_pairs_kernel");
    return SIMIL_OK;
}

}  // namespace sml
