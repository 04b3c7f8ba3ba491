/* cpu_sq.c: the scalar-quantizer scan on the CPU (sml_sq_scan_args), in the
 * frame of cpu_ivf.h.  Each row is decoded into a per-thread buffer and
 * keyed with the SIMD loops of cpu_knn.c.  Codes of residuals need no
 * decoded centroid: per probed list the query becomes x - c (L2, since
 * ||x - (c + r)|| = ||(x - c) - r||), or the key starts from <x, c> (IP). */
#include <assert.h>
#include <omp.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/sq_code.h"
#include "cpu/cpu_ivf.h"
#include "cpu/cpu_knn.h"

static void sml_cpu_sq_decode(const sml_sq_scan_args *a, const uint8_t *code, float *out)
{
    const sml_sq_type t = (sml_sq_type)a->type;
    for (int64_t j = 0; j < a->scan.dim; j++)
        out[j] = sml_sq_decode(t, code, j, a->vmin, a->vdiff);
}

/* Query q's keys over list l into t; buf: 2 x dim floats of the thread. */
static void sml_cpu_sq_list(const sml_sq_scan_args *a, const float *x, int64_t l, float *buf,
                            sml_topk *t)
{
    const sml_ivf_scan_args *s = &a->scan;
    const int64_t dim = s->dim;
    float *y = buf, *xl = buf + dim;
    const float *xq = x;
    float base = 0.0f;
    if (a->coarse != NULL) {
        const float *c = a->coarse + l * dim;
        if (s->metric == SIMIL_METRIC_L2) {
            for (int64_t j = 0; j < dim; j++) xl[j] = x[j] - c[j];
            xq = xl;
        } else {
            base = sml_cpu_dot(x, c, dim);
        }
    }
    const uint8_t *codes = s->lists.codes;
    const int64_t end = s->lists.offset[l] + s->lists.size[l];
    for (int64_t i = s->lists.offset[l]; i < end; i++) {
        if (!sml_id_allowed(s->filter, s->lists.ids[i])) continue;
        sml_cpu_sq_decode(a, codes + (size_t)i * s->lists.code_stride, y);
        const float key = s->metric == SIMIL_METRIC_L2 ? sml_cpu_l2sq(xq, y, dim)
                                                       : -(base + sml_cpu_dot(xq, y, dim));
        sml_topk_push(t, key, s->lists.ids[i]);
    }
}

simil_status sml_cpu_sq_scan(sml_backend *b, const sml_sq_scan_args *a)
{
    const sml_ivf_scan_args *s = &a->scan;
    assert(sml_ivf_scan_args_ok(s));
    assert(a->type != SML_SQ_8BIT || (a->vmin != NULL && a->vdiff != NULL));
    assert(s->lists.code_stride >= (size_t)s->dim * sml_sq_elem_bytes((sml_sq_type)a->type));
    sml_ivf_probes probes;
    SML_TRY(sml_cpu_ivf_probes(b, s, &probes));
    const int threads = s->threads > 0 ? s->threads : omp_get_max_threads();
    const int64_t kept = sml_cpu_ivf_kept(s->k, sml_cpu_ivf_most(s, &probes));
    const int64_t cap = sml_topk_capacity(kept);
    sml_topk_pair *storage = NULL;
    float *bufs = NULL;
    simil_status st = sml_alloc((void **)&storage, (size_t)(threads * cap), sizeof *storage,
                                "SQ candidate lists");
    if (st == SIMIL_OK)
        st = sml_alloc((void **)&bufs, (size_t)(threads * 2 * s->dim), sizeof *bufs,
                       "SQ decoded rows");
    if (st != SIMIL_OK) {
        sml_free(storage);
        sml_cpu_ivf_probes_free(s, &probes);
        return st;
    }
    const int64_t nprobe = probes.nprobe;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4)
    for (int64_t q = 0; q < s->nq; q++) {
        const int me = omp_get_thread_num();
        sml_topk t;
        sml_topk_reset(&t, storage + me * cap, kept);
        for (int64_t p = 0; p < nprobe; p++) {
            const int64_t l = probes.lists[q * nprobe + p];
            if (l >= 0)
                sml_cpu_sq_list(a, s->queries + q * s->dim, l, bufs + me * 2 * s->dim, &t);
        }
        sml_cpu_ivf_finish(s, q, kept, &t);
    }
    sml_free(bufs);
    sml_free(storage);
    sml_cpu_ivf_probes_free(s, &probes);
    return SIMIL_OK;
}
