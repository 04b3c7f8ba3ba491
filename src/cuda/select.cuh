// select.cuh: launching k-selection over the rows of a matrix on the GPU.
//
//   select_rows          k <= 2048: one of the designs below, picked by the
//                        table of select_dispatch.cu
//   select_rows_radix    any k: radix select of the k-th key, compaction, then
//                        a segmented sort of the k survivors (radix_select.cu)
// Both write rows x k (key, index) pairs sorted by key then index.  One queue
// size per select_kNN.cu file, so the build runs in parallel.
//
// The designs (docs/k-selection.md compares them):
//   buffered_warp    WarpSelect with a 32-slot buffer per warp in shared
//                    memory in place of thread queues; one warp per row;
//                    K a power of two (warp_select_kernel)
//   threshold_block  a threshold and a buffer in shared memory, sorted when
//                    full; one block per row (block_select_kernel)
//   queue_warp       the paper's WarpSelect: thread queues and warp queue in
//                    registers, odd-size networks; one warp per row
//                    (queue_warp_select_kernel)
//   queue_block      the paper's BlockSelect: queue_warp's queues in several
//                    warps per row, merged in shared memory at the end
//                    (warps_block_select_kernel)
//   buffered_block   the same with buffered_warp's queues
// The last three take K from kQueueSizes (multiples of 32, not only powers
// of two).
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

// The numbers are those of sml_cuda_select_force (cuda_backend.h).
enum class SelectDesign : int {
    automatic = 0,
    buffered_warp = 1,
    threshold_block = 2,
    queue_warp = 3,
    queue_block = 4,
    buffered_block = 5,
};

struct SelectChoice {
    SelectDesign design;
    int warps;  // per row: queue_block and buffered_block, 1..kMaxRowWarps
};

// Warp queue sizes of queue_warp, queue_block and buffered_block.
constexpr int kQueueSizes[] = {32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048};

// The smallest queue size that holds k (k <= kMaxWarpSelectK).
inline int queue_select_size(int k)
{
    for (int K : kQueueSizes)
        if (K >= k) return K;
    return kMaxWarpSelectK;
}

// Round k up to the queue size its kernel uses.
inline int warp_select_queue(int k)
{
    int q = 32;
    while (q < k) q <<= 1;
    return q;
}

// Which kernels are compiled.  Every design at every queue size is 172
// kernels per GPU architecture (fp32 and fp16, aligned or not), most of the
// build's time, while the table of select_dispatch.cu runs only 48 of them
// (those below); the others are reached only by forcing a design
// (sml_cuda_select_force, sml_cuda_select_rows), for the tests and
// bench_select's sweep.  SIMIL_SELECT_ALL (CMake
// SIMIL_CUDA_SELECT_ALL, on with SIMIL_TESTS) builds them all; without it a
// forced design outside this set returns SIMIL_ERR_UNSUPPORTED.
// select_dispatch.cu checks at compile time that the table picks nothing
// outside it.  threshold_block (one kernel for every k) is always built.
#ifndef SIMIL_SELECT_ALL
#define SIMIL_SELECT_ALL 0
#endif

// The kernels the table can pick: K is warp_select_queue(k) for
// buffered_warp, queue_select_size(k) for the others.
constexpr bool select_dispatched(SelectDesign d, int K)
{
    switch (d) {
    case SelectDesign::buffered_warp: return K <= 64;
    case SelectDesign::threshold_block: return true;
    case SelectDesign::queue_warp: return K >= 96 && K <= 512;
    case SelectDesign::buffered_block: return K >= 96 && K <= 256;
    default: return false;
    }
}

constexpr bool select_built(SelectDesign d, int K)
{
    return SIMIL_SELECT_ALL || select_dispatched(d, K);
}

simil_status select_not_built(SelectDesign d, int K);

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

// queue_warp, queue_block and buffered_block at one queue size each.
simil_status select_rows_queue_k32(const SelectJob &, ScoreType, SelectChoice, cudaStream_t);
simil_status select_rows_queue_k64(const SelectJob &, ScoreType, SelectChoice, cudaStream_t);
simil_status select_rows_queue_k96(const SelectJob &, ScoreType, SelectChoice, cudaStream_t);
simil_status select_rows_queue_k128(const SelectJob &, ScoreType, SelectChoice, cudaStream_t);
simil_status select_rows_queue_k192(const SelectJob &, ScoreType, SelectChoice, cudaStream_t);
simil_status select_rows_queue_k256(const SelectJob &, ScoreType, SelectChoice, cudaStream_t);
simil_status select_rows_queue_k384(const SelectJob &, ScoreType, SelectChoice, cudaStream_t);
simil_status select_rows_queue_k512(const SelectJob &, ScoreType, SelectChoice, cudaStream_t);
simil_status select_rows_queue_k768(const SelectJob &, ScoreType, SelectChoice, cudaStream_t);
simil_status select_rows_queue_k1024(const SelectJob &, ScoreType, SelectChoice, cudaStream_t);
simil_status select_rows_queue_k1536(const SelectJob &, ScoreType, SelectChoice, cudaStream_t);
simil_status select_rows_queue_k2048(const SelectJob &, ScoreType, SelectChoice, cudaStream_t);

// k <= kMaxWarpSelectK; the design from the table (or the test hook).
simil_status select_rows(const SelectJob &job, ScoreType type, cudaStream_t stream);

// The table's choice for a job on a GPU of sms multiprocessors.
SelectChoice select_choice(const SelectJob &job, int sms);

// k <= kMaxWarpSelectK, with the given design (not automatic).
simil_status select_rows_with(const SelectJob &job, ScoreType type, SelectChoice choice,
                              cudaStream_t stream);

// Any k <= cols.  Scratch bytes first, then the call.
size_t select_rows_radix_workspace(int rows, int cols, int k);
simil_status select_rows_radix(const SelectJob &job, ScoreType type, void *workspace,
                               size_t workspace_bytes, cudaStream_t stream);

// The WarpSelect launch shared by the select_kNN.cu files.
template <int K>
simil_status launch_warp_select(const SelectJob &job, ScoreType type, cudaStream_t s)
{
    if (job.rows == 0) return SIMIL_OK;
    if constexpr (!select_built(SelectDesign::buffered_warp, K)) {
        return select_not_built(SelectDesign::buffered_warp, K);
    } else {
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
}

template <int K, typename S, bool Vec>
simil_status launch_queue_select_as(const SelectJob &job, SelectChoice c, cudaStream_t s)
{
    if (c.design == SelectDesign::queue_warp) {
        if constexpr (!select_built(SelectDesign::queue_warp, K)) {
            return select_not_built(SelectDesign::queue_warp, K);
        } else {
            const unsigned blocks = (unsigned)((job.rows + 3) / 4);
            queue_warp_select_kernel<K, S, Vec><<<blocks, 128, 0, s>>>(job);
            SML_LAUNCH_TRY("queue_warp_select_kernel");
            return SIMIL_OK;
        }
    }
    const size_t smem = warps_block_smem(K, c.warps);
    const auto launch = [&](auto kernel) -> simil_status {
        if (smem > 48 * 1024)
            SML_CUDA_TRY(cudaFuncSetAttribute(
                kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        kernel<<<job.rows, 32 * c.warps, smem, s>>>(job);
        SML_LAUNCH_TRY("warps_block_select_kernel");
        return SIMIL_OK;
    };
    if (c.design == SelectDesign::queue_block) {
        if constexpr (!select_built(SelectDesign::queue_block, K))
            return select_not_built(SelectDesign::queue_block, K);
        else
            return launch(warps_block_select_kernel<K, S, Vec, QueueWarpSelect<K>>);
    }
    if constexpr (!select_built(SelectDesign::buffered_block, K))
        return select_not_built(SelectDesign::buffered_block, K);
    else
        return launch(warps_block_select_kernel<K, S, Vec, BufferedWarpSelect<K, true>>);
}

// The launch of queue_warp, queue_block and buffered_block shared by the
// select_kNN.cu files.
template <int K>
simil_status launch_queue_select(const SelectJob &job, ScoreType type, SelectChoice c,
                                 cudaStream_t s)
{
    SML_RETURN_IF(c.design != SelectDesign::queue_warp && c.design != SelectDesign::queue_block &&
                      c.design != SelectDesign::buffered_block,
                  SIMIL_ERR_INTERNAL, "select: design %d has no queue kernel", (int)c.design);
    SML_RETURN_IF(c.design != SelectDesign::queue_warp && (c.warps < 1 || c.warps > kMaxRowWarps),
                  SIMIL_ERR_INTERNAL, "select: %d warps per row outside [1, %d]", c.warps,
                  kMaxRowWarps);
    if (job.rows == 0) return SIMIL_OK;
    const bool vec = select_vectorizable(job, type);
    if (type == ScoreType::f16)
        return vec ? launch_queue_select_as<K, __half, true>(job, c, s)
                   : launch_queue_select_as<K, __half, false>(job, c, s);
    return vec ? launch_queue_select_as<K, float, true>(job, c, s)
               : launch_queue_select_as<K, float, false>(job, c, s);
}

}  // namespace sml




