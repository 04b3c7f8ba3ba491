/* index_xfbq_common.c: alpha, query codes, search and the parameter section
 * of both XFBQ index types (index_xfbq_common.h). */
#include "index/index_xfbq_common.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "algo/opq.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/rng.h"

static const uint32_t sml_tag_params = SML_TAG('X', 'F', 'B', 'Q');

enum { SML_XFBQ_ALPHA_SET = 1, SML_XFBQ_ALPHA_MANUAL = 2, SML_XFBQ_ROTATED = 4 };

/* Rows rotated per block (core/blas.h, sml_sgemm_rows, through sml_opq_apply). */
enum { SML_XFBQ_ROTATE_ROWS = 4096 };

/* The seed of every RR rotation: one matrix per dimension. */
static const uint64_t sml_xfbq_rotation_seed = 0x5846425152520001ull;

/* The last rotation made, kept while an RR index lives.  Every RR index of
 * one dimension has the same matrix, so the shards of a sharded RR index, and
 * indexes made or loaded while another lives, copy it instead of making it
 * again (one SVD of dim x dim each: Shards8,RR,XFBQ at 768-d took 0.91 s to
 * create on 2 cores, and takes 0.12 s). */
static struct {
    pthread_mutex_t lock;
    int64_t live; /* RR bases that hold a rotation */
    int64_t made; /* rotations made by SVD, ever (sml_xfbq_rotations_made) */
    int64_t dim;
    float *rt;    /* dim x dim, or NULL */
} sml_xfbq_memo = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* rt = the orthogonal factor U V^T of a seeded Gaussian dim x dim matrix: a
 * uniformly random rotation (the polar factor of a Gaussian matrix is
 * Haar-distributed); the memo's copy where it holds that dimension. */
static simil_status sml_xfbq_make_rotation(int64_t dim, float *rt)
{
    const size_t bytes = sizeof(float) * (size_t)(dim * dim);
    pthread_mutex_lock(&sml_xfbq_memo.lock);
    const int hit = sml_xfbq_memo.rt != NULL && sml_xfbq_memo.dim == dim;
    if (hit) memcpy(rt, sml_xfbq_memo.rt, bytes);
    pthread_mutex_unlock(&sml_xfbq_memo.lock);
    if (hit) return SIMIL_OK;
    float *g;
    SML_TRY(sml_alloc((void **)&g, (size_t)(dim * dim), sizeof *g, "the XFBQ rotation"));
    for (int64_t i = 0; i < dim * dim; i++)
        g[i] = (float)sml_rng_gauss_at(sml_xfbq_rotation_seed ^ (uint64_t)i * 0x100000001b3ull);
    simil_status s = sml_opq_procrustes((int)dim, (int)dim, g, rt);
    if (s == SIMIL_OK) {
        /* g becomes the memo (a copy of rt), in place of the last one */
        memcpy(g, rt, bytes);
        pthread_mutex_lock(&sml_xfbq_memo.lock);
        assert(sml_xfbq_memo.live > 0); /* the caller's base counts */
        float *old = sml_xfbq_memo.rt;
        sml_xfbq_memo.rt = g;
        sml_xfbq_memo.dim = dim;
        sml_xfbq_memo.made++;
        pthread_mutex_unlock(&sml_xfbq_memo.lock);
        g = old;
    }
    sml_free(g);
    return s;
}

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
                  "XFBQ is not built for %s; use the CPU (device \"cpu\")", index->backend->name);
    SML_TRY(sml_xfbq_init(&base->q, index->dim, index->spec.xfbq_query_bits,
                          index->spec.xfbq_base_bits));
    base->normalize = index->metric != SIMIL_METRIC_COSINE;
    base->alpha_manual = 0;
    base->recode = recode;
    base->rotation = NULL;
    base->rotation_device = NULL;
    if (!index->spec.rotate) return SIMIL_OK;
    SML_RETURN_IF(pthread_mutex_init(&base->rotation_lock, NULL) != 0, SIMIL_ERR_OUT_OF_MEMORY,
                  "cannot make a lock for the XFBQ rotation");
    simil_status a = sml_alloc((void **)&base->rotation, (size_t)(index->dim * index->dim),
                               sizeof(float), "the XFBQ rotation");
    if (a != SIMIL_OK) {
        pthread_mutex_destroy(&base->rotation_lock);
        return a;
    }
    pthread_mutex_lock(&sml_xfbq_memo.lock);
    sml_xfbq_memo.live++;
    pthread_mutex_unlock(&sml_xfbq_memo.lock);
    /* a file being read holds the rotation (sml_xfbq_load_params reads it and
     * checks it is orthogonal): no SVD for it, which costs O(dim^3) */
    if (index->loading) {
        memset(base->rotation, 0, sizeof(float) * (size_t)(index->dim * index->dim));
        return SIMIL_OK;
    }
    const simil_status s = sml_xfbq_make_rotation(index->dim, base->rotation);
    if (s != SIMIL_OK) sml_xfbq_base_free(base, index->backend);
    return s;
}

/* Free the GPU's copy of the rotation (after the host's changed, or when
 * the index goes); no search may run meanwhile. */
static void sml_xfbq_drop_device_rotation(sml_xfbq_base *base, sml_backend *b)
{
    if (base->rotation_device == NULL) return;
    b->ops->mem_free(b, base->rotation_device);
    base->rotation_device = NULL;
}

/* The GPU's copy of the rotation, uploaded once (sml_xfbq_base). */
static simil_status sml_xfbq_device_rotation(const simil_index *index, const void **out)
{
    /* the copy is a cache, not a change of the index: searches take a const
     * index, and make it under the lock */
    sml_xfbq_base *x = (sml_xfbq_base *)sml_xfbq_base_of(index);
    sml_backend *b = index->backend;
    assert(x->rotation != NULL);
    simil_status s = SIMIL_OK;
    pthread_mutex_lock(&x->rotation_lock);
    if (x->rotation_device == NULL) {
        const size_t bytes = sizeof(float) * (size_t)(index->dim * index->dim);
        void *mem = NULL;
        s = b->ops->mem_alloc(b, bytes, &mem);
        if (s == SIMIL_OK) s = b->ops->mem_upload(b, mem, x->rotation, bytes);
        if (s == SIMIL_OK)
            x->rotation_device = mem;
        else if (mem != NULL)
            b->ops->mem_free(b, mem);
    }
    *out = x->rotation_device;
    pthread_mutex_unlock(&x->rotation_lock);
    return s;
}

void sml_xfbq_base_free(sml_xfbq_base *base, sml_backend *b)
{
    if (base->rotation == NULL) return;
    sml_xfbq_drop_device_rotation(base, b);
    pthread_mutex_destroy(&base->rotation_lock);
    sml_free(base->rotation);
    base->rotation = NULL;
    /* the last RR index takes the memo with it: no memory stays held */
    float *memo = NULL;
    pthread_mutex_lock(&sml_xfbq_memo.lock);
    assert(sml_xfbq_memo.live > 0);
    if (--sml_xfbq_memo.live == 0) {
        memo = sml_xfbq_memo.rt;
        sml_xfbq_memo.rt = NULL;
    }
    pthread_mutex_unlock(&sml_xfbq_memo.lock);
    sml_free(memo);
}

simil_status sml_xfbq_rotated(const sml_xfbq_base *base, int64_t n, const float *v,
                              const float **coded, float **copy)
{
    *coded = v;
    *copy = NULL;
    if (base->rotation == NULL || n == 0) return SIMIL_OK;
    const int64_t dim = base->q.dim;
    SML_TRY(sml_alloc((void **)copy, (size_t)(n * dim), sizeof(float), "rotated vectors"));
    /* in the device's order (sml_xfbq_rotate): a GPU codes rotated queries
     * with the same bits */
    sml_xfbq_rotate(base->rotation, dim, n, v, *copy);
    *coded = *copy;
    return SIMIL_OK;
}

simil_status sml_xfbq_code_rows(const sml_xfbq_base *base, const sml_xfbq *q, int64_t n,
                                const float *v, size_t vstride, uint64_t *out, size_t stride)
{
    const int64_t dim = q->dim;
    const size_t row_bytes = sizeof(float) * (size_t)dim;
    if (base->rotation == NULL && vstride == row_bytes) {
        sml_xfbq_encode(q, q->base_bits, n, v, base->normalize, out, stride);
        return SIMIL_OK;
    }
    /* gather (and rotate) a block at a time */
    const int64_t block = n < SML_XFBQ_ROTATE_ROWS ? n : SML_XFBQ_ROTATE_ROWS;
    float *rows = NULL, *rotated = NULL;
    simil_status s = sml_alloc((void **)&rows, (size_t)(block * dim), sizeof *rows, "rows to code");
    if (s == SIMIL_OK && base->rotation != NULL)
        s = sml_alloc((void **)&rotated, (size_t)(block * dim), sizeof *rotated, "rotated rows");
    for (int64_t r = 0; r < n && s == SIMIL_OK; r += block) {
        const int64_t m = n - r < block ? n - r : block;
        for (int64_t i = 0; i < m; i++)
            memcpy(rows + i * dim, (const char *)v + (size_t)(r + i) * vstride, row_bytes);
        if (rotated != NULL) s = sml_opq_apply(m, dim, dim, base->rotation, rows, rotated);
        if (s == SIMIL_OK)
            sml_xfbq_encode(q, q->base_bits, m, rotated != NULL ? rotated : rows,
                            base->normalize, (uint64_t *)((char *)out + (size_t)r * stride),
                            stride);
    }
    sml_free(rows);
    sml_free(rotated);
    return s;
}

/* alpha for n host vectors: from the vectors, or with RR from the rotation
 * of the rows sml_xfbq_choose_alpha would sample (evenly spaced, up to 2^21
 * components), so that the rotation of a large batch costs no more. */
static simil_status sml_xfbq_alpha_of(const sml_xfbq_base *base, int64_t n, const float *xs,
                                      float *alpha)
{
    const int64_t dim = base->q.dim;
    if (base->rotation == NULL || n == 0)
        return sml_xfbq_choose_alpha(n, dim, xs, base->normalize, alpha);
    int64_t rows = ((int64_t)1 << 21) / dim;
    if (rows < 1) rows = 1;
    if (rows > n) rows = n;
    float *sample, *rotated = NULL;
    SML_TRY(sml_alloc((void **)&sample, (size_t)(rows * dim), sizeof *sample, "an alpha sample"));
    for (int64_t r = 0; r < rows; r++)
        memcpy(sample + r * dim, xs + (int64_t)((double)r * (double)n / (double)rows) * dim,
               sizeof(float) * (size_t)dim);
    const float *coded;
    simil_status s = sml_xfbq_rotated(base, rows, sample, &coded, &rotated);
    if (s == SIMIL_OK) s = sml_xfbq_choose_alpha(rows, dim, coded, base->normalize, alpha);
    sml_free(sample);
    sml_free(rotated);
    return s;
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
    SML_TRY(sml_xfbq_alpha_of(x, n, xs, &alpha));
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
        SML_TRY(sml_xfbq_alpha_of(x, n, xs, &x->q.alpha));
    }
    simil_status s = append(index, n, xs, ids);
    if (s != SIMIL_OK) x->q = before;
    return s;
}

simil_status sml_xfbq_search(const simil_index *index, const sml_search_call *call,
                             sml_ivf_scan_args scan, const float *vectors, size_t vector_stride,
                             const void *shadow)
{
    const sml_xfbq_base *x = sml_xfbq_base_of(index);
    sml_backend *b = index->backend;
    const int64_t nq = call->nq;
    const int64_t code_words = x->q.query_bits * x->q.words;
    uint64_t *codes = NULL;
    /* A GPU codes the queries itself, in the scan, from the queries it
     * stages anyway: no upload and no wait of their own per call (the fixed
     * cost of a call, docs/benchmarks.md).  With RR it rotates them first, in
     * the host's order (sml_xfbq_rotate: the same bits as the CPU), from a
     * copy of the rotation in its memory.  Elsewhere the host rotates and
     * codes them. */
    const int backend_codes = b->gpu >= 0;
    const void *device_rotation = NULL;
    const float *coded = NULL;
    float *rotated = NULL; /* host, RR */
    simil_status s = SIMIL_OK;
    if (backend_codes && x->rotation != NULL) {
        s = sml_xfbq_device_rotation(index, &device_rotation);
    } else if (!backend_codes) {
        s = sml_xfbq_rotated(x, nq, call->queries, &coded, &rotated);
        if (s == SIMIL_OK)
            s = sml_alloc((void **)&codes, (size_t)(nq * code_words), sizeof *codes,
                          "query codes");
        if (s == SIMIL_OK)
            sml_xfbq_encode(&x->q, x->q.query_bits, nq, coded, x->normalize, codes,
                            sizeof *codes * (size_t)code_words);
    }
    if (s == SIMIL_OK) {
        sml_xfbq_select sel;
        const float extra = call->params.extra_distance < 0 ? 0.05f : call->params.extra_distance;
        sml_xfbq_selection(&x->q, extra, call->params.extra_of == SML_EXTRA_OF_SPREAD, &sel);
        sml_xfbq_scan_args args = {
            .scan = scan,
            .query_codes = codes,
            .rotation = device_rotation,
            .alpha = x->q.alpha,
            .normalize = x->normalize,
            .query_bits = x->q.query_bits,
            .base_bits = x->q.base_bits,
            .words = x->q.words,
            .vectors = vectors,
            .vector_stride = vector_stride,
            .shadow = shadow,
            .bin_shift = sel.shift,
            .nbins = sel.nbins,
            .extra_bins = sel.extra_bins,
            .spread_q16 = sel.spread_q16,
        };
        args.scan.metric = sml_kernel_metric(index->metric);
        s = b->ops->xfbq_scan(b, &args);
    }
    sml_free(codes);
    sml_free(rotated);
    return s;
}

/* Section XFBQ: f32 alpha (0: not chosen), u32 flags, u32 query bits, u32 base
 * bits; with RR (flag 4) the rotation after them, dim x dim f32.  Files
 * written before RR have the 16 bytes alone, and load as before. */
simil_status sml_xfbq_save_params(const simil_index *index, sml_writer *w)
{
    const sml_xfbq_base *x = sml_xfbq_base_of(index);
    unsigned char p[16];
    const uint32_t flags = (x->q.alpha > 0 ? SML_XFBQ_ALPHA_SET : 0) |
                           (x->alpha_manual ? SML_XFBQ_ALPHA_MANUAL : 0) |
                           (x->rotation != NULL ? SML_XFBQ_ROTATED : 0);
    const uint32_t qb = (uint32_t)x->q.query_bits, bb = (uint32_t)x->q.base_bits;
    memcpy(p, &x->q.alpha, 4);
    memcpy(p + 4, &flags, 4);
    memcpy(p + 8, &qb, 4);
    memcpy(p + 12, &bb, 4);
    if (x->rotation == NULL) return sml_section_write(w, sml_tag_params, p, sizeof p);
    const size_t rbytes = sizeof(float) * (size_t)(index->dim * index->dim);
    unsigned char *all;
    SML_TRY(sml_alloc((void **)&all, sizeof p + rbytes, 1, "the XFBQ section"));
    memcpy(all, p, sizeof p);
    memcpy(all + sizeof p, x->rotation, rbytes);
    const simil_status s = sml_section_write(w, sml_tag_params, all, sizeof p + rbytes);
    sml_free(all);
    return s;
}

/* The rotation as read: finite, and orthogonal to float precision (a damaged
 * one would give codes unrelated to the vectors). */
static int sml_xfbq_rotation_ok(int64_t dim, const float *rt)
{
    for (int64_t i = 0; i < dim; i++) {
        double norm = 0;
        for (int64_t j = 0; j < dim; j++) {
            const float v = rt[i * dim + j];
            if (!isfinite(v)) return 0;
            norm += (double)v * v;
        }
        if (fabs(norm - 1) > 1e-3) return 0;
    }
    return 1;
}

simil_status sml_xfbq_load_params(simil_index *index, sml_reader *r)
{
    sml_xfbq_base *x = sml_xfbq_base_of(index);
    uint64_t bytes;
    unsigned char p[16];
    const uint64_t rbytes =
        x->rotation != NULL ? sizeof(float) * (uint64_t)(index->dim * index->dim) : 0;
    SML_TRY(sml_section_open(r, sml_tag_params, &bytes));
    SML_RETURN_IF(bytes != sizeof p + rbytes, SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: XFBQ parameters of %llu bytes, expected %llu", r->path,
                  (unsigned long long)bytes, (unsigned long long)(sizeof p + rbytes));
    SML_TRY(sml_section_read(r, p, sizeof p));
    if (rbytes > 0) {
        /* a GPU copy of the rotation read over would be stale */
        sml_xfbq_drop_device_rotation(x, index->backend);
        SML_TRY(sml_section_read(r, x->rotation, (size_t)rbytes));
    }
    SML_TRY(sml_section_close(r));
    float alpha;
    uint32_t flags, qb, bb;
    memcpy(&alpha, p, 4);
    memcpy(&flags, p + 4, 4);
    memcpy(&qb, p + 8, 4);
    memcpy(&bb, p + 12, 4);
    const int set = (flags & SML_XFBQ_ALPHA_SET) != 0;
    const int rotated = (flags & SML_XFBQ_ROTATED) != 0;
    SML_RETURN_IF(qb != (uint32_t)x->q.query_bits || bb != (uint32_t)x->q.base_bits ||
                      flags > 7 || rotated != (x->rotation != NULL) ||
                      (set ? !(alpha > 0 && alpha <= 1e30f) : alpha != 0) ||
                      (!set && index->ntotal > 0) ||
                      (rotated && !sml_xfbq_rotation_ok(index->dim, x->rotation)),
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

const float *sml_xfbq_index_rotation(const simil_index *index)
{
    if (index == NULL || !sml_xfbq_index_is(index)) return NULL;
    return sml_xfbq_base_of(index)->rotation;
}

int64_t sml_xfbq_rotations_made(void)
{
    pthread_mutex_lock(&sml_xfbq_memo.lock);
    const int64_t made = sml_xfbq_memo.made;
    pthread_mutex_unlock(&sml_xfbq_memo.lock);
    return made;
}
