/* index_xfbq_common.h: what the two XFBQ index types share (the XFBQ paper;
 * docs/papers.md, "The XFBQ paper"): "XFBQ[QxB]" (index_xfbq.c, every row in one array)
 * and "IVFn,XFBQ[QxB]" (index_ivf_xfbq.c, rows in inverted lists).
 *
 * Both code each vector train-free with XOR-friendly binary codes, scan them
 * with XOR and popcount, select candidates with the histogram widened by the
 * extra distance, and re-rank the candidates exactly from the float vectors
 * kept beside the codes.
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
 * on a filled index recodes every stored row from its floats (each type's
 * recode).
 *
 * Rotation ("RR,", the XFBQ paper's section 3.5.1).  Data whose components
 * are far from alike (a few dominant dimensions, sparse non-negative pixels)
 * breaks the paper's Assumption 3.1, and one alpha suits no component.  With
 * RR every code is made from the vector rotated by a fixed random orthogonal
 * matrix rt (y = x rt, dim x dim, seeded: the same for every index of that
 * dimension; saved with the index): alpha is chosen from rotated vectors,
 * rows and queries are rotated before they are coded, and nothing else sees
 * the rotation: the floats kept for re-ranking and reconstruct are the
 * vectors given.  The host rotates rows and, on the CPU, queries; a GPU
 * rotates its queries itself.  Both sum each component in one fixed order
 * (sml_xfbq_rotated_component), so CPU and GPU indexes make the same codes
 * on every thread count. */
#ifndef SML_INDEX_XFBQ_COMMON_H
#define SML_INDEX_XFBQ_COMMON_H

#include <pthread.h>

#include "algo/xfbq.h"
#include "index/index_internal.h"

/* Rows encoded on the host per upload. */
#define SML_XFBQ_CHUNK ((int64_t)1 << 16)

/* The first member of either type's index (index->impl). */
typedef struct sml_xfbq_base {
    sml_xfbq q;          /* dimensions, bits, alpha (0 until chosen) */
    int alpha_manual;    /* alpha set by hand: train and add keep it */
    int normalize;       /* metric IP or L2: codes from unit-norm copies */
    float *rotation;     /* host, dim x dim (RR), else NULL: codes of x rotation */
    /* A GPU's copy of rotation, uploaded by the first search that needs it
     * and kept until the index goes (sml_xfbq_search): a copy per call cost
     * an allocation and a dim x dim upload each time, 2.4 MB at 784
     * dimensions.  rotation_lock guards it, since searches run at once. */
    void *rotation_device;         /* on the index's backend */
    pthread_mutex_t rotation_lock; /* made with rotation */
    /* The type's stored rows recoded for q's alpha, and swapped in (all or
     * nothing); called only on an index with rows. */
    simil_status (*recode)(simil_index *index, const sml_xfbq *q);
} sml_xfbq_base;

static inline sml_xfbq_base *sml_xfbq_base_of(const simil_index *index)
{
    return (sml_xfbq_base *)index->impl;
}

/* Fill base for the index's dimension, metric and bit counts. */
simil_status sml_xfbq_base_init(sml_xfbq_base *base, const simil_index *index,
                                simil_status (*recode)(simil_index *, const sml_xfbq *));

/* Free what base_init allocated (the GPU's copy of the rotation on the
 * index's backend b). */
void sml_xfbq_base_free(sml_xfbq_base *base, sml_backend *b);

/* The vectors to code for n host vectors v: *coded = v without a rotation,
 * else a rotated copy that *copy owns (the caller frees it). */
simil_status sml_xfbq_rotated(const sml_xfbq_base *base, int64_t n, const float *v,
                              const float **coded, float **copy);

/* Base codes of n host rows into out (q's base planes at stride bytes apart;
 * bytes past the planes left alone) from the floats at v, vstride bytes
 * apart, rotated first with RR. */
simil_status sml_xfbq_code_rows(const sml_xfbq_base *base, const sml_xfbq *q, int64_t n,
                                const float *v, size_t vstride, uint64_t *out, size_t stride);

/* alpha from n vectors (host), unless it was set by hand. */
simil_status sml_xfbq_pick_alpha(simil_index *index, int64_t n, const float *xs);

/* Add through the type's append: an index without alpha yet takes it from
 * this batch; a failed append leaves alpha as it was. */
simil_status sml_xfbq_add_with(simil_index *index, int64_t n, const float *xs,
                               const int64_t *ids,
                               simil_status (*append)(simil_index *, int64_t, const float *,
                                                      const int64_t *));

/* Search the type's lists (scan: queries, lists, probes, k and outputs of
 * the call): codes the queries (on the backend where it can), then the
 * backend's XFBQ scan, re-ranking from the floats at vectors, vector_stride
 * bytes apart, or first from their shadow (the backend's fp16 copy, flat
 * XFBQ's default; NULL for none). */
simil_status sml_xfbq_search(const simil_index *index, const sml_search_call *call,
                             sml_ivf_scan_args scan, const float *vectors, size_t vector_stride,
                             const void *shadow);

/* Section XFBQ: alpha, how it was chosen, the bit counts. */
simil_status sml_xfbq_save_params(const simil_index *index, sml_writer *w);
simil_status sml_xfbq_load_params(simil_index *index, sml_reader *r);

#endif
