/* index_xfbq.c: "XFBQ[QxB]" and "IVFn,XFBQ[QxB]" (the XFBQ paper;
 * docs/papers.md, "The XFBQ paper"): train-free binary codes scanned with XOR and popcount, a
 * histogram selection widened by the extra distance, and exact re-ranking of
 * the candidates from the float vectors kept beside the codes.
 *
 * Storage, in backend memory, the same on the CPU and the GPU (and so are
 * files).  Flat XFBQ keeps the codes (code_bytes each, xfbq.h) in one array,
 * which the scan streams, the float vectors in another, and the ids beside
 * them (with a host copy for remove and reconstruct).  IVF-XFBQ keeps each
 * vector as one row of the inverted-list arena (ivf.h), code then floats
 * (xfbq.h), so that rows move with their lists.
 *
 * Metrics.  The codes always encode direction: for cosine the vectors arrive
 * normalized; for IP and L2 each vector (and query) is normalized for its code
 * only, and its float row keeps the raw vector.  So candidates are chosen by
 * estimated cosine and re-ranked by the index's own metric.  For cosine, and
 * for IP or L2 on unit-norm data, that is the exact order; otherwise a vector
 * whose norm, not its direction, would rank it in the top k can be missed.
 *
 * alpha.  Chosen from data (xfbq.h) by train, or by the first add when the
 * index has none yet (flat XFBQ needs no train call); or fixed by hand with
 * simil_index_set_xfbq_alpha, which train and add then keep.  Changing alpha
 * on a filled index recodes every stored row from its floats. */
#include <math.h>
#include <string.h>

#include "algo/xfbq.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/progress.h"
#include "index/index_internal.h"
#include "index/ivf.h"

static const uint32_t sml_tag_params = SML_TAG('X', 'F', 'B', 'Q');
static const uint32_t sml_tag_ids = SML_TAG('I', 'D', 'S', ' ');
static const uint32_t sml_tag_vectors = SML_TAG('V', 'E', 'C', 'S');
static const uint32_t sml_tag_codes = SML_TAG('X', 'C', 'O', 'D');

/* Rows encoded on the host per upload. */
static const int64_t sml_xfbq_chunk = (int64_t)1 << 16;

enum { SML_XFBQ_ALPHA_SET = 1, SML_XFBQ_ALPHA_MANUAL = 2 };

typedef struct sml_xfbq_index {
    sml_xfbq q;
    int alpha_manual;
    int normalize;       /* metric IP or L2: codes from unit-norm copies */
    int inverted;        /* IVFn,XFBQ */
    sml_ivf ivf;         /* IVF: lists of rows (code_size = row_size) */
    uint8_t *codes;      /* flat, mem: capacity x code_bytes */
    float *vectors;      /* flat, mem: capacity x dim */
    int64_t *ids;        /* flat, mem */
    int64_t *host_ids;   /* flat, host */
    int64_t capacity;
} sml_xfbq_index;

static sml_xfbq_index *sml_xfbq_of(const simil_index *index) { return index->impl; }

/* ---- recoding after alpha changes ---- */

/* Codes of n host vectors into buf (code_bytes each, padding zeroed). */
static void sml_xfbq_codes(const sml_xfbq_index *x, const sml_xfbq *q, int64_t n,
                           const float *v, uint8_t *buf)
{
    memset(buf, 0, (size_t)n * q->code_bytes);
    sml_xfbq_encode(q, q->base_bits, n, v, x->normalize, (uint64_t *)buf, q->code_bytes);
}

/* Flat: a new code array for q's alpha, from the stored vectors. */
static simil_status sml_xfbq_flat_recode(sml_backend *b, const sml_xfbq_index *x,
                                         const sml_xfbq *q, int64_t n, uint8_t **out)
{
    uint8_t *fresh = NULL, *buf = NULL;
    float *v = NULL;
    const int64_t chunk = n < sml_xfbq_chunk ? n : sml_xfbq_chunk;
    SML_TRY(b->ops->mem_alloc(b, (size_t)(x->capacity > 0 ? x->capacity : 1) * q->code_bytes,
                              (void **)&fresh));
    simil_status s = sml_alloc((void **)&buf, (size_t)chunk, q->code_bytes, "codes to recode");
    if (s == SIMIL_OK)
        s = sml_alloc((void **)&v, (size_t)(chunk * q->dim), sizeof *v, "vectors to recode");
    for (int64_t r = 0; r < n && s == SIMIL_OK; r += chunk) {
        const int64_t m = n - r < chunk ? n - r : chunk;
        s = b->ops->mem_download(b, v, x->vectors + r * q->dim, sizeof *v * (size_t)(m * q->dim));
        if (s == SIMIL_OK) {
            sml_xfbq_codes(x, q, m, v, buf);
            s = b->ops->mem_upload(b, fresh + (size_t)r * q->code_bytes, buf,
                                   (size_t)m * q->code_bytes);
        }
    }
    sml_free(buf);
    sml_free(v);
    if (s != SIMIL_OK) {
        b->ops->mem_free(b, fresh);
        return s;
    }
    *out = fresh;
    return SIMIL_OK;
}

/* IVF: a copy of the arena with the rows of every list recoded for q's alpha. */
static simil_status sml_xfbq_ivf_recode(sml_backend *b, const sml_xfbq_index *x,
                                        const sml_xfbq *q, uint8_t **out)
{
    const sml_ivf *ivf = &x->ivf;
    const size_t rs = q->row_size;
    uint8_t *fresh = NULL, *buf = NULL;
    SML_TRY(b->ops->mem_alloc(b, (size_t)(ivf->capacity > 0 ? ivf->capacity : 1) * rs,
                              (void **)&fresh));
    simil_status s = b->ops->mem_copy(b, fresh, ivf->codes_mem, (size_t)ivf->capacity * rs);
    if (s == SIMIL_OK) s = sml_alloc((void **)&buf, (size_t)sml_xfbq_chunk, rs, "rows to recode");
    /* (an untrained IVF has no lists yet) */
    for (int64_t l = 0; ivf->size != NULL && l < ivf->nlist && s == SIMIL_OK; l++) {
        for (int64_t r = 0; r < ivf->size[l] && s == SIMIL_OK; r += sml_xfbq_chunk) {
            const int64_t m = ivf->size[l] - r < sml_xfbq_chunk ? ivf->size[l] - r : sml_xfbq_chunk;
            uint8_t *at = fresh + (size_t)(ivf->offset[l] + r) * rs;
            s = b->ops->mem_download(b, buf, at, (size_t)m * rs);
            if (s == SIMIL_OK) {
                sml_xfbq_recode_rows(q, m, buf, x->normalize);
                s = b->ops->mem_upload(b, at, buf, (size_t)m * rs);
            }
        }
    }
    sml_free(buf);
    if (s != SIMIL_OK) {
        b->ops->mem_free(b, fresh);
        return s;
    }
    *out = fresh;
    return SIMIL_OK;
}

/* Make alpha the index's scale, recoding whatever it stores. */
static simil_status sml_xfbq_set_alpha(simil_index *index, float alpha)
{
    sml_xfbq_index *x = sml_xfbq_of(index);
    sml_backend *b = index->backend;
    sml_xfbq q = x->q;
    q.alpha = alpha;
    if (x->q.alpha == alpha || index->ntotal == 0) {
        x->q = q;
        return SIMIL_OK;
    }
    uint8_t *fresh;
    if (!x->inverted) {
        SML_TRY(sml_xfbq_flat_recode(b, x, &q, index->ntotal, &fresh));
        b->ops->mem_free(b, x->codes);
        x->codes = fresh;
    } else {
        SML_TRY(sml_xfbq_ivf_recode(b, x, &q, &fresh));
        b->ops->mem_free(b, x->ivf.codes_mem);
        x->ivf.codes_mem = fresh;
    }
    x->q = q;
    return SIMIL_OK;
}

/* alpha from n vectors, unless it was set by hand. */
static simil_status sml_xfbq_pick_alpha(simil_index *index, int64_t n, const float *xs)
{
    sml_xfbq_index *x = sml_xfbq_of(index);
    if (x->alpha_manual) return SIMIL_OK;
    float alpha;
    SML_TRY(sml_xfbq_choose_alpha(n, index->dim, xs, x->normalize, &alpha));
    return sml_xfbq_set_alpha(index, alpha);
}

/* ---- flat storage ---- */

static void sml_xfbq_free_flat(sml_backend *b, sml_xfbq_index *x)
{
    b->ops->mem_free(b, x->codes);
    b->ops->mem_free(b, x->vectors);
    b->ops->mem_free(b, x->ids);
    sml_free(x->host_ids);
    x->codes = NULL;
    x->vectors = NULL;
    x->ids = NULL;
    x->host_ids = NULL;
    x->capacity = 0;
}

/* *next = flat arrays with room for need rows that hold the first ntotal:
 * x's own when they have the room, else new blocks (all or none, x's
 * untouched).  The caller fills rows past ntotal, then commits next or
 * discards it. */
static simil_status sml_xfbq_room(const simil_index *index, int64_t need, sml_xfbq_index *next)
{
    const sml_xfbq_index *x = sml_xfbq_of(index);
    *next = *x;
    if (need <= x->capacity) return SIMIL_OK;
    int64_t cap = x->capacity + x->capacity / 2;
    if (cap < need) cap = need;
    sml_backend *b = index->backend;
    const size_t used = (size_t)index->ntotal, cs = x->q.code_bytes;
    const size_t vs = sizeof(float) * (size_t)index->dim;
    next->codes = NULL;
    next->vectors = NULL;
    next->ids = NULL;
    next->host_ids = NULL;
    next->capacity = cap;
    simil_status s = sml_mem_clone(b, (void **)&next->codes, x->codes, used * cs, (size_t)cap * cs);
    if (s == SIMIL_OK)
        s = sml_mem_clone(b, (void **)&next->vectors, x->vectors, used * vs, (size_t)cap * vs);
    if (s == SIMIL_OK)
        s = sml_mem_clone(b, (void **)&next->ids, x->ids, used * sizeof(int64_t),
                          (size_t)cap * sizeof(int64_t));
    if (s == SIMIL_OK) s = sml_alloc((void **)&next->host_ids, (size_t)cap, sizeof(int64_t), "ids");
    if (s != SIMIL_OK) {
        sml_xfbq_free_flat(b, next);
        *next = *x;
        return s;
    }
    if (used > 0) memcpy(next->host_ids, x->host_ids, used * sizeof(int64_t));
    return SIMIL_OK;
}

/* next (from sml_xfbq_room) becomes the index's flat arrays. */
static void sml_xfbq_commit(sml_backend *b, sml_xfbq_index *x, const sml_xfbq_index *next)
{
    if (next->codes != x->codes) sml_xfbq_free_flat(b, x);
    *x = *next;
}

static simil_status sml_xfbq_flat_fill(const simil_index *index, sml_xfbq_index *next, int64_t n,
                                       const float *xs, const int64_t *ids)
{
    sml_backend *b = index->backend;
    const int64_t at = index->ntotal, dim = index->dim;
    const size_t cs = next->q.code_bytes;
    uint8_t *buf;
    const int64_t chunk = n < sml_xfbq_chunk ? n : sml_xfbq_chunk;
    SML_TRY(sml_alloc((void **)&buf, (size_t)chunk, cs, "XFBQ codes"));
    simil_status s = SIMIL_OK;
    for (int64_t i = 0; i < n && s == SIMIL_OK; i += chunk) {
        const int64_t m = n - i < chunk ? n - i : chunk;
        sml_xfbq_codes(next, &next->q, m, xs + i * dim, buf);
        s = b->ops->mem_upload(b, next->codes + (size_t)(at + i) * cs, buf, (size_t)m * cs);
        if (s == SIMIL_OK)
            s = b->ops->mem_upload(b, next->vectors + (at + i) * dim, xs + i * dim,
                                   sizeof(float) * (size_t)(m * dim));
        sml_progress("add", i + m, n);
    }
    sml_free(buf);
    SML_TRY(s);
    SML_TRY(b->ops->mem_upload(b, next->ids + at, ids, (size_t)n * sizeof(int64_t)));
    memcpy(next->host_ids + at, ids, (size_t)n * sizeof(int64_t));
    return SIMIL_OK;
}

static simil_status sml_xfbq_flat_append(simil_index *index, int64_t n, const float *xs,
                                         const int64_t *ids)
{
    sml_xfbq_index *x = sml_xfbq_of(index);
    sml_xfbq_index next;
    SML_TRY(sml_xfbq_room(index, index->ntotal + n, &next));
    simil_status s = sml_xfbq_flat_fill(index, &next, n, xs, ids);
    if (s != SIMIL_OK) {
        if (next.codes != x->codes) sml_xfbq_free_flat(index->backend, &next);
        return s;
    }
    sml_xfbq_commit(index->backend, x, &next);
    return SIMIL_OK;
}

static simil_status sml_xfbq_ivf_append(simil_index *index, int64_t n, const float *xs,
                                        const int64_t *ids)
{
    sml_xfbq_index *x = sml_xfbq_of(index);
    sml_backend *b = index->backend;
    int64_t *lists = NULL;
    uint8_t *rows = NULL;
    simil_status s = sml_alloc((void **)&lists, (size_t)n, sizeof *lists, "list assignments");
    if (s == SIMIL_OK) s = sml_alloc((void **)&rows, (size_t)n, x->q.row_size, "XFBQ rows");
    const int64_t chunk = (int64_t)1 << 18;
    for (int64_t i = 0; i < n && s == SIMIL_OK; i += chunk) {
        const int64_t m = n - i < chunk ? n - i : chunk;
        s = sml_ivf_probe(b, &x->ivf, m, xs + i * index->dim, 1, lists + i);
        sml_xfbq_make_rows(&x->q, m, xs + i * index->dim, x->normalize,
                           rows + (size_t)i * x->q.row_size);
        sml_progress("add", i + m, n);
    }
    if (s == SIMIL_OK) s = sml_ivf_append(b, &x->ivf, n, lists, rows, ids);
    sml_free(rows);
    sml_free(lists);
    return s;
}

/* ---- the vtable ---- */

/* IVF: the coarse quantizer is trained beside the current one and swapped in
 * once alpha is set too, so a failure leaves the index as it was. */
static simil_status sml_xfbq_train(simil_index *index, int64_t n, const float *xs)
{
    sml_xfbq_index *x = sml_xfbq_of(index);
    if (!x->inverted) return n == 0 ? SIMIL_OK : sml_xfbq_pick_alpha(index, n, xs);
    sml_backend *b = index->backend;
    sml_ivf next;
    SML_TRY(sml_ivf_init(&next, x->ivf.nlist, x->ivf.dim, x->ivf.metric, x->ivf.spherical,
                         x->ivf.code_size));
    simil_status s = sml_ivf_train(b, &next, n, xs);
    if (s == SIMIL_OK && n > 0) s = sml_xfbq_pick_alpha(index, n, xs);
    if (s == SIMIL_OK) sml_ivf_swap_quantizer(&x->ivf, &next);
    sml_ivf_free(b, &next);
    return s;
}

static simil_status sml_xfbq_add(simil_index *index, int64_t n, const float *xs,
                                 const int64_t *ids)
{
    sml_xfbq_index *x = sml_xfbq_of(index);
    const sml_xfbq before = x->q;
    if (x->q.alpha == 0) {
        /* no alpha yet (an untrained flat index): this batch chooses it */
        SML_TRY(sml_xfbq_choose_alpha(n, index->dim, xs, x->normalize, &x->q.alpha));
    }
    simil_status s = x->inverted ? sml_xfbq_ivf_append(index, n, xs, ids)
                                 : sml_xfbq_flat_append(index, n, xs, ids);
    if (s != SIMIL_OK) x->q = before;
    return s;
}

static simil_status sml_xfbq_search(const simil_index *index, const sml_search_call *call)
{
    const sml_xfbq_index *x = sml_xfbq_of(index);
    sml_backend *b = index->backend;
    const int64_t nq = call->nq, dim = index->dim;
    const int64_t code_words = x->q.query_bits * x->q.words;
    int64_t nprobe = 1;
    if (x->inverted) {
        nprobe = call->params.nprobe > 0 ? call->params.nprobe : 1;
        if (nprobe > x->ivf.nlist) nprobe = x->ivf.nlist;
    }
    const int64_t flat_offset = 0, flat_size = index->ntotal;
    uint64_t *codes = NULL;
    int64_t *probes = NULL;
    char *device_block = NULL; /* GPU: the queries, then their codes */
    const float *queries = call->queries;
    const size_t qbytes = (sizeof(float) * (size_t)(nq * dim) + 255) / 256 * 256;
    const size_t cbytes = sizeof *codes * (size_t)(nq * code_words);
    simil_status s = sml_calloc((void **)&probes, (size_t)(nq * nprobe), sizeof *probes, "probes");
    if (s == SIMIL_OK && b->gpu >= 0) {
        s = b->ops->mem_alloc(b, qbytes + cbytes, (void **)&device_block);
        if (s == SIMIL_OK) {
            queries = (const float *)device_block;
            codes = (uint64_t *)(device_block + qbytes);
            s = b->ops->mem_upload(b, device_block, call->queries,
                                   sizeof(float) * (size_t)(nq * dim));
        }
    } else if (s == SIMIL_OK) {
        s = sml_alloc((void **)&codes, (size_t)(nq * code_words), sizeof *codes, "query codes");
    }
    if (s == SIMIL_OK && b->ops->xfbq_encode != NULL) {
        const sml_xfbq_encode_args enc = {
            .x = queries,
            .n = nq,
            .dim = dim,
            .bits = x->q.query_bits,
            .words = x->q.words,
            .alpha = x->q.alpha,
            .normalize = x->normalize,
            .codes = codes,
        };
        s = b->ops->xfbq_encode(b, &enc);
    } else if (s == SIMIL_OK) {
        /* a backend without the op works in host memory */
        sml_xfbq_encode(&x->q, x->q.query_bits, nq, call->queries, x->normalize, codes,
                        (size_t)code_words * sizeof *codes);
    }
    if (s == SIMIL_OK && x->inverted)
        s = sml_ivf_probe(b, &x->ivf, nq, queries, nprobe, probes);
    if (s == SIMIL_OK) {
        sml_xfbq_select sel;
        const float extra = call->params.extra_distance < 0 ? 0.05f : call->params.extra_distance;
        sml_xfbq_selection(&x->q, extra, &sel);
        sml_xfbq_scan_args args = {
            .queries = queries,
            .query_codes = codes,
            .nq = nq,
            .dim = dim,
            .query_bits = x->q.query_bits,
            .base_bits = x->q.base_bits,
            .words = x->q.words,
            .probes = probes,
            .nprobe = nprobe,
            .list_offset = x->inverted ? x->ivf.offset : &flat_offset,
            .list_size = x->inverted ? x->ivf.size : &flat_size,
            .nlist = x->inverted ? x->ivf.nlist : 1,
            .codes = x->inverted ? x->ivf.codes_mem : x->codes,
            .code_stride = x->inverted ? x->q.row_size : x->q.code_bytes,
            .vectors = x->inverted ? (const float *)(x->ivf.codes_mem + x->q.code_bytes)
                                   : x->vectors,
            .vector_stride = x->inverted ? x->q.row_size : sizeof(float) * (size_t)dim,
            .ids = x->inverted ? x->ivf.ids_mem : x->ids,
            .k = call->k,
            .metric = sml_kernel_metric(index->metric),
            .bin_shift = sel.shift,
            .nbins = sel.nbins,
            .extra_bins = sel.extra_bins,
            .distances = call->distances,
            .labels = call->labels,
            .threads = call->params.threads,
        };
        s = b->ops->xfbq_scan(b, &args);
    }
    if (device_block != NULL)
        b->ops->mem_free(b, device_block);
    else
        sml_free(codes);
    sml_free(probes);
    return s;
}

static int sml_xfbq_sorted_has(const int64_t *sorted, int64_t n, int64_t id)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < id) lo = mid + 1; else hi = mid;
    }
    return lo < n && sorted[lo] == id;
}

/* Flat: the kept rows gathered into new arrays, swapped in when complete. */
static simil_status sml_xfbq_flat_remove(simil_index *index, int64_t n_sorted,
                                         const int64_t *sorted, int64_t *removed)
{
    sml_xfbq_index *x = sml_xfbq_of(index);
    sml_backend *b = index->backend;
    int64_t *keep;
    SML_TRY(sml_alloc((void **)&keep, (size_t)index->ntotal, sizeof *keep, "rows to keep"));
    int64_t kept = 0;
    for (int64_t i = 0; i < index->ntotal; i++)
        if (!sml_xfbq_sorted_has(sorted, n_sorted, x->host_ids[i])) keep[kept++] = i;
    *removed = index->ntotal - kept;
    simil_status s = SIMIL_OK;
    if (*removed > 0) {
        sml_xfbq_index next = *x;
        next.codes = NULL;
        next.vectors = NULL;
        next.ids = NULL;
        next.host_ids = NULL;
        next.capacity = kept;
        const size_t rows = (size_t)(kept > 0 ? kept : 1);
        const size_t cs = x->q.code_bytes, vs = sizeof(float) * (size_t)index->dim;
        s = b->ops->mem_alloc(b, rows * cs, (void **)&next.codes);
        if (s == SIMIL_OK) s = b->ops->mem_move_rows(b, next.codes, NULL, x->codes, keep, cs, kept);
        if (s == SIMIL_OK) s = b->ops->mem_alloc(b, rows * vs, (void **)&next.vectors);
        if (s == SIMIL_OK)
            s = b->ops->mem_move_rows(b, next.vectors, NULL, x->vectors, keep, vs, kept);
        if (s == SIMIL_OK) s = b->ops->mem_alloc(b, rows * sizeof(int64_t), (void **)&next.ids);
        if (s == SIMIL_OK)
            s = b->ops->mem_move_rows(b, next.ids, NULL, x->ids, keep, sizeof(int64_t), kept);
        if (s == SIMIL_OK) s = sml_alloc((void **)&next.host_ids, rows, sizeof(int64_t), "ids");
        if (s == SIMIL_OK) {
            for (int64_t i = 0; i < kept; i++) next.host_ids[i] = x->host_ids[keep[i]];
            sml_xfbq_free_flat(b, x);
            *x = next;
        } else {
            sml_xfbq_free_flat(b, &next);
            *removed = 0;
        }
    }
    sml_free(keep);
    return s;
}

static simil_status sml_xfbq_remove(simil_index *index, int64_t n_sorted, const int64_t *sorted,
                                    int64_t *removed)
{
    sml_xfbq_index *x = sml_xfbq_of(index);
    if (x->inverted) return sml_ivf_remove(index->backend, &x->ivf, n_sorted, sorted, removed);
    return sml_xfbq_flat_remove(index, n_sorted, sorted, removed);
}

/* The stored floats of the first row with this id. */
static simil_status sml_xfbq_reconstruct(const simil_index *index, int64_t id, float *out)
{
    const sml_xfbq_index *x = sml_xfbq_of(index);
    const void *v = NULL;
    if (x->inverted) {
        const int64_t at = sml_ivf_find(&x->ivf, id);
        if (at >= 0) v = x->ivf.codes_mem + (size_t)at * x->q.row_size + x->q.code_bytes;
    } else {
        for (int64_t i = 0; i < index->ntotal && v == NULL; i++)
            if (x->host_ids[i] == id) v = x->vectors + i * index->dim;
    }
    SML_RETURN_IF(v == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "reconstruct: id %" PRId64 " is not in the index", id);
    sml_backend *b = index->backend;
    return b->ops->mem_download(b, out, v, (size_t)index->dim * sizeof(float));
}

static void sml_xfbq_reset(simil_index *index)
{
    sml_xfbq_index *x = sml_xfbq_of(index);
    if (x->inverted) {
        sml_ivf_reset(index->backend, &x->ivf);
    } else {
        sml_xfbq_free_flat(index->backend, x);
    }
}

/* Section XFBQ: f32 alpha (0: not chosen), u32 flags, u32 query bits, u32 base bits. */
static simil_status sml_xfbq_save(const simil_index *index, sml_writer *w)
{
    const sml_xfbq_index *x = sml_xfbq_of(index);
    unsigned char p[16];
    const uint32_t flags = (x->q.alpha > 0 ? SML_XFBQ_ALPHA_SET : 0) |
                           (x->alpha_manual ? SML_XFBQ_ALPHA_MANUAL : 0);
    const uint32_t qb = (uint32_t)x->q.query_bits, bb = (uint32_t)x->q.base_bits;
    memcpy(p, &x->q.alpha, 4);
    memcpy(p + 4, &flags, 4);
    memcpy(p + 8, &qb, 4);
    memcpy(p + 12, &bb, 4);
    SML_TRY(sml_section_write(w, sml_tag_params, p, sizeof p));
    if (x->inverted) {
        if (!index->trained) return SIMIL_OK;
        return sml_ivf_save(index->backend, &x->ivf, w);
    }
    const uint64_t n = (uint64_t)index->ntotal;
    SML_TRY(sml_section_write(w, sml_tag_ids, x->host_ids, n * sizeof(int64_t)));
    SML_TRY(sml_section_write_mem(w, sml_tag_vectors, index->backend, x->vectors,
                                  n * (uint64_t)index->dim * sizeof(float)));
    return sml_section_write_mem(w, sml_tag_codes, index->backend, x->codes, n * x->q.code_bytes);
}

static simil_status sml_xfbq_load_params(simil_index *index, sml_reader *r)
{
    sml_xfbq_index *x = sml_xfbq_of(index);
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

/* On a fresh index whose counters the header gave; on failure the caller
 * destroys the index. */
static simil_status sml_xfbq_load(simil_index *index, sml_reader *r)
{
    sml_xfbq_index *x = sml_xfbq_of(index);
    sml_backend *b = index->backend;
    SML_TRY(sml_xfbq_load_params(index, r));
    if (x->inverted) {
        if (!index->trained) {
            SML_RETURN_IF(index->ntotal != 0, SIMIL_ERR_CORRUPT,
                          "'%s' is damaged: an untrained index with vectors", r->path);
            return SIMIL_OK;
        }
        return sml_ivf_load(b, &x->ivf, r, index->ntotal, index->next_id);
    }
    const int64_t n = index->ntotal;
    index->ntotal = 0;
    uint64_t bytes;
    SML_TRY(sml_section_open(r, sml_tag_ids, &bytes));
    SML_RETURN_IF(bytes != (uint64_t)n * sizeof(int64_t), SIMIL_ERR_CORRUPT,
                  "'%s' is damaged: %" PRId64 " vectors but %llu bytes of ids", r->path, n,
                  (unsigned long long)bytes);
    const uint64_t per_vector =
        sizeof(int64_t) + x->q.code_bytes + sizeof(float) * (uint64_t)index->dim;
    SML_RETURN_IF((uint64_t)n > r->size / per_vector, SIMIL_ERR_CORRUPT,
                  "'%s' is truncated: %" PRId64 " XFBQ vectors of %llu bytes cannot fit in %llu "
                  "bytes", r->path, n, (unsigned long long)per_vector, (unsigned long long)r->size);
    sml_xfbq_index next;
    SML_TRY(sml_xfbq_room(index, n, &next));
    sml_xfbq_commit(b, x, &next); /* a fresh index: nothing to keep if the rest fails */
    SML_TRY(sml_section_read(r, x->host_ids, (size_t)bytes));
    SML_TRY(sml_section_close(r));
    SML_TRY(sml_ids_check(r->path, n, x->host_ids, index->next_id));
    SML_TRY(b->ops->mem_upload(b, x->ids, x->host_ids, (size_t)bytes));
    SML_TRY(sml_section_read_mem(r, sml_tag_vectors, b, x->vectors,
                                 (uint64_t)n * (uint64_t)index->dim * sizeof(float)));
    SML_TRY(sml_section_read_mem(r, sml_tag_codes, b, x->codes, (uint64_t)n * x->q.code_bytes));
    index->ntotal = n;
    return SIMIL_OK;
}

static void sml_xfbq_ids(const simil_index *index, int64_t *out)
{
    const sml_xfbq_index *x = sml_xfbq_of(index);
    if (x->inverted)
        sml_ivf_ids(&x->ivf, out);
    else if (index->ntotal > 0)
        memcpy(out, x->host_ids, sizeof(int64_t) * (size_t)index->ntotal);
}

static void sml_xfbq_destroy(simil_index *index)
{
    sml_xfbq_index *x = sml_xfbq_of(index);
    if (x->inverted) {
        sml_ivf_free(index->backend, &x->ivf);
    } else {
        sml_xfbq_free_flat(index->backend, x);
    }
    sml_free(x);
}

static const sml_index_vtable sml_xfbq_vtable = {
    .train = sml_xfbq_train,
    .add = sml_xfbq_add,
    .search = sml_xfbq_search,
    .remove = sml_xfbq_remove,
    .reconstruct = sml_xfbq_reconstruct,
    .ids = sml_xfbq_ids,
    .reset = sml_xfbq_reset,
    .save = sml_xfbq_save,
    .load = sml_xfbq_load,
    .destroy = sml_xfbq_destroy,
};

simil_status sml_xfbq_index_init(simil_index *index)
{
    SML_RETURN_IF(index->backend->ops->xfbq_scan == NULL, SIMIL_ERR_UNSUPPORTED,
                  "XFBQ is not built for %s; use --device cpu", index->backend->name);
    sml_xfbq_index *x;
    SML_TRY(sml_calloc((void **)&x, 1, sizeof *x, "an XFBQ index"));
    const sml_index_spec *spec = &index->spec;
    simil_status s = sml_xfbq_init(&x->q, index->dim, spec->xfbq_query_bits, spec->xfbq_base_bits);
    x->normalize = index->metric != SIMIL_METRIC_COSINE;
    x->inverted = spec->ivf_nlist > 0;
    if (s == SIMIL_OK && x->inverted)
        s = sml_ivf_init(&x->ivf, spec->ivf_nlist, index->dim, sml_kernel_metric(index->metric),
                         index->metric == SIMIL_METRIC_COSINE, x->q.row_size);
    if (s != SIMIL_OK) {
        sml_free(x);
        return s;
    }
    index->impl = x;
    index->vt = &sml_xfbq_vtable;
    /* flat XFBQ takes vectors at once (the first batch chooses alpha);
     * IVF,XFBQ needs its coarse quantizer trained first */
    index->trained = !x->inverted;
    return SIMIL_OK;
}

simil_status simil_index_set_xfbq_alpha(simil_index *index, float alpha)
{
    SML_RETURN_IF(index == NULL, SIMIL_ERR_INVALID_ARGUMENT, "set_xfbq_alpha: index is NULL");
    SML_RETURN_IF(index->vt != &sml_xfbq_vtable, SIMIL_ERR_INVALID_ARGUMENT,
                  "set_xfbq_alpha: index '%s' is not an XFBQ index", index->description);
    SML_RETURN_IF(!(alpha > 0) || !isfinite(alpha) || alpha > 1e30f,
                  SIMIL_ERR_INVALID_ARGUMENT,
                  "set_xfbq_alpha: alpha=%g must be a positive finite scale", (double)alpha);
    SML_TRY(sml_xfbq_set_alpha(index, alpha));
    sml_xfbq_of(index)->alpha_manual = 1;
    return SIMIL_OK;
}

float sml_xfbq_index_alpha(const simil_index *index)
{
    if (index == NULL || index->vt != &sml_xfbq_vtable) return 0.0f;
    return sml_xfbq_of(index)->q.alpha;
}
