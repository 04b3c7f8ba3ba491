// select_k1024.cu: the WarpSelect kernels for k <= 1024.  One queue size per
// file, so that the slow template builds run in parallel.
#include "cuda/select.cuh"

namespace sml {

simil_status select_rows_k1024(const SelectJob &job, ScoreType type, cudaStream_t s)
{
    return launch_warp_select<1024>(job, type, s);
}

}  // namespace sml
