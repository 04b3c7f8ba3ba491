/* index_xfbq_common.c: alpha, query codes, search and the parameter section
 * of both XFBQ index types (index_xfbq_common.h). */
#include "index/index_xfbq_common.h"

#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

static const uint32_t sml_tag_params = SML_TAG('X', 'F', 'B', 'Q');

enum { SML_XFBQ_ALPHA_SET = 1, SML_XFBQ_ALPHA_MANUAL = 2 };

/* Whether the factory made index as one of the two XFBQ types (and not as a
 * wrapper around one: index_factory.c), whose impl starts with the base. */
static int sml_xfbq_index_is(const simil_index *index)
{
    const sml_index_spec *s = &index->spec;
    return s->encoding == SML_ENCODING_XFBQ && !s->shards && !s->refine && !s->opq_m;
}

simil_status sml_xfbq_base_init(sml_xfbq_base *base, const simil_index *index,
                                simil_status (*recode)(simil_index *, const sml_xfbq *))
{
    SML_RETURN_IF(index->backend->ops->xfbq_scan == NULL, SIMIL_ERR_UNSUPPORTED,
                  "XFBQ is not built for %s; use --device cpu", index->backend->name);
    SML_TRY(sml_xfbq_init(&base->q, index->dim, index->spec.xfbq_query_bits,
                          index->spec.xfbq_base_bits));
    base->normalize = index->metric != SIMIL_METRIC_COSINE;
    base->alpha_manual = 0;
    base->recode = recode;
    return SIMIL_OK;
}

/* Make alpha the index's scale, recoding whatever it stores. */
static simil_status sml_xfbq_set_alpha(simil_index *index, float alpha)
{
    sml_xfbq_base *x = sml_xfbq_base_of(index);
    sml_xfbq q = x->q;
    q.alpha = alpha;
    if (x->q.alpha != alpha && index->ntotal > 0) SML_TRY(x->recode(index, &q));
    x->q = q;
    return SIMIL_OK;
}

simil_status sml_xfbq_pick_alpha(simil_index *index, int64_t n, const float *xs)
{
    sml_xfbq_base *x = sml_xfbq_base_of(index);
    if (x->alpha_manual) return SIMIL_OK;
    float alpha;
    SML_TRY(sml_xfbq_choose_alpha(n, index->dim, xs, x->normalize, &alpha));
    return sml_xfbq_set_alpha(index, alpha);
}

simil_status sml_xfbq_add_with(simil_index *index, int64_t n, const float *xs,
                               const int64_t *ids,
                               simil_status (*append)(simil_index *, int64_t, const float *,
                                                      const int64_t *))
{
    sml_xfbq_base *x = sml_xfbq_base_of(index);
    const sml_xfbq before = x->q;
    if (x->q.alpha == 0) {
        /* no alpha yet (an untrained flat index): this batch chooses it */
        SML_TRY(sml_xfbq_choose_alpha(n, index->dim, xs, x->normalize, &x->q.alpha));
    }
    simil_status s = append(index, n, xs, ids);
    if (s != SIMIL_OK) x->q = before;
    return s;
}

/* codes (nq x query code words) of the queries: on the backend where it codes
 * them (queries and codes in its memory), else on the host. */
static simil_status sml_xfbq_query_codes(const simil_index *index, int64_t nq,
                                         const float *queries, uint64_t *codes)
{
    const sml_xfbq_base *x = sml_xfbq_base_of(index);
    sml_backend *b = index->backend;
    if (b->ops->xfbq_encode == NULL) {
        /* a backend without the op works in host memory */
        sml_xfbq_encode(&x->q, x->q.query_bits, nq, queries, x->normalize, codes,
                        (size_t)(x->q.query_bits * x->q.words) * sizeof *codes);
        return SIMIL_OK;
    }
    const sml_xfbq_encode_args enc = {
        .x = queries,
        .n = nq,
        .dim = index->dim,
        .bits = x->q.query_bits,
        .words = x->q.words,
        .alpha = x->q.alpha,
        .normalize = x->normalize,
        .codes = codes,
    };
    return b->ops->xfbq_encode(b, &enc);
}

simil_status sml_xfbq_search(const simil_index *index, const sml_search_call *call,
                             sml_ivf_scan_args scan, const float *vectors, size_t vector_stride)
{
    const sml_xfbq_base *x = sml_xfbq_base_of(index);
    sml_backend *b = index->backend;
    const int64_t nq = call->nq;
    const int64_t code_words = x->q.query_bits * x->q.words;
    uint64_t *codes = NULL;
    const float *queries = call->queries;
    simil_status s = SIMIL_OK;
    /* A GPU codes the queries itself, in the scan, from the queries it
     * stages anyway: no device block, no upload and no wait of their own per
     * call (the fixed cost of a call, docs/benchmarks.md). */
    const int backend_codes = b->gpu >= 0 && b->ops->xfbq_encode != NULL;
    if (!backend_codes) {
        s = sml_alloc((void **)&codes, (size_t)(nq * code_words), sizeof *codes, "query codes");
        if (s == SIMIL_OK) s = sml_xfbq_query_codes(index, nq, queries, codes);
    }
    if (s == SIMIL_OK) {
        sml_xfbq_select sel;
        const float extra = call->params.extra_distance < 0 ? 0.05f : call->params.extra_distance;
        sml_xfbq_selection(&x->q, extra, call->params.extra_of == SML_EXTRA_OF_SPREAD, &sel);
        sml_xfbq_scan_args args = {
            .scan = scan,
            .query_codes = codes,
            .alpha = x->q.alpha,
            .normalize = x->normalize,
            .query_bits = x->q.query_bits,
            .base_bits = x->q.base_bits,
            .words = x->q.words,
            .vectors = vectors,
            .vector_stride = vector_stride,
            .bin_shift = sel.shift,
            .nbins = sel.nbins,
            .extra_bins = sel.extra_bins,
            .spread_q16 = sel.spread_q16,
        };
        args.scan.queries = queries;
        args.scan.metric = sml_kernel_metric(index->metric);
        s = b->ops->xfbq_scan(b, &args);
    }
    sml_free(codes);
    return s;
}

/* Section XFBQ: f32 alpha (0: not chosen), u32 flags, u32 query bits, u32 base bits. */
simil_status sml_xfbq_save_params(const simil_index *index, sml_writer *w)
{
    const sml_xfbq_base *x = sml_xfbq_base_of(index);
    unsigned char p[16];
    const uint32_t flags = (x->q.alpha > 0 ? SML_XFBQ_ALPHA_SET : 0) |
                           (x->alpha_manual ? SML_XFBQ_ALPHA_MANUAL : 0);
    const uint32_t qb = (uint32_t)x->q.query_bits, bb = (uint32_t)x->q.base_bits;
    memcpy(p, &x->q.alpha, 4);
    memcpy(p + 4, &flags, 4);
    memcpy(p + 8, &qb, 4);
    memcpy(p + 12, &bb, 4);
    return sml_section_write(w, sml_tag_params, p, sizeof p);
}

simil_status sml_xfbq_load_params(simil_index *index, sml_reader *r)
{
    sml_xfbq_base *x = sml_xfbq_base_of(index);
    uint64_t bytes;
    unsigned char p[16];
    SML_TRY(sml_section_open(r, sml_tag_params, &bytes));
    SML_RETURN_IF(bytes != sizeof p, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: XFBQ parameters of %llu bytes", r->path,
                  (unsigned long long)bytes);
    SML_TRY(sml_section_read(r, p, sizeof p));
    SML_TRY(sml_section_close(r));
    float alpha;
    uint32_t flags, qb, bb;
    memcpy(&alpha, p, 4);
    memcpy(&flags, p + 4, 4);
    memcpy(&qb, p + 8, 4);
    memcpy(&bb, p + 12, 4);
    const int set = (flags & SML_XFBQ_ALPHA_SET) != 0;
    SML_RETURN_IF(qb != (uint32_t)x->q.query_bits || bb != (uint32_t)x->q.base_bits ||
                      flags > 3 || (set ? !(alpha > 0 && alpha <= 1e30f) : alpha != 0) ||
                      (!set && index->ntotal > 0),
                  SIMIL_ERR_CORRUPT, "'%s' is damaged: impossible XFBQ parameters", r->path);
    x->q.alpha = alpha;
    x->alpha_manual = (flags & SML_XFBQ_ALPHA_MANUAL) != 0;
    return SIMIL_OK;
}

simil_status simil_index_set_xfbq_alpha(simil_index *index, float alpha)
{
    SML_RETURN_IF(index == NULL, SIMIL_ERR_INVALID_ARGUMENT, "set_xfbq_alpha: index is NULL");
    SML_RETURN_IF(!sml_xfbq_index_is(index), SIMIL_ERR_INVALID_ARGUMENT,
                  "set_xfbq_alpha: index '%s' is not an XFBQ index", index->description);
    SML_RETURN_IF(!(alpha > 0) || !isfinite(alpha) || alpha > 1e30f,
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "set_xfbq_alpha: alpha=%g must be a positive finite scale", (double)alpha);
    SML_TRY(sml_xfbq_set_alpha(index, alpha));
    sml_xfbq_base_of(index)->alpha_manual = 1;
    return SIMIL_OK;
}

float sml_xfbq_index_alpha(const simil_index *index)
{
    if (index == NULL || !sml_xfbq_index_is(index)) return 0.0f;
    return sml_xfbq_base_of(index)->q.alpha;
}
