// cuda_ivf_small.cu: what the IVF scans' small batches share (cuda_ivf.cuh,
// "small batches"): the coarse search on the device, and the merge of the
// parts that a split scan leaves per query.
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
// Nothing comes back to the host until the results do.
#include <atomic>

#include "cuda/cuda_ivf.cuh"
#include "cuda/knn_device.cuh"
#include "cuda/select.cuh"
#include "cuda/warp_select.cuh"

namespace sml {
namespace {

constexpr long long kDefaultSmallMax = 64;
std::atomic<long long> small_max{kDefaultSmallMax};

constexpr int kKeyThreads = 256;
constexpr int kKeyWarps = kKeyThreads / 32;
constexpr int kCentroidsPerWarp = 8;
constexpr int kSelectThreads = 256;
constexpr int kSelectWarps = kSelectThreads / 32;

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
    for (int c0 = warp * 32; c0 < n; c0 += kSelectThreads) {
        const int c = c0 + lane;
        float key = c < n ? row[c] : INFINITY;
        if (key != key) key = INFINITY;  // NaN ranks last, as in the exact search
        ws.offer(key, c < n ? c : kEmptyIdx);
    }
    ws.flush();
    ws.q.write(list_k[warp], list_v[warp]);
    __syncthreads();
    if (warp != 0) return;
    BufferedWarpSelect<K> m;
    m.init(np, INFINITY, kEmptyIdx, slot_k[0], slot_v[0]);
    for (int e0 = 0; e0 < kSelectWarps * np; e0 += 32) {
        const int e = e0 + lane;
        const int w = e / np, i = e - w * np;
        const int c = e < kSelectWarps * np ? list_v[w][i] : -1;
        m.offer(c < 0 ? INFINITY : list_k[w][i], c < 0 ? kEmptyIdx : c);
    }
    m.flush();
    __syncwarp();
    m.q.write(list_k[0], list_v[0]);
    __syncwarp();
    for (int j = lane; j < np; j += 32) {
        const int c = list_v[0][j];
        probes[(long long)q * np + j] = c < 0 ? -1 : ids ? ids[c] : c;
        distances[(long long)q * np + j] = l2 ? list_k[0][j] : -list_k[0][j];
    }
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

simil_status merge_parts(int nq, int parts, int k, const float *part_keys, const int *part_idx,
                         float *out_keys, int *out_idx, cudaStream_t st)
{
    if (nq == 0) return SIMIL_OK;
    SelectJob job{};
    job.scores = part_keys;
    job.ld = (long long)parts * k;
    job.row_scale_const = 1.0f;
    job.in_idx = part_idx;
    job.rows = nq;
    job.cols = parts * k;
    job.k = k;
    job.out_keys = out_keys;
    job.out_idx = out_idx;
    job.out_ld = k;
    return select_rows(job, ScoreType::f32, st);
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
