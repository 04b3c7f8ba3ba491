/* simil/faiss.h: exchanging indexes with Faiss.
 *
 * simil_index_load() reads Faiss index files as well as its own (it looks at
 * the first bytes): IndexFlatL2, IndexFlatIP, IndexIVFFlat, IndexIVFPQ with
 * 8-bit codes encoding residuals, and IndexIDMap/IndexIDMap2 around them.
 * Other Faiss types give SIMIL_ERR_UNSUPPORTED naming the type's four-letter
 * code.  docs/faiss.md has the details. */
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
 *   IVFn,PQmx8    -> IndexIVFPQ, by_residual (PQmx8 alone: IndexIVFPQ of 1 list)
 * Cosine indexes are written as inner product over their normalized vectors
 * (normalize queries before searching them in Faiss).  Other descriptions, and
 * PQ codes of fewer than 8 bits, give SIMIL_ERR_UNSUPPORTED; an untrained IVF
 * gives SIMIL_ERR_NOT_TRAINED. */
SIMIL_API simil_status simil_index_save_faiss(const simil_index *index, const char *path);

#ifdef __cplusplus
}
#endif
#endif
