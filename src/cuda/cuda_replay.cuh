// cuda_replay.cuh: a small IVF call's stream work as one CUDA graph launch.
//
// Why: a small IVF call (the query's upload, the coarse kernel, the scan
// kernel, one wait) spends most of its time in the driver when many threads
// call at once: each stream operation waits its turn for the driver, 2-3 us
// alone and 7-8 us with eight lanes issuing (docs/benchmarks.md, "Many
// callers").  Replayed as a graph, the call's three operations are one.
//
// A graph is reused only for work that is byte for byte the same as the one
// it was made from: the same kernels, grids, shared memory and arguments
// (pointers into the lane's buffers included), and the same copies.  A
// query travels through the lane's pinned buffer, whose address, not its
// contents, is part of the work.  So a replay issues exactly what the
// operations one by one would.
//
// Use: a Replay opened on a lane before a call's first stream operation
// records, on this thread, what launch() and copy_async() are given instead
// of issuing it; replay_submit() then issues the record on the lane's
// stream (a cached graph, a new one, or operation by operation).  Every
// stream operation between the two must go through launch() or copy_async():
// one issued directly would run before the recorded ones.  Operations that
// only prepare (a buffer's growth, zeroing new tickets) may be issued
// directly, since they belong before the recorded work anyway.  A Replay
// closed without a submit issues nothing: the call failed before its work.
#pragma once

#include <cuda_runtime.h>

#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda/cuda_device.cuh"

namespace sml {

struct ReplayRecord;

// The record of this thread's open Replay, or null (operations are issued).
ReplayRecord *replay_recording();

// Record a kernel launch; false where the record is full (the caller then
// issues the launch itself, after replay_spill).
bool replay_kernel(ReplayRecord *r, const void *func, dim3 grid, dim3 block, size_t smem,
                   void **params, const size_t *sizes, int nparams);
bool replay_copy(ReplayRecord *r, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);

// Issue what r holds, one by one, and record no more: the next operations
// are issued in order after it.
cudaError_t replay_spill(ReplayRecord *r);

class Replay {
public:
    // Opens on dev's stream 0 if enabled (sml_cuda_replay) and tracing is
    // off; otherwise, for a null dev, or where one is open on this thread,
    // does nothing.
    explicit Replay(Device *dev);
    ~Replay();
    Replay(const Replay &) = delete;
    Replay &operator=(const Replay &) = delete;

private:
    ReplayRecord *record_;
};

// Issue the open Replay's record on dev's stream 0 (nothing if none is open)
// and close it.
simil_status replay_submit(Device *dev);

// Destroys the lane's graphs: one of its buffers is about to be freed
// (cuda_backend.cu's grow_device_buffer says why).
void replay_forget(Device *dev);

// The lane's graphs and their cache, freed with its buffers.
void replay_free(Device *dev);

// A parameter's padding bytes, zeroed so that records compare by their bytes:
// a struct copied member by member leaves whatever its storage held there,
// and equal work would then look different (a graph made every call; GCC 11
// and Clang 16 have the builtin).
#if defined(__has_builtin)
#if __has_builtin(__builtin_clear_padding)
#define SML_CLEAR_PADDING(p) __builtin_clear_padding(p)
#endif
#endif
#ifndef SML_CLEAR_PADDING
#define SML_CLEAR_PADDING(p) ((void)(p))
#endif

template <typename Tuple, size_t... I>
void replay_params(Tuple &t, void **ptrs, size_t *sizes, std::index_sequence<I...>)
{
    ((SML_CLEAR_PADDING(&std::get<I>(t)), ptrs[I] = static_cast<void *>(&std::get<I>(t)),
      sizes[I] = sizeof(std::tuple_element_t<I, Tuple>)),
     ...);
}

// kernel<<<grid, block, smem, st>>>(args...), or recorded while a Replay
// is open on this thread.
template <typename... P, typename... A>
cudaError_t launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                   A &&...args)
{
    static_assert(sizeof...(P) == sizeof...(A), "one argument per parameter");
    std::tuple<std::decay_t<P>...> params{std::forward<A>(args)...};
    void *ptrs[sizeof...(P) > 0 ? sizeof...(P) : 1];
    size_t sizes[sizeof...(P) > 0 ? sizeof...(P) : 1];
    replay_params(params, ptrs, sizes, std::index_sequence_for<P...>{});
    const void *func = reinterpret_cast<const void *>(kernel);
    if (ReplayRecord *r = replay_recording()) {
        if (replay_kernel(r, func, grid, block, smem, ptrs, sizes, (int)sizeof...(P)))
            return cudaSuccess;
        const cudaError_t e = replay_spill(r);
        if (e != cudaSuccess) return e;
    }
    return cudaLaunchKernel(func, grid, block, ptrs, smem, st);
}

// cudaMemcpyAsync, or recorded while a Replay is open on this thread.
cudaError_t copy_async(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                       cudaStream_t st);

}  // namespace sml
