/* cuda_backend.h: the CUDA backend's statistics and test switches, callable
 * from C (its entry points for the layers above are in core/backend.h).
 * Implemented by the .cu files of src/cuda, or by cuda_stub.c in builds without CUDA. */
#ifndef SML_CUDA_BACKEND_H
#define SML_CUDA_BACKEND_H

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif
