/* faiss_write.c: simil_index_save_faiss, writing an index as a Faiss index
 * file (the layout faiss_read.c reads; see there for the conventions).
 *
 * Flat becomes IndexFlatL2/IP, wrapped in an IndexIDMap2 unless its ids are
 * 0..n-1 in order; IVF-Flat and IVF-PQ become IndexIVFFlat and IndexIVFPQ
 * with ArrayInvertedLists, which carry the ids themselves.  Vectors and codes
 * are streamed from backend memory through a host buffer; PQ codes lose the
 * padding simil's lists give them.  The file is written atomically. */
#include <stdio.h>
#include <string.h>

#include "algo/pq.h"
#include "core/alloc.h"
#include "core/error.h"
#include "index/index_internal.h"
#include "index/ivf.h"
#include "simil/faiss.h"

enum { SML_FW_FLAT = 1, SML_FW_IVF_FLAT = 2, SML_FW_IVF_PQ = 3 };

/* Backend memory moves through host buffers of about this size. */
static const size_t sml_fw_chunk = (size_t)16 << 20;

static simil_status sml_fw_code(sml_writer *w, const char *code)
{
    return sml_writer_write(w, code, 4);
}

static simil_status sml_fw_u8(sml_writer *w, uint8_t v) { return sml_writer_write(w, &v, 1); }
static simil_status sml_fw_i32(sml_writer *w, int32_t v) { return sml_writer_write(w, &v, 4); }
static simil_status sml_fw_u64(sml_writer *w, uint64_t v) { return sml_writer_write(w, &v, 8); }

/* Faiss metric codes: 0 inner product, 1 L2.  Cosine is IP on the stored,
 * normalized vectors. */
static int32_t sml_fw_metric(const simil_index *index)
{
    return index->metric == SIMIL_METRIC_L2 ? 1 : 0;
}

/* The fields every Faiss index starts with, after its code. */
static simil_status sml_fw_header(sml_writer *w, const simil_index *index, int64_t ntotal)
{
    const int64_t unused = (int64_t)1 << 20; /* what Faiss writes there */
    SML_TRY(sml_fw_i32(w, (int32_t)index->dim));
    SML_TRY(sml_writer_write(w, &ntotal, 8));
    SML_TRY(sml_writer_write(w, &unused, 8));
    SML_TRY(sml_writer_write(w, &unused, 8));
    SML_TRY(sml_fw_u8(w, 1));
    return sml_fw_i32(w, sml_fw_metric(index));
}

/* bytes of backend memory, through a host buffer where it is not host memory. */
static simil_status sml_fw_mem(sml_writer *w, sml_backend *b, const void *mem, uint64_t bytes)
{
    if (b->gpu < 0) return sml_writer_write(w, mem, (size_t)bytes);
    size_t chunk = bytes < sml_fw_chunk ? (size_t)bytes : sml_fw_chunk;
    void *buf;
    SML_TRY(sml_alloc(&buf, chunk > 0 ? chunk : 1, 1, "a save buffer"));
    simil_status s = SIMIL_OK;
    for (uint64_t done = 0; done < bytes && s == SIMIL_OK; done += chunk) {
        size_t m = bytes - done < chunk ? (size_t)(bytes - done) : chunk;
        s = b->ops->mem_download(b, buf, (const char *)mem + done, m);
        if (s == SIMIL_OK) s = sml_writer_write(w, buf, m);
    }
    sml_free(buf);
    return s;
}

/* An IndexFlat of n vectors: code, header, then the floats as a vector. */
static simil_status sml_fw_flat(sml_writer *w, const simil_index *index, sml_backend *b,
                                const float *mem, int64_t n)
{
    SML_TRY(sml_fw_code(w, index->metric == SIMIL_METRIC_L2 ? "IxF2" : "IxFI"));
    SML_TRY(sml_fw_header(w, index, n));
    uint64_t count = (uint64_t)n * (uint64_t)index->dim;
    SML_TRY(sml_fw_u64(w, count));
    return sml_fw_mem(w, b, mem, count * sizeof(float));
}

static simil_status sml_fw_flat_index(sml_writer *w, const simil_index *index)
{
    const float *vectors;
    const int64_t *ids;
    sml_flat_data(index, &vectors, &ids);
    int sequential = 1;
    for (int64_t i = 0; i < index->ntotal && sequential; i++) sequential = ids[i] == i;
    if (sequential) return sml_fw_flat(w, index, index->backend, vectors, index->ntotal);
    SML_TRY(sml_fw_code(w, "IxM2"));
    SML_TRY(sml_fw_header(w, index, index->ntotal));
    SML_TRY(sml_fw_flat(w, index, index->backend, vectors, index->ntotal));
    SML_TRY(sml_fw_u64(w, (uint64_t)index->ntotal));
    return sml_writer_write(w, ids, (size_t)index->ntotal * sizeof(int64_t));
}

/* ArrayInvertedLists: nlist, code size, the sizes in full, then each
 * non-empty list's codes (code_size of each row_bytes-byte row) and ids. */
static simil_status sml_fw_invlists(sml_writer *w, sml_backend *b, const sml_ivf *ivf,
                                    size_t code_size, uint8_t *buf)
{
    SML_TRY(sml_fw_code(w, "ilar"));
    SML_TRY(sml_fw_u64(w, (uint64_t)ivf->nlist));
    SML_TRY(sml_fw_u64(w, (uint64_t)code_size));
    SML_TRY(sml_fw_code(w, "full"));
    SML_TRY(sml_fw_u64(w, (uint64_t)ivf->nlist));
    for (int64_t l = 0; l < ivf->nlist; l++) SML_TRY(sml_fw_u64(w, (uint64_t)ivf->size[l]));
    const size_t row_bytes = ivf->code_size;
    for (int64_t l = 0; l < ivf->nlist; l++) {
        const int64_t n = ivf->size[l];
        if (n == 0) continue;
        SML_TRY(b->ops->mem_download(b, buf, ivf->codes_mem + (size_t)ivf->offset[l] * row_bytes,
                                     (size_t)n * row_bytes));
        sml_rows_narrow(buf, n, row_bytes, code_size);
        SML_TRY(sml_writer_write(w, buf, (size_t)n * code_size));
        SML_TRY(sml_writer_write(w, ivf->host_ids + ivf->offset[l], (size_t)n * sizeof(int64_t)));
    }
    return SIMIL_OK;
}

/* Header, nlist, the default nprobe, the quantizer, an empty direct map. */
static simil_status sml_fw_ivf_header(sml_writer *w, const simil_index *index, sml_backend *b,
                                      const sml_ivf *ivf)
{
    SML_TRY(sml_fw_header(w, index, index->ntotal));
    SML_TRY(sml_fw_u64(w, (uint64_t)ivf->nlist));
    SML_TRY(sml_fw_u64(w, (uint64_t)simil_index_nprobe(index)));
    SML_TRY(sml_fw_flat(w, index, b, ivf->centroids_mem, ivf->nlist));
    SML_TRY(sml_fw_u8(w, 0));
    return sml_fw_u64(w, 0);
}

static simil_status sml_fw_ivf_index(sml_writer *w, const simil_index *index, int kind)
{
    sml_backend *b = index->backend;
    sml_ivf *ivf = index->impl;
    sml_pq *pq = NULL;
    if (kind == SML_FW_IVF_PQ) sml_ivf_pq_parts(index, &ivf, &pq);
    SML_TRY(sml_fw_code(w, kind == SML_FW_IVF_PQ ? "IwPQ" : "IwFl"));
    SML_TRY(sml_fw_ivf_header(w, index, b, ivf));
    size_t code_size = ivf->code_size;
    if (pq != NULL) {
        code_size = (size_t)pq->m;
        uint64_t count = (uint64_t)(pq->m * pq->ksub * pq->dsub);
        SML_TRY(sml_fw_u8(w, 1)); /* by_residual */
        SML_TRY(sml_fw_u64(w, (uint64_t)code_size));
        SML_TRY(sml_fw_u64(w, (uint64_t)pq->dim));
        SML_TRY(sml_fw_u64(w, (uint64_t)pq->m));
        SML_TRY(sml_fw_u64(w, (uint64_t)pq->nbits));
        SML_TRY(sml_fw_u64(w, count));
        SML_TRY(sml_writer_write(w, pq->centroids, (size_t)count * sizeof(float)));
    }
    int64_t largest = 1;
    for (int64_t l = 0; l < ivf->nlist; l++)
        if (ivf->size[l] > largest) largest = ivf->size[l];
    uint8_t *buf;
    SML_TRY(sml_alloc((void **)&buf, (size_t)largest, ivf->code_size, "a save buffer"));
    simil_status s = sml_fw_invlists(w, b, ivf, code_size, buf);
    sml_free(buf);
    return s;
}

/* Which Faiss index the simil index becomes, or why none does. */
static simil_status sml_fw_kind(const simil_index *index, int *kind)
{
    const sml_index_spec *sp = &index->spec;
    char want[96] = "";
    if (sp->encoding == SML_ENCODING_FLAT && sp->ivf_nlist == 0) {
        *kind = SML_FW_FLAT;
        snprintf(want, sizeof want, "Flat");
    } else if (sp->encoding == SML_ENCODING_FLAT) {
        *kind = SML_FW_IVF_FLAT;
        snprintf(want, sizeof want, "IVF%" PRId64 ",Flat", sp->ivf_nlist);
    } else if (sp->encoding == SML_ENCODING_PQ) {
        *kind = SML_FW_IVF_PQ;
        if (sp->ivf_nlist)
            snprintf(want, sizeof want, "IVF%" PRId64 ",PQ%" PRId64 "x8", sp->ivf_nlist, sp->pq_m);
        else
            snprintf(want, sizeof want, "PQ%" PRId64 "x8", sp->pq_m);
    }
    /* anything with wrappers (OPQ, Refine, shards) or other encodings differs */
    SML_RETURN_IF(strcmp(want, index->description) != 0, SIMIL_ERR_UNSUPPORTED,
                  "simil writes Faiss files of Flat, IVF<n>,Flat and IVF<n>,PQ<m>x8 indexes; "
                  "'%s' has no Faiss counterpart it can write",
                  index->description);
    SML_RETURN_IF(!index->trained, SIMIL_ERR_NOT_TRAINED,
                  "index '%s' is not trained; train it before saving it for Faiss",
                  index->description);
    return SIMIL_OK;
}

simil_status simil_index_save_faiss(const simil_index *index, const char *path)
{
    SML_RETURN_IF(index == NULL || path == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "save_faiss: index and path must not be NULL");
    int kind = 0;
    SML_TRY(sml_fw_kind(index, &kind));
    sml_writer *w;
    SML_TRY(sml_writer_open(&w, path));
    simil_status s = kind == SML_FW_FLAT ? sml_fw_flat_index(w, index)
                                         : sml_fw_ivf_index(w, index, kind);
    if (s != SIMIL_OK) {
        sml_writer_abort(w);
        return sml_error_context(s, "saving '%s' for Faiss (the old file, if any, is intact)",
                                 path);
    }
    return sml_writer_commit(w);
}
