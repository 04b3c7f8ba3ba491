// select_k1024.cu: the k-selection kernels for queues of 1024 pairs: buffered
// WarpSelect for 512 < k <= 1024, and queue_warp, queue_block and buffered_block
// for 768 < k <= 1024.  One queue size per file, so that the slow template
// builds run in parallel.
#include "cuda/select.cuh"

namespace sml {

simil_status select_rows_k1024(const SelectJob &job, ScoreType type, cudaStream_t s)
{
    return launch_warp_select<1024>(job, type, s);
}

simil_status select_rows_queue_k1024(const SelectJob &job, ScoreType type, SelectChoice c,
                                     cudaStream_t s)
{
    return launch_queue_select<1024>(job, type, c, s);
}

}  // namespace sml
