// cuda_device.cuh: one GPU's resources, shared by every index on it.
//
// Two streams (tiles alternate between them so that one tile's GEMM overlaps
// the other's selection), a cuBLAS handle per stream, a device workspace and a
// pinned host buffer.  Both buffers grow on demand, under the device lock, and
// are reused across calls: the search paths size what they need first and
// ask once.  A call that uses them holds the lock for its duration.
//
// Lanes: a small batch (an IVF search of at most ivf_small_max() queries)
// leaves most of the GPU idle, and its call is mostly waits for launches and
// copies, so that small batches of several threads are best run side by
// side.  The GPU's Device is lane 0; up to lanes_max() - 1 more, each a
// Device of its own (streams, cuBLAS handles, buffers, lock), are made the
// first time every lane is busy, and kept with it.  lane_lock hands a small
// batch the first free lane; everything else runs on lane 0.
#pragma once

#include <cuda_runtime.h>
#include <pthread.h>

#include <atomic>

#include "core/backend.h"
#include "cuda/cuda_blas.cuh"

namespace sml {

// The caller's filter (core/id_filter.h) as the last filtered search
// uploaded it: on the device, and its pinned host copy to compare the next
// filter with, so that a filter sent again is not uploaded again.  held: its
// bytes (0: none); kind and count tell a bitset of nbits from a list of n.
struct FilterCopy {
    void *device;
    size_t device_bytes;
    void *host;
    size_t host_bytes;
    cudaEvent_t copied;  // the upload from host ends
    size_t held;
    bool bits;
    long long count;
    uint64_t stamp;  // sml_id_filter::stamp of the bytes held, or 0
};

struct ReplayCache;  // cuda_replay.cuh

struct Device {
    int gpu;
    int refs;  // backends open on it; at 0 its buffers are freed, the rest kept
    int sm_count;
    char name[96];  // cudaDeviceProp::name
    cudaStream_t stream[2];
    cudaEvent_t done[2];
    cudaEvent_t caller;  // see device_join_caller
    Blas *blas[2];
    void *workspace;
    size_t workspace_bytes;
    void *pinned;
    size_t pinned_bytes;
    void *results;  // pinned: a search's results on their way to the caller
    size_t results_bytes;
    void *staged;  // pinned: a streamed scan's queries (QueryStream, cuda_ivf.cuh)
    size_t staged_bytes;
    void *io;  // a search's inputs, beside the workspace that its steps use
    size_t io_bytes;
    void *out;  // a large batch's finished results, before their copy to `results`
    size_t out_bytes;
    void *filter;  // a filtered search's allowed rows (cuda_filter.cuh)
    size_t filter_bytes;
    unsigned *tickets;  // a small batch's counters, zero between calls (ivf_small_merge.cuh)
    size_t tickets_bytes;
    FilterCopy sent;  // the last filter uploaded (cuda_filter.cuh)
    ReplayCache *replay;  // small calls' graphs (cuda_replay.cuh), or null
    pthread_mutex_t lock;
    // lane 0 only: the other lanes, lane[0 .. lanes - 1] (written under
    // lanes_lock, before lanes grows; read without it)
    Device *lane[15];
    std::atomic<int> lanes;
    std::atomic<unsigned> turn;  // the lane a small batch waits for when all are busy
    pthread_mutex_t lanes_lock;
};

// Lanes a GPU may have at most (lane 0 included), 1 to 16 (sml_cuda_lanes).
int lanes_max();

// A lane of dev (lane 0), locked: for small, the first free one (a new one
// if every lane is busy and fewer than lanes_max() exist), else dev itself.
// The caller releases it with pthread_mutex_unlock(&lane->lock).
Device *lane_lock(Device *dev, bool small);

// Every GPU allocation of the library goes through these four (cuBLAS's own
// do not).  They ask the test-time fault injection first
// (sml_device_alloc_fail_at, core/alloc.h): an injected failure returns
// cudaErrorMemoryAllocation without calling CUDA.  They also count the blocks
// held (sml_cuda_live_allocations).  *p is NULL after a failure; freeing NULL
// does nothing.
cudaError_t device_malloc(void **p, size_t bytes);
cudaError_t pinned_malloc(void **p, size_t bytes);
void device_free(void *p);
void pinned_free(void *p);

template <typename T>
cudaError_t device_malloc(T **p, size_t bytes)
{
    return device_malloc(reinterpret_cast<void **>(p), bytes);
}

// The backend of a GPU index: its ops table points here.
inline Device *device_of(sml_backend *b) { return static_cast<Device *>(b->impl); }

// Grow the workspace (or pinned buffer, input, filter or results buffer)
// to at least bytes; contents are lost.  A pinned buffer that grows is freed
// only after the streams' work, which may still be copying from it, ends, so
// that a copy from pinned memory needs no wait of its own.  Caller holds
// dev->lock.
simil_status device_workspace(Device *dev, size_t bytes, void **out);
simil_status device_pinned(Device *dev, size_t bytes, void **out);
simil_status device_io(Device *dev, size_t bytes, void **out);
simil_status device_filter(Device *dev, size_t bytes, void **out);
// Pinned memory apart from device_pinned's, for results going to the host:
// a scan's plan in the pinned buffer stays intact while they come back.
simil_status device_results(Device *dev, size_t bytes, void **out);
// Pinned memory apart from both, for queries that go up while a scan that
// uses the other two runs (QueryStream).
simil_status device_staged(Device *dev, size_t bytes, void **out);
// Device memory for a large batch's finished results (finish_to_host).
simil_status device_out(Device *dev, size_t bytes, void **out);

// n counters of device memory, zero, for a kernel that leaves them zero
// (device_tickets_reset after a failed call, which may not have).
simil_status device_tickets(Device *dev, size_t n, unsigned **out);
void device_tickets_reset(Device *dev);

// The caller may still be writing the GPU arrays it passes, on the legacy
// default stream (a cudaMemcpy from pageable memory returns before its DMA
// ends), and the library's streams are non-blocking: make both wait for the
// default stream's work so far.  Every call that reads caller memory on the
// GPU starts with it.  Caller holds dev->lock.
simil_status device_join_caller(Device *dev);

// Bytes a new device allocation could take now, keeping a margin for cuBLAS.
size_t device_free_bytes(Device *dev);

// 1 if p is device (or managed) memory.
bool is_device_pointer(const void *p);

// The shadow of a stored matrix: rows scaled by powers of two (norm in
// [64, 128)) and rounded to fp16, for tensor-core GEMMs (cuda_knn.cu).
struct Shadow {
    __half *rows;        // capacity x dim
    float *inv_scale;    // per row: 1 / its scale (a power of two)
    float max_norm;      // largest row norm, for the error bound
    long long n;
    long long capacity;
    long long dim;
};

simil_status shadow_sync(sml_backend *b, void **shadow, const float *base, int64_t have,
                         int64_t n, int64_t dim, simil_metric metric);
void shadow_free(sml_backend *b, void *shadow);

simil_status cuda_knn(sml_backend *b, const sml_knn_args *args);
// cuda_knn for a caller that holds dev->lock and has joined the caller's stream.
simil_status knn_locked(Device *dev, const sml_knn_args *args);
simil_status cuda_knn_join(sml_backend *b, const sml_join_args *args);
simil_status cuda_ivf_flat_scan(sml_backend *b, const sml_ivf_scan_args *args);
simil_status cuda_ivf_pq_scan(sml_backend *b, const sml_ivf_pq_scan_args *args);
simil_status cuda_pq_encode(sml_backend *b, const sml_pq_encode_args *args);
simil_status cuda_sq_scan(sml_backend *b, const sml_sq_scan_args *args);
simil_status cuda_xfbq_scan(sml_backend *b, const sml_xfbq_scan_args *args);
simil_status cuda_xfbq_encode(sml_backend *b, const sml_xfbq_encode_args *args);
// xfbq_encode's kernel on st, without a wait: for a caller that holds
// dev->lock (the XFBQ scan codes its staged queries with it).
simil_status launch_xfbq_encode(const sml_xfbq_encode_args *args, cudaStream_t st);
// y = x r for n rows of dim floats (RR's rotation; device memory), each
// component core/xfbq_code.h's sml_xfbq_rotated_component, bit for bit.
simil_status launch_xfbq_rotate(const float *x, const float *r, int dim, long long n, float *y,
                                cudaStream_t st);
simil_status cuda_cluster_sums(sml_backend *b, int64_t n, int64_t dim, const float *x,
                               const int64_t *labels, int64_t k, float *sums, int64_t *counts);
simil_status cuda_select_k(sml_backend *b, int64_t rows, int64_t cols, const float *values,
                           int64_t k, int largest, float *out_values, int64_t *out_indices);

}  // namespace sml
