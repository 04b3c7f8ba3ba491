/* select_api.c: simil_select_k, on the backend that holds the data. */
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "index/index_internal.h"
#include "simil/select.h"

simil_status simil_select_k(int64_t rows, int64_t cols, const float *values, int64_t k,
                            int largest, float *out_values, int64_t *out_indices)
{
    SML_RETURN_IF(rows < 0 || cols < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "select_k: rows=%" PRId64 " and cols=%" PRId64 " must not be negative", rows,
                  cols);
    SML_RETURN_IF(k < 1, SIMIL_ERR_INVALID_ARGUMENT, "select_k: k=%" PRId64 " must be >= 1", k);
    if (rows == 0) return SIMIL_OK;
    SML_RETURN_IF(!sml_product_fits(rows, cols, SML_MAX_FLOATS) ||
                      !sml_product_fits(rows, k, (int64_t)1 << 40),
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "select_k: rows=%" PRId64 " x cols=%" PRId64 " values or x k=%" PRId64
                  " results is too many (at most 2^61 values and 2^40 results)",
                  rows, cols, k);
    SML_RETURN_IF(values == NULL && cols > 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "select_k: values is NULL");
    SML_RETURN_IF(out_values == NULL || out_indices == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "select_k: outputs must not be NULL");
    const int on_gpu = sml_cuda_pointer_is_device(out_values);
    SML_RETURN_IF((cols > 0 && sml_cuda_pointer_is_device(values) != on_gpu) ||
                      sml_cuda_pointer_is_device(out_indices) != on_gpu,
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "select_k: values and outputs must all be in host memory or all in GPU "
                  "memory");
    sml_backend *b;
    if (on_gpu) {
        SML_TRY(sml_cuda_backend_open(sml_cuda_pointer_device(out_values), &b));
    } else {
        SML_TRY(sml_cpu_backend_open(&b));
    }
    simil_status s = b->ops->select_k(b, rows, cols, values, k, largest, out_values, out_indices);
    sml_backend_close(b);
    return s;
}
