/* pq.c: product quantizer training, encoding and decoding (see pq.h).
 *
 * Training runs one k-means per sub-quantizer.  On the CPU the sub-quantizers
 * go to the threads, one k-means per thread, each on one thread: at PQ56 a
 * k-means iteration is a few milliseconds of work, and spreading each over
 * the team made 56 x 25 x 2 parallel regions, each ending at a barrier.  On a
 * loaded machine a barrier waits for whichever thread the scheduler has set
 * aside, and the waiting thread spins in libgomp meanwhile (22% of the CPU
 * time of an IVF256,PQ56 build on Fashion-MNIST went to that spinning, in
 * perf).
 * A k-means gives the same centroids on any number of threads (kmeans.c), so
 * the codebooks do not change. */
#include "algo/pq.h"

#include <assert.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "algo/kmeans.h"
#include "core/alloc.h"
#include "core/blas.h"
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

void sml_pq_pack_bits(const uint8_t *codes, int64_t m, int nbits, uint8_t *packed)
{
    assert(nbits >= 1 && nbits <= 8);
    memset(packed, 0, (size_t)((m * nbits + 7) / 8));
    for (int64_t j = 0, bit = 0; j < m; j++, bit += nbits) {
        const unsigned v = codes[j] & ((1u << nbits) - 1);
        packed[bit / 8] |= (uint8_t)(v << (bit % 8));
        if (bit % 8 + nbits > 8) packed[bit / 8 + 1] |= (uint8_t)(v >> (8 - bit % 8));
    }
}

void sml_pq_unpack_bits(const uint8_t *packed, int64_t m, int nbits, uint8_t *codes)
{
    assert(nbits >= 1 && nbits <= 8);
    /* last code first: code j reads bytes at most j, and codes past j are
     * already out, so packed and codes may be the same buffer */
    for (int64_t j = m - 1, bit = (m - 1) * nbits; j >= 0; j--, bit -= nbits) {
        unsigned v = packed[bit / 8] >> (bit % 8);
        if (bit % 8 + nbits > 8) v |= (unsigned)packed[bit / 8 + 1] << (8 - bit % 8);
        codes[j] = (uint8_t)(v & ((1u << nbits) - 1));
    }
}

void sml_pq_train_params_init(sml_pq_train_params *p, const sml_pq *pq, int iterations,
                              uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->iterations = iterations;
    p->seed = seed;
    p->stage = "train PQ";
    p->total = pq->m;
}

/* Sub-quantizer i: k-means on columns [i dsub, (i + 1) dsub) of x, copied
 * into sub (n x dsub), reporting nothing of its own. */
static simil_status sml_pq_train_one(sml_backend *b, sml_pq *pq, int64_t n, const float *x,
                                     const sml_pq_train_params *p, int64_t i, float *sub)
{
    for (int64_t r = 0; r < n; r++)
        memcpy(sub + r * pq->dsub, x + r * pq->dim + i * pq->dsub,
               sizeof(float) * (size_t)pq->dsub);
    simil_kmeans_params kp;
    simil_kmeans_params_init(&kp);
    kp.k = pq->ksub;
    kp.iterations = p->iterations;
    kp.seed = p->seed + (uint64_t)i;
    sml_progress_mute();
    simil_status s = sml_kmeans_run(b, &kp, n, pq->dsub, sub,
                                    pq->centroids + i * pq->ksub * pq->dsub, NULL, NULL);
    sml_progress_unmute();
    return s;
}

/* The threads that train sub-quantizers side by side on the CPU; 1 where
 * the sub-quantizers go one after the other, each k-means on every thread
 * (a GPU; or Debian's pthread OpenBLAS, which serves one caller at a time:
 * cpu_knn.c). */
static simil_status sml_pq_train_threads(sml_backend *b, const sml_pq *pq, int *threads)
{
    *threads = 1;
    int want = omp_get_max_threads();
    if (b->gpu >= 0 || want < 2 || pq->m < 2) return SIMIL_OK;
    if (want > pq->m) want = (int)pq->m;
    /* k-means at a wide dsub calls sgemm: as many callers as have room */
    SML_TRY(sml_blas_callers(want, threads));
    if (sml_blas_parallel() == 1) *threads = 1;
    return SIMIL_OK;
}

simil_status sml_pq_train(sml_backend *b, sml_pq *pq, int64_t n, const float *x,
                          const sml_pq_train_params *p)
{
    SML_RETURN_IF(n < pq->ksub, SIMIL_ERR_INVALID_ARGUMENT,
                  "PQ with %d-bit codes needs at least %" PRId64 " training vectors, got %" PRId64,
                  pq->nbits, pq->ksub, n);
    int threads;
    SML_TRY(sml_pq_train_threads(b, pq, &threads));
    SML_TRY(sml_pq_alloc(pq));
    float *sub;
    SML_TRY(sml_alloc((void **)&sub, (size_t)(threads * n * pq->dsub), sizeof(float),
                      "PQ training"));
    simil_status s = SIMIL_OK;
    if (threads == 1) {
        for (int64_t i = 0; i < pq->m && s == SIMIL_OK; i++) {
            s = sml_pq_train_one(b, pq, n, x, p, i, sub);
            sml_progress(p->stage, p->done + i + 1, p->total);
        }
        sml_free(sub);
        return s;
    }
    int failed = 0;
    int64_t trained = 0;
    char message[512] = "";
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t i = 0; i < pq->m; i++) {
        int skip;
#pragma omp atomic read
        skip = failed;
        if (skip) continue;
        /* this k-means alone on its thread: nested regions get one thread */
        omp_set_num_threads(1);
        const int t = omp_get_thread_num();
        const simil_status si = sml_pq_train_one(b, pq, n, x, p, i, sub + t * n * pq->dsub);
        if (si != SIMIL_OK) {
#pragma omp critical(sml_pq_train_error)
            if (!failed) {
                s = si;
                snprintf(message, sizeof message, "%s", simil_last_error());
#pragma omp atomic write
                failed = 1;
            }
        }
        int64_t now;
#pragma omp atomic capture
        now = ++trained;
        /* reports come from the caller's thread; the last one after the loop */
        if (t == 0 && now < pq->m) sml_progress(p->stage, p->done + now, p->total);
    }
    sml_free(sub);
    if (s != SIMIL_OK) return sml_error(s, "%s", message);
    sml_progress(p->stage, p->done + pq->m, p->total);
    return SIMIL_OK;
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
