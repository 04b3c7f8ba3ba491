/* pq.c: product quantizer training, encoding and decoding (see pq.h). */
#include "algo/pq.h"

#include <string.h>

#include "algo/kmeans.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/progress.h"

simil_status sml_pq_init(sml_pq *pq, int64_t dim, int64_t m, int nbits)
{
    memset(pq, 0, sizeof *pq);
    pq->dim = dim;
    pq->m = m;
    pq->dsub = dim / m;
    pq->nbits = nbits;
    pq->ksub = (int64_t)1 << nbits;
    return SIMIL_OK;
}

simil_status sml_pq_alloc(sml_pq *pq)
{
    if (pq->centroids != NULL) return SIMIL_OK;
    return sml_alloc((void **)&pq->centroids, (size_t)(pq->m * pq->ksub * pq->dsub), sizeof(float),
                     "PQ codebooks");
}

void sml_pq_free(sml_pq *pq)
{
    sml_free(pq->centroids);
    memset(pq, 0, sizeof *pq);
}

size_t sml_pq_code_bytes(int64_t m) { return ((size_t)m + 3) / 4 * 4; }

size_t sml_pq_code_size(const sml_pq *pq) { return sml_pq_code_bytes(pq->m); }

simil_status sml_pq_train(sml_backend *b, sml_pq *pq, int64_t n, const float *x, uint64_t seed,
                          int iterations)
{
    SML_RETURN_IF(n < pq->ksub, SIMIL_ERR_INVALID_ARGUMENT,
                  "PQ with %d-bit codes needs at least %" PRId64 " training vectors, got %" PRId64,
                  pq->nbits, pq->ksub, n);
    SML_TRY(sml_pq_alloc(pq));
    float *sub;
    SML_TRY(sml_alloc((void **)&sub, (size_t)(n * pq->dsub), sizeof(float), "PQ training"));
    simil_kmeans_params p;
    simil_kmeans_params_init(&p);
    p.k = pq->ksub;
    p.iterations = iterations;
    simil_status s = SIMIL_OK;
    for (int64_t i = 0; i < pq->m && s == SIMIL_OK; i++) {
#pragma omp parallel for schedule(static) if (n * pq->dsub > (1 << 16))
        for (int64_t r = 0; r < n; r++)
            memcpy(sub + r * pq->dsub, x + r * pq->dim + i * pq->dsub,
                   sizeof(float) * (size_t)pq->dsub);
        p.seed = seed + (uint64_t)i;
        s = sml_kmeans_run(b, &p, n, pq->dsub, sub, pq->centroids + i * pq->ksub * pq->dsub,
                           NULL, NULL);
        sml_progress("train PQ", i + 1, pq->m);
    }
    sml_free(sub);
    return s;
}

void sml_pq_decode(const sml_pq *pq, int64_t n, const uint8_t *codes, size_t code_size,
                   float *out)
{
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < pq->m; i++) {
            const uint8_t j = codes[(size_t)r * code_size + (size_t)i];
            memcpy(out + r * pq->dim + i * pq->dsub,
                   pq->centroids + (i * pq->ksub + j) * pq->dsub, sizeof(float) * (size_t)pq->dsub);
        }
}
