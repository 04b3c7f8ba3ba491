/* simil/index.h: the index handle.
 *
 * An index is created from a Faiss-style description string ("Flat",
 * "IVF4096,Flat", "IVF4096,PQ32", "OPQ32,IVF4096,PQ32", "XFBQ", ...), a metric
 * and a device.  Vectors are row-major float32; ids and counts are int64_t.
 *
 * Concurrency: simil_index_search() may run on one index from many threads at
 * once.  train, add, remove, reset and load-into need exclusive access: the
 * caller must make sure no other call on the same index runs meanwhile.
 *
 * Failure: a call that fails leaves the index exactly as it was. */
#ifndef SIMIL_INDEX_H
#define SIMIL_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "simil/search_params.h"
#include "simil/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum simil_metric {
    SIMIL_METRIC_L2 = 0,     /* squared Euclidean distance, smallest first */
    SIMIL_METRIC_IP = 1,     /* inner product, largest first */
    SIMIL_METRIC_COSINE = 2  /* vectors are L2-normalized on the way in, then IP;
                                a zero vector stays zero (cosine 0 with everything) */
} simil_metric;

/* "l2", "ip" or "cosine" (also "L2", "IP", "inner_product"). */
SIMIL_API simil_status simil_metric_parse(const char *name, simil_metric *metric);
SIMIL_API const char *simil_metric_name(simil_metric metric);

typedef struct simil_index simil_index;

/* Create an empty index.
 * dim: vector dimension, >= 1.
 * description: factory string, see docs/index-types.md.  "Flat" is exact search.
 * device: "auto" (or NULL): GPU 0 if one is usable, else the CPU;
 *         "cpu"; "gpu" or "gpu:N": that GPU, SIMIL_ERR_NO_DEVICE if absent.
 * On success *index is a new handle that the caller destroys. */
SIMIL_API simil_status simil_index_create(simil_index **index, int64_t dim,
                                          const char *description,
                                          simil_metric metric, const char *device);

/* Free the index and everything it holds.  NULL is allowed and does nothing. */
SIMIL_API void simil_index_destroy(simil_index *index);

/* Train on n vectors (n x dim floats, host memory).  Indexes that need no
 * training (Flat) accept the call and do nothing.  An index whose stored
 * vectors depend on its training (an inverted file, PQ, OPQ, and a sharded
 * index of any type that trains) refuses it while it holds vectors
 * (SIMIL_ERR_INVALID_ARGUMENT; reset it first); flat XFBQ accepts it and
 * recodes its vectors with the new alpha. */
SIMIL_API simil_status simil_index_train(simil_index *index, int64_t n, const float *x);

/* Add n vectors.  ids: n ids >= 0, or NULL to number the vectors sequentially
 * from one past the largest id the index has ever held.  Duplicate ids are
 * allowed: each copy is returned by search, and remove drops all of them.
 * Vectors holding NaN or Inf are rejected (SIMIL_ERR_INVALID_ARGUMENT) and
 * nothing is added. */
SIMIL_API simil_status simil_index_add(simil_index *index, int64_t n, const float *x,
                                       const int64_t *ids);

/* Search the k nearest neighbours of each of nq queries.
 * queries: nq x dim floats.  distances, labels: nq x k each.
 * Rows are sorted by distance (ascending for L2, descending similarity for IP
 * and cosine), then by id.  Slots beyond the index size get label -1 and
 * distance +inf (L2) or -inf (IP, cosine).  L2 distances are squared.
 * params: settings such as nprobe (simil/search_params.h), or NULL for the
 * defaults; settings this index does not use are ignored.  Safe to call from
 * several threads. */
SIMIL_API simil_status simil_index_search(const simil_index *index, int64_t nq,
                                          const float *queries, int64_t k,
                                          const simil_search_params *params,
                                          float *distances, int64_t *labels);

/* The result of a range search, in CSR form as Faiss's RangeSearchResult:
 * query i's neighbours are labels[j] and distances[j] for j in
 * [offsets[i], offsets[i + 1]), sorted as search sorts them.  The library
 * owns the arrays; free the whole with simil_range_result_destroy. */
typedef struct simil_range_result {
    int64_t nq;
    int64_t *offsets;    /* nq + 1, offsets[0] = 0 */
    int64_t *labels;     /* offsets[nq] */
    float *distances;    /* offsets[nq] */
} simil_range_result;

/* Every neighbour within radius of each of nq queries (host memory, nq x dim):
 * L2: squared distance < radius (radius >= 0, in squared units as search's
 * distances); IP and cosine: similarity > radius (any finite radius).
 * Flat finds all of them; an inverted file those in the lists it scans
 * (nprobe), IVF-PQ judging by its approximate distances.  params as for
 * search (nprobe, allowed ids, ...), or NULL.  A NaN or infinite radius, or a
 * negative one for L2, is SIMIL_ERR_INVALID_ARGUMENT.
 * It runs as k-NN searches (on the index's device) that grow k per query,
 * four times at a time from 64, until the k-th neighbour lies outside the
 * radius or k covers the index: a query with many neighbours costs a few
 * searches.  On success *result is the caller's to destroy. */
SIMIL_API simil_status simil_index_range_search(const simil_index *index, int64_t nq,
                                                const float *queries, float radius,
                                                const simil_search_params *params,
                                                simil_range_result **result);

/* NULL is allowed and does nothing. */
SIMIL_API void simil_range_result_destroy(simil_range_result *result);

/* 1 if searches of this index read the search parameter called name
 * (simil/search_params.h): nprobe for an inverted file, extra_distance for
 * XFBQ, and so on; 0 if they ignore it, or for an unknown name. */
SIMIL_API int simil_index_uses_search_param(const simil_index *index, const char *name);

/* Dynamic batching of concurrent searches: while a search of this index
 * runs, the searches other threads start wait, and those of the same k and
 * parameters then run together as one batch, in one pass over the data.
 * Each caller gets exactly the results it would get alone; a lone caller
 * pays only a lock.  On a GPU, up to 16 small batches (IVF searches of at
 * most 64 queries) run side by side, each on a set of streams and buffers
 * of its own; on the CPU, one batch runs at a time.  On by default for
 * Flat, IVFn,Flat, IVFn,PQm and XFBQ indexes, with max_wait_us = 100.
 * enabled: 0 runs every search on its own (concurrent small IVF searches of
 *   a GPU index then run side by side, up to 16 at once; other searches of a
 *   GPU index take turns on the device).
 * max_wait_us: how long a batch may wait, after its first search arrived, for
 *   others to join before it starts (>= 0; at most 10^7).  It waits only
 *   until its share of the callers has queued: the searches of the previous
 *   batch, of those running beside it and of those queued when it started,
 *   divided by the batches that may run at once (the first batch after this
 *   call: until it is full); so a lone caller pays the wait once, and
 *   callers that search in a loop settle into groups that take turns.
 *   0 waits for no one: only the searches that queued while the previous
 *   batch ran join.
 * Batches hold at most 1024 queries on a GPU and 16 on the CPU (where larger
 * batches would change method and rounding); a search of more queries, or of
 * queries or results in GPU memory, runs on its own.  Other index types
 * (OPQ, Refine, sharded) accept enabled = 0 only
 * (SIMIL_ERR_UNSUPPORTED).  Needs exclusive access, as add does. */
SIMIL_API simil_status simil_index_set_batching(simil_index *index, int enabled,
                                                int64_t max_wait_us);

/* Remove every vector whose id is in ids[0..n).  *removed (may be NULL)
 * receives how many vectors went.  Ids not present are not an error. */
SIMIL_API simil_status simil_index_remove(simil_index *index, int64_t n, const int64_t *ids,
                                          int64_t *removed);

/* Copy the stored vector with this id into out (dim floats).  For cosine the
 * stored vector is the normalized one.  SIMIL_ERR_INVALID_ARGUMENT if the id
 * is not present. */
SIMIL_API simil_status simil_index_reconstruct(const simil_index *index, int64_t id,
                                               float *out);

/* XFBQ and IVFn,XFBQ only: fix the scale alpha that multiplies each unit
 * vector before it is coded (docs/xfbq.md).  By default train, or the first
 * add of an index without alpha, picks alpha = 1 / the 0.98 quantile of the
 * components |x_ij| of (a sample of) its vectors; a value set here is kept by
 * later train and add calls and saved with the index.  Stored vectors are
 * recoded from their floats.  alpha: positive and finite.  Other index types:
 * SIMIL_ERR_INVALID_ARGUMENT.  Needs exclusive access, as add does. */
SIMIL_API simil_status simil_index_set_xfbq_alpha(simil_index *index, float alpha);

/* The inverted lists a search visits when its parameters leave nprobe at 0:
 * the index's default, 1 until set (as in Faiss).  It is saved with the
 * index, in simil and Faiss files alike, and a Faiss file's nprobe becomes
 * the default of the index loaded from it.  set: nprobe >= 1, or 0 for 1;
 * indexes without inverted lists give SIMIL_ERR_INVALID_ARGUMENT.  Needs
 * exclusive access, as add does.  get: 0 for indexes without inverted lists. */
SIMIL_API simil_status simil_index_set_nprobe(simil_index *index, int64_t nprobe);
SIMIL_API int64_t simil_index_nprobe(const simil_index *index);

/* Remove all vectors; training is kept. */
SIMIL_API simil_status simil_index_reset(simil_index *index);

SIMIL_API int64_t simil_index_size(const simil_index *index);
SIMIL_API int64_t simil_index_dim(const simil_index *index);
SIMIL_API simil_metric simil_index_metric(const simil_index *index);
SIMIL_API int simil_index_is_trained(const simil_index *index);
/* The normalized description string, e.g. "IVF1024,Flat". */
SIMIL_API const char *simil_index_description(const simil_index *index);

/* What the index runs on, e.g. "cpu (2 threads)" or "cuda:0 (NVIDIA H200)". */
SIMIL_API const char *simil_backend_name(const simil_index *index);

/* Write the index to path atomically: a temporary file beside it, fsync,
 * rename.  If anything fails, the file that was at path is left intact. */
SIMIL_API simil_status simil_index_save(const simil_index *index, const char *path);

/* Load an index saved by simil_index_save onto device (see create).
 * Faiss index files of the types in docs/faiss.md load too (one that simil
 * cannot represent gives SIMIL_ERR_UNSUPPORTED, naming it).  A truncated,
 * damaged or unknown file gives SIMIL_ERR_CORRUPT. */
SIMIL_API simil_status simil_index_load(simil_index **index, const char *path,
                                        const char *device);

/* Number of GPUs this build can use (0 without CUDA, driver or device). */
SIMIL_API int simil_gpu_count(void);

/* Memory of GPU gpu (0 .. simil_gpu_count() - 1): bytes free and in total, as
 * the driver counts them (every process's allocations).  SIMIL_ERR_NO_DEVICE
 * where there is no such GPU. */
SIMIL_API simil_status simil_gpu_memory(int gpu, size_t *free_bytes, size_t *total_bytes);

/* 1 if this library was built with the CUDA backend, else 0. */
SIMIL_API int simil_built_with_cuda(void);

#ifdef __cplusplus
}
#endif
#endif
