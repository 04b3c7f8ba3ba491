/* cuda_backend.h: the CUDA backend's entry points, callable from C.
 * Implemented by the .cu files of src/cuda, or by cuda_stub.c in builds without CUDA. */
#ifndef SML_CUDA_BACKEND_H
#define SML_CUDA_BACKEND_H

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GPUs usable by this process: 0 without CUDA, driver or device. */
int sml_cuda_device_count(void);

/* 1 when built with CUDA. */
int sml_cuda_built(void);

/* 1 if p points to GPU memory (device or managed); 0 for host memory and in
 * builds without CUDA. */
int sml_cuda_pointer_is_device(const void *p);

/* The GPU that device pointer p belongs to (0 when unknown). */
int sml_cuda_pointer_device(const void *p);

/* Queries the exact GPU search re-ran on its fp32 path since the process
 * started, because their fast-path candidates could not be proven complete
 * (a statistic for tests and benchmarks). */
long long sml_cuda_fallback_queries(void);

/* Blocks of device and pinned memory the library holds now, from cudaMalloc
 * and cudaMallocHost (cuBLAS's own not counted): a statistic for leak checks
 * in tests.  The per-GPU workspace and pinned buffer count while an index or
 * call holds that GPU. */
long long sml_cuda_live_allocations(void);

/* Tests only: force the GPU k-selection kernel (0 automatic, 1 WarpSelect,
 * 2 BlockSelect).  Not for concurrent use. */
void sml_cuda_select_force(int which);

/* Open GPU gpu.  SIMIL_ERR_NO_DEVICE if it does not exist or CUDA is absent. */
simil_status sml_cuda_backend_open(int gpu, sml_backend **backend);

#ifdef __cplusplus
}
#endif
#endif
