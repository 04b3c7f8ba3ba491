/* cpu_ivf.c: IVF-Flat scans on the CPU.  Threads take queries; each query
 * walks the rows of its probed lists, computing exact distances with the SIMD
 * loops of cpu_knn.c, into its own top-k (cpu_select.h). */
#include "cpu/cpu_ivf.h"

#include <math.h>
#include <omp.h>

#include "core/alloc.h"
#include "core/error.h"
#include "cpu/cpu_knn.h"
#include "cpu/cpu_select.h"

simil_status sml_cpu_ivf_scan_probed(sml_backend *b, const sml_ivf_scan_args *a,
                                     simil_status (*scan)(sml_backend *,
                                                          const sml_ivf_scan_args *))
{
    const size_t pairs = (size_t)(a->nq * a->nprobe);
    int64_t *probes;
    float *keys = NULL;
    SML_TRY(sml_alloc((void **)&probes, pairs, sizeof *probes, "probes"));
    simil_status s = sml_alloc((void **)&keys, pairs, sizeof *keys, "coarse distances");
    sml_knn_args knn = sml_knn_of(a->coarse_search, a->queries, a->nq, a->nprobe, keys, probes);
    knn.threads = a->threads;
    if (s == SIMIL_OK) s = b->ops->knn(b, &knn);
    if (s == SIMIL_OK) {
        sml_ivf_keys_of_knn(knn.metric, keys, pairs);
        sml_ivf_scan_args probed = *a;
        probed.probes = probes;
        probed.coarse_keys = keys;
        s = scan(b, &probed);
    }
    sml_free(keys);
    sml_free(probes);
    return s;
}

simil_status sml_cpu_ivf_flat_scan(sml_backend *b, const sml_ivf_scan_args *a)
{
    if (a->probes == NULL) return sml_cpu_ivf_scan_probed(b, a, sml_cpu_ivf_flat_scan);
    int threads = a->threads > 0 ? a->threads : omp_get_max_threads();
    /* k beyond any query's candidates only pads: keep the buffers small */
    int64_t most = 0;
    for (int64_t q = 0; q < a->nq; q++) {
        int64_t c = 0;
        for (int64_t p = 0; p < a->nprobe; p++) {
            int64_t l = a->probes[q * a->nprobe + p];
            if (l >= 0) c += a->list_size[l];
        }
        if (c > most) most = c;
    }
    int64_t kept = a->k < most ? a->k : most;
    if (kept < 1) kept = 1;
    int64_t cap = sml_topk_capacity(kept);
    sml_topk_pair *storage;
    SML_TRY(sml_alloc((void **)&storage, (size_t)(threads * cap), sizeof *storage,
                      "IVF candidate lists"));
    const float *codes = a->codes;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4)
    for (int64_t q = 0; q < a->nq; q++) {
        sml_topk t;
        sml_topk_reset(&t, storage + omp_get_thread_num() * cap, kept);
        const float *x = a->queries + q * a->dim;
        for (int64_t p = 0; p < a->nprobe; p++) {
            int64_t l = a->probes[q * a->nprobe + p];
            if (l < 0) continue;
            int64_t end = a->list_offset[l] + a->list_size[l];
            for (int64_t i = a->list_offset[l]; i < end; i++) {
                const float *y = codes + i * a->dim;
                float key = a->metric == SIMIL_METRIC_L2 ? sml_cpu_l2sq(x, y, a->dim)
                                                         : -sml_cpu_dot(x, y, a->dim);
                sml_topk_push(&t, key, a->ids[i]);
            }
        }
        float *d = a->distances + q * a->k;
        int64_t *l = a->labels + q * a->k;
        sml_topk_finish(&t, d, l);
        for (int64_t j = 0; j < a->k; j++) {
            if (j >= kept) {
                d[j] = INFINITY;
                l[j] = -1;
            }
            if (a->metric == SIMIL_METRIC_IP) d[j] = -d[j];
        }
    }
    sml_free(storage);
    return SIMIL_OK;
}
