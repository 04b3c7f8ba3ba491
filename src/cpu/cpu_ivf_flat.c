/* cpu_ivf_flat.c: the IVF-Flat scan on the CPU.  Threads take queries; each
 * query walks the rows of its probed lists, computing exact distances with
 * the SIMD loops of cpu_knn.c, into its own top-k (cpu_ivf.h). */
#include <assert.h>
#include <omp.h>

#include "core/alloc.h"
#include "core/error.h"
#include "cpu/cpu_ivf.h"
#include "cpu/cpu_knn.h"

/* Arena row i's key for query x into t. */
static inline void sml_ivf_flat_push(const sml_ivf_scan_args *a, const float *x, int64_t i,
                                     sml_topk *t)
{
    const float *y = (const float *)a->lists.codes + i * a->dim;
    const float key = a->metric == SIMIL_METRIC_L2 ? sml_cpu_l2sq(x, y, a->dim)
                                                   : -sml_cpu_dot(x, y, a->dim);
    sml_topk_push(t, key, a->lists.ids[i]);
}

simil_status sml_cpu_ivf_flat_scan(sml_backend *b, const sml_ivf_scan_args *a)
{
    assert(a->lists.code_stride == sizeof(float) * (size_t)a->dim);
    sml_ivf_probes probes;
    SML_TRY(sml_cpu_ivf_probes(b, a, &probes));
    const int threads = a->threads > 0 ? a->threads : omp_get_max_threads();
    /* k beyond any query's candidates only pads: keep the buffers small */
    const int64_t kept = sml_cpu_ivf_kept(a->k, sml_cpu_ivf_most(a, &probes));
    const int64_t cap = sml_topk_capacity(kept);
    sml_topk_pair *storage;
    simil_status s = sml_alloc((void **)&storage, (size_t)(threads * cap), sizeof *storage,
                               "IVF candidate lists");
    if (s != SIMIL_OK) {
        sml_cpu_ivf_probes_free(a, &probes);
        return s;
    }
    const int64_t nprobe = probes.nprobe;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4)
    for (int64_t q = 0; q < a->nq; q++) {
        sml_topk t;
        sml_topk_reset(&t, storage + omp_get_thread_num() * cap, kept);
        const float *x = a->queries + q * a->dim;
        for (int64_t p = 0; p < nprobe; p++) {
            int64_t l = probes.lists[q * nprobe + p];
            if (l < 0) continue;
            const int64_t end = a->lists.offset[l] + a->lists.size[l];
            if (a->filter == NULL) {
                for (int64_t i = a->lists.offset[l]; i < end; i++)
                    sml_ivf_flat_push(a, x, i, &t);
                continue;
            }
            /* the allowed rows of each chunk first (sml_allowed_rows: no
             * branch per row's test) */
            int64_t pick[SML_ALLOWED_CHUNK];
            for (int64_t i0 = a->lists.offset[l]; i0 < end; i0 += SML_ALLOWED_CHUNK) {
                const int np = sml_allowed_rows(a->filter, a->lists.ids, i0, end, pick);
                for (int j = 0; j < np; j++) sml_ivf_flat_push(a, x, pick[j], &t);
            }
        }
        sml_cpu_ivf_finish(a, q, kept, &t);
    }
    sml_free(storage);
    sml_cpu_ivf_probes_free(a, &probes);
    return SIMIL_OK;
}
