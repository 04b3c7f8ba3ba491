/* kmeans.h: the k-means driver over a backend (kmeans.c). */
#ifndef SML_ALGO_KMEANS_H
#define SML_ALGO_KMEANS_H

#include "core/backend.h"
#include "simil/kmeans.h"

/* simil_kmeans on an open backend (see simil/kmeans.h). */
simil_status sml_kmeans_run(sml_backend *b, const simil_kmeans_params *params, int64_t n,
                            int64_t dim, const float *x, float *centroids, int64_t *assignments,
                            double *objective);

#endif
