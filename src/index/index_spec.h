/* index_spec.h: Faiss-style index descriptions, parsed.
 *
 * Grammar (components separated by commas, in this order):
 *   [Shardss,] [IDMap,] [OPQm[_d], | RR,] [IVFn,] (Flat | PQm[xb] | XFBQ[QxB][_fp32|_host|_fp16] |
 *   SQ8 | SQfp16 | SQbf16) [,Refine | ,RFlat]
 * e.g. "Flat", "IVF4096,Flat", "IVF4096,PQ32x8", "OPQ32_128,IVF4096,PQ32",
 * "XFBQ4x3", "IVF1024,XFBQ", "IVF4096,PQ32,Refine", "IVF4096,SQ8", "SQfp16".  IDMap is accepted for
 * Faiss compatibility and ignored: every simil index takes ids.  "Shardss,"
 * splits the index into s parts on the devices of the device string (what a
 * device list such as gpu:0,1 also does); saved sharded indexes carry it.
 * "RR" (Faiss's random rotation; "RR<dim>" also, at the input dimension) is
 * taken by XFBQ alone: its codes are made from randomly rotated vectors (the
 * XFBQ paper, section 3.5.1), while its floats stay the vectors given.
 * A flat XFBQ keeps its re-ranking floats in host memory with an fp16 copy
 * of them on the backend for a first re-ranking ("_fp16", the default, not
 * written back); "_host" keeps the floats in host memory alone, "_fp32" in
 * backend memory. */
#ifndef SML_INDEX_SPEC_H
#define SML_INDEX_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "simil/status.h"

typedef enum sml_encoding {
    SML_ENCODING_FLAT = 0,
    SML_ENCODING_PQ = 1,
    SML_ENCODING_XFBQ = 2,
    SML_ENCODING_SQ = 3
} sml_encoding;

/* Flat XFBQ's re-ranking floats: in backend memory (_fp32, and IVF-XFBQ's,
 * in its list rows); in host memory the backend reads (_host); or in host
 * memory with an fp16 copy in backend memory that picks the few candidates
 * to re-rank from them (_fp16, flat XFBQ's default). */
enum { SML_XFBQ_FLOATS_BACKEND = 0, SML_XFBQ_FLOATS_HOST = 1, SML_XFBQ_FLOATS_FP16 = 2 };

typedef struct sml_index_spec {
    int64_t shards;       /* 0: not sharded */
    int64_t opq_m;        /* 0: no OPQ */
    int64_t opq_dim;      /* OPQ output dimension (the input dimension unless _d) */
    int rotate;           /* RR: XFBQ codes of randomly rotated vectors */
    int64_t ivf_nlist;    /* 0: no inverted file */
    sml_encoding encoding;
    int64_t pq_m;         /* sub-quantizers */
    int pq_bits;          /* bits per sub-quantizer code, 4..8 */
    int xfbq_query_bits;  /* 1..8 */
    int xfbq_base_bits;   /* 1..8 */
    int xfbq_floats;      /* where flat XFBQ's re-ranking floats live (below) */
    int sq_type;          /* SQ: an sml_sq_type (core/sq_code.h) */
    int refine;           /* re-rank with the float vectors */
} sml_index_spec;

/* Parse description for vectors of dim dimensions, checking every number
 * (PQ m divides the dimension, code size, bit counts).  Errors say which
 * component is wrong and what would be accepted. */
simil_status sml_index_spec_parse(const char *description, int64_t dim, sml_index_spec *spec);

/* The canonical description, e.g. "OPQ16_64,IVF256,PQ16x8,Refine". */
void sml_index_spec_format(const sml_index_spec *spec, char *out, size_t size);

#endif
