// last_block.cuh: which block of a piece of work finishes last, so that it
// may do the work's end (a merge, a selection) with no kernel launch after
// (the pattern of the CUDA samples' threadFenceReduction).  Used by the small
// IVF batches (ivf_small_merge.cuh) and the one-query exact search
// (cuda_knn_small.cu).
#pragma once

namespace sml {

// Every thread of a block calls this once the block's share of a piece of
// work is written to global memory: true (in every thread) in the last of
// the piece's `blocks` blocks to get here, which may then read the others'
// writes (through L2: __ldcg).  *ticket counts the blocks done; the last
// leaves it 0, ready for the next kernel on the lane (device_tickets).
__device__ __forceinline__ bool last_block(unsigned *ticket, unsigned blocks)
{
    __shared__ bool last;
    __threadfence();  // this block's writes, before its ticket
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(ticket, 1u) == blocks - 1;
        if (last) *ticket = 0;
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}

}  // namespace sml
