/* dist_search.c: MPI search over one shard per rank (see simil/dist.h).
 *
 * Queries go out with MPI_Bcast, partial top-k lists come back with
 * MPI_Gather, and rank 0 merges them with simil_select_k.  Every step that
 * can fail is followed by simil_dist_agree, an MPI_Allreduce of the ranks'
 * outcomes, so that a rank that fails tells the others instead of leaving
 * them blocked in the next collective.  A rank that dies outright is handled
 * by the MPI runtime, which ends the job.  Large messages go in pieces: MPI
 * counts are ints. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simil/dist.h"
#include "simil/select.h"

enum { SML_DIST_CHUNK = 1 << 28 }; /* elements per MPI call */

/* The message of this module's own errors (simil_dist_last_error). */
static char sml_dist_message[512];

static simil_status sml_dist_fail(simil_status s, const char *msg)
{
    snprintf(sml_dist_message, sizeof sml_dist_message, "%s", msg);
    return s;
}

static int sml_dist_we_initialized;

simil_status simil_dist_begin(int *argc, char ***argv, int *rank, int *ranks)
{
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
        if (MPI_Init(argc, argv) != MPI_SUCCESS)
            return sml_dist_fail(SIMIL_ERR_REMOTE, "MPI_Init failed: is this run under mpirun?");
        sml_dist_we_initialized = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, ranks);
    return SIMIL_OK;
}

void simil_dist_end(void)
{
    if (sml_dist_we_initialized) MPI_Finalize();
    sml_dist_we_initialized = 0;
}

const char *simil_dist_last_error(void) { return sml_dist_message; }

simil_status simil_dist_agree(simil_status local, const char *what)
{
    int mine = local == SIMIL_OK ? 0 : 1, any = 0, rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int worst = local == SIMIL_OK ? -1 : rank, first = -1;
    if (MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS)
        return SIMIL_ERR_REMOTE;
    if (!any) return SIMIL_OK;
    MPI_Allreduce(&worst, &first, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (local != SIMIL_OK) return local;
    char msg[256];
    snprintf(msg, sizeof msg, "%s failed on rank %d", what, first);
    return sml_dist_fail(SIMIL_ERR_REMOTE, msg);
}

static int sml_dist_bcast(void *data, int64_t count, MPI_Datatype type, int size)
{
    char *p = data;
    for (int64_t done = 0; done < count; done += SML_DIST_CHUNK) {
        int64_t m = count - done < SML_DIST_CHUNK ? count - done : SML_DIST_CHUNK;
        if (MPI_Bcast(p + done * size, (int)m, type, 0, MPI_COMM_WORLD) != MPI_SUCCESS) return -1;
    }
    return 0;
}

static int sml_dist_gather(const void *mine, void *all, int64_t count, MPI_Datatype type, int size,
                           int ranks)
{
    for (int64_t done = 0; done < count; done += SML_DIST_CHUNK) {
        int64_t m = count - done < SML_DIST_CHUNK ? count - done : SML_DIST_CHUNK;
        /* each rank's piece [done, done + m) lands at rank * count + done on
         * rank 0: gather into a staging block, then place it */
        char *stage = NULL;
        int rank;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (rank == 0) stage = malloc((size_t)(m * size) * (size_t)ranks);
        if (rank == 0 && stage == NULL) return -1;
        int rc = MPI_Gather((const char *)mine + done * size, (int)m, type, stage, (int)m, type, 0,
                            MPI_COMM_WORLD);
        if (rank == 0) {
            for (int r = 0; r < ranks; r++)
                memcpy((char *)all + ((int64_t)r * count + done) * size,
                       stage + (size_t)r * (size_t)(m * size), (size_t)(m * size));
            free(stage);
        }
        if (rc != MPI_SUCCESS) return -1;
    }
    return 0;
}

/* Rank 0: the best k of the ranks' lists, query by query. */
static simil_status sml_dist_merge(int ranks, int64_t nq, int64_t k, int largest,
                                   const float *d_all, const int64_t *l_all, float *distances,
                                   int64_t *labels)
{
    const int64_t cols = (int64_t)ranks * k;
    float *rows = malloc(sizeof(float) * (size_t)(nq * cols));
    float *sel_d = malloc(sizeof(float) * (size_t)(nq * k));
    int64_t *sel_i = malloc(sizeof(int64_t) * (size_t)(nq * k));
    simil_status s = SIMIL_OK;
    if (!rows || !sel_d || !sel_i) s = sml_dist_fail(SIMIL_ERR_OUT_OF_MEMORY, "out of memory merging");
    if (s == SIMIL_OK) {
        /* d_all is [rank][query][k]; rows is [query][rank][k] */
        for (int r = 0; r < ranks; r++)
            for (int64_t q = 0; q < nq; q++)
                memcpy(rows + q * cols + r * k, d_all + ((int64_t)r * nq + q) * k,
                       sizeof(float) * (size_t)k);
        s = simil_select_k(nq, cols, rows, k, largest, sel_d, sel_i);
    }
    if (s == SIMIL_OK)
        for (int64_t q = 0; q < nq; q++)
            for (int64_t j = 0; j < k; j++) {
                const int64_t c = sel_i[q * k + j];
                const int64_t r = c < 0 ? 0 : c / k, jj = c < 0 ? 0 : c % k;
                labels[q * k + j] = c < 0 ? -1 : l_all[(r * nq + q) * k + jj];
                distances[q * k + j] = sel_d[q * k + j];
            }
    free(rows);
    free(sel_d);
    free(sel_i);
    return s;
}

simil_status simil_dist_search(const simil_index *shard, int64_t nq, const float *queries,
                               int64_t k, const simil_search_params *params, float *distances,
                               int64_t *labels)
{
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    int64_t shape[3] = {nq, k, simil_index_dim(shard)};
    /* rank 0 checks the caller's sizes before any product of them is formed
     * (each rank gathers nq x k x ranks results); the others learn of a
     * refusal through the broadcast */
    simil_status refused = SIMIL_OK;
    if (rank == 0 && (nq < 0 || k < 1 || (nq > 0 && k > (((int64_t)1 << 40) / ranks) / nq) ||
                      (nq > 0 && shape[2] > (INT64_MAX / 4) / nq))) {
        refused = sml_dist_fail(SIMIL_ERR_INVALID_ARGUMENT,
                                "distributed search: nq and k must be >= 0 and >= 1, and nq x k "
                                "x ranks at most 2^40 results");
        shape[0] = -1;
    }
    if (MPI_Bcast(shape, 3, MPI_INT64_T, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        return sml_dist_fail(SIMIL_ERR_REMOTE, "MPI_Bcast failed");
    if (shape[0] < 0)
        return rank == 0 ? refused : sml_dist_fail(SIMIL_ERR_REMOTE, "rank 0 stopped the search");
    nq = shape[0];
    k = shape[1];
    simil_status s = shape[2] == simil_index_dim(shard)
                         ? SIMIL_OK
                         : sml_dist_fail(SIMIL_ERR_INVALID_ARGUMENT,
                                         "this rank's shard has another dimension than rank 0's");
    float *q = NULL, *d = NULL, *d_all = NULL;
    int64_t *l = NULL, *l_all = NULL;
    if (s == SIMIL_OK) {
        q = rank == 0 ? (float *)queries : malloc(sizeof(float) * (size_t)(nq * shape[2] + 1));
        d = malloc(sizeof(float) * (size_t)(nq * k + 1));
        l = malloc(sizeof(int64_t) * (size_t)(nq * k + 1));
        if (rank == 0) {
            d_all = malloc(sizeof(float) * (size_t)(nq * k * ranks + 1));
            l_all = malloc(sizeof(int64_t) * (size_t)(nq * k * ranks + 1));
        }
        if (!q || !d || !l || (rank == 0 && (!d_all || !l_all)))
            s = sml_dist_fail(SIMIL_ERR_OUT_OF_MEMORY, "out of memory for the queries");
    }
    s = simil_dist_agree(s, "allocating");
    if (s == SIMIL_OK && sml_dist_bcast(q, nq * shape[2], MPI_FLOAT, 4) != 0) s = SIMIL_ERR_REMOTE;
    if (s == SIMIL_OK) s = simil_dist_agree(simil_index_search(shard, nq, q, k, params, d, l),
                                            "the search");
    if (s == SIMIL_OK && (sml_dist_gather(d, d_all, nq * k, MPI_FLOAT, 4, ranks) != 0 ||
                          sml_dist_gather(l, l_all, nq * k, MPI_INT64_T, 8, ranks) != 0))
        s = SIMIL_ERR_REMOTE;
    if (s == SIMIL_OK && rank == 0)
        s = sml_dist_merge(ranks, nq, k, simil_index_metric(shard) != SIMIL_METRIC_L2, d_all,
                           l_all, distances, labels);
    if (rank != 0) free(q);
    free(d);
    free(l);
    free(d_all);
    free(l_all);
    return s;
}
