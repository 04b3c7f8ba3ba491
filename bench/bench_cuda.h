/* bench_cuda.h: what the GPU benchmark programs share (include after
 * cuda_runtime.h). */
#ifndef SIMIL_BENCH_CUDA_H
#define SIMIL_BENCH_CUDA_H

#include <cuda_runtime.h>
#include <stddef.h>

/* The device-to-device copy bandwidth in GB/s, counting bytes read and
 * written: the best of 5 copies of bytes, after one warm-up; 0 if the
 * buffers do not fit. */
static inline double bench_copy_bandwidth(size_t bytes)
{
    void *a = NULL, *b = NULL;
    if (cudaMalloc(&a, bytes) || cudaMalloc(&b, bytes)) {
        cudaFree(a);
        return 0;
    }
    cudaMemset(a, 1, bytes);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    float best = 1e30f;
    for (int r = 0; r < 5; r++) {
        cudaEventRecord(e0, 0);
        cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (ms < best) best = ms;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return 2.0 * (double)bytes / (best * 1e-3) / 1e9;
}

#endif
