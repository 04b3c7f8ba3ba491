// select_dispatch.cu: picks the queue size, and WarpSelect or BlockSelect.
#include "cuda/select.cuh"

namespace sml {

simil_status select_rows(const SelectJob &job, ScoreType type, cudaStream_t stream)
{
    SML_RETURN_IF(job.k < 1 || job.k > kMaxWarpSelectK, SIMIL_ERR_INTERNAL,
                  "select_rows: k=%d outside [1, %d]", job.k, kMaxWarpSelectK);
    int device = 0, sms = 0;
    SML_CUDA_TRY(cudaGetDevice(&device));
    SML_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    // One warp per row leaves most of the GPU idle when rows are few and long;
    // then several warps share each row (BlockSelect).
    const bool block = job.rows < 8 * sms && job.cols >= 2048;
    switch (warp_select_queue(job.k)) {
    case 32: return select_rows_k32(job, type, block, stream);
    case 64: return select_rows_k64(job, type, block, stream);
    case 128: return select_rows_k128(job, type, block, stream);
    case 256: return select_rows_k256(job, type, block, stream);
    case 512: return select_rows_k512(job, type, block, stream);
    case 1024: return select_rows_k1024(job, type, block, stream);
    default: return select_rows_k2048(job, type, block, stream);
    }
}

}  // namespace sml
