// cuda_ivf_small.cu: what the IVF scans' small batches share (cuda_ivf.cuh,
// "small batches"): the coarse search on the device, and the merge of the
// parts that a split scan leaves per query into the results.
//
// A batch of a few queries spends most of its time outside the scan: the
// coarse search as a general exact search (fp16 candidates, their check
// flags back to the host, a wait) and, for a scan planned on the host, the
// probes' trip to the host and the plan's back.  Here the coarse search of
// a small batch is one kernel (coarse_kernel) that leaves the probes in
// device memory:
//   keys: one warp per four (query, centroid) pairs, the exact fp32 key of
//       the exact search's re-ranking (exact_key), so that the probes and
//       their keys are the bits the general coarse search gives;
//   selection (coarse_select_block, in the last block of the query to
//       finish its keys): the nprobe smallest (key, centroid) pairs in
//       order, as that search ranks them.
// The code type's scan then splits each query over several blocks, and the
// last of them merges their parts into the results (ivf_small_merge.cuh),
// which it writes into pinned host memory: nothing comes back to the host
// but the results, and no copy is queued for them.
#include <assert.h>
#include <string.h>

#include <atomic>

#include "cuda/cuda_ivf.cuh"
#include "cuda/ivf_small_merge.cuh"
#include "cuda/knn_device.cuh"
#include "cuda/warp_select.cuh"

namespace sml {
namespace {

constexpr long long kDefaultSmallMax = 64;
std::atomic<long long> small_max{kDefaultSmallMax};

constexpr int kKeyThreads = 256;
constexpr int kKeyWarps = kKeyThreads / 32;
// 4 took 16 callers of IVF4096,PQ32 from 184-200K QPS to 202-217K (H200),
// with its loads in flight together; 2 and 3 ran slower, 8 no faster, and 8
// one centroid after the other left one query's 4,096 to too few blocks.
constexpr int kCentroidsPerWarp = 4;
constexpr int kSelectThreads = 256;
constexpr int kSelectWarps = kSelectThreads / 32;
static_assert(kCentroidsPerWarp == 4, "warp_sum4 sums four centroids' keys");

// Batches above ivf_small_max() queries: up to many_max of them find their
// probes with coarse_many_kernel and coarse_select_kernel, not with the
// general exact search (cuda_ivf.cuh, coarse_many).  Dimensions up to
// kManyMaxDim, so that a thread's centroid stays in registers; each block
// keys kManyThreads centroids against kManyQueries queries.  256: on an
// H200 (IVF4096, dimension 96) the kernels beat the exact search's eight
// launches and wait at 128 and 256 queries for IVF-Flat and IVF-PQ; at 512
// and 1,024 IVF-Flat lost, the keys kernel taking 164 us at 1,024 queries
// (docs/benchmarks.md, "What a call does").  A batch whose probes stay on
// the device (IVF-PQ's fused scan) takes them up to 512 queries: IVF4096,PQ32
// at 512 gained in two A/Bs on two loans (0.686 -> 0.587 and 0.662 -> 0.620
// ms), at 1,024 once and lost once (1.127 -> 1.012, 1.005 -> 1.054 ms).
constexpr long long kDefaultManyMax = 256;
constexpr long long kDefaultManyMaxOnDevice = 512;
std::atomic<long long> many_max{-1};  // sml_cuda_ivf_coarse_many_max; -1: the defaults
constexpr int kManyMaxDim = 128;
constexpr size_t kManyMaxKeys = (size_t)64 << 20;  // 256 MB of keys
constexpr int kManyThreads = 128;
constexpr int kManyQueries = 16;

// Probes of query q: the np smallest (key, centroid) pairs, nearest first,
// as list numbers (ids, or the centroid rows where null) and as the coarse
// search reports their distances (the key for L2, -key = <x, c> for IP).
//
// A radix select over the keys as ordered integers: four passes of a
// 256-bin histogram, each fixing 8 bits of the np-th smallest key T; then
// the keys below T and the ties at T of smallest centroid take their places
// by rank.  The pairs are ordered as every selection orders them (key, then
// centroid: kv_less, NaN as +inf), so the probes are the bits of the batch
// path's.  (Warp queues merged by one warp, the first design, took 15-17 us
// for one query's 4,096 keys: their sorts, one warp at a time.)  A row of at
// most kCoarseItems * kSelectThreads keys stays in registers.
constexpr int kCoarseItems = 16;

// A key as an integer in kv_less's order of keys: -0 and +0, equal as
// floats, become one.
__device__ __forceinline__ unsigned coarse_order(float key)
{
    return to_ordered(key == 0.0f ? 0.0f : key);
}

__device__ void coarse_select_block(const float *row, int n, int np, bool l2, const int64_t *ids,
                                    int64_t *probes, float *distances)
{
    __shared__ unsigned hist[256];
    __shared__ float pick_k[kCoarseMaxProbes];
    __shared__ int pick_v[kCoarseMaxProbes];
    __shared__ int warp_ties[kSelectWarps];
    __shared__ unsigned s_bin, s_before, s_in_bin;
    __shared__ int s_picked;
    static_assert(kSelectThreads == 256 && kCoarseMaxProbes <= kSelectThreads, "one bin per thread");
    assert(blockDim.x == kSelectThreads);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const auto key_at = [&](int c) {
        const float k = __ldcg(row + c);  // other blocks' keys (last_block)
        return k != k ? INFINITY : k;  // NaN ranks last, as in the exact search
    };
    const bool cached = n <= kCoarseItems * kSelectThreads;
    float reg[kCoarseItems];
    if (cached) {
#pragma unroll
        for (int i = 0; i < kCoarseItems; ++i) {
            const int c = tid + i * kSelectThreads;
            reg[i] = c < n ? key_at(c) : INFINITY;
        }
    }
    // f(key, c) for every c of this thread, c >= n included (every thread of
    // the block calls f equally often)
    const auto each = [&](auto f) {
        if (cached) {
#pragma unroll
            for (int i = 0; i < kCoarseItems; ++i) f(reg[i], tid + i * kSelectThreads);
        } else {
            for (int c0 = 0; c0 < n; c0 += kSelectThreads) {
                const int c = c0 + tid;
                f(c < n ? key_at(c) : INFINITY, c);
            }
        }
    };
    // T: the np-th smallest key; want: how many of the keys equal to T are
    // among the np (the smallest first), ties: how many keys equal T
    unsigned prefix = 0, mask = 0, want = (unsigned)np, ties = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        hist[tid] = 0;
        __syncthreads();
        each([&](float k, int c) {
            const unsigned u = coarse_order(k);
            const bool in = c < n && (u & mask) == prefix;
            const unsigned bin = (u >> shift) & 255u;
            // one atomic per bin and warp: the keys of a query crowd a few bins
            const unsigned peers = __match_any_sync(kFullMask, in ? bin : 256u);
            if (in && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], (unsigned)__popc(peers));
        });
        __syncthreads();
        if (warp == 0) {
            unsigned h[8], sum = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) sum += h[j] = hist[lane * 8 + j];
            unsigned incl = sum;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const unsigned t = __shfl_up_sync(kFullMask, incl, o);
                if (lane >= o) incl += t;
            }
            unsigned before = incl - sum;
            if (before < want && want <= incl) {  // one lane: the bin of the want-th
                int b = 0;
                while (before + h[b] < want) before += h[b++];
                s_bin = (unsigned)(lane * 8 + b);
                s_before = before;
                s_in_bin = h[b];
            }
        }
        __syncthreads();
        want -= s_before;
        prefix |= s_bin << shift;
        mask |= 255u << shift;
        ties = s_in_bin;
        __syncthreads();  // s_bin and the histogram are read before the next pass
    }
    assert(want >= 1 && want <= ties);
    const unsigned T = prefix;
    if (tid == 0) s_picked = 0;
    __syncthreads();
    const bool all_ties = want == ties;  // the usual case: T is one key's alone
    each([&](float k, int c) {
        const unsigned u = coarse_order(k);
        if (c < n && (u < T || (all_ties && u == T))) {
            const int at = atomicAdd(&s_picked, 1);
            pick_k[at] = k;
            pick_v[at] = c;
        }
    });
    if (!all_ties) {
        // the want ties of smallest centroid: in order, kSelectThreads at a time
        unsigned taken = 0;
        for (int c0 = 0; c0 < n && taken < want; c0 += kSelectThreads) {
            const int c = c0 + tid;
            const float k = c < n ? key_at(c) : INFINITY;
            const bool tie = c < n && coarse_order(k) == T;
            const unsigned m = __ballot_sync(kFullMask, tie);
            if (lane == 0) warp_ties[warp] = __popc(m);
            __syncthreads();
            unsigned rank = taken + (unsigned)__popc(m & ((1u << lane) - 1)), chunk = 0;
            for (int w = 0; w < kSelectWarps; ++w) {
                if (w < warp) rank += warp_ties[w];
                chunk += warp_ties[w];
            }
            if (tie && rank < want) {
                const int at = atomicAdd(&s_picked, 1);
                pick_k[at] = k;
                pick_v[at] = c;
            }
            taken += chunk;
            __syncthreads();  // warp_ties read before the next chunk
        }
    }
    __syncthreads();
    assert(s_picked == np);
    if (tid < np) {  // each pair to its rank among the np (their centroids differ)
        const float k = pick_k[tid];
        const int c = pick_v[tid];
        int rank = 0;
        for (int j = 0; j < np; ++j) rank += kv_less(pick_k[j], pick_v[j], k, c);
        probes[rank] = ids ? ids[c] : c;
        distances[rank] = l2 ? k : -k;
    }
}

// Blocks of one query's keys.
constexpr int key_blocks(int n)
{
    return (n + kKeyWarps * kCentroidsPerWarp - 1) / (kKeyWarps * kCentroidsPerWarp);
}

// keys[q * n + c]: exact key of query q (blockIdx.y) against centroid c,
// then in the last block of the query to finish, its probes (as above).
// The blocks past key_blocks(n) fill the query's table (table_out non-null),
// a thread an entry, beside the keys: no launch and no time of their own on
// a small batch.
__global__ void __launch_bounds__(kKeyThreads)
coarse_kernel(const float *queries, const float *centroids, int n, int dim, bool l2, int np,
              const int64_t *ids, float *keys, unsigned *tickets, int64_t *probes,
              float *distances, const QueryTable table, float *table_out)
{
    static_assert(kKeyThreads == kSelectThreads, "the last block selects");
    const int q = blockIdx.y, warp = threadIdx.x >> 5;
    const float *x = queries + (long long)q * dim;
    const int blocks = key_blocks(n);
    if ((int)blockIdx.x >= blocks) {
        const int entries = table.m * table.ksub;
        const int e = ((int)blockIdx.x - blocks) * kKeyThreads + (int)threadIdx.x;
        if (e < entries) table_out[(long long)q * entries + e] = table_entry(table, x, e);
        return;
    }
    // a warp's centroids side by side: their loads in flight together
    const int c0 = (blockIdx.x * kKeyWarps + warp) * kCentroidsPerWarp, lane = threadIdx.x & 31;
    float s[kCentroidsPerWarp];
#pragma unroll
    for (int u = 0; u < kCentroidsPerWarp; ++u) s[u] = 0;
    for (int j = lane; j < dim; j += 32) {
        const float xj = x[j];
#pragma unroll
        for (int u = 0; u < kCentroidsPerWarp; ++u) {
            s[u] = key_term(xj, centroids[(long long)min(c0 + u, n - 1) * dim + j], s[u], l2);
        }
    }
    const float v = warp_sum4(s);  // exact_key's sum, in its order: its bits
    const int u = lane >> 3;
    if ((lane & 7) == 0 && c0 + u < n) keys[(long long)q * n + c0 + u] = l2 ? v : -v;
    if (!last_block(tickets + q, (unsigned)blocks)) return;
    coarse_select_block(keys + (long long)q * n, n, np, l2, ids, probes + (long long)q * np,
                        distances + (long long)q * np);
}

// The selection alone, one block per row (launch_coarse_many,
// sml_cuda_coarse_select).
__global__ void __launch_bounds__(kSelectThreads)
coarse_select_kernel(const float *keys, int n, int np, bool l2, const int64_t *ids,
                     int64_t *probes, float *distances)
{
    const long long q = blockIdx.x;
    coarse_select_block(keys + q * n, n, np, l2, ids, probes + q * np, distances + q * np);
}

// keys[q * n + c] for a batch of more queries than coarse_kernel takes
// (launch_coarse_many), with exact_key's bits, a thread per centroid: exact_key
// sums lane l's dimensions l, l + 32, ... (its leaf l), then adds the leaves
// in warp_sum's tree, whose pairs at the lowest level are leaves l and
// l + 16, then those pairs' sums l and l + 8, and so on.  A thread computes
// the leaves in bit-reversed order (0, 16, 8, 24, 4, ...) and adds each
// finished subtree to the one before it, as a binary counter carries: the same
// tree of the same leaves.  The thread keeps its centroid in registers across
// kManyQueries queries, whose dimensions are staged in shared memory in leaf
// order, so that each leaf is one broadcast load.  Where four warps shuffled
// four centroids' sums per query, the shuffles bounded the kernel.  Block (x,
// y): centroids from kManyThreads x, queries from kManyQueries y.
template <int kSteps>
__global__ void __launch_bounds__(kManyThreads)
coarse_many_kernel(const float *queries, int nq, const float *centroids, int n, int dim, bool l2,
                   float *keys)
{
    static_assert(kSteps >= 1 && kSteps <= 4, "a leaf's dimensions are one float4");
    __shared__ float4 xs[kManyQueries][32];  // xs[q][l] = query q's leaf l, 0 past dim
    const int q0 = blockIdx.y * kManyQueries;
    // (loops unrolled, so that their loads are in flight together: one at a
    // time, they made the kernel wait on memory for most of its time)
#pragma unroll
    for (int i = 0; i < kManyQueries * 32 * 4 / kManyThreads; ++i) {
        const int e = threadIdx.x + i * kManyThreads;
        const int q = e / 128, l = (e / 4) % 32, t = e % 4, j = l + 32 * t;
        reinterpret_cast<float *>(xs)[e] =
            q0 + q < nq && t < kSteps && j < dim ? queries[(long long)(q0 + q) * dim + j] : 0.0f;
    }
    // the block's centroids, 32 dimensions at a time through shared memory:
    // each row read whole by a warp, where a thread reading its own row
    // touched 32 rows' lines per load
    __shared__ float slab[kManyThreads][33];  // 33: a column's 32 floats in 32 banks
    const int c0 = blockIdx.x * kManyThreads, c = c0 + threadIdx.x;
    float y[32][kSteps];
#pragma unroll
    for (int t = 0; t < kSteps; ++t) {
#pragma unroll 8
        for (int i = 0; i < 32; ++i) {
            const int e = threadIdx.x + i * kManyThreads, r = e / 32, j = 32 * t + e % 32;
            slab[r][e % 32] = j < dim ? centroids[(long long)min(c0 + r, n - 1) * dim + j] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int l = 0; l < 32; ++l) y[l][t] = slab[threadIdx.x][l];
        __syncthreads();  // the slab is read before the next dimensions overwrite it
    }
    const int q1 = min(nq - q0, kManyQueries);
    for (int q = 0; q < q1; ++q) {
        float sub[5];  // sub[h]: a finished subtree of 2^h leaves, waiting for its pair
        float key = 0;
#pragma unroll
        for (int i = 0; i < 32; ++i) {
            const int l = (int)(__brev((unsigned)i) >> 27);
            const float4 x4 = xs[q][l];
            const float xv[4] = {x4.x, x4.y, x4.z, x4.w};
            float v = 0;
#pragma unroll
            for (int t = 0; t < kSteps; ++t) {
                if (l + 32 * t >= dim) break;  // exact_key's loop: j < dim
                v = key_term(xv[t], y[l][t], v, l2);
            }
            int h = 0;
#pragma unroll
            for (; h < 5 && ((i >> h) & 1); ++h) v = sub[h] + v;
            if (h < 5) sub[h] = v;
            else key = v;
        }
        if (c < n) keys[(long long)(q0 + q) * n + c] = l2 ? key : -key;
    }
}

}  // namespace

long long ivf_small_max() { return small_max.load(std::memory_order_relaxed); }

namespace {

// Whether the coarse search of a can run as this file's kernels at all: its
// probes not given, few enough, and the centroids as fp32 rows on the device.
bool coarse_kernels_take(const sml_ivf_scan_args &a)
{
    const sml_knn_args &c = a.probes.coarse_search;
    return a.probes.lists == nullptr && a.probes.nprobe <= kCoarseMaxProbes &&
           c.base != nullptr && c.n < INT32_MAX;
}

}  // namespace

bool coarse_on_device(const sml_ivf_scan_args &a, int nq)
{
    return coarse_kernels_take(a) && nq <= ivf_small_max();
}

bool coarse_many(const sml_ivf_scan_args &a, int nq, bool probes_stay)
{
    const sml_knn_args &c = a.probes.coarse_search;
    // the keys of every (query, centroid) pair sit in device scratch at once
    const bool keys_fit = (size_t)nq * (size_t)c.n <= kManyMaxKeys;
    const long long set = many_max.load(std::memory_order_relaxed);
    const long long most = set >= 0 ? set : probes_stay ? kDefaultManyMaxOnDevice : kDefaultManyMax;
    return coarse_kernels_take(a) && nq <= most && c.dim <= kManyMaxDim && keys_fit;
}

simil_status launch_coarse_many(const sml_ivf_scan_args &a, const float *queries, int nq,
                                float *scratch, int64_t *probes, float *distances,
                                cudaStream_t st)
{
    const sml_knn_args &c = a.probes.coarse_search;
    const int n = (int)c.n, np = (int)a.probes.nprobe, dim = (int)c.dim;
    const bool l2 = c.metric == SIMIL_METRIC_L2;
    assert(coarse_many(a, nq, true) && np >= 1 && np <= n);  // the larger bound
    if (nq == 0) return SIMIL_OK;
    const dim3 grid((unsigned)((n + kManyThreads - 1) / kManyThreads),
                    (unsigned)((nq + kManyQueries - 1) / kManyQueries));
    const dim3 block(kManyThreads);
    const auto keys = [&](auto kernel) {
        return launch(kernel, grid, block, 0, st, queries, nq, c.base, n, dim, l2, scratch);
    };
    static_assert(kManyMaxDim == 4 * 32, "one kernel per 32 dimensions");
    switch ((dim + 31) / 32) {
    case 1: SML_CUDA_TRY(keys(coarse_many_kernel<1>)); break;
    case 2: SML_CUDA_TRY(keys(coarse_many_kernel<2>)); break;
    case 3: SML_CUDA_TRY(keys(coarse_many_kernel<3>)); break;
    default: SML_CUDA_TRY(keys(coarse_many_kernel<4>)); break;
    }
    SML_CUDA_TRY(launch(coarse_select_kernel, dim3((unsigned)nq), dim3(kSelectThreads), 0, st,
                        (const float *)scratch, n, np, l2, c.base_ids, probes, distances));
    return SIMIL_OK;
}

simil_status launch_coarse(const sml_ivf_scan_args &a, const float *queries, int nq,
                           float *scratch, unsigned *tickets, int64_t *probes, float *distances,
                           const QueryTable *table, float *table_out, cudaStream_t st)
{
    const sml_knn_args &c = a.probes.coarse_search;
    const int n = (int)c.n, np = (int)a.probes.nprobe;
    const bool l2 = c.metric == SIMIL_METRIC_L2;
    assert(np >= 1 && np <= kCoarseMaxProbes && np <= n);
    assert(table == nullptr || (table_out != nullptr && table->m * table->ksub > 0));
    if (nq == 0) return SIMIL_OK;
    const QueryTable none{};
    const int table_blocks =
        table ? (table->m * table->ksub + kKeyThreads - 1) / kKeyThreads : 0;
    const dim3 grid((unsigned)(key_blocks(n) + table_blocks), (unsigned)nq);
    SML_CUDA_TRY(launch(coarse_kernel, grid, dim3(kKeyThreads), 0, st, queries, c.base, n,
                        (int)c.dim, l2, np, c.base_ids, scratch, tickets, probes, distances,
                        table ? *table : none, table ? table_out : nullptr));
    return SIMIL_OK;
}

simil_status small_out(Device *dev, const sml_ivf_scan_args &a, int nq, SmallOut *o)
{
    assert(a.k <= kSmallMaxK);
    const size_t nk = (size_t)nq * a.k;
    char *host;
    SML_TRY(device_results(dev, 12 * nk, reinterpret_cast<void **>(&host)));
    SML_TRY(device_tickets(dev, (size_t)nq, &o->tickets));
    o->ids = a.lists.ids;
    o->l2 = a.metric == SIMIL_METRIC_L2;
    o->k = (int)a.k;
    o->labels = reinterpret_cast<int64_t *>(host);
    o->distances = reinterpret_cast<float *>(host + 8 * nk);
    return SIMIL_OK;
}

simil_status small_out_to_host(Device *dev, const sml_ivf_scan_args &a, long long q0, int nq,
                               const SmallOut &o)
{
    const size_t nk = (size_t)nq * o.k;
    SML_TRY(replay_submit(dev));
    SML_CUDA_TRY(cudaStreamSynchronize(dev->stream[0]));
    trace_mark(dev->stream[0], "ivf: split scan, parts merged into pinned memory");
    memcpy(a.labels + q0 * o.k, o.labels, 8 * nk);
    memcpy(a.distances + q0 * o.k, o.distances, 4 * nk);
    return SIMIL_OK;
}

int small_splits(const Device *dev, long long blocks, long long most)
{
    long long s = (4LL * dev->sm_count + blocks - 1) / (blocks > 0 ? blocks : 1);
    if (s > most) s = most;
    return s > 1 ? (int)s : 1;
}

}  // namespace sml

extern "C" simil_status sml_cuda_coarse_select(int64_t nq, int64_t n, int64_t np, int l2,
                                               const float *d_keys, int64_t *d_probes,
                                               float *d_distances)
{
    SML_RETURN_IF(nq < 0 || n < 1 || n >= INT32_MAX || np < 1 || np > n ||
                      np > sml::kCoarseMaxProbes,
                  SIMIL_ERR_INVALID_ARGUMENT, "coarse select: nq=%lld n=%lld np=%lld",
                  (long long)nq, (long long)n, (long long)np);
    if (nq == 0) return SIMIL_OK;
    sml::coarse_select_kernel<<<(unsigned)nq, sml::kSelectThreads>>>(
        d_keys, (int)n, (int)np, l2 != 0, nullptr, d_probes, d_distances);
    SML_LAUNCH_TRY("coarse_select_kernel");
    SML_CUDA_TRY(cudaDeviceSynchronize());
    return SIMIL_OK;
}

extern "C" void sml_cuda_ivf_small_max(long long nq)
{
    sml::small_max.store(nq < 0 ? sml::kDefaultSmallMax : nq);
}

extern "C" void sml_cuda_ivf_coarse_many_max(long long nq)
{
    sml::many_max.store(nq < 0 ? -1 : nq);
}
