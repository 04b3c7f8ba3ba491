// ivf_probe_scan.cuh: the small-batch scan of the IVF types whose rows a
// loader turns into floats (IVF-Flat's rows as they are, IVF-SQ's decoded:
// cuda_ivf_flat.cu, cuda_ivf_sq.cu).
//
// A batch of at most ivf_small_max() queries keeps its probes on the device
// (cuda_ivf.cuh, "small batches"): block (s, j, q) of probe_scan_kernel reads
// query q's j-th list from row 32 (4 s + w) in runs of 32 rows per warp w,
// every splits-th run, and keeps the k best (key, row) pairs; the last of a
// query's nprobe x splits blocks then folds their parts into its k best
// (ivf_small_merge.cuh).  A key is the thin tiles' arithmetic (tile_term over
// the dimensions in order, on Rows::load4), the batch path's over the same
// loader (IVF-Flat, SQfp16, SQbf16; not SQ8's tensor cores).  Rows: a loader
// as the tiled scan takes (load4(row, f, list): floats 4f .. 4f + 3 of
// arena row `row` of list `list`).
#pragma once

#include "cuda/cuda_ivf.cuh"
#include "cuda/ivf_small_merge.cuh"
#include "cuda/warp_select.cuh"

namespace sml {

constexpr int kProbeThreads = 128;
constexpr int kProbeWarps = kProbeThreads / 32;
constexpr size_t kProbeQueryBytes = (size_t)32 << 10;

template <typename Rows>
struct ProbeScan {
    const float *queries;        // nq x dim
    const int64_t *probes;       // nq x nprobe lists, -1 for none
    int nprobe;
    const int64_t *list_offset;  // per list, on the device
    const int64_t *list_size;
    Rows rows;
    int dim;
    int splits;
    int k;
    RowFilter allowed;           // the rows a filter allows (no filter: all)
    float *part_keys;            // nq x nprobe x splits x k
    int *part_idx;
    SmallOut out;                // the results, from each query's last block
};

template <bool L2, int K, typename Rows>
__global__ void __launch_bounds__(kProbeThreads)
probe_scan_kernel(const __grid_constant__ ProbeScan<Rows> a)
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
            float acc = 0;
#pragma unroll 4
            for (int f = 0; f < d4; ++f)
                acc = tile_term<L2>(probe_query[f], a.rows.load4(row, f, (int)l), acc);
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

template <bool L2, int K, typename Rows>
simil_status launch_probe_scan(const ProbeScan<Rows> &p, int nq, cudaStream_t st)
{
    const dim3 grid((unsigned)p.splits, (unsigned)p.nprobe, (unsigned)nq);
    SML_CUDA_TRY(launch(probe_scan_kernel<L2, K, Rows>, grid, dim3(kProbeThreads),
                        sizeof(float) * (size_t)p.dim, st, p));
    return SIMIL_OK;
}

// Whether nq queries of a take the probe scan.
inline bool probe_scan_fits(const sml_ivf_scan_args &a, long long nq)
{
    return nq <= ivf_small_max() && a.k <= kSmallMaxK && a.dim % 4 == 0 &&
           sizeof(float) * (size_t)a.dim <= kProbeQueryBytes &&
           (a.probes.lists != nullptr || coarse_on_device(a, (int)nq));
}

// Queries [q0, q0 + nq) of a, their inputs on the device (stage_inputs with
// device probes): the probe scan, the merge, the results.
template <typename Rows>
simil_status probe_batch(Device *dev, const sml_ivf_scan_args &a, const Inputs &in, long long q0,
                         int nq, long long mean_rows, const RowFilter &allowed, const Rows &rows)
{
    cudaStream_t st = dev->stream[0];
    const int np = (int)a.probes.nprobe, k = (int)a.k;
    // splits: enough blocks for the GPU, each with a few runs of rows to read
    const long long runs = (mean_rows + kProbeThreads - 1) / kProbeThreads;
    ProbeScan<Rows> p{in.queries, in.probes, np, in.list_offset, in.list_size, rows, (int)a.dim,
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

// Every query of a (probe_scan_fits), ivf_small_max() at a time: inputs
// staged (with the coarse search on the device), the probe scan.  Caller
// holds the device (ivf_locked).
template <typename Rows>
simil_status probe_scan_all(Device *dev, const sml_ivf_scan_args *a, bool host_queries,
                            const RowFilter &allowed, const Rows &rows)
{
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
        SML_TRY(probe_batch(dev, *a, in, q0, n, mean_rows, allowed, rows));
        q0 += n;
    }
    return SIMIL_OK;
}

}  // namespace sml
