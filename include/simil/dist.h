/* simil/dist.h: search across processes and machines with MPI, one shard per
 * rank (the GPU paper's sharding, over MPI).  In libsimil_dist, built when
 * Open MPI is found; the caller initializes and finalizes MPI.
 *
 * Every rank of MPI_COMM_WORLD calls these collectively.  A failure on any
 * rank makes every rank return the error (SIMIL_ERR_REMOTE on the others),
 * so no rank is left waiting. */
#ifndef SIMIL_DIST_H
#define SIMIL_DIST_H

#include <stdint.h>

#include "simil/index.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MPI_Init (when MPI is not initialized yet); *rank and *ranks of
 * MPI_COMM_WORLD. */
SIMIL_API simil_status simil_dist_begin(int *argc, char ***argv, int *rank, int *ranks);

/* MPI_Finalize, when simil_dist_begin initialized MPI. */
SIMIL_API void simil_dist_end(void);

/* The message of the last error simil_dist raised itself on this process
 * (SIMIL_ERR_REMOTE names the failing rank); for errors of the index calls,
 * simil_last_error(). */
SIMIL_API const char *simil_dist_last_error(void);

/* All ranks learn whether every rank's local status is SIMIL_OK.  Returns
 * local on a failing rank, SIMIL_ERR_REMOTE on the others when some rank
 * failed, SIMIL_OK when none did.  what names the step for messages. */
SIMIL_API simil_status simil_dist_agree(simil_status local, const char *what);

/* Search the union of the ranks' shards.  Rank 0 gives nq queries and k and
 * receives distances and labels (nq x k, as simil_index_search); the other
 * ranks pass NULL for queries, distances and labels (nq and k are taken from
 * rank 0).  Queries are broadcast, each rank searches its shard, rank 0
 * gathers the partial lists and merges them with one more k-selection.
 * Rank 0 may pass nq = -1 instead, to make the other ranks' pending call
 * return SIMIL_ERR_REMOTE when it cannot go on. */
SIMIL_API simil_status simil_dist_search(const simil_index *shard, int64_t nq,
                                         const float *queries, int64_t k,
                                         const simil_search_params *params, float *distances,
                                         int64_t *labels);

#ifdef __cplusplus
}
#endif
#endif
