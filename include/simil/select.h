/* simil/select.h: k-selection over the rows of a matrix, on the GPU when the
 * data is in GPU memory (WarpSelect / BlockSelect up to k = 2048, radix
 * selection beyond), and on the CPU otherwise. */
#ifndef SIMIL_SELECT_H
#define SIMIL_SELECT_H

#include <stdint.h>

#include "simil/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* For each of rows rows of cols floats (row-major), the k smallest values
 * (largest when largest != 0), sorted, with their column indices; ties go to
 * the smaller index.  k may exceed cols: the extra slots get +inf (-inf when
 * largest) and index -1.  NaN counts as +inf (smallest selection) and is never
 * returned before a number.
 * values, out_values (rows x k) and out_indices (rows x k) are all in host
 * memory or all in the memory of one GPU. */
SIMIL_API simil_status simil_select_k(int64_t rows, int64_t cols, const float *values, int64_t k,
                                      int largest, float *out_values, int64_t *out_indices);

#ifdef __cplusplus
}
#endif
#endif
