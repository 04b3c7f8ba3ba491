// cuda_ivf.cu: inverted-list scans on the GPU (the GPU paper, section 5.2):
// IVF-Flat, and the driver IVF-PQ shares (its distances: cuda_ivf_pq.cu).
//
// A search's queries go to the device once, in batches (stage_inputs), for
// the coarse search and the scan.  For a batch and its probes:
//  1. The (query, probe) pairs are grouped by list on the host.  IVF-Flat
//     reads each list once per 32 of its queries: a tiled kernel computes the
//     exact distances of those queries to the list's vectors, like a small
//     GEMM in shared memory (queries x vectors x dimensions), so the lists
//     stream from memory about nq * nprobe / (32 nlist) times instead of
//     nq * nprobe.  IVF-PQ with residual tables (or k > kPqFusedMaxK)
//     builds one lookup table per pair and adds it up over the pair's codes.
//  2. The distances are laid out query by query: query q owns one segment per
//     probe, each padded to a multiple of 4 floats.
//  3. k <= 2048: every segment keeps its k best (WarpSelect / BlockSelect over
//     ragged rows, the paper's multi-pass k-selection), then one more
//     selection per query merges its nprobe lists.  k > 2048: the kernel also
//     writes each candidate's arena row, and radix selection picks the k best
//     of each query's whole segment run.
// IVF-PQ with term-3 tables and k <= kPqFusedMaxK skips all of that: one
// block per query scans its lists and selects in registers (fused_batch),
// reading the probes where the coarse search wrote them in device memory.
// IVF-Flat distances are exact fp32 (sum of squared differences, or dot
// products), the same arithmetic as the CPU scan.
#include <string.h>

#include "core/alloc.h"
#include "core/vectors.h"
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_kernels.cuh"
#include "cuda/cuda_ivf.cuh"
#include "cuda/cuda_util.cuh"
#include "cuda/select.cuh"

namespace sml {
namespace {

constexpr int kTileQueries = 32;
constexpr int kTileVectors = 64;
constexpr int kTileDims = 32;
constexpr size_t kCandidateBudget = (size_t)2 << 30;  // bytes of distances per batch

// Tiled distances: 128 threads, each 4 queries x 4 vectors; shared memory
// holds 32 query rows and 64 vector rows, 32 dimensions at a time.
template <bool L2>
__global__ void __launch_bounds__(128)
ivf_distance_kernel(const ScanTile *tiles, const int *pair_query, const long long *pair_out,
                    const float *queries, const float *codes, const long long *list_offset,
                    const int *list_size, int dim, float *distances, int *rows)
{
    __shared__ float qs[kTileQueries][kTileDims + 1];
    __shared__ float ys[kTileVectors][kTileDims + 1];
    const ScanTile t = tiles[blockIdx.x];
    const long long base = list_offset[t.list];
    const int nvec = min(kTileVectors, list_size[t.list] - t.vector0);
    const int tq = threadIdx.x / 16, tv = threadIdx.x % 16;  // 8 x 16 threads
    float acc[4][4] = {};
    for (int d0 = 0; d0 < dim; d0 += kTileDims) {
        for (int e = threadIdx.x; e < kTileQueries * kTileDims; e += blockDim.x) {
            const int i = e / kTileDims, d = e % kTileDims;
            qs[i][d] = (i < t.npairs && d0 + d < dim)
                           ? queries[(long long)pair_query[t.pair0 + i] * dim + d0 + d]
                           : 0.0f;
        }
        for (int e = threadIdx.x; e < kTileVectors * kTileDims; e += blockDim.x) {
            const int i = e / kTileDims, d = e % kTileDims;
            ys[i][d] = (i < nvec && d0 + d < dim)
                           ? codes[(base + t.vector0 + i) * dim + d0 + d]
                           : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int d = 0; d < kTileDims; ++d) {
            float q[4], y[4];
#pragma unroll
            for (int a = 0; a < 4; ++a) q[a] = qs[tq + 8 * a][d];
#pragma unroll
            for (int b = 0; b < 4; ++b) y[b] = ys[tv + 16 * b][d];
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 4; ++b) {
                    if (L2) {
                        const float diff = q[a] - y[b];
                        acc[a][b] = fmaf(diff, diff, acc[a][b]);
                    } else {
                        acc[a][b] = fmaf(q[a], y[b], acc[a][b]);
                    }
                }
        }
        __syncthreads();
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        const int i = tq + 8 * a;
        if (i >= t.npairs) continue;
        const long long out = pair_out[t.pair0 + i];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const int v = tv + 16 * b;
            if (v >= nvec) continue;
            distances[out + t.vector0 + v] = L2 ? acc[a][b] : -acc[a][b];
            if (rows) rows[out + t.vector0 + v] = (int)(base + t.vector0 + v);
        }
    }
}

// The host's plan for one batch of queries.
struct ScanPlan {
    int nq;
    int npairs;
    // per pair, grouped by list: its query, segment start, output row, list
    int *pair_query;
    long long *pair_out;
    int *pair_row;
    int *pair_list;
    int *pair_cols;
    int *pair_base;
    float *pair_key;         // the coarse key of each pair (IVF-PQ)
    ScanTile *tiles;         // IVF-Flat work
    int ntiles;
    PqItem *items;           // IVF-PQ work
    int nitems;
    long long *query_start;  // per query: start of its segments, and (k > 2048) length
    int *query_cols;
    long long total;         // floats of distances
};

void plan_free(ScanPlan *p)
{
    sml_free(p->pair_query);
    sml_free(p->tiles);
    sml_free(p->items);
    sml_free(p->query_start);
    memset(p, 0, sizeof *p);
}

long long pad4(long long x) { return (x + 3) / 4 * 4; }

// IVF-Flat work: runs of up to 32 pairs of one list, times chunks of 64 vectors.
simil_status plan_tiles(ScanPlan *p)
{
    long long tiles = 0;
    for (int i = 0; i < p->npairs;) {
        int j = i;
        while (j < p->npairs && j - i < kTileQueries && p->pair_list[j] == p->pair_list[i]) ++j;
        tiles += (p->pair_cols[i] + kTileVectors - 1) / kTileVectors;
        i = j;
    }
    SML_TRY(sml_alloc(reinterpret_cast<void **>(&p->tiles), (size_t)(tiles > 0 ? tiles : 1),
                      sizeof(ScanTile), "IVF plan"));
    p->ntiles = (int)tiles;
    long long t = 0;
    for (int i = 0; i < p->npairs;) {
        int j = i;
        while (j < p->npairs && j - i < kTileQueries && p->pair_list[j] == p->pair_list[i]) ++j;
        for (int v = 0; v < p->pair_cols[i]; v += kTileVectors)
            p->tiles[t++] = ScanTile{p->pair_list[i], i, j - i, v};
        i = j;
    }
    return SIMIL_OK;
}

// IVF-PQ work: each pair in chunks of kPqItemVectors vectors.
simil_status plan_items(ScanPlan *p)
{
    long long items = 0;
    for (int i = 0; i < p->npairs; ++i) items += (p->pair_cols[i] + kPqItemVectors - 1) / kPqItemVectors;
    SML_TRY(sml_alloc(reinterpret_cast<void **>(&p->items), (size_t)(items > 0 ? items : 1),
                      sizeof(PqItem), "IVF-PQ plan"));
    p->nitems = (int)items;
    long long t = 0;
    for (int i = 0; i < p->npairs; ++i)
        for (int v = 0; v < p->pair_cols[i]; v += kPqItemVectors) p->items[t++] = PqItem{i, v};
    return SIMIL_OK;
}

// Group the pairs of queries [q0, q0 + nq) by list; lay out their segments;
// cut the work into blocks for the flat or the PQ distance kernel.
simil_status plan_batch(const sml_ivf_scan_args *a, long long q0, int nq, bool pq, ScanPlan *p)
{
    memset(p, 0, sizeof *p);
    p->nq = nq;
    const int64_t np = a->nprobe;
    long long *count;
    SML_TRY(sml_calloc(reinterpret_cast<void **>(&count), (size_t)(a->nlist + 1),
                       sizeof *count, "IVF plan"));
    for (long long i = 0; i < (long long)nq * np; ++i) {
        const int64_t l = a->probes[q0 * np + i];
        if (l >= 0 && a->list_size[l] > 0) count[l + 1]++;
    }
    for (int64_t l = 0; l < a->nlist; ++l) count[l + 1] += count[l];
    p->npairs = (int)count[a->nlist];
    const size_t pairs = (size_t)(p->npairs > 0 ? p->npairs : 1);
    // one block: query, out, row, list, cols, base, key
    simil_status s = sml_alloc(reinterpret_cast<void **>(&p->pair_query), pairs,
                               sizeof(int) * 6 + sizeof(long long) + sizeof(float), "IVF plan");
    if (s == SIMIL_OK)
        s = sml_alloc(reinterpret_cast<void **>(&p->query_start), (size_t)nq,
                      sizeof(long long) + sizeof(int), "IVF plan");
    if (s != SIMIL_OK) {
        sml_free(count);
        plan_free(p);
        return s;
    }
    p->pair_out = reinterpret_cast<long long *>(p->pair_query + pairs);
    p->pair_row = reinterpret_cast<int *>(p->pair_out + pairs);
    p->pair_list = p->pair_row + pairs;
    p->pair_cols = p->pair_list + pairs;
    p->pair_base = p->pair_cols + pairs;
    p->pair_key = reinterpret_cast<float *>(p->pair_base + pairs);
    p->query_cols = reinterpret_cast<int *>(p->query_start + nq);
    long long at = 0;
    for (int q = 0; q < nq; ++q) {
        p->query_start[q] = at;
        for (int64_t j = 0; j < np; ++j) {
            const int64_t l = a->probes[(q0 + q) * np + j];
            if (l < 0 || a->list_size[l] == 0) continue;
            const long long slot = count[l]++;
            p->pair_query[slot] = q;
            p->pair_out[slot] = at;
            p->pair_row[slot] = (int)(q * np + j);
            p->pair_list[slot] = (int)l;
            p->pair_cols[slot] = (int)a->list_size[l];
            p->pair_base[slot] = (int)a->list_offset[l];
            p->pair_key[slot] = a->coarse_keys ? a->coarse_keys[(q0 + q) * np + j] : 0.0f;
            at += pad4(a->list_size[l]);
        }
        p->query_cols[q] = (int)(at - p->query_start[q]);
    }
    p->total = at;
    sml_free(count);
    const simil_status w = pq ? plan_items(p) : plan_tiles(p);
    if (w != SIMIL_OK) plan_free(p);
    return w;
}

size_t up(size_t x) { return (x + 255) / 256 * 256; }

struct Scratch {
    int *pair_query;
    int *pair_list;
    float *pair_key;
    PqItem *items;
    float *pq_scratch;
    long long *pair_out;
    int *pair_row;
    int *pair_cols;
    int *pair_base;
    ScanTile *tiles;
    long long *list_offset;
    int *list_size;
    long long *query_start;
    int *query_cols;
    float *distances;
    int *rows;         // k > 2048 only
    float *part_keys;  // nq x nprobe x k1
    int *part_idx;
    float *final_keys;
    int *final_idx;
    float *out_dist;
    int64_t *out_labels;
    void *radix;
    size_t radix_bytes;
    size_t total;
};

Scratch carve(const sml_ivf_scan_args *a, const ScanPlan &p, int k1, bool radix, bool pq,
              char *base)
{
    Scratch s{};
    size_t at = 0;
    auto take = [&](size_t bytes) {
        char *ptr = base ? base + at : nullptr;
        at += up(bytes);
        return ptr;
    };
    const size_t nq = (size_t)p.nq, pairs = (size_t)(p.npairs > 0 ? p.npairs : 1);
    s.pair_query = reinterpret_cast<int *>(take(4 * pairs));
    s.pair_out = reinterpret_cast<long long *>(take(8 * pairs));
    s.pair_row = reinterpret_cast<int *>(take(4 * pairs));
    s.pair_cols = reinterpret_cast<int *>(take(4 * pairs));
    s.pair_base = reinterpret_cast<int *>(take(4 * pairs));
    s.tiles = reinterpret_cast<ScanTile *>(take(sizeof(ScanTile) * (size_t)(p.ntiles + 1)));
    if (pq) {
        s.pair_list = reinterpret_cast<int *>(take(4 * pairs));
        s.pair_key = reinterpret_cast<float *>(take(4 * pairs));
        s.items = reinterpret_cast<PqItem *>(take(sizeof(PqItem) * (size_t)(p.nitems + 1)));
        s.pq_scratch = reinterpret_cast<float *>(take(4 * pq_scratch_floats(a, p.nq)));
    }
    s.list_offset = reinterpret_cast<long long *>(take(8 * (size_t)a->nlist));
    s.list_size = reinterpret_cast<int *>(take(4 * (size_t)a->nlist));
    s.query_start = reinterpret_cast<long long *>(take(8 * nq));
    s.query_cols = reinterpret_cast<int *>(take(4 * nq));
    s.distances = reinterpret_cast<float *>(take(4 * (size_t)(p.total + 4)));
    s.rows = radix ? reinterpret_cast<int *>(take(4 * (size_t)(p.total + 4))) : nullptr;
    if (radix) {
        int most = 1;
        for (int q = 0; q < p.nq; ++q) most = p.query_cols[q] > most ? p.query_cols[q] : most;
        s.radix_bytes = select_rows_radix_workspace(p.nq, most, (int)a->k);
        s.radix = take(s.radix_bytes);
    } else {
        s.part_keys = reinterpret_cast<float *>(take(4 * nq * a->nprobe * k1));
        s.part_idx = reinterpret_cast<int *>(take(4 * nq * a->nprobe * k1));
    }
    s.final_keys = reinterpret_cast<float *>(take(4 * nq * a->k));
    s.final_idx = reinterpret_cast<int *>(take(4 * nq * a->k));
    s.out_dist = reinterpret_cast<float *>(take(4 * nq * a->k));
    s.out_labels = reinterpret_cast<int64_t *>(take(8 * nq * a->k));
    s.total = at;
    return s;
}

simil_status upload_plan(const sml_ivf_scan_args *a, const ScanPlan &p, const Scratch &s,
                         long long q0, cudaStream_t st)
{
    const size_t pairs = (size_t)p.npairs;
    SML_CUDA_TRY(cudaMemcpyAsync(s.pair_query, p.pair_query, 4 * pairs, cudaMemcpyHostToDevice, st));
    SML_CUDA_TRY(cudaMemcpyAsync(s.pair_out, p.pair_out, 8 * pairs, cudaMemcpyHostToDevice, st));
    SML_CUDA_TRY(cudaMemcpyAsync(s.pair_row, p.pair_row, 4 * pairs, cudaMemcpyHostToDevice, st));
    SML_CUDA_TRY(cudaMemcpyAsync(s.pair_cols, p.pair_cols, 4 * pairs, cudaMemcpyHostToDevice, st));
    SML_CUDA_TRY(cudaMemcpyAsync(s.pair_base, p.pair_base, 4 * pairs, cudaMemcpyHostToDevice, st));
    if (p.tiles)
        SML_CUDA_TRY(cudaMemcpyAsync(s.tiles, p.tiles, sizeof(ScanTile) * (size_t)p.ntiles,
                                     cudaMemcpyHostToDevice, st));
    if (p.items) {
        SML_CUDA_TRY(cudaMemcpyAsync(s.pair_list, p.pair_list, 4 * pairs, cudaMemcpyHostToDevice, st));
        SML_CUDA_TRY(cudaMemcpyAsync(s.pair_key, p.pair_key, 4 * pairs, cudaMemcpyHostToDevice, st));
        SML_CUDA_TRY(cudaMemcpyAsync(s.items, p.items, sizeof(PqItem) * (size_t)p.nitems,
                                     cudaMemcpyHostToDevice, st));
    }
    SML_CUDA_TRY(cudaMemcpyAsync(s.query_start, p.query_start, 8 * (size_t)p.nq,
                                 cudaMemcpyHostToDevice, st));
    SML_CUDA_TRY(cudaMemcpyAsync(s.query_cols, p.query_cols, 4 * (size_t)p.nq,
                                 cudaMemcpyHostToDevice, st));
    return SIMIL_OK;
}

// Selection after the distances: per segment then per query, or radix.
simil_status select_batch(const sml_ivf_scan_args *a, const ScanPlan &p, const Scratch &s,
                          int k1, bool radix, cudaStream_t st)
{
    if (radix) {
        // the padding between segments must not count: mark it empty
        SelectJob job{};
        job.scores = s.distances;
        job.ld = 4;
        job.row_scale_const = 1.0f;
        job.in_idx = s.rows;
        job.row_offsets = s.query_start;
        job.row_cols = s.query_cols;
        job.rows = p.nq;
        int most = 1;
        for (int q = 0; q < p.nq; ++q) most = p.query_cols[q] > most ? p.query_cols[q] : most;
        job.cols = most;
        job.k = (int)a->k < most ? (int)a->k : most;
        job.out_keys = s.final_keys;
        job.out_idx = s.final_idx;
        job.out_ld = a->k;
        SML_CUDA_TRY(cudaMemsetAsync(s.final_idx, 0xff, 4 * (size_t)p.nq * a->k, st));
        return select_rows_radix(job, ScoreType::f32, s.radix, s.radix_bytes, st);
    }
    SML_CUDA_TRY(cudaMemsetAsync(s.part_idx, 0xff, 4 * (size_t)p.nq * a->nprobe * k1, st));
    if (p.npairs > 0) {
        SelectJob seg{};
        seg.scores = s.distances;
        seg.ld = 4;
        seg.row_scale_const = 1.0f;
        seg.row_offsets = s.pair_out;
        seg.row_cols = s.pair_cols;
        seg.row_idx_base = s.pair_base;
        seg.out_rows = s.pair_row;
        seg.rows = p.npairs;
        seg.cols = 1;
        seg.k = k1;
        seg.out_keys = s.part_keys;
        seg.out_idx = s.part_idx;
        seg.out_ld = k1;
        SML_TRY(select_rows(seg, ScoreType::f32, st));
    }
    SelectJob merge{};
    merge.scores = s.part_keys;
    merge.ld = (long long)a->nprobe * k1;
    merge.row_scale_const = 1.0f;
    merge.in_idx = s.part_idx;
    merge.rows = p.nq;
    merge.cols = (int)(a->nprobe * k1);
    merge.k = (int)a->k;
    merge.out_keys = s.final_keys;
    merge.out_idx = s.final_idx;
    merge.out_ld = a->k;
    return select_rows(merge, ScoreType::f32, st);
}

simil_status scan_batch(Device *dev, const sml_ivf_scan_args *a, bool pq, long long q0, int nq)
{
    cudaStream_t st = dev->stream[0];
    const bool radix = a->k > kMaxWarpSelectK;
    const int k1 = (int)(a->k < kMaxWarpSelectK ? a->k : kMaxWarpSelectK);
    ScanPlan p;
    SML_TRY(plan_batch(a, q0, nq, pq, &p));
    const Scratch need = carve(a, p, k1, radix, pq, nullptr);
    char *ws = nullptr;
    simil_status s = device_workspace(dev, need.total, reinterpret_cast<void **>(&ws));
    Scratch sc{};
    if (s == SIMIL_OK) {
        sc = carve(a, p, k1, radix, pq, ws);
        s = upload_plan(a, p, sc, q0, st);
    }
    if (s == SIMIL_OK) {
        // lists: host offsets and sizes as the kernels' types
        long long *lo = nullptr;
        s = device_pinned(dev, (size_t)a->nlist * 12, reinterpret_cast<void **>(&lo));
        if (s == SIMIL_OK) {
            int *ls = reinterpret_cast<int *>(lo + a->nlist);
            for (int64_t l = 0; l < a->nlist; ++l) {
                lo[l] = a->list_offset[l];
                ls[l] = (int)a->list_size[l];
            }
            s = cuda_status(cudaMemcpyAsync(sc.list_offset, lo, 12 * (size_t)a->nlist,
                                            cudaMemcpyHostToDevice, st),
                            "IVF lists", __FILE__, __LINE__);
            if (s == SIMIL_OK) s = cuda_status(cudaStreamSynchronize(st), "IVF lists", __FILE__, __LINE__);
        }
        sc.list_size = reinterpret_cast<int *>(sc.list_offset + a->nlist);
    }
    if (s == SIMIL_OK && radix)
        s = cuda_status(cudaMemsetAsync(sc.rows, 0xff, 4 * (size_t)(p.total + 4), st),
                        "IVF rows", __FILE__, __LINE__);
    if (s == SIMIL_OK && pq) {
        PqBatch batch{sc.items,    p.nitems,    sc.pair_query, sc.pair_list, sc.pair_cols,
                      sc.pair_base, sc.pair_out, sc.pair_key,  nq,
                      a->queries + q0 * a->dim};
        if (p.nitems > 0)
            s = launch_pq_distances(a, batch, sc.pq_scratch, sc.distances, sc.rows, st);
    } else if (s == SIMIL_OK && p.ntiles > 0) {
        const auto kernel = a->metric == SIMIL_METRIC_L2 ? ivf_distance_kernel<true>
                                                         : ivf_distance_kernel<false>;
        kernel<<<p.ntiles, 128, 0, st>>>(sc.tiles, sc.pair_query, sc.pair_out,
                                         a->queries + q0 * a->dim,
                                         static_cast<const float *>(a->codes), sc.list_offset,
                                         sc.list_size, (int)a->dim, sc.distances, sc.rows);
        s = cuda_status(cudaGetLastError(), "ivf_distance_kernel", __FILE__, __LINE__);
    }
    if (s == SIMIL_OK) s = select_batch(a, p, sc, k1, radix, st);
    if (s == SIMIL_OK)
        s = launch_finish(nq, (int)a->k, sc.final_keys, sc.final_idx,
                          a->metric == SIMIL_METRIC_L2, nullptr, a->ids, sc.out_dist,
                          sc.out_labels, st);
    if (s == SIMIL_OK)
        s = cuda_status(cudaMemcpyAsync(a->distances + q0 * a->k, sc.out_dist,
                                        4 * (size_t)nq * a->k, cudaMemcpyDeviceToHost, st),
                        "IVF results", __FILE__, __LINE__);
    if (s == SIMIL_OK)
        s = cuda_status(cudaMemcpyAsync(a->labels + q0 * a->k, sc.out_labels,
                                        8 * (size_t)nq * a->k, cudaMemcpyDeviceToHost, st),
                        "IVF results", __FILE__, __LINE__);
    if (s == SIMIL_OK) s = cuda_status(cudaStreamSynchronize(st), "IVF scan", __FILE__, __LINE__);
    plan_free(&p);
    return s;
}

// A batch's inputs in device memory: its queries, and for the fused scan its
// probes with their coarse keys and the list layout.
struct Inputs {
    const float *queries;        // nq x dim
    const int64_t *probes;       // nq x nprobe (fused)
    const float *keys;           // nq x nprobe: coarse keys ...
    float key_sign;              // ... times this
    const int64_t *list_offset;  // nlist each (fused), as the search holds them
    const int64_t *list_size;
};

// Device memory for one batch's inputs; queries per batch keep within it (and
// the fused grid within one launch).
constexpr size_t kInputBudget = (size_t)256 << 20;
constexpr int kMaxBatchQueries = 65536;

int input_batch(const sml_ivf_scan_args *a, long long q0, bool host_queries, bool fused)
{
    const size_t per_query =
        (host_queries ? 4 * (size_t)a->dim : 0) + (fused ? 12 * (size_t)a->nprobe : 0) + 1;
    const long long fit = (long long)(kInputBudget / per_query);
    long long n = a->nq - q0;
    if (n > kMaxBatchQueries) n = kMaxBatchQueries;
    if (n > fit) n = fit > 0 ? fit : 1;
    return (int)n;
}

// Queries [q0, q0 + nq) to the device (unless there already), and for the
// fused scan their probes: the caller's, or the coarse search's, which writes
// them in device memory.  What comes from the host goes in one copy through
// the pinned buffer: the list layout, the queries, given probes and keys.
simil_status stage_inputs(Device *dev, const sml_ivf_scan_args *a, long long q0, int nq, bool fused,
                          Inputs *in)
{
    cudaStream_t st = dev->stream[0];
    const bool host_queries = !is_device_pointer(a->queries);
    const bool given = a->probes != nullptr;
    const size_t nlist = fused ? (size_t)a->nlist : 0, pairs = fused ? (size_t)nq * a->nprobe : 0;
    const size_t q_bytes = host_queries ? 4 * (size_t)nq * a->dim : 0;
    const size_t at_sizes = up(8 * nlist), at_queries = at_sizes + up(8 * nlist),
                 at_probes = at_queries + up(q_bytes), at_keys = at_probes + up(8 * pairs),
                 total = at_keys + up(4 * pairs);
    const size_t staged = given ? total : at_probes;
    char *io, *host = nullptr;
    SML_TRY(device_io(dev, total, reinterpret_cast<void **>(&io)));
    if (staged > 0) SML_TRY(device_pinned(dev, staged, reinterpret_cast<void **>(&host)));
    if (fused) {
        sml_copy_parallel(host, a->list_offset, 8 * nlist);
        sml_copy_parallel(host + at_sizes, a->list_size, 8 * nlist);
    }
    if (host_queries) sml_copy_parallel(host + at_queries, a->queries + q0 * a->dim, q_bytes);
    if (given && fused) {
        sml_copy_parallel(host + at_probes, a->probes + q0 * a->nprobe, 8 * pairs);
        sml_copy_parallel(host + at_keys, a->coarse_keys + q0 * a->nprobe, 4 * pairs);
    }
    if (staged > 0) {
        SML_CUDA_TRY(cudaMemcpyAsync(io, host, staged, cudaMemcpyHostToDevice, st));
        // the next steps may regrow the pinned buffer: the copy from it ends first
        SML_CUDA_TRY(cudaStreamSynchronize(st));
    }
    in->queries = host_queries ? reinterpret_cast<const float *>(io + at_queries)
                               : a->queries + q0 * a->dim;
    in->list_offset = reinterpret_cast<const int64_t *>(io);
    in->list_size = reinterpret_cast<const int64_t *>(io + at_sizes);
    in->probes = reinterpret_cast<const int64_t *>(io + at_probes);
    in->keys = reinterpret_cast<const float *>(io + at_keys);
    in->key_sign = 1.0f;
    if (given || !fused) return SIMIL_OK;
    const sml_knn_args knn = sml_knn_of(a->coarse_search, in->queries, nq, a->nprobe,
                                        reinterpret_cast<float *>(io + at_keys),
                                        reinterpret_cast<int64_t *>(io + at_probes));
    in->key_sign = knn.metric == SIMIL_METRIC_L2 ? 1.0f : -1.0f;  // similarity to key
    return knn_locked(dev, &knn);
}

// IVF-PQ, fused: queries [q0, q0 + nq) in one launch, from their inputs on
// the device.
simil_status fused_batch(Device *dev, const sml_ivf_scan_args *a, const Inputs &in, long long q0,
                         int nq)
{
    cudaStream_t st = dev->stream[0];
    const size_t k = (size_t)a->k;
    const size_t at_out_idx = up(4 * nq * k), at_dist = at_out_idx + up(4 * nq * k),
                 at_labels = at_dist + up(4 * nq * k), at_scratch = at_labels + up(8 * nq * k),
                 total = at_scratch + up(pq_fused_scratch_bytes(a));
    char *ws;
    SML_TRY(device_workspace(dev, total, reinterpret_cast<void **>(&ws)));
    PqQueryScan scan{};
    scan.queries = in.queries;
    scan.probes = in.probes;
    scan.probe_keys = in.keys;
    scan.probe_key_sign = in.key_sign;
    scan.nprobe = (int)a->nprobe;
    scan.list_offset = in.list_offset;
    scan.list_size = in.list_size;
    scan.out_keys = reinterpret_cast<float *>(ws);
    scan.out_idx = reinterpret_cast<int *>(ws + at_out_idx);
    scan.codebooks_by_codeword = reinterpret_cast<float *>(ws + at_scratch);
    SML_TRY(launch_pq_fused(a, scan, nq, st));
    float *dist = reinterpret_cast<float *>(ws + at_dist);
    int64_t *labels = reinterpret_cast<int64_t *>(ws + at_labels);
    SML_TRY(launch_finish(nq, (int)k, scan.out_keys, scan.out_idx, a->metric == SIMIL_METRIC_L2,
                          nullptr, a->ids, dist, labels, st));
    SML_CUDA_TRY(cudaMemcpyAsync(a->distances + q0 * a->k, dist, 4 * nq * k,
                                 cudaMemcpyDeviceToHost, st));
    SML_CUDA_TRY(cudaMemcpyAsync(a->labels + q0 * a->k, labels, 8 * nq * k,
                                 cudaMemcpyDeviceToHost, st));
    SML_CUDA_TRY(cudaStreamSynchronize(st));
    return SIMIL_OK;
}

// Queries per batch: as many as keep the distances within the budget.
int batch_queries(const sml_ivf_scan_args *a, long long q0)
{
    const bool radix = a->k > kMaxWarpSelectK;
    const size_t per_candidate = radix ? 8 : 4;
    size_t bytes = 0;
    int n = 0;
    while (q0 + n < a->nq && n < 65536) {
        size_t c = 0;
        for (int64_t j = 0; j < a->nprobe; ++j) {
            const int64_t l = a->probes[(q0 + n) * a->nprobe + j];
            if (l >= 0) c += (size_t)pad4(a->list_size[l]);
        }
        if (n > 0 && bytes + c * per_candidate > kCandidateBudget) break;
        bytes += c * per_candidate;
        ++n;
    }
    return n;
}

// The scans planned on the host (IVF-Flat; IVF-PQ unfused) for queries
// [q0, q0 + nq), in device memory at queries: their probes are the caller's,
// or found now into host memory.
simil_status scan_planned(Device *dev, const sml_ivf_scan_args *a, bool pq, const float *queries,
                          long long q0, int nq)
{
    sml_ivf_scan_args batch = *a;
    batch.queries = queries;
    batch.nq = nq;
    batch.distances = a->distances + q0 * a->k;
    batch.labels = a->labels + q0 * a->k;
    int64_t *probes = nullptr;
    float *keys = nullptr;
    simil_status s = SIMIL_OK;
    if (a->probes) {
        batch.probes = a->probes + q0 * a->nprobe;
        batch.coarse_keys = a->coarse_keys ? a->coarse_keys + q0 * a->nprobe : nullptr;
    } else {
        const size_t pairs = (size_t)nq * a->nprobe;
        s = sml_alloc(reinterpret_cast<void **>(&probes), pairs, sizeof *probes, "probes");
        if (s == SIMIL_OK)
            s = sml_alloc(reinterpret_cast<void **>(&keys), pairs, sizeof *keys, "coarse distances");
        const sml_knn_args knn = sml_knn_of(a->coarse_search, queries, nq, a->nprobe, keys, probes);
        if (s == SIMIL_OK) s = knn_locked(dev, &knn);
        if (s == SIMIL_OK) sml_ivf_keys_of_knn(knn.metric, keys, pairs);
        batch.probes = probes;
        batch.coarse_keys = keys;
    }
    for (long long sub = 0; s == SIMIL_OK && sub < nq;) {
        const int n = batch_queries(&batch, sub);
        s = scan_batch(dev, &batch, pq, sub, n);
        sub += n;
    }
    sml_free(keys);
    sml_free(probes);
    return s;
}

simil_status ivf_scan(sml_backend *b, const sml_ivf_scan_args *a, bool pq)
{
    SML_RETURN_IF(a->k >= INT32_MAX || a->dim >= INT32_MAX, SIMIL_ERR_UNSUPPORTED,
                  "IVF scan on the GPU: k and dim must be below 2^31");
    Device *dev = device_of(b);
    pthread_mutex_lock(&dev->lock);
    simil_status s = cuda_status(cudaSetDevice(dev->gpu), "cudaSetDevice", __FILE__, __LINE__);
    if (s == SIMIL_OK) s = device_join_caller(dev);
    const bool fused = pq && pq_fused(a), host_queries = !is_device_pointer(a->queries);
    for (long long q0 = 0; s == SIMIL_OK && q0 < a->nq;) {
        const int n = input_batch(a, q0, host_queries, fused);
        Inputs in{};
        s = stage_inputs(dev, a, q0, n, fused, &in);
        if (s == SIMIL_OK && fused) s = fused_batch(dev, a, in, q0, n);
        else if (s == SIMIL_OK) s = scan_planned(dev, a, pq, in.queries, q0, n);
        q0 += n;
    }
    if (s != SIMIL_OK) cudaStreamSynchronize(dev->stream[0]);
    pthread_mutex_unlock(&dev->lock);
    return s;
}

}  // namespace

simil_status cuda_ivf_flat_scan(sml_backend *b, const sml_ivf_scan_args *a)
{
    return ivf_scan(b, a, false);
}

simil_status cuda_ivf_pq_scan(sml_backend *b, const sml_ivf_scan_args *a)
{
    return ivf_scan(b, a, true);
}

}  // namespace sml
