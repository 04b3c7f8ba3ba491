// cuda_backend.cu: the CUDA backend: device discovery, per-GPU resources
// (cuda_device.cuh), backend memory in device memory, and the ops table.
//
// The runtime is linked statically, so on a machine without a driver
// cudaGetDeviceCount fails, simil_gpu_count() is 0 and "auto" picks the CPU.
#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <atomic>
#include <new>

#include "core/alloc.h"
#include "core/vectors.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_kernels.cuh"
#include "cuda/cuda_replay.cuh"
#include "cuda/cuda_stream.cuh"
#include "cuda/cuda_util.cuh"

namespace sml {
namespace {

constexpr int kMaxDevices = 64;
// Lanes per GPU unless sml_cuda_lanes says otherwise (cuda_device.cuh); a
// lane is made only when that many small batches run at once.  16 callers of
// IVF4096,PQ32 and IVF4096,Flat, H200: 16 lanes 7% and 21% ahead of 8
// (docs/benchmarks.md).
constexpr int kDefaultLanes = 16;
constexpr int kMaxLanes = 16;
static_assert(sizeof(Device::lane) / sizeof(Device *) == kMaxLanes - 1, "lane 0 is the Device");
Device *devices[kMaxDevices];
pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;

// Blocks from device_malloc and pinned_malloc not yet freed.
std::atomic<long long> live_blocks{0};

void free_buffers(Device *dev);

void device_release(Device *dev)
{
    for (int i = 0; i < dev->lanes.load(); ++i) device_release(dev->lane[i]);
    cudaSetDevice(dev->gpu);
    free_buffers(dev); // before the streams it waits for go
    for (int i = 0; i < 2; ++i) {
        blas_destroy(dev->blas[i]);
        if (dev->done[i]) cudaEventDestroy(dev->done[i]);
        if (dev->stream[i]) cudaStreamDestroy(dev->stream[i]);
    }
    if (dev->caller) cudaEventDestroy(dev->caller);
    if (dev->sent.copied) cudaEventDestroy(dev->sent.copied);
    pthread_mutex_destroy(&dev->lock);
    pthread_mutex_destroy(&dev->lanes_lock);
    sml_free(dev);
}

simil_status device_create(int gpu, Device **out)
{
    Device *dev;
    SML_TRY(sml_calloc(reinterpret_cast<void **>(&dev), 1, sizeof *dev, "a GPU context"));
    new (dev) Device{};
    dev->gpu = gpu;
    pthread_mutex_init(&dev->lock, nullptr);
    pthread_mutex_init(&dev->lanes_lock, nullptr);
    simil_status s = cuda_status(cudaSetDevice(gpu), "cudaSetDevice", __FILE__, __LINE__);
    if (s == SIMIL_OK)
        s = cuda_status(cudaDeviceGetAttribute(&dev->sm_count, cudaDevAttrMultiProcessorCount, gpu),
                        "cudaDeviceGetAttribute", __FILE__, __LINE__);
    // once: cudaGetDeviceProperties is slow, and every backend open names the GPU
    cudaDeviceProp prop;
    if (s == SIMIL_OK && cudaGetDeviceProperties(&prop, gpu) == cudaSuccess) {
        snprintf(dev->name, sizeof dev->name, "%s", prop.name);
    } else {
        cudaGetLastError();
        strcpy(dev->name, "unknown GPU");
    }
    for (int i = 0; i < 2 && s == SIMIL_OK; ++i) {
        s = cuda_status(cudaStreamCreateWithFlags(&dev->stream[i], cudaStreamNonBlocking),
                        "cudaStreamCreate", __FILE__, __LINE__);
        if (s == SIMIL_OK)
            s = cuda_status(cudaEventCreateWithFlags(&dev->done[i], cudaEventDisableTiming),
                            "cudaEventCreate", __FILE__, __LINE__);
        if (s == SIMIL_OK) s = blas_create(dev->stream[i], &dev->blas[i]);
    }
    if (s == SIMIL_OK)
        s = cuda_status(cudaEventCreateWithFlags(&dev->caller, cudaEventDisableTiming),
                        "cudaEventCreate", __FILE__, __LINE__);
    if (s == SIMIL_OK)
        s = cuda_status(cudaEventCreateWithFlags(&dev->sent.copied, cudaEventDisableTiming),
                        "cudaEventCreate", __FILE__, __LINE__);
    if (s != SIMIL_OK) {
        device_release(dev);
        return s;
    }
    *out = dev;
    return SIMIL_OK;
}

// A lane's buffers, after its streams' work.
void free_buffers(Device *dev)
{
    // a device_create that failed part way has no streams to wait for
    for (int i = 0; i < 2; ++i)
        if (dev->stream[i]) cudaStreamSynchronize(dev->stream[i]);
    replay_free(dev);  // its graphs name the buffers
    device_free(dev->workspace);
    device_free(dev->io);
    device_free(dev->out);
    device_free(dev->filter);
    device_free(dev->tickets);
    pinned_free(dev->pinned);
    pinned_free(dev->results);
    pinned_free(dev->staged);
    device_free(dev->sent.device);
    pinned_free(dev->sent.host);
    dev->sent.device = dev->sent.host = nullptr;
    dev->sent.device_bytes = dev->sent.host_bytes = dev->sent.held = 0;
    dev->workspace = dev->io = dev->out = dev->filter = dev->pinned = dev->results = nullptr;
    dev->staged = nullptr;
    dev->tickets = nullptr;
    dev->tickets_bytes = 0;
    dev->workspace_bytes = dev->io_bytes = dev->out_bytes = dev->filter_bytes =
        dev->pinned_bytes = dev->results_bytes = dev->staged_bytes = 0;
}

void backend_close(sml_backend *b)
{
    Device *dev = device_of(b);
    pthread_mutex_lock(&devices_lock);
    if (--dev->refs == 0) {
        // The streams, events and cuBLAS handles stay for the next open: a
        // one-off call (simil_select_k, a graph's small index) would otherwise
        // create them anew each time, which cost more than a 4 GB selection
        // (10,000 x 100,000 floats, k = 10: 2.08 ms a call against 1.43 ms of
        // kernel, H100, 2026-11-25).  The buffers go, so that no GPU memory
        // stays held (sml_cuda_live_allocations is back to 0).
        cudaSetDevice(dev->gpu);
        for (int i = 0; i < dev->lanes.load(); ++i) free_buffers(dev->lane[i]);
        free_buffers(dev);
    }
    pthread_mutex_unlock(&devices_lock);
    sml_free(b);
}

simil_status mem_alloc(sml_backend *b, size_t bytes, void **mem)
{
    *mem = nullptr;
    SML_CUDA_TRY(cudaSetDevice(b->gpu));
    SML_CUDA_TRY(device_malloc(mem, bytes ? bytes : 1));
    return SIMIL_OK;
}

void mem_free(sml_backend *b, void *mem)
{
    if (mem == nullptr) return;
    cudaSetDevice(b->gpu);
    device_free(mem);
}

simil_status mem_copy_kind(sml_backend *b, void *dst, const void *src, size_t bytes,
                           cudaMemcpyKind kind)
{
    if (bytes == 0) return SIMIL_OK;
    Device *dev = device_of(b);
    SML_CUDA_TRY(cudaSetDevice(b->gpu));
    SML_TRY(device_join_caller(dev));
    SML_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kind, dev->stream[0]));
    SML_CUDA_TRY(cudaStreamSynchronize(dev->stream[0]));
    return SIMIL_OK;
}

// Large uploads from pageable memory go through two pinned pieces: the host
// threads copy piece i + 1 (sml_copy_parallel) while the DMA engine moves
// piece i.  A plain cudaMemcpy from pageable memory is staged by the driver
// on one thread, and is much slower (docs/benchmarks.md, "IVF-PQ").
constexpr size_t kStagedPiece = (size_t)32 << 20;

simil_status upload_staged(Device *dev, char *dst, const char *src, size_t bytes,
                           cudaEvent_t moved[2])
{
    char *pinned;
    SML_TRY(device_pinned(dev, 2 * kStagedPiece, reinterpret_cast<void **>(&pinned)));
    cudaStream_t st = dev->stream[0];
    for (size_t at = 0, i = 0; at < bytes; at += kStagedPiece, ++i) {
        const size_t n = bytes - at < kStagedPiece ? bytes - at : kStagedPiece;
        char *piece = pinned + (i & 1) * kStagedPiece;
        if (i >= 2) SML_CUDA_TRY(cudaEventSynchronize(moved[i & 1]));
        sml_copy_parallel(piece, src + at, n);
        SML_CUDA_TRY(cudaMemcpyAsync(dst + at, piece, n, cudaMemcpyHostToDevice, st));
        SML_CUDA_TRY(cudaEventRecord(moved[i & 1], st));
    }
    SML_CUDA_TRY(cudaStreamSynchronize(st));
    return SIMIL_OK;
}

simil_status mem_upload(sml_backend *b, void *mem, const void *host, size_t bytes)
{
    if (bytes < 2 * kStagedPiece || is_device_pointer(host))
        return mem_copy_kind(b, mem, host, bytes, cudaMemcpyHostToDevice);
    Device *dev = device_of(b);
    cudaEvent_t moved[2] = {nullptr, nullptr};
    pthread_mutex_lock(&dev->lock);
    simil_status s = cuda_status(cudaSetDevice(b->gpu), "cudaSetDevice", __FILE__, __LINE__);
    if (s == SIMIL_OK) s = device_join_caller(dev);
    for (int i = 0; i < 2 && s == SIMIL_OK; ++i)
        s = cuda_status(cudaEventCreateWithFlags(&moved[i], cudaEventDisableTiming),
                        "cudaEventCreate", __FILE__, __LINE__);
    if (s == SIMIL_OK)
        s = upload_staged(dev, static_cast<char *>(mem), static_cast<const char *>(host), bytes,
                          moved);
    if (s != SIMIL_OK) cudaStreamSynchronize(dev->stream[0]);
    for (int i = 0; i < 2; ++i)
        if (moved[i]) cudaEventDestroy(moved[i]);
    pthread_mutex_unlock(&dev->lock);
    return s;
}

simil_status mem_download(sml_backend *b, void *host, const void *mem, size_t bytes)
{
    return mem_copy_kind(b, host, mem, bytes, cudaMemcpyDeviceToHost);
}

simil_status mem_copy(sml_backend *b, void *dst, const void *src, size_t bytes)
{
    return mem_copy_kind(b, dst, src, bytes, cudaMemcpyDeviceToDevice);
}

simil_status mem_move_rows(sml_backend *b, void *dst, const int64_t *dst_rows, const void *src,
                           const int64_t *src_rows, size_t row_bytes, int64_t n)
{
    assert(row_bytes % 4 == 0 && (n == 0 || dst != src));
    if (n == 0) return SIMIL_OK;
    Device *dev = device_of(b);
    int64_t *d_index = nullptr;
    const size_t bytes = sizeof(int64_t) * (size_t)n;
    const int arrays = (dst_rows != nullptr) + (src_rows != nullptr);
    if (arrays > 0) SML_TRY(mem_alloc(b, bytes * arrays, reinterpret_cast<void **>(&d_index)));
    int64_t *d_dst = nullptr, *d_src = nullptr, *next = d_index;
    simil_status s = SIMIL_OK;
    if (dst_rows) {
        d_dst = next;
        next += n;
        s = mem_upload(b, d_dst, dst_rows, bytes);
    }
    if (s == SIMIL_OK && src_rows) {
        d_src = next;
        s = mem_upload(b, d_src, src_rows, bytes);
    }
    if (s == SIMIL_OK) s = launch_move_rows(dst, d_dst, src, d_src, row_bytes, n, dev->stream[0]);
    if (s == SIMIL_OK)
        s = cuda_status(cudaStreamSynchronize(dev->stream[0]), "moving rows", __FILE__, __LINE__);
    mem_free(b, d_index);
    return s;
}

simil_status row_norms(sml_backend *b, int64_t n, int64_t dim, const float *x, float *norms)
{
    Device *dev = device_of(b);
    SML_CUDA_TRY(cudaSetDevice(b->gpu));
    SML_TRY(launch_row_norms(n, (int)dim, x, norms, dev->stream[0]));
    SML_CUDA_TRY(cudaStreamSynchronize(dev->stream[0]));
    return SIMIL_OK;
}

sml_backend_ops make_ops()
{
    sml_backend_ops o{};
    o.close = backend_close;
    o.mem_alloc = mem_alloc;
    o.mem_free = mem_free;
    o.mem_upload = mem_upload;
    o.mem_download = mem_download;
    o.mem_copy = mem_copy;
    o.mem_move_rows = mem_move_rows;
    o.row_norms = row_norms;
    o.knn = cuda_knn;
    o.knn_join = cuda_knn_join;
    o.ivf_flat_scan = cuda_ivf_flat_scan;
    o.ivf_pq_scan = cuda_ivf_pq_scan;
    o.pq_encode = cuda_pq_encode;
    o.sq_scan = cuda_sq_scan;
    o.xfbq_scan = cuda_xfbq_scan;
    o.xfbq_encode = cuda_xfbq_encode;
    o.select_k = cuda_select_k;
    o.cluster_sums = cuda_cluster_sums;
    o.shadow_sync = shadow_sync;
    o.shadow_free = shadow_free;
    o.pinned_alloc = stream_pinned_alloc;
    o.pinned_free = stream_pinned_free;
    o.host_pinned = stream_host_pinned;
    o.copier_open = copier_open;
    o.copier_upload = copier_upload;
    o.copier_wait = copier_wait;
    o.copier_close = copier_close;
    o.copier_check = copier_check;
    o.copier_checked = copier_checked;
    o.shadow_refill = shadow_refill;
    o.generator_open = generator_open;
    o.generator_fill = generator_fill;
    o.generator_close = generator_close;
    return o;
}

const sml_backend_ops cuda_ops = make_ops();

}  // namespace

// ---- lanes ----------------------------------------------------------------

namespace {

std::atomic<int> lanes_setting{kDefaultLanes};

}  // namespace

int lanes_max() { return lanes_setting.load(std::memory_order_relaxed); }

Device *lane_lock(Device *dev, bool small)
{
    if (!small || lanes_max() <= 1) {
        pthread_mutex_lock(&dev->lock);
        return dev;
    }
    if (pthread_mutex_trylock(&dev->lock) == 0) return dev;
    // lanes made under a larger setting stay, unused
    const int most = lanes_max() - 1;
    int n = dev->lanes.load(std::memory_order_acquire);
    if (n > most) n = most;
    for (int i = 0; i < n; ++i)
        if (pthread_mutex_trylock(&dev->lane[i]->lock) == 0) return dev->lane[i];
    pthread_mutex_lock(&dev->lanes_lock);
    n = dev->lanes.load(std::memory_order_relaxed);
    Device *fresh = nullptr;
    // a lane that cannot be made (out of memory, say) is no failure: the
    // batch waits for one that exists
    if (n < most && device_create(dev->gpu, &fresh) == SIMIL_OK) {
        fresh->sm_count = dev->sm_count;
        pthread_mutex_lock(&fresh->lock);
        dev->lane[n] = fresh;
        dev->lanes.store(n + 1, std::memory_order_release);
    }
    pthread_mutex_unlock(&dev->lanes_lock);
    if (fresh != nullptr) return fresh;
    if (n > most) n = most;
    const unsigned t = dev->turn.fetch_add(1, std::memory_order_relaxed) % (unsigned)(n + 1);
    Device *lane = t == 0 ? dev : dev->lane[t - 1];
    pthread_mutex_lock(&lane->lock);
    return lane;
}

namespace {

// One allocation through the fault injection, counted while it is held.
template <typename Allocate>
cudaError_t counted_malloc(void **p, size_t bytes, Allocate allocate)
{
    *p = nullptr;
    if (sml_device_alloc_injected_failure()) return cudaErrorMemoryAllocation;
    const cudaError_t err = allocate(p, bytes);
    if (err != cudaSuccess) {
        *p = nullptr;
        return err;
    }
    live_blocks.fetch_add(1);
    return cudaSuccess;
}

}  // namespace

cudaError_t device_malloc(void **p, size_t bytes)
{
    return counted_malloc(p, bytes, [](void **q, size_t n) { return cudaMalloc(q, n); });
}

cudaError_t pinned_malloc(void **p, size_t bytes)
{
    return counted_malloc(p, bytes, [](void **q, size_t n) { return cudaMallocHost(q, n); });
}

void device_free(void *p)
{
    if (p == nullptr) return;
    cudaFree(p);
    live_blocks.fetch_sub(1);
}

void pinned_free(void *p)
{
    if (p == nullptr) return;
    cudaFreeHost(p);
    live_blocks.fetch_sub(1);
}

namespace {

// A block of the lane's that is freed and made again may come back at the
// same address; a graph whose copy named the old block would then look like
// the new work and be replayed (cuGraphLaunch crashed on such a graph on an
// H200), so the lane's graphs go with it.
simil_status grow_device_buffer(Device *dev, void **buffer, size_t *have, size_t bytes,
                                void **out)
{
    if (bytes > *have) {
        if (*buffer != nullptr) replay_forget(dev);
        device_free(*buffer);
        *buffer = nullptr;
        *have = 0;
        SML_CUDA_TRY(device_malloc(buffer, bytes));
        *have = bytes;
    }
    *out = *buffer;
    return SIMIL_OK;
}

}  // namespace

simil_status device_workspace(Device *dev, size_t bytes, void **out)
{
    return grow_device_buffer(dev, &dev->workspace, &dev->workspace_bytes, bytes, out);
}

simil_status device_io(Device *dev, size_t bytes, void **out)
{
    return grow_device_buffer(dev, &dev->io, &dev->io_bytes, bytes, out);
}

simil_status device_out(Device *dev, size_t bytes, void **out)
{
    return grow_device_buffer(dev, &dev->out, &dev->out_bytes, bytes, out);
}

simil_status device_filter(Device *dev, size_t bytes, void **out)
{
    return grow_device_buffer(dev, &dev->filter, &dev->filter_bytes, bytes, out);
}

namespace {

// A copy from the old block may still be pending on a stream (stage_inputs
// does not wait for its upload): it ends before the block is freed.
simil_status grow_pinned_buffer(Device *dev, void **buffer, size_t *have, size_t bytes,
                                void **out)
{
    if (bytes > *have) {
        if (*buffer != nullptr) {
            for (int i = 0; i < 2; ++i) SML_CUDA_TRY(cudaStreamSynchronize(dev->stream[i]));
            replay_forget(dev);  // as grow_device_buffer's
        }
        pinned_free(*buffer);
        *buffer = nullptr;
        *have = 0;
        SML_CUDA_TRY(pinned_malloc(buffer, bytes));
        *have = bytes;
    }
    *out = *buffer;
    return SIMIL_OK;
}

}  // namespace

simil_status device_pinned(Device *dev, size_t bytes, void **out)
{
    return grow_pinned_buffer(dev, &dev->pinned, &dev->pinned_bytes, bytes, out);
}

simil_status device_results(Device *dev, size_t bytes, void **out)
{
    return grow_pinned_buffer(dev, &dev->results, &dev->results_bytes, bytes, out);
}

simil_status device_staged(Device *dev, size_t bytes, void **out)
{
    return grow_pinned_buffer(dev, &dev->staged, &dev->staged_bytes, bytes, out);
}

simil_status device_tickets(Device *dev, size_t n, unsigned **out)
{
    const size_t bytes = (n + 255) / 256 * 256 * sizeof(unsigned);
    if (bytes > dev->tickets_bytes) {
        void *grown;
        SML_TRY(grow_device_buffer(dev, reinterpret_cast<void **>(&dev->tickets),
                                   &dev->tickets_bytes, bytes, &grown));
        // zeroed once: every kernel that takes tickets leaves them zero
        const cudaError_t e = cudaMemsetAsync(grown, 0, bytes, dev->stream[0]);
        if (e != cudaSuccess) dev->tickets_bytes = 0;  // grown and zeroed again next time
        SML_CUDA_TRY(e);
    }
    *out = dev->tickets;
    return SIMIL_OK;
}

void device_tickets_reset(Device *dev)
{
    if (dev->tickets == nullptr) return;
    if (cudaMemsetAsync(dev->tickets, 0, dev->tickets_bytes, dev->stream[0]) != cudaSuccess ||
        cudaStreamSynchronize(dev->stream[0]) != cudaSuccess) {
        cudaGetLastError();
        // counters that may be wrong are not used again
        replay_forget(dev);  // as grow_device_buffer's
        device_free(dev->tickets);
        dev->tickets = nullptr;
        dev->tickets_bytes = 0;
    }
}

simil_status device_join_caller(Device *dev)
{
    SML_CUDA_TRY(cudaEventRecord(dev->caller, cudaStreamLegacy));
    for (int i = 0; i < 2; ++i) SML_CUDA_TRY(cudaStreamWaitEvent(dev->stream[i], dev->caller, 0));
    return SIMIL_OK;
}

size_t device_free_bytes(Device *dev)
{
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    // what the workspace holds now can be reused; keep 512 MiB for cuBLAS and others
    free_bytes += dev->workspace_bytes;
    const size_t margin = (size_t)512 << 20;
    return free_bytes > margin ? free_bytes - margin : 0;
}

bool is_device_pointer(const void *p)
{
    cudaPointerAttributes attr;
    if (p == nullptr || cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

}  // namespace sml

extern "C" int sml_cuda_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // clear the "no driver" error
        return 0;
    }
    return count;
}

extern "C" int sml_cuda_built(void) { return 1; }

extern "C" simil_status sml_cuda_memory_info(int gpu, size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = *total_bytes = 0;
    const int count = sml_cuda_device_count();
    SML_RETURN_IF(gpu < 0 || gpu >= count, SIMIL_ERR_NO_DEVICE,
                  "GPU %d: %d GPU%s usable", gpu, count, count == 1 ? " is" : "s are");
    int previous = 0;
    cudaGetDevice(&previous);
    cudaError_t e = cudaSetDevice(gpu);
    if (e == cudaSuccess) e = cudaMemGetInfo(free_bytes, total_bytes);
    cudaSetDevice(previous);
    if (e != cudaSuccess) cudaGetLastError();
    SML_RETURN_IF(e != cudaSuccess, SIMIL_ERR_DEVICE, "GPU %d: cudaMemGetInfo failed: %s", gpu,
                  cudaGetErrorString(e));
    return SIMIL_OK;
}

extern "C" long long sml_cuda_live_allocations(void) { return sml::live_blocks.load(); }

extern "C" void sml_cuda_lanes(int lanes)
{
    sml::lanes_setting.store(lanes <= 0 ? sml::kDefaultLanes
                                        : lanes > sml::kMaxLanes ? sml::kMaxLanes : lanes);
}

extern "C" int sml_cuda_pointer_is_device(const void *p) { return sml::is_device_pointer(p); }

extern "C" int sml_cuda_pointer_device(const void *p)
{
    cudaPointerAttributes attr;
    if (p == nullptr || cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return attr.device;
}

extern "C" simil_status sml_cuda_backend_open(int gpu, sml_backend **out)
{
    using namespace sml;
    *out = nullptr;
    const int count = sml_cuda_device_count();
    SML_RETURN_IF(gpu < 0 || gpu >= count || gpu >= kMaxDevices, SIMIL_ERR_NO_DEVICE,
                  "GPU %d requested, but %d GPU%s usable (no driver or device?); use the CPU "
                  "(device \"cpu\")",
                  gpu, count, count == 1 ? " is" : "s are");
    sml_backend *b;
    SML_TRY(sml_calloc(reinterpret_cast<void **>(&b), 1, sizeof *b, "the GPU backend"));
    pthread_mutex_lock(&devices_lock);
    simil_status s = SIMIL_OK;
    if (devices[gpu] == nullptr) s = device_create(gpu, &devices[gpu]);
    if (s == SIMIL_OK) devices[gpu]->refs++;
    Device *dev = devices[gpu];
    pthread_mutex_unlock(&devices_lock);
    if (s != SIMIL_OK) {
        sml_free(b);
        return s;
    }
    b->ops = &cuda_ops;
    b->gpu = gpu;
    b->impl = dev;
    // Exact search keeps its fast path up to k = 1024 and re-ranks every
    // candidate with the same per-query code (cuda_knn.cu); 1024 queries is
    // already a batch the GPU runs efficiently, more are not worth a wait.
    b->batch_max_queries = 1024;
    b->batch_max_k = 1024;
    b->batch_lanes = lanes_max();
    snprintf(b->name, sizeof b->name, "cuda:%d (%s)", gpu, dev->name);
    *out = b;
    return SIMIL_OK;
}
