/* simil/stream.h: data sets larger than memory (docs/billion-scale.md).
 *
 * A source hands out rows [first, first + n) of a rows x dim float32 matrix
 * on demand, so that nothing needs all of it at once:
 *   - a vector file, read by row ranges: .fvecs .bvecs .ivecs .npy and
 *     FILE.hdf5:NAME, other element types converted to float32 (a gzipped
 *     idx file is decompressed from its start at every read: slow for large
 *     files);
 *   - a generator of docs/datasets.md, "gen:KIND:ROWS:DIM:SEED", e.g.
 *     "gen:mix:1000000000:96:11" (rows [0, ROWS) of simil_generate's set);
 *   - rows in caller memory, or a caller's function.
 * Rows are numbered from 0 in every source, and a search of a source reports
 * those numbers as ids.  Reading a source from several threads at once is
 * safe (a callback must allow it too).
 *
 * On the GPU, a generator source is generated in device memory (bit for bit
 * simil_generate's values); rows of caller memory that are pinned are copied
 * from where they lie, and other sources are read on the host through a ring
 * of pinned pieces, while the GPU works on the previous chunk. */
#ifndef SIMIL_STREAM_H
#define SIMIL_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "simil/index.h"
#include "simil/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct simil_source simil_source;

/* Open a file or generator source named by spec (see above).  A file path
 * that begins with "gen:" is written "./gen:...".  On success *source is a
 * new source that the caller closes. */
SIMIL_API simil_status simil_source_open(simil_source **source, const char *spec);

/* Rows x dim floats at x, which must stay valid and unchanged while the
 * source is used. */
SIMIL_API simil_status simil_source_from_memory(simil_source **source, int64_t rows,
                                                int64_t dim, const float *x);

/* Rows produced by fn: fn(user, first, n, out) writes rows [first, first + n)
 * (n x dim floats) to out and returns SIMIL_OK, or an error that the reading
 * call returns.  fn may be called from a thread other than the caller's,
 * and from several at once. */
typedef simil_status (*simil_source_fn)(void *user, int64_t first, int64_t n, float *out);
SIMIL_API simil_status simil_source_from_callback(simil_source **source, int64_t rows,
                                                  int64_t dim, simil_source_fn fn, void *user);

/* A new source of rows [first, first + n) of source (n < 0: to the end),
 * numbered from 0.  It does not refer to source, which may be closed first
 * (memory and callback sources still read the caller's memory or function). */
SIMIL_API simil_status simil_source_slice(simil_source **out, const simil_source *source,
                                          int64_t first, int64_t n);

/* NULL is allowed and does nothing. */
SIMIL_API void simil_source_close(simil_source *source);

SIMIL_API int64_t simil_source_rows(const simil_source *source);
SIMIL_API int64_t simil_source_dim(const simil_source *source);

/* What the source is, e.g. "gen:mix:1000000000:96:11" or a file's path. */
SIMIL_API const char *simil_source_name(const simil_source *source);

/* Rows [first, first + n) into out (n x dim floats, host memory). */
SIMIL_API simil_status simil_source_read(const simil_source *source, int64_t first, int64_t n,
                                         float *out);

/* Settings of the calls below.  Fill with simil_stream_params_init() first. */
typedef struct simil_stream_params {
    int64_t chunk_rows;  /* rows read (and, on a GPU, uploaded) at a time; 0: the
                            default, about 1 GiB of floats per chunk for a
                            search and 1,048,576 rows for an add */
    const char *device;  /* simil_source_search: "auto" (default), "cpu", "gpu",
                            "gpu:N" */
    int threads;         /* CPU threads of the search; 0: all */
    int64_t first_id;    /* simil_index_add_source: -1 (default): sequential ids
                            from one past the largest the index has held;
                            else row r gets id first_id + r */
} simil_stream_params;

SIMIL_API void simil_stream_params_init(simil_stream_params *params);

/* What a simil_source_search took (any field may be 0 where not measured). */
typedef struct simil_stream_stats {
    double seconds;           /* the whole call */
    double read_seconds;      /* reading or generating chunks on the host */
    double wait_seconds;      /* the search waiting for a chunk to arrive */
    int64_t chunks;
    uint64_t bytes_uploaded;  /* host-to-GPU bytes of base vectors */
    int generated_on_device;  /* 1: a generator source made on the GPU */
} simil_stream_stats;

/* Exact k nearest neighbours of nq queries (host, nq x dim) among every row
 * of base, whose row numbers are the ids.  distances and labels: host, nq x k,
 * ordered as simil_index_search orders them (by distance, then id), with
 * slots past the source's rows empty (-1, +inf for L2, -inf otherwise).
 * Cosine normalizes the queries and each base row.  The base streams through
 * the device in chunks of chunk_rows rows; the top k of each chunk are merged
 * on the host.  On a GPU, rows of caller memory that are pinned
 * (cudaMallocHost, cudaHostRegister) are copied from where they lie, other
 * rows through four pinned pieces of 64 MiB.  Memory: on the CPU, two chunks
 * of floats; on a GPU, two chunks in device memory with an fp16 copy for the
 * tensor-core search; besides nq x k results.  stats may be NULL. */
SIMIL_API simil_status simil_source_search(const simil_source *base, simil_metric metric,
                                           int64_t nq, const float *queries, int64_t k,
                                           const simil_stream_params *params,
                                           float *distances, int64_t *labels,
                                           simil_stream_stats *stats);

/* Train index on sample_rows rows of source (0: the default of
 * simil_index_train_sample), taken as 256 evenly spaced runs of consecutive
 * rows (all rows when sample_rows >= the source's), read into host memory
 * (sample_rows x dim floats) for the time of the call.  An index that needs no
 * training accepts the call and reads nothing. */
SIMIL_API simil_status simil_index_train_source(simil_index *index, const simil_source *source,
                                                int64_t sample_rows);

/* The default sample of simil_index_train_source for a source of rows rows:
 * 100,000 rows, or for an inverted file of more than 1,562 lists 64 rows per
 * list (Faiss warns below 39), and never more than the source holds:
 * 4,194,304 rows for IVF65536. */
SIMIL_API int64_t simil_index_train_sample(const simil_index *index, int64_t rows);

/* Add every row of source to a trained index, chunk by chunk.  Progress is
 * reported as stage "add" in rows ("add: placing" for IVF-PQ's second pass).
 * IVFn,PQm (and PQm) encode every chunk first, keeping the codes and lists
 * of all the rows in host memory (PQ code bytes + 4 a row), then lay the
 * inverted lists out once at their final sizes and append: device memory
 * never holds more than the final index.  Other types add chunk by chunk
 * (simil_index_add).  Host memory besides: two chunks of floats where the
 * rows are read on the host.
 * A failed call leaves the index as it was: IVF-PQ truncates its lists back,
 * other types remove the rows already added (their ids are new to the
 * index, so a first_id must be at least one past the largest id the index
 * has held); should that removal itself fail, the error says which rows
 * stayed. */
SIMIL_API simil_status simil_index_add_source(simil_index *index, const simil_source *source,
                                              const simil_stream_params *params);

#ifdef __cplusplus
}
#endif
#endif
