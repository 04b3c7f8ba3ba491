/* cpu_knn.h: exact k-NN on the CPU (the oracle for every other backend). */
#ifndef SML_CPU_KNN_H
#define SML_CPU_KNN_H

#include <stdbool.h>

#include "core/backend.h"
#include "cpu/cpu_select.h"

/* Batches of at most this many queries, for at most this many neighbours,
 * compute each query's distances directly, on their own (no GEMM): each
 * query's results do not depend on the others. */
#define SML_CPU_KNN_DIRECT_MAX_QUERIES 16
#define SML_CPU_KNN_DIRECT_MAX_K 4096

/* Runs args (all pointers in host memory).  See sml_knn_args. */
simil_status sml_cpu_knn(const sml_knn_args *args);

/* Dot product and squared L2 distance of two dim-vectors, vectorized. */
float sml_cpu_dot(const float *a, const float *b, int64_t dim);
float sml_cpu_l2sq(const float *a, const float *b, int64_t dim);

/* The GEMM blocks of sml_cpu_knn, for callers that choose their own base rows
 * (the inverted-list join, cpu_join.c).  scan pushes the keys of m queries
 * (rows of `queries`, dim = a->dim) against base rows [first, first + count)
 * of a (base, base_norms, base_ids, metric; no filter) into lists[0..m),
 * tile rows at a time; scores holds m x tile floats.  finish writes each list's k (= a->k)
 * best as distances and labels (rows of a->k), the query norm added for L2.
 * Single-threaded: call from one thread per block, with OpenBLAS kept to one
 * thread (see sml_cpu_blas_one_caller). */
void sml_cpu_knn_block_scan(const sml_knn_args *a, const float *queries, int64_t m,
                            int64_t first, int64_t count, int64_t tile, float *scores,
                            sml_topk *lists);
void sml_cpu_knn_block_finish(const sml_knn_args *a, const float *queries, int64_t m,
                              sml_topk *lists, float *distances, int64_t *labels);

/* The join of inverted lists (cpu_join.c; see sml_join_args). */
simil_status sml_cpu_knn_join(sml_backend *b, const sml_join_args *args);

/* True when OpenBLAS is its pthread build, whose GEMMs must all come from one
 * thread (see cpu_knn.c). */
bool sml_cpu_blas_one_caller(void);

#endif
