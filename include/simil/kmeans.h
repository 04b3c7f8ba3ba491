/* simil/kmeans.h: k-means clustering (Lloyd iterations) on the CPU or a GPU.
 *
 * Assignment is exact nearest-centroid search (GEMM plus an arg-min), the
 * update a per-centroid mean.  Empty clusters are reseeded by splitting a
 * large one.  The training set is subsampled to at most
 * max_points_per_centroid * k points.  Results are deterministic for a given
 * seed on a given backend. */
#ifndef SIMIL_KMEANS_H
#define SIMIL_KMEANS_H

#include <stdint.h>

#include "simil/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum simil_kmeans_init {
    SIMIL_KMEANS_INIT_RANDOM = 0,    /* k distinct training points */
    SIMIL_KMEANS_INIT_PLUSPLUS = 1   /* k-means++ seeding */
} simil_kmeans_init;

/* Fill with simil_kmeans_params_init(), then change what you need. */
typedef struct simil_kmeans_params {
    int64_t k;                        /* clusters; required, >= 1 */
    int iterations;                   /* Lloyd iterations; default 20 */
    simil_kmeans_init init;           /* default SIMIL_KMEANS_INIT_RANDOM */
    int64_t max_points_per_centroid;  /* subsample above k * this; default 256; 0 = all */
    uint64_t seed;                    /* default 1234 */
    int spherical;                    /* 1: unit-norm centroids, for cosine / IP data */
    const char *device;               /* "auto" (default), "cpu", "gpu", "gpu:N" */
} simil_kmeans_params;

SIMIL_API void simil_kmeans_params_init(simil_kmeans_params *params);

/* Cluster n vectors of dim floats (host memory) into params->k centroids.
 * centroids: k x dim floats, written.
 * assignments: n entries (the nearest centroid of every input vector after the
 *   last iteration), or NULL.
 * objective: params->iterations entries, the sum of squared distances of the
 *   (subsampled) training points to their centroids at each iteration, or
 *   NULL.
 * Progress is reported as stage "kmeans", one unit per iteration. */
SIMIL_API simil_status simil_kmeans(const simil_kmeans_params *params, int64_t n, int64_t dim,
                                    const float *x, float *centroids, int64_t *assignments,
                                    double *objective);

#ifdef __cplusplus
}
#endif
#endif
