/* cpu_ivf.c: what the CPU's inverted-list scans share (cpu_ivf.h). */
#include "cpu/cpu_ivf.h"

#include <assert.h>
#include <math.h>

#include "core/alloc.h"
#include "core/error.h"

simil_status sml_cpu_ivf_probes(sml_backend *b, const sml_ivf_scan_args *a, sml_ivf_probes *out)
{
    assert(sml_ivf_scan_args_ok(a));
    *out = a->probes;
    if (a->probes.lists != NULL) return SIMIL_OK;
    const size_t pairs = (size_t)(a->nq * a->probes.nprobe);
    int64_t *lists;
    float *keys = NULL;
    SML_TRY(sml_alloc((void **)&lists, pairs, sizeof *lists, "probes"));
    simil_status s = sml_alloc((void **)&keys, pairs, sizeof *keys, "coarse distances");
    sml_knn_args knn = sml_knn_of(a->probes.coarse_search, a->queries, a->nq, a->probes.nprobe,
                                  keys, lists);
    knn.threads = a->threads;
    if (s == SIMIL_OK) s = b->ops->knn(b, &knn);
    if (s != SIMIL_OK) {
        sml_free(keys);
        sml_free(lists);
        return s;
    }
    sml_ivf_keys_of_knn(knn.metric, keys, pairs);
    out->lists = lists;
    out->keys = keys;
    return SIMIL_OK;
}

void sml_cpu_ivf_probes_free(const sml_ivf_scan_args *a, sml_ivf_probes *probes)
{
    if (probes->lists != a->probes.lists) {
        sml_free((void *)probes->lists);
        sml_free((void *)probes->keys);
    }
    *probes = a->probes;
}

int64_t sml_cpu_ivf_most(const sml_ivf_scan_args *a, const sml_ivf_probes *probes)
{
    int64_t most = 0;
    for (int64_t q = 0; q < a->nq; q++) {
        int64_t c = 0;
        for (int64_t p = 0; p < probes->nprobe; p++) {
            const int64_t l = probes->lists[q * probes->nprobe + p];
            assert(l < a->lists.nlist);
            if (l >= 0) c += a->lists.size[l];
        }
        if (c > most) most = c;
    }
    return most;
}

void sml_cpu_ivf_finish(const sml_ivf_scan_args *a, int64_t q, int64_t kept, sml_topk *t)
{
    float *d = a->distances + q * a->k;
    int64_t *l = a->labels + q * a->k;
    sml_topk_finish(t, d, l);
    for (int64_t j = 0; j < a->k; j++) {
        if (j >= kept) {
            d[j] = INFINITY;
            l[j] = -1;
        }
        if (a->metric == SIMIL_METRIC_IP) d[j] = -d[j];
    }
}
