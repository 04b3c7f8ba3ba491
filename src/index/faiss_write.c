/* faiss_write.c: simil_index_save_faiss, writing an index as a Faiss index
 * file (the layout faiss_read.c reads; see there for the conventions).
 *
 * Flat becomes IndexFlatL2/IP, wrapped in an IndexIDMap2 unless its ids are
 * 0..n-1 in order; IVF-Flat and IVF-PQ become IndexIVFFlat and IndexIVFPQ
 * with ArrayInvertedLists, which carry the ids themselves.  OPQ becomes an
 * IndexPreTransform whose one LinearTransform is the rotation, around the
 * IVF-PQ.  Vectors and codes are streamed from backend memory through a
 * host buffer; PQ codes lose the padding simil's lists give them, and codes
 * of fewer than 8 bits are packed as Faiss packs them.  The file is written
 * atomically. */
#include <stdio.h>
#include <string.h>

#include "algo/pq.h"
#include "core/alloc.h"
#include "core/error.h"
#include "index/index_internal.h"
#include "index/ivf.h"
#include "simil/faiss.h"

enum { SML_FW_FLAT = 1, SML_FW_IVF_FLAT = 2, SML_FW_IVF_PQ = 3, SML_FW_OPQ = 4 };

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
    SML_TRY(sml_fw_i32(w, (int32_t)index->dim)); /* an OPQ's inner index has its own */
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

/* Rows of PQ codes (one byte per sub-quantizer at the start of each
 * row_bytes-byte row) packed in place to Faiss's nbits per code. */
static void sml_fw_pack_rows(uint8_t *rows, int64_t n, size_t row_bytes, const sml_pq *pq,
                             uint8_t *tmp)
{
    for (int64_t j = 0; j < n; j++) {
        uint8_t *row = rows + (size_t)j * row_bytes;
        memcpy(tmp, row, (size_t)pq->m);
        sml_pq_pack_bits(tmp, pq->m, pq->nbits, row);
    }
}

/* ArrayInvertedLists: nlist, code size, the sizes in full, then each
 * non-empty list's codes (code_size of each row_bytes-byte row, packed for
 * a PQ of fewer than 8 bits) and ids. */
static simil_status sml_fw_invlists(sml_writer *w, sml_backend *b, const sml_ivf *ivf,
                                    const sml_pq *pq, size_t code_size, uint8_t *buf,
                                    uint8_t *tmp)
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
        if (pq != NULL && pq->nbits < 8) sml_fw_pack_rows(buf, n, row_bytes, pq, tmp);
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
    int by_residual = 1;
    if (kind == SML_FW_IVF_PQ) sml_ivf_pq_parts(index, &ivf, &pq, &by_residual);
    SML_TRY(sml_fw_code(w, kind == SML_FW_IVF_PQ ? "IwPQ" : "IwFl"));
    SML_TRY(sml_fw_ivf_header(w, index, b, ivf));
    size_t code_size = ivf->code_size;
    if (pq != NULL) {
        code_size = (size_t)((pq->m * pq->nbits + 7) / 8);
        uint64_t count = (uint64_t)(pq->m * pq->ksub * pq->dsub);
        SML_TRY(sml_fw_u8(w, (uint8_t)by_residual));
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
    uint8_t *buf, *tmp = NULL;
    SML_TRY(sml_alloc((void **)&buf, (size_t)largest, ivf->code_size, "a save buffer"));
    simil_status s = sml_alloc((void **)&tmp, ivf->code_size, 1, "a code buffer");
    if (s == SIMIL_OK) s = sml_fw_invlists(w, b, ivf, pq, code_size, buf, tmp);
    sml_free(tmp);
    sml_free(buf);
    return s;
}

/* IndexPreTransform: header, one LinearTransform ("LTra": no bias, A of
 * dout x dim, y = A x, so A is simil's rotation transposed; d_in, d_out,
 * is_trained), then the index inside. */
static simil_status sml_fw_opq_index(sml_writer *w, const simil_index *index)
{
    float *rt, *a;
    int64_t dout;
    simil_index *inner;
    sml_opq_parts(index, &rt, &dout, &inner);
    SML_TRY(sml_fw_code(w, "IxPT"));
    SML_TRY(sml_fw_header(w, index, index->ntotal));
    SML_TRY(sml_fw_i32(w, 1));
    SML_TRY(sml_fw_code(w, "LTra"));
    SML_TRY(sml_fw_u8(w, 0));
    SML_TRY(sml_fw_u64(w, (uint64_t)(dout * index->dim)));
    SML_TRY(sml_alloc((void **)&a, (size_t)(dout * index->dim), sizeof *a, "a rotation"));
    for (int64_t i = 0; i < index->dim; i++)
        for (int64_t j = 0; j < dout; j++) a[j * index->dim + i] = rt[i * dout + j];
    simil_status s = sml_writer_write(w, a, sizeof *a * (size_t)(dout * index->dim));
    sml_free(a);
    SML_TRY(s);
    SML_TRY(sml_fw_u64(w, 0));
    SML_TRY(sml_fw_i32(w, (int32_t)index->dim));
    SML_TRY(sml_fw_i32(w, (int32_t)dout));
    SML_TRY(sml_fw_u8(w, 1));
    return sml_fw_ivf_index(w, inner, SML_FW_IVF_PQ);
}

/* Which Faiss index the simil index becomes, or why none does: the words
 * name the Faiss class where there is one. */
static simil_status sml_fw_kind(const simil_index *index, int *kind)
{
    const sml_index_spec *sp = &index->spec;
    SML_RETURN_IF(sp->shards, SIMIL_ERR_UNSUPPORTED,
                  "index '%s' is sharded, and Faiss does not save IndexShards to a file; build "
                  "it on one device to write it for Faiss",
                  index->description);
    SML_RETURN_IF(sp->encoding == SML_ENCODING_XFBQ, SIMIL_ERR_UNSUPPORTED,
                  "index '%s': XFBQ codes have no Faiss counterpart", index->description);
    SML_RETURN_IF(sp->encoding == SML_ENCODING_SQ, SIMIL_ERR_UNSUPPORTED,
                  "index '%s': simil reads Faiss's IndexScalarQuantizer and "
                  "IndexIVFScalarQuantizer but does not write them yet; save it as a simil file",
                  index->description);
    SML_RETURN_IF(sp->refine, SIMIL_ERR_UNSUPPORTED,
                  "index '%s': simil does not write Faiss's IndexRefineFlat yet; write the "
                  "index without ',Refine'",
                  index->description);
    SML_RETURN_IF(sp->encoding != SML_ENCODING_PQ && sp->encoding != SML_ENCODING_FLAT,
                  SIMIL_ERR_INTERNAL, "index '%s': an encoding the Faiss writer does not know",
                  index->description);
    SML_RETURN_IF(sp->opq_m && sp->encoding != SML_ENCODING_PQ, SIMIL_ERR_INTERNAL,
                  "index '%s': OPQ without PQ", index->description);
    *kind = sp->encoding == SML_ENCODING_PQ ? SML_FW_IVF_PQ
            : sp->ivf_nlist                 ? SML_FW_IVF_FLAT
                                            : SML_FW_FLAT;
    if (sp->opq_m) *kind = SML_FW_OPQ;
    return SIMIL_OK;
}

simil_status simil_index_check_faiss(const simil_index *index)
{
    SML_RETURN_IF(index == NULL, SIMIL_ERR_INVALID_ARGUMENT, "check_faiss: index is NULL");
    int kind;
    return sml_fw_kind(index, &kind);
}

simil_status simil_index_save_faiss(const simil_index *index, const char *path)
{
    SML_RETURN_IF(index == NULL || path == NULL, SIMIL_ERR_INVALID_ARGUMENT,
                  "save_faiss: index and path must not be NULL");
    int kind = 0;
    SML_TRY(sml_fw_kind(index, &kind));
    SML_RETURN_IF(!index->trained, SIMIL_ERR_NOT_TRAINED,
                  "index '%s' is not trained; train it before saving it for Faiss",
                  index->description);
    sml_writer *w;
    SML_TRY(sml_writer_open(&w, path));
    simil_status s = kind == SML_FW_FLAT  ? sml_fw_flat_index(w, index)
                     : kind == SML_FW_OPQ ? sml_fw_opq_index(w, index)
                                          : sml_fw_ivf_index(w, index, kind);
    if (s != SIMIL_OK) {
        sml_writer_abort(w);
        return sml_error_context(s, "saving '%s' for Faiss (the old file, if any, is intact)",
                                 path);
    }
    return sml_writer_commit(w);
}
