/* cpu_knn.h: exact k-NN on the CPU (the oracle for every other backend). */
#ifndef SML_CPU_KNN_H
#define SML_CPU_KNN_H

#include "core/backend.h"

/* Runs args (all pointers in host memory).  See sml_knn_args. */
simil_status sml_cpu_knn(const sml_knn_args *args);

/* Dot product and squared L2 distance of two dim-vectors, vectorized. */
float sml_cpu_dot(const float *a, const float *b, int64_t dim);
float sml_cpu_l2sq(const float *a, const float *b, int64_t dim);

#endif
