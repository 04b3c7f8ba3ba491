// cuda_blas.cu: cuBLAS through dlopen (see cuda_blas.cuh).
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "core/error.h"
#include "cuda/cuda_blas.cuh"

namespace sml {
namespace {

// cublasGemmEx is overloaded in C++; this is the C entry point's type.
typedef cublasStatus_t (*GemmExFn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                   int, int, const void *, const void *, cudaDataType, int,
                                   const void *, cudaDataType, int, const void *, void *,
                                   cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

struct BlasLibrary {
    void *handle;
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSgemm_v2) sgemm;
    GemmExFn gemm_ex;
    decltype(&cublasSetMathMode) set_math_mode;
};

BlasLibrary blas_lib;
pthread_once_t blas_once = PTHREAD_ONCE_INIT;
char blas_load_error[512];

template <typename F>
bool blas_symbol(F &fn, const char *name)
{
    fn = reinterpret_cast<F>(dlsym(blas_lib.handle, name));
    if (fn == nullptr) snprintf(blas_load_error, sizeof blas_load_error, "cuBLAS lacks %s", name);
    return fn != nullptr;
}

void blas_load()
{
    const char *names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so",
                           "/usr/local/cuda/lib64/libcublas.so.13",
                           "/usr/local/cuda/lib64/libcublas.so"};
    for (const char *name : names) {
        blas_lib.handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (blas_lib.handle) break;
    }
    if (blas_lib.handle == nullptr) {
        snprintf(blas_load_error, sizeof blas_load_error,
                 "cannot load cuBLAS (libcublas.so.13): %s; install the CUDA libraries or "
                 "add their folder to LD_LIBRARY_PATH",
                 dlerror());
        return;
    }
    bool ok = blas_symbol(blas_lib.create, "cublasCreate_v2") &&
              blas_symbol(blas_lib.destroy, "cublasDestroy_v2") &&
              blas_symbol(blas_lib.set_stream, "cublasSetStream_v2") &&
              blas_symbol(blas_lib.sgemm, "cublasSgemm_v2") &&
              blas_symbol(blas_lib.gemm_ex, "cublasGemmEx") &&
              blas_symbol(blas_lib.set_math_mode, "cublasSetMathMode");
    if (!ok) {
        dlclose(blas_lib.handle);
        blas_lib.handle = nullptr;
    }
}

simil_status blas_status(cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS) return SIMIL_OK;
    if (s == CUBLAS_STATUS_ALLOC_FAILED)
        return sml_error(SIMIL_ERR_OUT_OF_MEMORY, "out of GPU memory in %s", what);
    return sml_error(SIMIL_ERR_DEVICE, "%s failed with cuBLAS status %d", what, (int)s);
}

}  // namespace

struct Blas {
    cublasHandle_t handle;
};

simil_status blas_create(cudaStream_t stream, Blas **out)
{
    *out = nullptr;
    pthread_once(&blas_once, blas_load);
    SML_RETURN_IF(blas_lib.handle == nullptr, SIMIL_ERR_NO_DEVICE, "%s", blas_load_error);
    Blas *b;
    SML_TRY(sml_calloc(reinterpret_cast<void **>(&b), 1, sizeof *b, "a cuBLAS handle"));
    simil_status s = blas_status(blas_lib.create(&b->handle), "cublasCreate");
    if (s == SIMIL_OK) s = blas_status(blas_lib.set_stream(b->handle, stream), "cublasSetStream");
    // fp32 GEMMs stay fp32: the fast path rounds on purpose and bounds the error.
    if (s == SIMIL_OK)
        s = blas_status(blas_lib.set_math_mode(b->handle, CUBLAS_PEDANTIC_MATH),
                        "cublasSetMathMode");
    if (s != SIMIL_OK) {
        if (b->handle) blas_lib.destroy(b->handle);
        sml_free(b);
        return s;
    }
    *out = b;
    return SIMIL_OK;
}

void blas_destroy(Blas *b)
{
    if (b == nullptr) return;
    blas_lib.destroy(b->handle);
    sml_free(b);
}

// Row-major C = A * B^T is column-major C^T = B * A^T: cuBLAS sees B transposed
// (n x k from its k x n storage) times A (k x m).
simil_status blas_gemm_f32(Blas *b, int m, int n, int k, float alpha, const float *a, int lda,
                           const float *bm, int ldb, float beta, float *c, int ldc)
{
    return blas_status(blas_lib.sgemm(b->handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, bm,
                                      ldb, a, lda, &beta, c, ldc),
                       "cublasSgemm");
}

simil_status blas_gemm_f16(Blas *b, int m, int n, int k, float alpha, const __half *a, int lda,
                           const __half *bm, int ldb, float beta, __half *c, int ldc)
{
    return blas_status(blas_lib.gemm_ex(b->handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, bm,
                                        CUDA_R_16F, ldb, a, CUDA_R_16F, lda, &beta, c,
                                        CUDA_R_16F, ldc, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT),
                       "cublasGemmEx (fp16)");
}

}  // namespace sml
