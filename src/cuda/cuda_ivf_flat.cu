// cuda_ivf_flat.cu: IVF-Flat's scan on the GPU (the GPU paper, section 5.2):
// its driver and its distance kernel, on the pair scan of cuda_ivf.cuh.
//
// IVF-Flat reads each list once per 32 of its queries: a tiled kernel
// computes the exact distances of those queries to the list's vectors, like
// a small GEMM in shared memory (queries x vectors x dimensions), so the
// lists stream from memory about nq * nprobe / (32 nlist) times instead of
// nq * nprobe.  The distances are exact fp32 (sum of squared differences, or
// dot products), the same arithmetic as the CPU scan.
#include <assert.h>

#include "cuda/cuda_ivf.cuh"
#include "cuda/select.cuh"

namespace sml {
namespace {

constexpr int kTileQueries = 32;
constexpr int kTileVectors = 64;
constexpr int kTileDims = 32;
constexpr size_t kCandidateBudget = (size_t)2 << 30;  // bytes of distances per batch
constexpr int kMaxBatch = 65536;

// The work of one block: up to 32 pairs of one list against up to 64 of its
// vectors.
struct ScanTile {
    int list;
    int pair0;    // first pair (in the list-grouped pair order)
    int npairs;
    int vector0;  // first vector of the list
};

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

// A batch's host block: the pair plan, the tiles, the list layout as the
// kernel's types.
struct FlatPlan {
    PairPlan pairs;
    ScanTile *tiles;
    long long ntiles;
    long long *list_offset;
    int *list_size;
};

// Tiles: each list's pairs in runs of up to kTileQueries, times chunks of
// kTileVectors of its vectors (from the counting pass).
long long count_tiles(const sml_ivf_scan_args &a, const PairCount &count)
{
    long long tiles = 0;
    for (int64_t l = 0; l < a.lists.nlist; ++l)
        tiles += (count.of(l) + kTileQueries - 1) / kTileQueries *
                 ((a.lists.size[l] + kTileVectors - 1) / kTileVectors);
    return tiles;
}

size_t carve_flat_plan(void *base, const sml_ivf_scan_args &a, int nq, long long npairs,
                       long long ntiles, FlatPlan *p)
{
    Carve c(base);
    carve_pair_plan(c, nq, npairs, false, false, &p->pairs);
    p->tiles = c.take<ScanTile>((size_t)(ntiles + 1));
    p->ntiles = ntiles;
    p->list_offset = c.take<long long>((size_t)a.lists.nlist);
    p->list_size = c.take<int>((size_t)a.lists.nlist);
    return c.used();
}

// After the placing pass: list l's pairs end at by_list[l].
void fill_tiles(const sml_ivf_scan_args &a, const PairCount &count, FlatPlan *p)
{
    long long t = 0;
    for (int64_t l = 0; l < a.lists.nlist; ++l) {
        const long long first = l > 0 ? count.by_list[l - 1] : 0, end = count.by_list[l];
        for (long long i = first; i < end; i += kTileQueries) {
            const int n = (int)(end - i < kTileQueries ? end - i : kTileQueries);
            for (int v = 0; v < a.lists.size[l]; v += kTileVectors)
                p->tiles[t++] = ScanTile{(int)l, (int)i, n, v};
        }
    }
    assert(t == p->ntiles);
    for (int64_t l = 0; l < a.lists.nlist; ++l) {
        p->list_offset[l] = a.lists.offset[l];
        p->list_size[l] = (int)a.lists.size[l];
    }
}

// Queries [q0, q0 + nq) of a (device queries, host probes): plan, distances,
// selection, results.
simil_status flat_batch(Device *dev, const sml_ivf_scan_args &a, long long q0, int nq)
{
    cudaStream_t st = dev->stream[0];
    PairCount count;
    SML_TRY(count_pairs(a, q0, nq, kPairShape, &count));
    const long long ntiles = count_tiles(a, count);
    FlatPlan hp;
    const size_t host_bytes = carve_flat_plan(nullptr, a, nq, count.pairs, ntiles, &hp);
    char *host;
    SML_TRY(device_pinned(dev, host_bytes, reinterpret_cast<void **>(&host)));
    carve_flat_plan(host, a, nq, count.pairs, ntiles, &hp);
    fill_pair_plan(a, q0, nq, &count, &hp.pairs);
    fill_tiles(a, count, &hp);
    PairScratch sc;
    PairPlan dp;
    char *ws;
    float *unused;
    SML_TRY(pair_workspace(dev, a, host, host_bytes, hp.pairs, 0, &ws, &unused, &sc, &dp));
    if (ntiles > 0) {
        const auto kernel = a.metric == SIMIL_METRIC_L2 ? ivf_distance_kernel<true>
                                                        : ivf_distance_kernel<false>;
        kernel<<<(int)ntiles, 128, 0, st>>>(mirror(ws, host, hp.tiles), dp.pair_query,
                                            dp.pair_out, a.queries + q0 * a.dim,
                                            static_cast<const float *>(a.lists.codes),
                                            mirror(ws, host, hp.list_offset),
                                            mirror(ws, host, hp.list_size), (int)a.dim,
                                            sc.distances, sc.rows);
        SML_LAUNCH_TRY("ivf_distance_kernel");
    }
    SML_TRY(select_pairs(a, hp.pairs, dp, sc, st));
    return finish_to_host(a, q0, nq, sc.final_keys, sc.final_idx, sc.out_dist, sc.out_labels,
                          st);
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
    return ivf_locked(b, [&](Device *dev) {
        return scan_planned(dev, a, limits,
                            [&](const sml_ivf_scan_args &batch, long long, long long sub, int n) {
                                return flat_batch(dev, batch, sub, n);
                            });
    });
}

}  // namespace sml
