// select_k64.cu: the k-selection kernels for queues of 64 pairs: buffered
// WarpSelect for 32 < k <= 64, and queue_warp, queue_block and buffered_block
// for 32 < k <= 64.  One queue size per file, so that the slow template
// builds run in parallel.
#include "cuda/select.cuh"

namespace sml {

simil_status select_rows_k64(const SelectJob &job, ScoreType type, cudaStream_t s)
{
    return launch_warp_select<64>(job, type, s);
}

simil_status select_rows_queue_k64(const SelectJob &job, ScoreType type, SelectChoice c,
                                   cudaStream_t s)
{
    return launch_queue_select<64>(job, type, c, s);
}

}  // namespace sml
