// cuda_ivf_small.cu: what the IVF scans' small batches share (cuda_ivf.cuh,
// "small batches"): the coarse search on the device, and the merge of the
// parts that a split scan leaves per query into the results.
//
// A batch of a few queries spends most of its time outside the scan: the
// coarse search as a general exact search (fp16 candidates, their check
// flags back to the host, a wait) and, for a scan planned on the host, the
// probes' trip to the host and the plan's back.  Here the coarse search of
// a small batch is two kernels that leave the probes in device memory:
//   keys (coarse_keys_kernel): one warp per (query, centroid), the exact
//       fp32 key of the exact search's re-ranking (exact_key), so that the
//       probes and their keys are the bits the general coarse search gives;
//   selection (coarse_select_kernel, one block per query): the nprobe
//       smallest (key, centroid) pairs in order, as that search ranks them.
// The code type's scan then splits each query over several blocks, and one
// kernel merges their parts into the results (merge_finish_kernel).
// Nothing comes back to the host until the results do, in one copy.
#include <assert.h>
#include <string.h>

#include <atomic>

#include "cuda/cuda_ivf.cuh"
#include "cuda/knn_device.cuh"
#include "cuda/warp_select.cuh"

namespace sml {
namespace {

constexpr long long kDefaultSmallMax = 64;
std::atomic<long long> small_max{kDefaultSmallMax};

constexpr int kKeyThreads = 256;
constexpr int kKeyWarps = kKeyThreads / 32;
constexpr int kCentroidsPerWarp = 2;  // 8 left one query's 4,096 centroids to 64 blocks
constexpr int kSelectThreads = 256;
constexpr int kSelectWarps = kSelectThreads / 32;

// The end of a block's selection: each warp's queue (its kk best) goes to
// shared memory, and warp 0 merges them into list_k[0], list_v[0], the kk
// best of the block in order; false in the other warps, which are done.
template <int K>
__device__ __forceinline__ bool block_merge(BufferedWarpSelect<K> &ws, int kk,
                                            float (*list_k)[K], int (*list_v)[K],
                                            float (*slot_k)[32], int (*slot_v)[32])
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    ws.flush();
    ws.q.write(list_k[warp], list_v[warp]);
    __syncthreads();
    if (warp != 0) return false;
    BufferedWarpSelect<K> m;
    m.init(kk, INFINITY, kEmptyIdx, slot_k[0], slot_v[0]);
    for (int e0 = 0; e0 < kSelectWarps * kk; e0 += 32) {
        const int e = e0 + lane;
        const int w = e / kk, i = e - w * kk;
        const int r = e < kSelectWarps * kk ? list_v[w][i] : -1;
        m.offer(r < 0 ? INFINITY : list_k[w][i], r < 0 ? kEmptyIdx : r);
    }
    m.flush();
    __syncwarp();
    m.q.write(list_k[0], list_v[0]);
    __syncwarp();
    return true;
}

// keys[q * n + c]: exact key of query q against centroid c.
__global__ void __launch_bounds__(kKeyThreads)
coarse_keys_kernel(const float *queries, const float *centroids, int n, int dim, bool l2,
                   float *keys)
{
    const int q = blockIdx.y, warp = threadIdx.x >> 5;
    const float *x = queries + (long long)q * dim;
    const int c0 = (blockIdx.x * kKeyWarps + warp) * kCentroidsPerWarp;
    for (int c = c0; c < c0 + kCentroidsPerWarp && c < n; ++c) {
        const float key = exact_key(x, centroids + (long long)c * dim, dim, l2);
        if ((threadIdx.x & 31) == 0) keys[(long long)q * n + c] = key;
    }
}

// Probes of query q: the np smallest (key, centroid) pairs, nearest first,
// as list numbers (ids, or the centroid rows where null) and as the coarse
// search reports their distances (the key for L2, -key = <x, c> for IP).
template <int K>
__global__ void __launch_bounds__(kSelectThreads)
coarse_select_kernel(const float *keys, int n, int np, bool l2, const int64_t *ids,
                     int64_t *probes, float *distances)
{
    __shared__ float slot_k[kSelectWarps][32];
    __shared__ int slot_v[kSelectWarps][32];
    __shared__ float list_k[kSelectWarps][K];
    __shared__ int list_v[kSelectWarps][K];
    const int q = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float *row = keys + (long long)q * n;
    BufferedWarpSelect<K> ws;
    ws.init(np, INFINITY, kEmptyIdx, slot_k[warp], slot_v[warp]);
    offer_ahead<16>(ws, warp * 32, kSelectThreads, n, [&](int c, float &key, int &idx) {
        key = c < n ? row[c] : INFINITY;
        if (key != key) key = INFINITY;  // NaN ranks last, as in the exact search
        idx = c < n ? c : kEmptyIdx;
    });
    if (!block_merge(ws, np, list_k, list_v, slot_k, slot_v)) return;
    for (int j = lane; j < np; j += 32) {
        const int c = list_v[0][j];
        probes[(long long)q * np + j] = c < 0 ? -1 : ids ? ids[c] : c;
        distances[(long long)q * np + j] = l2 ? list_k[0][j] : -list_k[0][j];
    }
}

// Query q's k best of its parts (parts x k pairs, rows -1 where empty), as
// the batch path's selection (select_rows) and finish_kernel give them:
// labels and distances of finish_row (finish_row_warp).
template <int K>
__global__ void __launch_bounds__(kSelectThreads)
merge_finish_kernel(const float *part_keys, const int *part_idx, int parts, int k, bool l2,
                    const int64_t *ids, int64_t *labels, float *distances)
{
    __shared__ float slot_k[kSelectWarps][32];
    __shared__ int slot_v[kSelectWarps][32];
    __shared__ float list_k[kSelectWarps][K];
    __shared__ int list_v[kSelectWarps][K];
    const int q = blockIdx.x, warp = threadIdx.x >> 5;
    const int total = parts * k;
    const long long row = (long long)q * total;
    BufferedWarpSelect<K> ws;
    ws.init(k, INFINITY, kEmptyIdx, slot_k[warp], slot_v[warp]);
    offer_ahead<8>(ws, warp * 32, kSelectThreads, total, [&](int e, float &key, int &idx) {
        const int i = e < total ? part_idx[row + e] : -1;
        key = i < 0 ? INFINITY : part_keys[row + e];
        idx = i < 0 ? kEmptyIdx : i;
    });
    if (!block_merge(ws, k, list_k, list_v, slot_k, slot_v)) return;
    finish_row_warp(k, list_k[0], list_v[0], l2, nullptr, ids, distances + (long long)q * k,
                    labels + (long long)q * k);
}

template <int K>
void launch_select(const float *keys, int nq, int n, int np, bool l2, const int64_t *ids,
                   int64_t *probes, float *distances, cudaStream_t st)
{
    coarse_select_kernel<K><<<nq, kSelectThreads, 0, st>>>(keys, n, np, l2, ids, probes,
                                                           distances);
}

}  // namespace

long long ivf_small_max() { return small_max.load(std::memory_order_relaxed); }

bool coarse_on_device(const sml_ivf_scan_args &a, int nq)
{
    const sml_knn_args &c = a.probes.coarse_search;
    return a.probes.lists == nullptr && nq <= ivf_small_max() &&
           a.probes.nprobe <= kCoarseMaxProbes && c.base != nullptr && c.n < INT32_MAX;
}

simil_status launch_coarse(const sml_ivf_scan_args &a, const float *queries, int nq,
                           float *scratch, int64_t *probes, float *distances, cudaStream_t st)
{
    const sml_knn_args &c = a.probes.coarse_search;
    const int n = (int)c.n, np = (int)a.probes.nprobe;
    const bool l2 = c.metric == SIMIL_METRIC_L2;
    assert(np >= 1 && np <= kCoarseMaxProbes && np <= n);
    if (nq == 0) return SIMIL_OK;
    const dim3 grid((unsigned)((n + kKeyWarps * kCentroidsPerWarp - 1) /
                               (kKeyWarps * kCentroidsPerWarp)),
                    (unsigned)nq);
    coarse_keys_kernel<<<grid, kKeyThreads, 0, st>>>(queries, c.base, n, (int)c.dim, l2, scratch);
    SML_LAUNCH_TRY("coarse_keys_kernel");
    if (np <= 32)
        launch_select<32>(scratch, nq, n, np, l2, c.base_ids, probes, distances, st);
    else if (np <= 64)
        launch_select<64>(scratch, nq, n, np, l2, c.base_ids, probes, distances, st);
    else if (np <= 128)
        launch_select<128>(scratch, nq, n, np, l2, c.base_ids, probes, distances, st);
    else
        launch_select<kCoarseMaxProbes>(scratch, nq, n, np, l2, c.base_ids, probes, distances, st);
    SML_LAUNCH_TRY("coarse_select_kernel");
    return SIMIL_OK;
}

simil_status finish_parts_to_host(Device *dev, const sml_ivf_scan_args &a, long long q0, int nq,
                                  int parts, const float *part_keys, const int *part_idx,
                                  void *scratch)
{
    assert(a.k <= kSmallMaxK);
    cudaStream_t st = dev->stream[0];
    const int k = (int)a.k;
    const size_t nk = (size_t)nq * k;
    int64_t *labels = static_cast<int64_t *>(scratch);
    float *dist = reinterpret_cast<float *>(labels + nk);
    const bool l2 = a.metric == SIMIL_METRIC_L2;
    const auto launch = [&](auto kernel) {
        kernel<<<nq, kSelectThreads, 0, st>>>(part_keys, part_idx, parts, k, l2, a.lists.ids,
                                              labels, dist);
    };
    if (k <= 32)
        launch(merge_finish_kernel<32>);
    else if (k <= 64)
        launch(merge_finish_kernel<64>);
    else
        launch(merge_finish_kernel<kSmallMaxK>);
    SML_LAUNCH_TRY("merge_finish_kernel");
    // one copy through pinned memory, laid out as the scratch
    char *host;
    SML_TRY(device_results(dev, 12 * nk, reinterpret_cast<void **>(&host)));
    SML_CUDA_TRY(cudaMemcpyAsync(host, scratch, 12 * nk, cudaMemcpyDeviceToHost, st));
    SML_CUDA_TRY(cudaStreamSynchronize(st));
    trace_mark(st, "ivf: parts merged, results to pinned memory");
    memcpy(a.labels + q0 * k, host, 8 * nk);
    memcpy(a.distances + q0 * k, host + 8 * nk, 4 * nk);
    return SIMIL_OK;
}

int small_splits(const Device *dev, long long blocks, long long most)
{
    long long s = (4LL * dev->sm_count + blocks - 1) / (blocks > 0 ? blocks : 1);
    if (s > most) s = most;
    return s > 1 ? (int)s : 1;
}

}  // namespace sml

extern "C" void sml_cuda_ivf_small_max(long long nq)
{
    sml::small_max.store(nq < 0 ? sml::kDefaultSmallMax : nq);
}
