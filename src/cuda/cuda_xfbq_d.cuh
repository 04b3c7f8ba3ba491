// cuda_xfbq_d.cuh: XFBQ's estimated distance D of one row against a few
// queries by XOR and popcount, the paper's formula (docs/xfbq.md, "The
// codes"): D = sum over query plane i and row plane j of
// 2^((Q-1-i)+(B-1-j)) popcount(X_i ^ Y_j).  The scan kernels of
// cuda_xfbq.cu and the small-batch and histogram kernels of cuda_xfbq_mma.cu
// share it.
#pragma once

#include <stdint.h>

namespace sml {

// D of the row whose planes are at y (B planes of W words, global memory)
// against G queries, query t's Q planes of W words at xq[t].  Q, B, W > 0 fix
// them at compile time (the loops unroll and the row's words load at once);
// 0 takes qbits, bbits and words.
template <int G, int Q, int B, int W>
__device__ __forceinline__ void xfbq_row_d(const uint64_t *const (&xq)[G], const uint64_t *y,
                                           int qbits, int bbits, int words, unsigned (&d)[G])
{
#pragma unroll
    for (int t = 0; t < G; ++t) d[t] = 0;
    if constexpr (Q > 0) {
        uint64_t yw[B * W];
#pragma unroll
        for (int e = 0; e < B * W; ++e) yw[e] = __ldg(y + e);
#pragma unroll
        for (int j = 0; j < B; ++j)
#pragma unroll
            for (int i = 0; i < Q; ++i)
#pragma unroll
                for (int t = 0; t < G; ++t) {
                    unsigned c = 0;
#pragma unroll
                    for (int w = 0; w < W; ++w) c += __popcll(xq[t][i * W + w] ^ yw[j * W + w]);
                    d[t] += c << ((Q - 1 - i) + (B - 1 - j));
                }
    } else {
        for (int j = 0; j < bbits; ++j)
            for (int w = 0; w < words; ++w) {
                const uint64_t yw = __ldg(y + j * words + w);
                for (int i = 0; i < qbits; ++i) {
                    const int sh = (qbits - 1 - i) + (bbits - 1 - j);
#pragma unroll
                    for (int t = 0; t < G; ++t)
                        d[t] += (unsigned)__popcll(xq[t][i * words + w] ^ yw) << sh;
                }
            }
    }
}

}  // namespace sml
