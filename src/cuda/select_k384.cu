// select_k384.cu: queue_warp, queue_block and buffered_block for
// 256 < k <= 384: a queue size that the odd-size networks allow between two
// powers of two.  One queue size per file, so that the slow template builds
// run in parallel.
#include "cuda/select.cuh"

namespace sml {

simil_status select_rows_queue_k384(const SelectJob &job, ScoreType type, SelectChoice c,
                                    cudaStream_t s)
{
    return launch_queue_select<384>(job, type, c, s);
}

}  // namespace sml
