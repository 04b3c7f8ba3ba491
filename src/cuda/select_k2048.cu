// select_k2048.cu: the WarpSelect kernels for k <= 2048.  One queue size per
// file, so that the slow template builds run in parallel.
#include "cuda/select.cuh"

namespace sml {

simil_status select_rows_k2048(const SelectJob &job, ScoreType type, cudaStream_t s)
{
    return launch_warp_select<2048>(job, type, s);
}

}  // namespace sml
