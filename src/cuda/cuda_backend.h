/* cuda_backend.h: the CUDA backend's statistics and test switches, callable
 * from C (its entry points for the layers above are in core/backend.h).
 * Implemented by the .cu files of src/cuda, or by cuda_stub.c in builds without CUDA. */
#ifndef SML_CUDA_BACKEND_H
#define SML_CUDA_BACKEND_H

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Queries the exact GPU search re-ran on its fp32 path since the process
 * started, because their fast-path candidates could not be proven complete
 * (a statistic for tests and benchmarks). */
long long sml_cuda_fallback_queries(void);

/* Blocks of device and pinned memory the library holds now, from cudaMalloc
 * and cudaMallocHost (cuBLAS's own not counted): a statistic for leak checks
 * in tests.  The per-GPU workspace and pinned buffer count while an index or
 * call holds that GPU. */
long long sml_cuda_live_allocations(void);

/* The GPU k-selection designs (docs/k-selection.md; src/cuda/select.cuh). */
enum {
    SML_SELECT_AUTO = 0,            /* the dispatch table's choice */
    SML_SELECT_BUFFERED_WARP = 1,   /* WarpSelect with a 32-slot buffer per warp */
    SML_SELECT_THRESHOLD_BLOCK = 2, /* BlockSelect: threshold and shared buffer */
    SML_SELECT_QUEUE_WARP = 3,      /* the paper's WarpSelect */
    SML_SELECT_QUEUE_BLOCK = 4,     /* the paper's BlockSelect */
    SML_SELECT_BUFFERED_BLOCK = 5,  /* BlockSelect of buffered WarpSelect queues */
    SML_SELECT_RADIX = 6            /* radix select (any k; not in the table) */
};

/* Tests only: every k-selection with k <= 2048 runs design (1 to 5; 0 gives
 * the choice back to the table), with warps per row (1 to 8) for the block
 * designs 4 and 5.  Not for concurrent use. */
void sml_cuda_select_force(int design, int warps);

/* Tests and benchmarks: whether design runs k (1 to 2048) in this build.  Only
 * the kernels the dispatch table picks are built, unless CMake's
 * SIMIL_CUDA_SELECT_ALL (on with SIMIL_TESTS) builds every design at every
 * k; a forced design that is not built returns SIMIL_ERR_UNSUPPORTED.  0,
 * radix and k > 2048 (radix, whatever the design) always run. */
int sml_cuda_select_built(int design, int64_t k);

/* Benchmarks only: the name of a design. */
const char *sml_cuda_select_design_name(int design);

/* Benchmarks only: the design (and, through warps, warps per row) that the
 * dispatch table picks for rows x cols and k on the current GPU; -1 without
 * a GPU. */
int sml_cuda_select_choice(int64_t rows, int64_t cols, int64_t k, int *warps);

/* Benchmarks only: the k smallest of each row of rows x cols floats in GPU
 * memory (row-major), by one design (SML_SELECT_*; k <= 2048 but radix) with
 * warps per row for the block designs, into d_keys and d_idx (rows x k, on
 * the GPU; index -1 for empty slots).  Asynchronous, on the legacy default
 * stream.  d_workspace: sml_cuda_select_rows_workspace bytes (radix only). */
simil_status sml_cuda_select_rows(int design, int warps, int64_t rows, int64_t cols,
                                  const float *d_values, int64_t k, float *d_keys,
                                  int32_t *d_idx, void *d_workspace, size_t workspace_bytes);
size_t sml_cuda_select_rows_workspace(int design, int64_t rows, int64_t cols, int64_t k);

/* Tests and benchmarks: the largest batch that exact search on the GPU runs
 * on its small-batch path (cuda_knn_small.cu); 0 sends every batch to the
 * batch path, a negative value restores the default (64).  Not for
 * concurrent use. */
void sml_cuda_knn_small_max(long long nq);

/* Tests and benchmarks: where flat XFBQ on the GPU computes its estimated
 * distances.  -1, the default: on integer tensor cores wherever that path
 * takes the scan (one list, no filter, the window of the range, at most 7
 * bits a side and 1,024 dimensions, and enough rows for its bound), else with
 * XOR and popcount; 0: always XOR and popcount; 1: tensor cores wherever
 * they take the scan, however few the rows.  Both give the same candidates.
 * Not for concurrent use. */
void sml_cuda_xfbq_tensor(int mode);

/* Tests: RR's rotation on the GPU, y = x r for n rows x of dim components
 * and r (dim x dim, row-major), all device memory; the bits of
 * sml_xfbq_rotate (algo/xfbq.h).  Synchronous. */
simil_status sml_cuda_xfbq_rotate(const float *d_x, const float *d_r, int64_t dim, int64_t n,
                                  float *d_y);

/* Tests and benchmarks: the largest batch that an IVF search on the GPU
 * runs with its probes on the device (cuda_ivf.cuh, "small batches"); 0
 * sends every batch to the batch path, a negative value restores the default
 * (64).  Not for concurrent use. */
void sml_cuda_ivf_small_max(long long nq);

/* Tests and benchmarks: the largest batch past sml_cuda_ivf_small_max whose
 * coarse search runs as a kernel of keys and a selection per query
 * (cuda_ivf.cuh, coarse_many), not as the general exact search: the same
 * bits.  0 sends every such batch to the exact search, a negative value
 * restores the defaults (256, and 512 for IVF-PQ's fused scan, whose probes
 * stay on the device).  Not for concurrent use. */
void sml_cuda_ivf_coarse_many_max(long long nq);

/* Whether the batch path of an IVF-Flat search on the GPU stages its thin
 * tiles' rows through shared memory (cuda_ivf.cuh, thin_staged_kernel; the
 * default, on) or reads each row lane by lane (0): the same bits, for
 * benchmarks and tests that compare the two.  Not for concurrent use. */
void sml_cuda_ivf_thin_staged(int on);

/* Whether a small batch's fused IVF-PQ scan takes each query's table from
 * the coarse search, which fills it beside the keys (the default, on), or
 * builds it in every block (0): the same bits, for benchmarks and tests that
 * compare the two.  Not for concurrent use. */
void sml_cuda_ivf_pq_coarse_tables(int on);

/* Tests only: the coarse selection of a small IVF batch (cuda_ivf_small.cu)
 * on nq rows of n keys (device memory, row-major): each row's np smallest
 * (key, column) pairs in order (key, then column; NaN as +inf), as columns
 * into d_probes and as distances (key for l2, else -key) into d_distances
 * (nq x np each, device memory).  np <= 256.  Synchronous. */
simil_status sml_cuda_coarse_select(int64_t nq, int64_t n, int64_t np, int l2, const float *d_keys,
                                    int64_t *d_probes, float *d_distances);

/* Tests and benchmarks: how many small IVF batches (at most
 * sml_cuda_ivf_small_max queries) may run side by side on one GPU, each on a
 * lane of its own (streams, buffers; cuda_device.cuh), 1 to 16; 0 or less
 * restores the default (16).  Backends opened from then on tell the search
 * batcher (backend.h, batch_lanes).  Not for concurrent use. */
void sml_cuda_lanes(int lanes);

/* Whether the small-batch path computes its approximate dot products on
 * tensor cores where the dimension allows (a multiple of 16; the default,
 * on) or on CUDA cores (0): for benchmarks and tests that compare the two.
 * Not for concurrent use. */
void sml_cuda_knn_small_tensor(int on);

/* Whether the small-batch path searches one query from host memory in one
 * launch (the default, on: the query sent with the launch, the last block
 * finishing) or in three (0: scaling, scan, finish): for benchmarks and
 * tests that compare the two.  Not for concurrent use. */
void sml_cuda_knn_small_one_launch(int on);

/* Whether a small IVF batch's stream work (the upload, the coarse search,
 * the scan) is replayed as one CUDA graph launch, the graph kept per lane
 * for work that is byte for byte the same (1, the default; cuda_replay.cuh),
 * or issued operation by operation (0): the same bits, for benchmarks and
 * tests that compare the two.  Not for concurrent use. */
void sml_cuda_replay(int on);

/* Since the process began, small batches whose work was: replayed by a
 * graph kept from before (hits), by a graph made for it (builds), or issued
 * operation by operation though recorded (direct); and graphs dropped
 * because a buffer of their lane was freed (dropped). */
void sml_cuda_replay_counts(long long *hits, long long *builds, long long *direct,
                            long long *dropped);

#ifdef __cplusplus
}
#endif
#endif
