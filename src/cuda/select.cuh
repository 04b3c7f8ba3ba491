// select.cuh: launching k-selection over the rows of a matrix on the GPU.
//
//   select_rows          k <= 2048: WarpSelect (one warp per row, queues in
//                        registers; warp_select.cuh) or BlockSelect (one block
//                        per row, a buffer in shared memory; block_select.cuh)
//   select_rows_radix    any k: radix select of the k-th key, compaction, then
//                        a segmented sort of the k survivors (radix_select.cu)
// Both write rows x k (key, index) pairs sorted by key then index.  One
// WarpSelect queue size per select_kNN.cu file, so the build runs in parallel.
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/block_select.cuh"
#include "cuda/cuda_util.cuh"
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

// 16-byte loads are possible: aligned rows and per-column arrays.
inline bool select_vectorizable(const SelectJob &job, ScoreType type)
{
    const uintptr_t need = type == ScoreType::f16 ? 8 : 16;
    const auto aligned = [need](const void *p) {
        return p == nullptr || reinterpret_cast<uintptr_t>(p) % need == 0;
    };
    const auto aligned16 = [](const void *p) {
        return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0;
    };
    return job.ld % 4 == 0 && aligned(job.scores) && aligned16(job.add) &&
           aligned16(job.scale) && aligned16(job.in_idx);
}

simil_status select_rows_k32(const SelectJob &job, ScoreType type, cudaStream_t s);
simil_status select_rows_k64(const SelectJob &job, ScoreType type, cudaStream_t s);
simil_status select_rows_k128(const SelectJob &job, ScoreType type, cudaStream_t s);
simil_status select_rows_k256(const SelectJob &job, ScoreType type, cudaStream_t s);
simil_status select_rows_k512(const SelectJob &job, ScoreType type, cudaStream_t s);
simil_status select_rows_k1024(const SelectJob &job, ScoreType type, cudaStream_t s);
simil_status select_rows_k2048(const SelectJob &job, ScoreType type, cudaStream_t s);
simil_status select_rows_block(const SelectJob &job, ScoreType type, cudaStream_t s);

// k <= kMaxWarpSelectK; picks the kernel.
simil_status select_rows(const SelectJob &job, ScoreType type, cudaStream_t stream);

// Any k <= cols.  Scratch bytes first, then the call.
size_t select_rows_radix_workspace(int rows, int cols, int k);
simil_status select_rows_radix(const SelectJob &job, ScoreType type, void *workspace,
                               size_t workspace_bytes, cudaStream_t stream);

// The WarpSelect launch shared by the select_kNN.cu files.
template <int K>
simil_status launch_warp_select(const SelectJob &job, ScoreType type, cudaStream_t s)
{
    if (job.rows == 0) return SIMIL_OK;
    const unsigned blocks = (unsigned)((job.rows + 3) / 4);
    const bool vec = select_vectorizable(job, type);
    if (type == ScoreType::f16) {
        if (vec)
            warp_select_kernel<K, __half, true><<<blocks, 128, 0, s>>>(job);
        else
            warp_select_kernel<K, __half, false><<<blocks, 128, 0, s>>>(job);
    } else {
        if (vec)
            warp_select_kernel<K, float, true><<<blocks, 128, 0, s>>>(job);
        else
            warp_select_kernel<K, float, false><<<blocks, 128, 0, s>>>(job);
    }
    SML_LAUNCH_TRY("warp_select_kernel");
    return SIMIL_OK;
}

}  // namespace sml




