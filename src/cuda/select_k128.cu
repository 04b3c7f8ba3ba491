// select_k128.cu: the k-selection kernels for queues of 128 pairs: buffered
// WarpSelect for 64 < k <= 128, and queue_warp, queue_block and buffered_block
// for 96 < k <= 128.  One queue size per file, so that the slow template
// builds run in parallel.
#include "cuda/select.cuh"

namespace sml {

simil_status select_rows_k128(const SelectJob &job, ScoreType type, cudaStream_t s)
{
    return launch_warp_select<128>(job, type, s);
}

simil_status select_rows_queue_k128(const SelectJob &job, ScoreType type, SelectChoice c,
                                    cudaStream_t s)
{
    return launch_queue_select<128>(job, type, c, s);
}

}  // namespace sml
