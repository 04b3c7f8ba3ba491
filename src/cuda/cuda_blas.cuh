// cuda_blas.cuh: the few cuBLAS calls simil makes, loaded at run time.
//
// cuBLAS is opened with dlopen when a GPU backend starts, so that a CUDA build
// of simil still loads and runs on the CPU on machines without the CUDA
// libraries (the runtime itself is linked statically).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "simil/status.h"

namespace sml {

struct Blas;

// Load cuBLAS (once per process) and create a handle bound to stream.
simil_status blas_create(cudaStream_t stream, Blas **blas);
void blas_destroy(Blas *blas);

// Row-major C (m x n, stride ldc) = alpha * A (m x k, stride lda) * B^T
// (B: n x k, stride ldb) + beta * C, in fp32.
simil_status blas_gemm_f32(Blas *blas, int m, int n, int k, float alpha, const float *a, int lda,
                           const float *b, int ldb, float beta, float *c, int ldc);

// The same with fp16 inputs and output, accumulated in fp32 on tensor cores.
simil_status blas_gemm_f16(Blas *blas, int m, int n, int k, float alpha, const __half *a,
                           int lda, const __half *b, int ldb, float beta, __half *c, int ldc);

}  // namespace sml
