// select_k512.cu: the k-selection kernels for queues of 512 pairs: buffered
// WarpSelect for 256 < k <= 512, and queue_warp, queue_block and buffered_block
// for 384 < k <= 512.  One queue size per file, so that the slow template
// builds run in parallel.
#include "cuda/select.cuh"

namespace sml {

simil_status select_rows_k512(const SelectJob &job, ScoreType type, cudaStream_t s)
{
    return launch_warp_select<512>(job, type, s);
}

simil_status select_rows_queue_k512(const SelectJob &job, ScoreType type, SelectChoice c,
                                    cudaStream_t s)
{
    return launch_queue_select<512>(job, type, c, s);
}

}  // namespace sml
