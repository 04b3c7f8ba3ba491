/* index_ivf_pq.c: "IVFn,PQm[xb]", IVFADC (the GPU paper, section 5.2):
 * an inverted file whose lists hold product-quantized residuals.
 *
 * Training: k-means for the coarse quantizer, then a product quantizer of
 * m sub-quantizers on the residuals x - c(x).  Adding encodes residuals on the
 * backend.  Searching computes, per query and probed list, a lookup table of
 * m x 2^b partial distances and adds m entries per code.  For L2 the tables
 * come from the paper's decomposition
 *     ||x - c - q(r)||^2 = ||x - c||^2 + (||q(r)||^2 + 2<c, q(r)>) - 2<x, q(r)>
 *                          term 2        term 1 (per list, at training)   term 3
 * Term 1 depends only on the stored vector, so for L2 each row keeps its sum
 * over the sub-quantizers as a float after the code (4 bytes a vector, where
 * the paper's per-list tables take nlist x m x 2^b floats).  A query's table
 * is then term 3 alone, the same for every list it probes, and a row's
 * distance is term 2 + its term 1 + m entries.  On request
 * (precomputed_tables = 0) each (query, list) table is computed from the
 * residual instead.  "PQm" alone is an inverted file of one list.
 *
 * A Faiss IndexIVFPQ with by_residual = false codes the vectors themselves:
 * such an index (read from a Faiss file) encodes, decodes and builds its
 * tables against a zero centroid (zero_mem) wherever the others use their
 * list's, so its L2 scans take the residual-table route with x - 0, and its
 * IP scans key a row with its term 3 alone (the coarse similarity <x, 0> is
 * 0; sml_ivf_pq_scan_args.codes_of_vectors), which only backends with
 * ivf_pq_ip_vector_codes do: the others refuse such an index on load. */
#include <assert.h>
#include <string.h>

#include "algo/pq.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/progress.h"
#include "index/index_internal.h"
#include "index/ivf.h"

static const uint32_t sml_tag_codebooks = SML_TAG('P', 'Q', 'C', 'B');
/* an empty section before the codebooks: the codes are not of residuals */
static const uint32_t sml_tag_no_residual = SML_TAG('P', 'Q', 'N', 'R');

typedef struct sml_ivf_pq {
    sml_ivf ivf;
    sml_pq pq;
    float *codebooks_mem;  /* backend: the PQ codebooks */
    float *by_codeword_mem; /* backend: the same, codeword by codeword (ksub x m x dsub) */
    int by_residual;       /* 0: codes of the vectors, not of their residuals */
    float *zero_mem;       /* backend, by_residual = 0 only: nlist x dim zeros */
} sml_ivf_pq;

static sml_ivf_pq *sml_ivf_pq_of(const simil_index *index) { return index->impl; }

/* The centroids that codes are residuals of (backend): the coarse ones, or
 * zeros where the codes are of the vectors themselves. */
static const float *sml_ivf_pq_base(const sml_ivf_pq *x)
{
    assert(x->by_residual || x->zero_mem != NULL);
    return x->by_residual ? x->ivf.centroids_mem : x->zero_mem;
}

/* *slot = new backend memory holding these host bytes; the old block is
 * freed only once the new one is complete. */
static simil_status sml_ivf_pq_put(sml_backend *b, float **slot, const float *host, size_t bytes)
{
    float *mem = NULL;
    simil_status s = b->ops->mem_alloc(b, bytes, (void **)&mem);
    if (s == SIMIL_OK) s = b->ops->mem_upload(b, mem, host, bytes);
    if (s != SIMIL_OK) {
        b->ops->mem_free(b, mem);
        return s;
    }
    b->ops->mem_free(b, *slot);
    *slot = mem;
    return SIMIL_OK;
}

/* The codebooks to backend memory, as they are and codeword by codeword:
 * codeword j of every sub-quantizer together, the order in which the GPU's
 * one-query tables read them (a kernel that reordered them on each call was
 * one more launch per search). */
static simil_status sml_ivf_pq_upload(sml_backend *b, sml_ivf_pq *x)
{
    const sml_pq *pq = &x->pq;
    const size_t m = (size_t)pq->m, ksub = (size_t)pq->ksub, dsub = (size_t)pq->dsub;
    float *by_codeword = NULL;
    SML_TRY(sml_alloc((void **)&by_codeword, m * ksub * dsub, sizeof *by_codeword,
                      "PQ codebooks by codeword"));
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < ksub; j++)
            memcpy(by_codeword + (j * m + i) * dsub, pq->centroids + (i * ksub + j) * dsub,
                   dsub * sizeof *by_codeword);
    simil_status s = sml_ivf_pq_put(b, &x->by_codeword_mem, by_codeword,
                                    sizeof(float) * m * ksub * dsub);
    sml_free(by_codeword);
    if (s == SIMIL_OK)
        s = sml_ivf_pq_put(b, &x->codebooks_mem, pq->centroids, sizeof(float) * m * ksub * dsub);
    return s;
}

/* The zero centroids of codes of the vectors, to backend memory; refused
 * for IP on a backend whose scans would add the coarse similarity. */
static simil_status sml_ivf_pq_zero_upload(sml_backend *b, sml_ivf_pq *x)
{
    SML_RETURN_IF(x->ivf.metric != SIMIL_METRIC_L2 && !b->ops->ivf_pq_ip_vector_codes,
                  SIMIL_ERR_UNSUPPORTED,
                  "an inner-product IVF-PQ whose codes are of the vectors (Faiss's "
                  "by_residual = false) is not supported on %s yet; use the CPU (device \"cpu\")",
                  b->name);
    const size_t count = (size_t)(x->ivf.nlist * x->ivf.dim);
    float *zeros = NULL;
    SML_TRY(sml_calloc((void **)&zeros, count, sizeof *zeros, "zero centroids"));
    simil_status s = sml_ivf_pq_put(b, &x->zero_mem, zeros, count * sizeof *zeros);
    sml_free(zeros);
    return s;
}

size_t sml_ivf_pq_row_bytes(int64_t m, simil_metric kernel_metric)
{
    return sml_pq_code_bytes(m) + (kernel_metric == SIMIL_METRIC_L2 ? sizeof(float) : 0);
}

/* Check the codes of n rows (host, row_bytes apart) against the codebooks
 * and, for L2, write each row's term 1 after its code: sum over i of
 * ||q_i||^2 + 2 <c_i, q_i>, q_i the codeword, c the centroid of the row's list
 * (lists[r], or `list` for every row where lists is NULL), in float64 like
 * the CPU's other reference sums.  Returns 0 if some code is past its
 * codebook (a damaged file with codes of fewer than 8 bits), which a scan
 * would look up past its table. */
static int sml_ivf_pq_term1_rows(const sml_ivf_pq *x, int64_t n, const int64_t *lists,
                                 int64_t list, uint8_t *rows)
{
    const sml_pq *pq = &x->pq;
    const sml_ivf *ivf = &x->ivf;
    const int l2 = ivf->metric == SIMIL_METRIC_L2;
    if (!l2 && pq->ksub == 256) return 1;
    const size_t at = sml_pq_code_size(pq);
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n * pq->m * pq->dsub > (1 << 18))
    for (int64_t r = 0; r < n; r++) {
        uint8_t *row = rows + (size_t)r * ivf->code_size;
        const float *c =
            x->by_residual ? ivf->centroids + (lists ? lists[r] : list) * ivf->dim : NULL;
        double v = 0;
        for (int64_t i = 0; i < pq->m; i++) {
            if (row[i] >= pq->ksub) {
                bad = 1;
                break;
            }
            if (!l2) continue;
            const float *q = pq->centroids + (i * pq->ksub + row[i]) * pq->dsub;
            for (int64_t t = 0; t < pq->dsub; t++)
                v += (double)q[t] * q[t] + (c ? 2.0 * (double)c[i * pq->dsub + t] * q[t] : 0.0);
        }
        if (!l2) continue;
        const float t1 = (float)v;
        memcpy(row + at, &t1, sizeof t1);
    }
    return !bad;
}

/* Files hold the codes alone: loading checks them, and for L2 rebuilds
 * term 1 (sml_ivf.derive). */
static int sml_ivf_pq_derive(const void *owner, int64_t list, int64_t n, uint8_t *rows)
{
    return sml_ivf_pq_term1_rows(owner, n, NULL, list, rows);
}

simil_status sml_ivf_pq_append(simil_index *index, int64_t n, const int64_t *lists,
                               uint8_t *rows, const int64_t *ids)
{
    sml_ivf_pq *x = sml_ivf_pq_of(index);
    /* the encoder's and Faiss's 8-bit codes always fit their codebooks */
    SML_RETURN_IF(!sml_ivf_pq_term1_rows(x, n, lists, 0, rows), SIMIL_ERR_INTERNAL,
                  "IVF-PQ: a code to append is past its codebook");
    return sml_ivf_append(index->backend, &x->ivf, n, lists, rows, ids);
}

/* Free what a (fresh or swapped-out) IVF-PQ holds. */
static void sml_ivf_pq_free_parts(sml_backend *b, sml_ivf_pq *x)
{
    b->ops->mem_free(b, x->codebooks_mem);
    b->ops->mem_free(b, x->by_codeword_mem);
    b->ops->mem_free(b, x->zero_mem);
    sml_ivf_free(b, &x->ivf);
    sml_pq_free(&x->pq);
}

/* The coarse quantizer and the codebooks are trained beside the current ones
 * and swapped in only when both are complete, so a failed train (or retrain)
 * leaves the index as it was. */
static simil_status sml_ivf_pq_train(simil_index *index, int64_t n, const float *xs)
{
    sml_ivf_pq *x = sml_ivf_pq_of(index);
    sml_backend *b = index->backend;
    sml_ivf_pq next = {0};
    int64_t *lists = NULL;
    float *res = NULL;
    simil_status s = sml_pq_init(&next.pq, index->dim, x->pq.m, x->pq.nbits);
    if (s == SIMIL_OK)
        s = sml_ivf_init(&next.ivf, x->ivf.nlist, index->dim, x->ivf.metric, x->ivf.spherical,
                         x->ivf.code_size);
    if (s == SIMIL_OK) s = sml_ivf_train(b, &next.ivf, n, xs);
    /* residuals against the nearest coarse centroid (or the vectors) */
    if (s == SIMIL_OK) s = sml_alloc((void **)&lists, (size_t)n, sizeof *lists, "list assignments");
    if (s == SIMIL_OK) s = sml_alloc((void **)&res, (size_t)(n * index->dim), sizeof *res, "residuals");
    if (s == SIMIL_OK) s = sml_ivf_probe(b, &next.ivf, n, xs, 1, lists);
    if (s == SIMIL_OK) {
        if (x->by_residual)
            sml_ivf_residuals(&next.ivf, n, xs, lists, res);
        else /* codes of the vectors themselves: the PQ learns them as they are */
            memcpy(res, xs, sizeof *res * (size_t)(n * index->dim));
        sml_pq_train_params pp;
        sml_pq_train_params_init(&pp, &next.pq, 25, 4321);
        s = sml_pq_train(b, &next.pq, n, res, &pp);
    }
    if (s == SIMIL_OK) s = sml_ivf_pq_upload(b, &next);
    if (s == SIMIL_OK) {
        sml_ivf_swap_quantizer(&x->ivf, &next.ivf);
        float *t = x->pq.centroids, *cb = x->codebooks_mem, *bc = x->by_codeword_mem;
        x->pq.centroids = next.pq.centroids;
        x->codebooks_mem = next.codebooks_mem;
        x->by_codeword_mem = next.by_codeword_mem;
        next.pq.centroids = t;
        next.codebooks_mem = cb;
        next.by_codeword_mem = bc;
    }
    sml_ivf_pq_free_parts(b, &next);
    sml_free(res);
    sml_free(lists);
    return s;
}

/* Each chunk goes to backend memory once, where both the coarse assignment
 * and the encoder read it; x already there (in_backend) is read in place.
 * The CPU takes chunks of 16,384 vectors, a progress report each (a second
 * or two at 784-d), where one call of 60,000 reported only its end. */
simil_status sml_ivf_pq_encode(const simil_index *index, int64_t n, const float *xs,
                               int in_backend, int64_t *lists, uint8_t *codes)
{
    const sml_ivf_pq *x = sml_ivf_pq_of(index);
    sml_backend *b = index->backend;
    const size_t code_size = x->ivf.code_size;
    const int64_t most = (int64_t)1 << (b->gpu >= 0 ? 20 : 14);
    const int64_t chunk = n < most ? n : most;
    float *staged = NULL;
    simil_status s = SIMIL_OK;
    if (b->gpu >= 0 && !in_backend)
        s = b->ops->mem_alloc(b, sizeof(float) * (size_t)(chunk * index->dim), (void **)&staged);
    for (int64_t i = 0; i < n && s == SIMIL_OK; i += chunk) {
        const int64_t m = n - i < chunk ? n - i : chunk;
        const float *part = xs + i * index->dim;
        if (staged != NULL) {
            s = b->ops->mem_upload(b, staged, part, sizeof(float) * (size_t)(m * index->dim));
            part = staged;
        }
        if (s == SIMIL_OK) s = sml_ivf_probe(b, &x->ivf, m, part, 1, lists + i);
        sml_pq_encode_args enc = {
            .x = part,
            .n = m,
            .dim = index->dim,
            .lists = lists + i,
            .coarse = sml_ivf_pq_base(x),
            .codebooks = x->codebooks_mem,
            .m = x->pq.m,
            .ksub = x->pq.ksub,
            .dsub = x->pq.dsub,
            .codes = codes + (size_t)i * code_size,
            .code_size = code_size,
        };
        if (s == SIMIL_OK) s = b->ops->pq_encode(b, &enc);
        sml_progress("add", i + m, n);
    }
    b->ops->mem_free(b, staged);
    return s;
}

static simil_status sml_ivf_pq_add(simil_index *index, int64_t n, const float *xs,
                                   const int64_t *ids)
{
    const size_t code_size = sml_ivf_pq_of(index)->ivf.code_size;
    int64_t *lists = NULL;
    uint8_t *codes = NULL;
    simil_status s = sml_alloc((void **)&lists, (size_t)n, sizeof *lists, "list assignments");
    if (s == SIMIL_OK) s = sml_alloc((void **)&codes, (size_t)n, code_size, "codes");
    if (s == SIMIL_OK) s = sml_ivf_pq_encode(index, n, xs, 0, lists, codes);
    if (s == SIMIL_OK) s = sml_ivf_pq_append(index, n, lists, codes, ids);
    sml_free(codes);
    sml_free(lists);
    return s;
}

simil_status sml_ivf_pq_reserve(simil_index *index, const int64_t *extra)
{
    return sml_ivf_reserve(index->backend, &sml_ivf_pq_of(index)->ivf, extra);
}

static simil_status sml_ivf_pq_search(const simil_index *index, const sml_search_call *call)
{
    const sml_ivf_pq *x = sml_ivf_pq_of(index);
    const sml_ivf *ivf = &x->ivf;
    const int64_t lut_bytes = x->pq.m * x->pq.ksub * (int64_t)sizeof(float);
    /* the backend finds the probes: on a GPU, the queries, probes and
     * coarse keys stay in device memory from the coarse search to the scan */
    const sml_ivf_pq_scan_args args = {
        .scan = sml_ivf_scan_of(ivf, call),
        .m = x->pq.m,
        .ksub = x->pq.ksub,
        .dsub = x->pq.dsub,
        .codebooks = x->codebooks_mem,
        .codebooks_by_codeword = x->by_codeword_mem,
        .coarse = sml_ivf_pq_base(x),
        /* term 1 holds <c, q(r)>, which codes of the vectors lack */
        .term1_at = x->by_residual && ivf->metric == SIMIL_METRIC_L2 &&
                            call->params.precomputed_tables
                        ? sml_pq_code_size(&x->pq)
                        : 0,
        .lut_fp16 = call->params.lut == SML_LUT_FP16 ||
                    (call->params.lut == SML_LUT_AUTO && lut_bytes > 48 * 1024),
        .codes_of_vectors = !x->by_residual,
    };
    return index->backend->ops->ivf_pq_scan(index->backend, &args);
}

static simil_status sml_ivf_pq_remove(simil_index *index, int64_t n_sorted, const int64_t *sorted,
                                      int64_t *removed)
{
    return sml_ivf_remove(index->backend, &sml_ivf_pq_of(index)->ivf, n_sorted, sorted, removed);
}

/* The coarse centroid plus the decoded residual (or the decoded vector). */
static simil_status sml_ivf_pq_reconstruct(const simil_index *index, int64_t id, float *out)
{
    const sml_ivf_pq *x = sml_ivf_pq_of(index);
    const sml_ivf *ivf = &x->ivf;
    const int64_t at = sml_ivf_find(ivf, id);
    SML_RETURN_IF(at < 0, SIMIL_ERR_INVALID_ARGUMENT,
                  "reconstruct: id %" PRId64 " is not in the index", id);
    uint8_t code[128];
    sml_backend *b = index->backend;
    SML_TRY(b->ops->mem_download(b, code, ivf->codes_mem + (size_t)at * ivf->code_size,
                                 ivf->code_size));
    sml_pq_decode(&x->pq, 1, code, ivf->code_size, out);
    if (!x->by_residual) return SIMIL_OK;
    const int64_t l = sml_ivf_list_of(ivf, at);
    for (int64_t t = 0; t < index->dim; t++) out[t] += ivf->centroids[l * index->dim + t];
    return SIMIL_OK;
}

static void sml_ivf_pq_reset(simil_index *index)
{
    sml_ivf_reset(index->backend, &sml_ivf_pq_of(index)->ivf);
}

static simil_status sml_ivf_pq_save(const simil_index *index, sml_writer *w)
{
    if (!index->trained) return SIMIL_OK;
    const sml_ivf_pq *x = sml_ivf_pq_of(index);
    if (!x->by_residual) SML_TRY(sml_section_write(w, sml_tag_no_residual, NULL, 0));
    SML_TRY(sml_section_write(w, sml_tag_codebooks, x->pq.centroids,
                              sizeof(float) * (uint64_t)(x->pq.m * x->pq.ksub * x->pq.dsub)));
    return sml_ivf_save(index->backend, &x->ivf, w);
}

static simil_status sml_ivf_pq_load(simil_index *index, sml_reader *r)
{
    if (!index->trained) {
        SML_RETURN_IF(index->ntotal != 0, SIMIL_ERR_CORRUPT,
                      "'%s' is damaged: an untrained index with vectors", r->path);
        return SIMIL_OK;
    }
    sml_ivf_pq *x = sml_ivf_pq_of(index);
    uint64_t bytes;
    uint32_t tag = 0;
    if (r->size - r->offset >= sizeof tag) {
        SML_TRY(sml_reader_read(r, &tag, sizeof tag));
        SML_TRY(sml_reader_seek(r, r->offset - sizeof tag));
    }
    const int by_residual = tag != sml_tag_no_residual;
    if (!by_residual) {
        SML_TRY(sml_section_open(r, sml_tag_no_residual, &bytes));
        SML_TRY(sml_section_close(r));
    }
    SML_TRY(sml_section_open(r, sml_tag_codebooks, &bytes));
    SML_RETURN_IF(bytes != sizeof(float) * (uint64_t)(x->pq.m * x->pq.ksub * x->pq.dsub),
                  SIMIL_ERR_CORRUPT, "'%s' is damaged: PQ codebooks of %llu bytes", r->path,
                  (unsigned long long)bytes);
    SML_TRY(sml_pq_alloc(&x->pq)); /* its size checked against the file first */
    SML_TRY(sml_section_read(r, x->pq.centroids, (size_t)bytes));
    SML_TRY(sml_section_close(r));
    /* before the lists, whose term 1 (sml_ivf_pq_derive) depends on it */
    x->by_residual = by_residual;
    if (!by_residual) SML_TRY(sml_ivf_pq_zero_upload(index->backend, x));
    SML_TRY(sml_ivf_load(index->backend, &x->ivf, r, index->ntotal, index->next_id));
    return sml_ivf_pq_upload(index->backend, x);
}

static void sml_ivf_pq_ids(const simil_index *index, int64_t *out)
{
    sml_ivf_ids(&sml_ivf_pq_of(index)->ivf, out);
}

static void sml_ivf_pq_destroy(simil_index *index)
{
    sml_ivf_pq *x = sml_ivf_pq_of(index);
    sml_ivf_pq_free_parts(index->backend, x);
    sml_free(x);
}

simil_status sml_ivf_pq_set_trained(simil_index *index, const float *coarse,
                                    const float *codebooks, int by_residual)
{
    sml_ivf_pq *x = sml_ivf_pq_of(index);
    sml_backend *b = index->backend;
    SML_TRY(sml_pq_alloc(&x->pq));
    SML_TRY(sml_ivf_set_centroids(b, &x->ivf, coarse));
    x->by_residual = by_residual;
    if (!by_residual) SML_TRY(sml_ivf_pq_zero_upload(b, x));
    memcpy(x->pq.centroids, codebooks, sizeof(float) * (size_t)(x->pq.m * x->pq.ksub * x->pq.dsub));
    SML_TRY(sml_ivf_pq_upload(b, x));
    index->trained = 1;
    return SIMIL_OK;
}

void sml_ivf_pq_parts(const simil_index *index, sml_ivf **ivf, sml_pq **pq, int *by_residual)
{
    sml_ivf_pq *x = sml_ivf_pq_of(index);
    *ivf = &x->ivf;
    *pq = &x->pq;
    *by_residual = x->by_residual;
}

static const sml_index_vtable sml_ivf_pq_vtable = {
    .train = sml_ivf_pq_train,
    .add = sml_ivf_pq_add,
    .search = sml_ivf_pq_search,
    .remove = sml_ivf_pq_remove,
    .reconstruct = sml_ivf_pq_reconstruct,
    .ids = sml_ivf_pq_ids,
    .reset = sml_ivf_pq_reset,
    .save = sml_ivf_pq_save,
    .load = sml_ivf_pq_load,
    .destroy = sml_ivf_pq_destroy,
    .batchable = 1,
};

int sml_index_is_ivf_pq(const simil_index *index) { return index->vt == &sml_ivf_pq_vtable; }

size_t sml_ivf_pq_code_bytes(const simil_index *index)
{
    return sml_pq_code_size(&sml_ivf_pq_of(index)->pq);
}

simil_status sml_ivf_pq_init(simil_index *index)
{
    const sml_backend_ops *ops = index->backend->ops;
    SML_RETURN_IF(ops->ivf_pq_scan == NULL || ops->pq_encode == NULL, SIMIL_ERR_UNSUPPORTED,
                  "IVF-PQ is not built for %s yet; use the CPU (device \"cpu\")", index->backend->name);
    sml_ivf_pq *x;
    SML_TRY(sml_calloc((void **)&x, 1, sizeof *x, "an IVF-PQ index"));
    x->by_residual = 1;
    const sml_index_spec *spec = &index->spec;
    simil_status s = sml_pq_init(&x->pq, index->dim, spec->pq_m, spec->pq_bits);
    if (s == SIMIL_OK)
        s = sml_ivf_init(&x->ivf, spec->ivf_nlist > 0 ? spec->ivf_nlist : 1, index->dim,
                         sml_kernel_metric(index->metric), index->metric == SIMIL_METRIC_COSINE,
                         sml_ivf_pq_row_bytes(spec->pq_m, sml_kernel_metric(index->metric)));
    if (s != SIMIL_OK) {
        sml_pq_free(&x->pq);
        sml_free(x);
        return s;
    }
    x->ivf.file_code_size = sml_pq_code_size(&x->pq);
    /* IP rows of 8-bit codes have nothing to rebuild or check: they load in bulk */
    if (x->ivf.metric == SIMIL_METRIC_L2 || x->pq.ksub < 256) {
        x->ivf.derive = sml_ivf_pq_derive;
        x->ivf.derive_owner = x;
    }
    index->impl = x;
    index->vt = &sml_ivf_pq_vtable;
    index->trained = 0;
    return SIMIL_OK;
}
