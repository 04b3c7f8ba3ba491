// select_k256.cu: the k-selection kernels for queues of 256 pairs: buffered
// WarpSelect for 128 < k <= 256, and queue_warp, queue_block and buffered_block
// for 192 < k <= 256.  One queue size per file, so that the slow template
// builds run in parallel.
#include "cuda/select.cuh"

namespace sml {

simil_status select_rows_k256(const SelectJob &job, ScoreType type, cudaStream_t s)
{
    return launch_warp_select<256>(job, type, s);
}

simil_status select_rows_queue_k256(const SelectJob &job, ScoreType type, SelectChoice c,
                                    cudaStream_t s)
{
    return launch_queue_select<256>(job, type, c, s);
}

}  // namespace sml
