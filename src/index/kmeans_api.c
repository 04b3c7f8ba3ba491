/* kmeans_api.c: simil_kmeans, on the backend its device string names (the
 * defaults of its parameters come from the driver, algo/kmeans.c). */
#include "algo/kmeans.h"
#include "core/error.h"
#include "index/index_internal.h"

simil_status simil_kmeans(const simil_kmeans_params *params, int64_t n, int64_t dim,
                          const float *x, float *centroids, int64_t *assignments,
                          double *objective)
{
    SML_RETURN_IF(params == NULL, SIMIL_ERR_INVALID_ARGUMENT, "k-means: params is NULL");
    SML_RETURN_IF(params->init != SIMIL_KMEANS_INIT_RANDOM &&
                      params->init != SIMIL_KMEANS_INIT_PLUSPLUS,
                  SIMIL_ERR_INVALID_ARGUMENT, "k-means: unknown init %d", (int)params->init);
    sml_backend *b;
    SML_TRY(sml_device_open(params->device, &b));
    simil_status s = sml_kmeans_run(b, params, n, dim, x, centroids, assignments, objective);
    sml_backend_close(b);
    return s;
}
