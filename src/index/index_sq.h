/* index_sq.h: what the scalar-quantizer types share: flat SQ
 * ("SQ8", "SQfp16", "SQbf16", index_sq.c) and IVF-SQ ("IVFn,SQ8",
 * index_ivf_sq.c).  Their codes are algo/sq.h's, kept in rows of
 * sml_sq_stride bytes; SQ8's trained ranges live in host and backend memory
 * (the scan reads the latter). */
#ifndef SML_INDEX_SQ_H
#define SML_INDEX_SQ_H

#include "algo/sq.h"
#include "index/index_internal.h"

typedef struct sml_sq_params {
    sml_sq_type type;
    int64_t dim;
    float *vmin, *vdiff;          /* host: dim each (SQ8), NULL until trained */
    float *vmin_mem, *vdiff_mem;  /* backend: the same */
} sml_sq_params;

/* Row bytes of a code: its bytes rounded up to a multiple of 4. */
static inline size_t sml_sq_stride(sml_sq_type t, int64_t dim)
{
    return (sml_sq_code_bytes(t, dim) + 3) & ~(size_t)3;
}

void sml_sq_params_init(sml_sq_params *p, sml_sq_type type, int64_t dim);
void sml_sq_params_free(sml_backend *b, sml_sq_params *p);

/* SQ8: ranges of n vectors (host), replacing the old ones only on success.
 * Other types: nothing to do. */
simil_status sml_sq_params_train(sml_backend *b, sml_sq_params *p, int64_t n, const float *x);

/* SQ8: these ranges (host, dim each; copied), e.g. from a Faiss file. */
simil_status sml_sq_params_set(sml_backend *b, sml_sq_params *p, const float *vmin,
                               const float *vdiff);

/* Codes of n host vectors into rows of sml_sq_stride bytes (host). */
void sml_sq_params_encode(const sml_sq_params *p, int64_t n, const float *x, uint8_t *codes);

/* Run the scan of `scan` over codes of type p on the index's backend
 * (coarse_mem: the centroids of an IVF of residual codes, else NULL). */
simil_status sml_sq_search(const simil_index *index, const sml_sq_params *p,
                           const sml_ivf_scan_args *scan, const float *coarse_mem);

/* Section SQPR: u32 type, then (SQ8) vmin and vdiff, dim floats each. */
simil_status sml_sq_params_save(const sml_sq_params *p, sml_writer *w);
simil_status sml_sq_params_load(sml_backend *b, sml_sq_params *p, sml_reader *r);

/* The insides that reading Faiss files needs (faiss_read.c): the quantizer
 * of a flat SQ or IVF-SQ index, and the inverted file of the latter. */
struct sml_ivf;
sml_sq_params *sml_sq_flat_params(simil_index *index);
sml_sq_params *sml_ivf_sq_params(simil_index *index);
struct sml_ivf *sml_ivf_sq_ivf(simil_index *index);
/* IVF-SQ: 0 where its codes are of the vectors, not of their residuals
 * (Faiss's by_residual = false); set before any vector is added. */
void sml_ivf_sq_set_by_residual(simil_index *index, int by_residual);

/* Append n code rows (host, sml_sq_stride bytes each) with these ids to a
 * trained flat SQ index; the caller keeps ntotal and next_id. */
simil_status sml_sq_flat_append_codes(simil_index *index, int64_t n, const uint8_t *codes,
                                      const int64_t *ids);

#endif
