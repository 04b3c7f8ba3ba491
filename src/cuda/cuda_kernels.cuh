// cuda_kernels.cuh: the small kernels around search: norms, fp16 scaling,
// row gathers, exact re-ranking and writing results.  Each launcher checks
// its launch and returns a simil_status.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "simil/status.h"

namespace sml {

// norms[i] = ||x_i||^2, one warp per row.
simil_status launch_row_norms(long long n, int dim, const float *x, float *norms,
                              cudaStream_t s);

// dst row d(i) = src row s(i) for i < n, d(i) = dst_rows[i] or i when
// dst_rows is null, likewise s(i) (index arrays: device); row_bytes a
// multiple of 4.
simil_status launch_move_rows(void *dst, const int64_t *dst_rows, const void *src,
                              const int64_t *src_rows, size_t row_bytes, long long n,
                              cudaStream_t s);

// out row i = fp16(x_i * s_i) with s_i a power of two putting ||x_i|| * s_i in
// [64, 128) (s_i = 1 for a zero row); inv_scale[i] = 1 / s_i.  When norms is
// not null it receives ||x_i|| (not squared).  *max_norm (device, may be null)
// is raised to the largest ||x_i||.
simil_status launch_scale_to_half(long long n, int dim, const float *x, __half *out,
                                  float *inv_scale, float *norms, float *max_norm,
                                  cudaStream_t s);

// Rows of fp32 values small enough to travel as a kernel's arguments (a
// launch carries them: no copy, no staging buffer).  3,840 bytes, under the
// 4 KB that every architecture takes.
struct SentRows {
    static constexpr int kFloats = 952;
    int n, dim;
    float x[kFloats];
};

// Whether n rows of dim floats fit in SentRows.
bool sent_rows_fit(long long n, int dim);

// launch_scale_to_half of n rows (sent_rows_fit) read from host_x (host
// memory, read by the call: the launch carries them), also written to x
// (device, n x dim fp32); without max_norm.
simil_status launch_scale_sent_to_half(int n, int dim, const float *host_x, float *x, __half *out,
                                       float *inv_scale, float *norms, cudaStream_t s);

// keys[q][c] = exact key of candidate idx[q][c] for query q: ||x - y||^2
// (l2) or -<x, y>; idx < 0 gives +inf.  One block per query.
simil_status launch_rerank(int nq, int dim, const float *queries, const float *base,
                           const int *idx, int ncand, bool l2, float *keys, cudaStream_t s);

// Final results of nq rows of k sorted (key, position) pairs:
// distance = key + (add_query_norms ? ||x||^2 clamped at 0 : 0) for l2, -key
// for ip; label = ids[position] (or -1), and runs of equal distances ordered by
// label.  Writes rows of stride ld_out into distances / labels.
// Rows up to which launch_finish takes a warp per row: its writes to a row
// are one store per 32 entries, and it reads them back only where two
// entries tie.  Past it, a thread per row writes its entries one by one and
// reads them back to order ties, which is fast in device memory only.
constexpr int kFinishWarpRows = 1024;

simil_status launch_finish(int nq, int k, const float *keys, const int *pos, bool l2,
                           const float *query_norms, const int64_t *ids, float *distances,
                           int64_t *labels, cudaStream_t s);

}  // namespace sml
