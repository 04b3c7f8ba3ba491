// select.cuh: launching k-selection over the rows of a matrix on the GPU.
//
//   select_rows          k <= 2048: WarpSelect, or BlockSelect for few long
//                        rows; one kernel instantiation per K in select_kNN.cu
//   select_rows_radix    any k: radix select of the k-th key (three histogram
//                        passes), compaction, then a segmented sort of the k
//                        survivors (radix_select.cu)
// Both write rows x k (key, index) pairs sorted by key then index.
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>

#include "cuda/warp_select.cuh"
#include "simil/status.h"

namespace sml {

constexpr int kMaxWarpSelectK = 2048;

enum class ScoreType { f32, f16 };

// Round k up to the queue size its kernel uses.
inline int warp_select_queue(int k)
{
    int q = 32;
    while (q < k) q <<= 1;
    return q;
}

simil_status select_rows_k32(const SelectJob &job, ScoreType type, bool block, cudaStream_t s);
simil_status select_rows_k64(const SelectJob &job, ScoreType type, bool block, cudaStream_t s);
simil_status select_rows_k128(const SelectJob &job, ScoreType type, bool block, cudaStream_t s);
simil_status select_rows_k256(const SelectJob &job, ScoreType type, bool block, cudaStream_t s);
simil_status select_rows_k512(const SelectJob &job, ScoreType type, bool block, cudaStream_t s);
simil_status select_rows_k1024(const SelectJob &job, ScoreType type, bool block, cudaStream_t s);
simil_status select_rows_k2048(const SelectJob &job, ScoreType type, bool block, cudaStream_t s);

// k <= kMaxWarpSelectK.
simil_status select_rows(const SelectJob &job, ScoreType type, cudaStream_t stream);

// Any k <= cols.  Scratch bytes first (workspace NULL), then the call.
size_t select_rows_radix_workspace(int rows, int cols, int k);
simil_status select_rows_radix(const SelectJob &job, ScoreType type, void *workspace,
                               size_t workspace_bytes, cudaStream_t stream);

// The launch shared by the select_kNN.cu files.
template <int K>
simil_status launch_select(const SelectJob &job, ScoreType type, bool block, cudaStream_t s)
{
    if (job.rows == 0) return SIMIL_OK;
    if (block) {
        const int threads = 32 * BlockSelectWarps<K>::value;
        if (type == ScoreType::f16)
            block_select_kernel<K, __half><<<job.rows, threads, 0, s>>>(job);
        else
            block_select_kernel<K, float><<<job.rows, threads, 0, s>>>(job);
        SML_LAUNCH_TRY("block_select_kernel");
    } else {
        const unsigned blocks = (unsigned)((job.rows + 3) / 4);
        if (type == ScoreType::f16)
            warp_select_kernel<K, __half><<<blocks, 128, 0, s>>>(job);
        else
            warp_select_kernel<K, float><<<blocks, 128, 0, s>>>(job);
        SML_LAUNCH_TRY("warp_select_kernel");
    }
    return SIMIL_OK;
}

}  // namespace sml
