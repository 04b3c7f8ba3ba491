/* pq.h: product quantization (the GPU paper, "IVFADC"; Jégou et al.).
 *
 * A vector of dim components is cut into m sub-vectors of dsub = dim / m
 * components; each is replaced by the index of the nearest of ksub = 2^nbits
 * centroids of its own codebook.  A code takes m bytes (one per sub-vector,
 * whatever nbits), padded to a multiple of 4 for the inverted-list arena. */
#ifndef SML_ALGO_PQ_H
#define SML_ALGO_PQ_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"

typedef struct sml_pq {
    int64_t dim;
    int64_t m;
    int64_t dsub;
    int nbits;
    int64_t ksub;
    float *centroids;  /* host: m x ksub x dsub; NULL until trained or loaded */
} sml_pq;

/* An untrained quantizer: its codebooks are allocated only when they get
 * values (sml_pq_alloc, done by sml_pq_train), so that an untrained index,
 * or an untrained index file, costs no memory for them. */
simil_status sml_pq_init(sml_pq *pq, int64_t dim, int64_t m, int nbits);
/* Allocate the codebooks (uninitialized) unless they are. */
simil_status sml_pq_alloc(sml_pq *pq);
void sml_pq_free(sml_pq *pq);

/* Bytes of one code of m sub-quantizers in an arena: m, rounded up to a
 * multiple of 4. */
size_t sml_pq_code_bytes(int64_t m);
size_t sml_pq_code_size(const sml_pq *pq);

/* How sml_pq_train runs; fill with sml_pq_train_params_init. */
typedef struct sml_pq_train_params {
    int iterations;     /* Lloyd iterations per sub-quantizer */
    uint64_t seed;      /* sub-quantizer i seeds its k-means with seed + i */
    const char *stage;  /* progress: one unit per sub-quantizer, after `done` */
    int64_t done, total;  /* units of `stage` before this call, and in all */
} sml_pq_train_params;

/* iterations and seed as given, stage "train PQ" of m units. */
void sml_pq_train_params_init(sml_pq_train_params *p, const sml_pq *pq, int iterations,
                              uint64_t seed);

/* One k-means per sub-space (on the backend), over n vectors (host), on at
 * most 256 * ksub of them, as Faiss trains its product quantizers (a sample
 * drawn by each k-means, kmeans.h).  Fails leaving the codebooks allocated
 * but of undefined content. */
simil_status sml_pq_train(sml_backend *b, sml_pq *pq, int64_t n, const float *x,
                          const sml_pq_train_params *p);

/* Faiss's packed codes (faiss::PQEncoderGeneric): m codes of nbits each,
 * one after the other from the lowest bit of the first byte, in
 * (m * nbits + 7) / 8 bytes.  codes holds one byte per sub-quantizer.
 * Unpacking may work in place (packed == codes, m bytes long). */
void sml_pq_pack_bits(const uint8_t *codes, int64_t m, int nbits, uint8_t *packed);
void sml_pq_unpack_bits(const uint8_t *packed, int64_t m, int nbits, uint8_t *codes);

/* The vectors that codes stand for (n x dim floats). */
void sml_pq_decode(const sml_pq *pq, int64_t n, const uint8_t *codes, size_t code_size,
                   float *out);

#endif
