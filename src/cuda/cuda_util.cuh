// cuda_util.cuh: error handling shared by the CUDA sources.
//
// Every CUDA call is checked.  SML_CUDA_TRY turns a failed call into a
// simil_status (out of memory stays SIMIL_ERR_OUT_OF_MEMORY, anything else is
// SIMIL_ERR_DEVICE) with a message naming the call; SML_LAUNCH_TRY checks
// cudaGetLastError after a kernel launch.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include "core/error.h"
#include "core/trace.h"

namespace sml {

constexpr unsigned kFullMask = 0xffffffffu;

inline simil_status cuda_status(cudaError_t err, const char *what, const char *file, int line)
{
    if (err == cudaSuccess) return SIMIL_OK;
    cudaGetLastError();  // clear a non-sticky error so later calls start clean
    if (err == cudaErrorMemoryAllocation) {
        size_t free_bytes = 0, total = 0;
        cudaMemGetInfo(&free_bytes, &total);
        return sml_error(SIMIL_ERR_OUT_OF_MEMORY,
                         "out of GPU memory in %s (%.2f GiB free of %.2f GiB); use a smaller "
                         "batch, another index type, or the CPU (device \"cpu\")",
                         what, free_bytes / 1073741824.0, total / 1073741824.0);
    }
    return sml_error(SIMIL_ERR_DEVICE, "CUDA error in %s (%s:%d): %s", what, file, line,
                     cudaGetErrorString(err));
}

// A SIMIL_TRACE mark (core/trace.h) for the work issued on st so far: traced,
// it waits for the stream first, so the GPU's time is counted where its work
// was issued.
inline void trace_mark(cudaStream_t st, const char *what)
{
    if (!sml_trace_on()) return;
    cudaStreamSynchronize(st);
    sml_trace_mark(what);
}

}  // namespace sml

#define SML_CUDA_TRY(call)                                                           \
    do {                                                                             \
        cudaError_t sml_cuda_err_ = (call);                                          \
        if (sml_cuda_err_ != cudaSuccess)                                            \
            return sml::cuda_status(sml_cuda_err_, #call, __FILE__, __LINE__);       \
    } while (0)

#define SML_LAUNCH_TRY(kernel_name)                                                  \
    do {                                                                             \
        cudaError_t sml_cuda_err_ = cudaGetLastError();                              \
        if (sml_cuda_err_ != cudaSuccess)                                            \
            return sml::cuda_status(sml_cuda_err_, "launch of " kernel_name, __FILE__, __LINE__); \
    } while (0)
