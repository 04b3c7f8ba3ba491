// cuda_xfbq_mma.cuh: flat XFBQ's estimated distances D on integer tensor
// cores, never written out (cuda_xfbq_mma.cu).  cuda_xfbq.cu runs the scan
// around them: these find each query's candidates, its re-ranking and
// selection are the XOR/popcount path's.
//
// Why it is the same D.  Write a query's planes as Q-bit levels
// x_d = sum_i 2^(Q-1-i) X_i[d] and a row's as B-bit levels y_d.  Since
// popcount(a ^ b) = a + b - 2ab on bits, the paper's
//   D = sum_{i,j} 2^((Q-1-i)+(B-1-j)) popcount(X_i ^ Y_j)
//     = sum_d (2^B - 1) x_d + y_d ((2^Q - 1) - 2 x_d)
//     = C_q + <a, y>,  a_d = (2^Q - 1) - 2 x_d,  C_q = (2^B - 1) sum_d x_d,
// an exact dot product of small integers (|a_d| < 2^Q, y_d < 2^B; both fit
// int8 for Q, B <= 7), which mma.sync's int8 shape sums in int32.
//
// How the candidates come out without a histogram of every D (the
// popcount path's shared-memory atomics, one per (query, row)):
//  1. chunk minima: per query and chunk of rows (a block's rows), the
//     smallest D, counted into the query's histogram; for a small K only
//     every chunk_step-th chunk.  The K smallest chunk minima are the D of K
//     distinct rows, so the bin of the K-th smallest of them is at least b,
//     the bin of the K-th smallest D: the threshold kernel on that histogram
//     gives a limit T_q no lower than the scan's own.
//  2. collect: every row with D <= T_q goes to its query's buffer with its D
//     (cap rows; the count goes on past cap, so the caller learns the cap it
//     needs); then the histogram of the buffered D, which holds every D up
//     to T_q: the threshold kernel on it gives the scan's own bin, limit and
//     count.
//  3. compact: each query's rows under its limit go to the selection pass's
//     candidate slots.
// A batch of 1 or 2 queries runs steps 1 and 2 with D by XOR and popcount
// instead (a thread per row): making each row's bytes for so few queries
// would cost more than the popcounts.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/cuda_workspace.cuh"
#include "simil/status.h"

namespace sml {

// The most queries of one batch (their per-query words sit in shared memory).
constexpr int kXfbqMmaMaxQueries = 2048;

struct XfbqMma {
    const char *codes;            // row r in [0, n): bbits planes of words
    long long stride;             //   64-bit words at codes + (row0 + r) * stride
    long long row0;
    int n;
    int qbits, bbits, words, dim;
    int nq;                       // queries of the batch
    const uint64_t *query_codes;  // nq x qbits * words
    unsigned dclamp;
    int shift;
    int nbins;
    int rows_per_block;           // a chunk of step 1; a multiple of 256
    int chunk_step;               // step 1 takes every chunk_step-th chunk
    int cap;                      // buffered rows per query
    int sm_count;                 // the GPU's SMs (how to split the work)
    // scratch (xfbq_mma_carve)
    int8_t *qvec;                 // the queries' a_d in fragment order (padded to 64
                                  // queries, zero past dim and nq)
    int *qconst;                  // per query, C_q
    int *scanned;                 // per query, n (the threshold kernel's want)
    unsigned *hist;               // nq x nbins
    int *fill;                    // per query: rows with D <= T_q (may pass cap)
    int *buf_row;                 // nq x cap arena rows
    unsigned *buf_d;              //   and their D
};

// Whether the tensor-core path takes codes of these bits and dimensions.
bool xfbq_mma_fits(int qbits, int bbits, int dim);

// The chunk of rows of step 1 for n rows on a GPU of sm_count SMs.
int xfbq_mma_rows_per_block(long long n, int sm_count);

// Which chunks step 1 reads (every step-th) for a K of want.
int xfbq_mma_chunk_step(long long n, int rows_per_block, long long want);

// The scratch of m (its nq and cap set), taken from c (cuda_workspace.cuh:
// over a null base to size it, then over the block).
void xfbq_mma_carve(Carve &c, XfbqMma *m);

// The queries' a_d and C_q, scanned; the histogram zeroed.
simil_status xfbq_mma_prepare(const XfbqMma &m, cudaStream_t st);

// Step 1: the chunk minima into m.hist (zeroed by the caller).
simil_status xfbq_mma_chunk_minima(const XfbqMma &m, cudaStream_t st);

// Step 2: rows with D <= limit[q] into the buffers (fill zeroed by the
// caller), then their histogram into m.hist.
simil_status xfbq_mma_collect(const XfbqMma &m, const unsigned *limit, cudaStream_t st);

// Step 3: for queries [first, first + n), the buffered rows with D <=
// limit[q] to cand_rows / cand_query from cstart[q] (device, by batch query).
simil_status xfbq_mma_compact(const XfbqMma &m, const unsigned *limit, const long long *cstart,
                              int first, int n, int *cand_rows, int *cand_query,
                              cudaStream_t st);

}  // namespace sml
