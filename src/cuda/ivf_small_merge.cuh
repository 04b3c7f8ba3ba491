// ivf_small_merge.cuh: the ends of a small batch's kernels (cuda_ivf.cuh,
// "small batches"): the last block of a query to finish its coarse keys
// selects its probes, and the last to finish its share of the scan merges
// the query's parts into its results.
//
// A separate selection or merge kernel was one more launch per call, and
// with several lanes issuing at once each launch cost 7-8 us of host time
// (H200); the last block of each query (a ticket counter per query, the
// pattern of the CUDA samples' threadFenceReduction) does the same work
// with no launch.
#pragma once

#include "cuda/cuda_ivf.cuh"
#include "cuda/knn_device.cuh"
#include "cuda/last_block.cuh"
#include "cuda/warp_select.cuh"

namespace sml {

// Every thread of a block of Warps warps calls this once the block's part
// of query q is written (its k best (key, arena row) pairs, at part_keys /
// part_idx + (q * parts + the block's part) * k).  The last of the query's
// parts blocks to get here merges the query's parts * k pairs into its
// results (o), as the batch path's selection and finish_kernel give them.
// The four arrays are the block's shared memory, free for this.
template <int K, int Warps>
__device__ void merge_if_last(const SmallOut &o, int q, int parts, const float *part_keys,
                              const int *part_idx, float (*list_k)[K], int (*list_v)[K],
                              float (*slot_k)[32], int (*slot_v)[32])
{
    if (!last_block(o.tickets + q, (unsigned)parts)) return;
    const int warp = threadIdx.x >> 5, total = parts * o.k;
    const long long row = (long long)q * total;
    BufferedWarpSelect<K> ws;
    ws.init(o.k, INFINITY, kEmptyIdx, slot_k[warp], slot_v[warp]);
    offer_parts<8>(ws, part_keys + row, part_idx + row, total, Warps * 32);
    if (!block_merge<K, Warps>(ws, o.k, list_k, list_v, slot_k, slot_v)) return;
    finish_row_warp(o.k, list_k[0], list_v[0], o.l2, nullptr, o.ids,
                    o.distances + (long long)q * o.k, o.labels + (long long)q * o.k);
}

}  // namespace sml
