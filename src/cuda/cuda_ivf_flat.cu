// cuda_ivf_flat.cu: IVF-Flat's scan on the GPU (the GPU paper, section 5.2):
// the tiled pair scan of cuda_ivf.cuh over rows of floats, read as they are,
// and for small batches a scan that reads its probes on the device.
// The distances are exact fp32 (sum of squared differences, or dot
// products), the same arithmetic as the CPU scan.
#include <assert.h>

#include "cuda/cuda_ivf.cuh"
#include "cuda/ivf_small_merge.cuh"
#include "cuda/select.cuh"
#include "cuda/warp_select.cuh"

namespace sml {
namespace {

constexpr size_t kCandidateBudget = (size_t)2 << 30;  // bytes of distances per batch
constexpr int kMaxBatch = 65536;

// Rows of dim floats.
struct FloatRows {
    static constexpr bool kFloatRows = true;  // thin_staged_kernel reads codes
    const float *codes;
    int dim;
    __device__ float load(long long row, int d, int) const { return codes[row * dim + d]; }
    __device__ float4 load4(long long row, int f, int) const
    {
        return __ldg(reinterpret_cast<const float4 *>(codes + row * dim) + f);
    }
};

// ---- small batches --------------------------------------------------------
//
// A batch of at most ivf_small_max() queries keeps its probes on the device
// (cuda_ivf.cuh, "small batches"): block (s, j, q) of probe_scan_kernel reads
// query q's j-th list from row 32 (4 s + w) in runs of 32 rows per warp w,
// every splits-th run, and keeps the k best (key, row) pairs; the last of a
// query's nprobe x splits blocks then folds their parts into its k best
// (ivf_small_merge.cuh).  A key is the
// thin tiles' arithmetic (tile_term over the dimensions in order), so that
// each query gets the bits of the batch path.
constexpr int kProbeThreads = 128;
constexpr int kProbeWarps = kProbeThreads / 32;
constexpr size_t kProbeQueryBytes = (size_t)32 << 10;

struct ProbeScan {
    const float *queries;        // nq x dim
    const int64_t *probes;       // nq x nprobe lists, -1 for none
    int nprobe;
    const int64_t *list_offset;  // per list, on the device
    const int64_t *list_size;
    const float *codes;
    int dim;
    int splits;
    int k;
    RowFilter allowed;           // the rows a filter allows (no filter: all)
    float *part_keys;            // nq x nprobe x splits x k
    int *part_idx;
    SmallOut out;                // the results, from each query's last block
};

template <bool L2, int K>
__global__ void __launch_bounds__(kProbeThreads) probe_scan_kernel(const __grid_constant__ ProbeScan a)
{
    extern __shared__ float4 probe_query[];  // dim / 4
    __shared__ float slot_k[kProbeWarps][32];
    __shared__ int slot_v[kProbeWarps][32];
    __shared__ float list_k[kProbeWarps][K];
    __shared__ int list_v[kProbeWarps][K];
    const int s = blockIdx.x, j = blockIdx.y, q = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int d4 = a.dim / 4;
    float *qs = reinterpret_cast<float *>(probe_query);
    for (int e = threadIdx.x; e < a.dim; e += kProbeThreads) qs[e] = a.queries[(long long)q * a.dim + e];
    __syncthreads();
    const int64_t l = a.probes[(long long)q * a.nprobe + j];
    const long long size = l >= 0 ? a.list_size[l] : 0;
    const long long first = l >= 0 ? a.list_offset[l] : 0;
    BufferedWarpSelect<K> ws;
    ws.init(a.k, INFINITY, kEmptyIdx, slot_k[warp], slot_v[warp]);
    // the trips are the warp's: offer is warp-wide
    for (long long r0 = (long long)(s * kProbeWarps + warp) * 32; r0 < size;
         r0 += (long long)a.splits * kProbeThreads) {
        const long long row = first + r0 + lane;
        float key = INFINITY;
        int idx = kEmptyIdx;
        // a row the filter refuses is offered as no row (cuda_filter.cuh)
        if (r0 + lane < size && row_allowed(a.allowed, row)) {
            const float4 *y = reinterpret_cast<const float4 *>(a.codes + row * a.dim);
            float acc = 0;
#pragma unroll 4
            for (int f = 0; f < d4; ++f) acc = tile_term<L2>(probe_query[f], __ldg(y + f), acc);
            key = L2 ? acc : -acc;
            if (key != key) key = INFINITY;  // NaN ranks last, as the selection counts it
            idx = (int)row;
        }
        ws.offer(key, idx);
    }
    if (block_merge<K, kProbeWarps>(ws, a.k, list_k, list_v, slot_k, slot_v)) {
        const long long out = (((long long)q * a.nprobe + j) * a.splits + s) * a.k;
        for (int i = lane; i < a.k; i += 32) {
            a.part_keys[out + i] = list_k[0][i];
            a.part_idx[out + i] = list_v[0][i];
        }
    }
    merge_if_last<K, kProbeWarps>(a.out, q, a.nprobe * a.splits, a.part_keys, a.part_idx, list_k,
                                  list_v, slot_k, slot_v);
}

template <bool L2, int K>
simil_status launch_probe_scan(const ProbeScan &p, int nq, cudaStream_t st)
{
    const dim3 grid((unsigned)p.splits, (unsigned)p.nprobe, (unsigned)nq);
    SML_CUDA_TRY(launch(probe_scan_kernel<L2, K>, grid, dim3(kProbeThreads),
                        sizeof(float) * (size_t)p.dim, st, p));
    return SIMIL_OK;
}

bool small_fits(const sml_ivf_scan_args &a, long long nq)
{
    return nq <= ivf_small_max() && a.k <= kSmallMaxK && a.dim % 4 == 0 &&
           sizeof(float) * (size_t)a.dim <= kProbeQueryBytes &&
           (a.probes.lists != nullptr || coarse_on_device(a, (int)nq));
}

// Queries [q0, q0 + nq) of a, their inputs on the device (stage_inputs with
// device probes): the probe scan, the merge, the results.
simil_status small_batch(Device *dev, const sml_ivf_scan_args &a, const Inputs &in,
                         long long q0, int nq, long long mean_rows, const RowFilter &allowed)
{
    cudaStream_t st = dev->stream[0];
    const int np = (int)a.probes.nprobe, k = (int)a.k;
    // splits: enough blocks for the GPU, each with a few runs of rows to read
    const long long runs = (mean_rows + kProbeThreads - 1) / kProbeThreads;
    ProbeScan p{in.queries, in.probes, np, in.list_offset, in.list_size,
                static_cast<const float *>(a.lists.codes), (int)a.dim,
                small_splits(dev, (long long)nq * np, runs > 1 ? runs : 1), k, allowed,
                nullptr, nullptr};
    const size_t parts = (size_t)nq * np * p.splits * k;
    const auto carve = [&](void *base) {
        Carve c(base);
        p.part_keys = c.take<float>(parts);
        p.part_idx = c.take<int>(parts);
        return c.used();
    };
    char *ws;
    SML_TRY(device_workspace(dev, carve(nullptr), reinterpret_cast<void **>(&ws)));
    carve(ws);
    SML_TRY(small_out(dev, a, nq, &p.out));
    const bool l2 = a.metric == SIMIL_METRIC_L2;
    simil_status s;
    if (k <= 32)
        s = l2 ? launch_probe_scan<true, 32>(p, nq, st) : launch_probe_scan<false, 32>(p, nq, st);
    else if (k <= 64)
        s = l2 ? launch_probe_scan<true, 64>(p, nq, st) : launch_probe_scan<false, 64>(p, nq, st);
    else
        s = l2 ? launch_probe_scan<true, kSmallMaxK>(p, nq, st)
               : launch_probe_scan<false, kSmallMaxK>(p, nq, st);
    SML_TRY(s);
    return small_out_to_host(dev, a, q0, nq, p.out);
}

}  // namespace

simil_status cuda_ivf_flat_scan(sml_backend *b, const sml_ivf_scan_args *a)
{
    assert(sml_ivf_scan_args_ok(a));
    assert(a->lists.code_stride == sizeof(float) * (size_t)a->dim);
    SML_RETURN_IF(a->k >= INT32_MAX || a->dim >= INT32_MAX, SIMIL_ERR_UNSUPPORTED,
                  "IVF scan on the GPU: k and dim must be below 2^31");
    const BatchLimits limits{kPairShape, a->k > kMaxWarpSelectK ? (size_t)8 : (size_t)4,
                             kCandidateBudget, kMaxBatch};
    const FloatRows rows{static_cast<const float *>(a->lists.codes), (int)a->dim};
    return ivf_locked(b, *a, [&](Device *dev, bool host_queries) {
        const bool small = small_fits(*a, a->nq);
        RowFilter allowed;
        SML_TRY(scan_filter(dev, *a, small || filter_by_label(*a), &allowed));
        if (small) {
            long long total = 0;
            for (int64_t l = 0; l < a->lists.nlist; ++l) total += a->lists.size[l];
            const long long mean_rows = total / a->lists.nlist;
            for (long long q0 = 0; q0 < a->nq;) {
                const int n = input_batch(a, q0, host_queries, true);
                Inputs in{};
                const SmallReplay replay(dev, *a, n);
                trace_mark(dev->stream[0], "ivf: lock and join");
                SML_TRY(stage_inputs(dev, a, q0, n, true, host_queries, &in));
                trace_mark(dev->stream[0], "ivf: inputs staged, coarse search on the device");
                SML_TRY(small_batch(dev, *a, in, q0, n, mean_rows, allowed));
                q0 += n;
            }
            return SIMIL_OK;
        }
        return scan_planned(dev, a, host_queries, limits,
                            [&](const sml_ivf_scan_args &batch, long long, long long sub, int n) {
                                return tiled_batch(dev, batch, sub, n, rows, allowed);
                            });
    });
}

}  // namespace sml
