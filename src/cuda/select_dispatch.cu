// select_dispatch.cu: BlockSelect's launch, and the choice between it and
// WarpSelect.
//
// WarpSelect keeps its queue in registers and is fastest for small k over many
// rows.  Its merges grow with k (a sort of 32 buffered pairs plus a bitonic
// merge of K pairs, every 32 accepted pairs), while BlockSelect sorts
// its shared-memory buffer only a handful of times per row; and when rows are
// few, one warp per row leaves most of the GPU idle.  BlockSelect takes
// k > 128, where it was the faster on an H200; that comparison was not
// recorded (docs/benchmarks.md, "k-selection").
#include <atomic>

#include "cuda/cuda_backend.h"
#include "cuda/select.cuh"

namespace sml {
namespace {

std::atomic<int> forced_kernel{0};

}  // namespace

simil_status select_rows_block(const SelectJob &job, ScoreType type, cudaStream_t s)
{
    if (job.rows == 0) return SIMIL_OK;
    const int capacity = block_select_capacity(job.k);
    const size_t smem = (size_t)capacity * (sizeof(float) + sizeof(int));
    const bool vec = select_vectorizable(job, type);
    const auto launch = [&](auto kernel) -> simil_status {
        SML_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)smem));
        kernel<<<job.rows, kBlockSelectThreads, smem, s>>>(job, capacity);
        SML_LAUNCH_TRY("block_select_kernel");
        return SIMIL_OK;
    };
    if (type == ScoreType::f16)
        return vec ? launch(block_select_kernel<__half, true>)
                   : launch(block_select_kernel<__half, false>);
    return vec ? launch(block_select_kernel<float, true>) : launch(block_select_kernel<float, false>);
}

simil_status select_rows(const SelectJob &job, ScoreType type, cudaStream_t stream)
{
    SML_RETURN_IF(job.k < 1 || job.k > kMaxWarpSelectK, SIMIL_ERR_INTERNAL,
                  "select_rows: k=%d outside [1, %d]", job.k, kMaxWarpSelectK);
    int device = 0, sms = 0;
    SML_CUDA_TRY(cudaGetDevice(&device));
    SML_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const int forced = forced_kernel.load();
    const bool few_long_rows = job.rows < 8 * sms && job.cols >= 4 * kBlockSelectStep;
    const bool block = forced == 2 || (forced == 0 && (job.k > 128 || few_long_rows));
    if (block) return select_rows_block(job, type, stream);
    switch (warp_select_queue(job.k)) {
    case 32: return select_rows_k32(job, type, stream);
    case 64: return select_rows_k64(job, type, stream);
    case 128: return select_rows_k128(job, type, stream);
    case 256: return select_rows_k256(job, type, stream);
    case 512: return select_rows_k512(job, type, stream);
    case 1024: return select_rows_k1024(job, type, stream);
    default: return select_rows_k2048(job, type, stream);
    }
}

}  // namespace sml

extern "C" void sml_cuda_select_force(int which) { sml::forced_kernel.store(which); }
