// select_k32.cu: the k-selection kernels for queues of 32 pairs: buffered
// WarpSelect for k <= 32, and queue_warp, queue_block and buffered_block
// for k <= 32.  One queue size per file, so that the slow template
// builds run in parallel.
#include "cuda/select.cuh"

namespace sml {

simil_status select_rows_k32(const SelectJob &job, ScoreType type, cudaStream_t s)
{
    return launch_warp_select<32>(job, type, s);
}

simil_status select_rows_queue_k32(const SelectJob &job, ScoreType type, SelectChoice c,
                                   cudaStream_t s)
{
    return launch_queue_select<32>(job, type, c, s);
}

}  // namespace sml
