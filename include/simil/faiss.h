/* simil/faiss.h: exchanging indexes with Faiss.
 *
 * simil_index_load() reads Faiss index files as well as its own (it looks at
 * the first bytes): IndexFlatL2, IndexFlatIP, IndexIVFFlat, IndexIVFPQ with
 * 4- to 8-bit codes of residuals (or, for L2, by_residual = false: of the
 * vectors), IndexPreTransform of one linear
 * transform without bias around an IndexIVFPQ (OPQ), IndexHNSWFlat (loaded
 * as Flat: the graph is dropped and searches are exact), and
 * IndexIDMap/IndexIDMap2 around them.  Other Faiss types give
 * SIMIL_ERR_UNSUPPORTED naming the type.  docs/faiss.md has the details. */
#ifndef SIMIL_FAISS_H
#define SIMIL_FAISS_H

#include "simil/index.h"
#include "simil/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Write the index as a Faiss index file that faiss.read_index() loads, atomically
 * (a temporary file beside path, fsync, rename; on failure the file that was at
 * path is left intact).
 *   Flat          -> IndexFlatL2 / IndexFlatIP, inside an IndexIDMap2 unless
 *                    the ids are 0, 1, ..., ntotal-1 in order
 *   IVFn,Flat     -> IndexIVFFlat (ids are kept in its inverted lists)
 *   IVFn,PQmxb    -> IndexIVFPQ, b-bit codes packed as Faiss packs them
 *                    (PQmxb alone: an IndexIVFPQ of 1 list); by_residual
 *                    unless it was read with by_residual = false
 *   OPQm_d,...    -> IndexPreTransform: the rotation as a LinearTransform,
 *                    around the IndexIVFPQ
 * Cosine indexes are written as inner product over their normalized vectors
 * (normalize queries before searching them in Faiss).  The index's default
 * nprobe is written with it.  XFBQ, ...,Refine and sharded indexes give
 * SIMIL_ERR_UNSUPPORTED (simil_index_check_faiss says so up front); an
 * untrained index gives SIMIL_ERR_NOT_TRAINED. */
SIMIL_API simil_status simil_index_save_faiss(const simil_index *index, const char *path);

/* SIMIL_OK if simil_index_save_faiss can write this index once it is trained,
 * else SIMIL_ERR_UNSUPPORTED saying why.  Cheap, and independent of what the
 * index holds: check before a long training. */
SIMIL_API simil_status simil_index_check_faiss(const simil_index *index);

/* What a Faiss index file holds, in one line: its objects, outermost first,
 * with their main settings, then the outermost's dimension, count and
 * metric, e.g. "IndexIDMap2 > IndexIVFFlat (nlist 1024, nprobe 16):
 * d=128, ntotal=1000000, metric l2".  It follows files of types simil does
 * not load as far as it can (their type, at least).  out: size bytes, cut to
 * fit.  SIMIL_ERR_CORRUPT for a file that is not a Faiss index file, or one
 * too damaged to read its header. */
SIMIL_API simil_status simil_faiss_describe(const char *path, char *out, size_t size);

#ifdef __cplusplus
}
#endif
#endif
