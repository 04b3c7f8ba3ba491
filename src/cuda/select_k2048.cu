// select_k2048.cu: the k-selection kernels for queues of 2048 pairs: buffered
// WarpSelect for 1024 < k <= 2048, and queue_warp, queue_block and buffered_block
// for 1536 < k <= 2048.  One queue size per file, so that the slow template
// builds run in parallel.
#include "cuda/select.cuh"

namespace sml {

simil_status select_rows_k2048(const SelectJob &job, ScoreType type, cudaStream_t s)
{
    return launch_warp_select<2048>(job, type, s);
}

simil_status select_rows_queue_k2048(const SelectJob &job, ScoreType type, SelectChoice c,
                                     cudaStream_t s)
{
    return launch_queue_select<2048>(job, type, c, s);
}

}  // namespace sml
