// select_k512.cu: the WarpSelect kernels for k <= 512.  One queue size per
// file, so that the slow template builds run in parallel.
#include "cuda/select.cuh"

namespace sml {

simil_status select_rows_k512(const SelectJob &job, ScoreType type, cudaStream_t s)
{
    return launch_warp_select<512>(job, type, s);
}

}  // namespace sml
