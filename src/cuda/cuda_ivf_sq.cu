// cuda_ivf_sq.cu: the scalar-quantizer scan on the GPU (sml_sq_scan_args),
// on the tiles of cuda_ivf.cuh's tiled pair scan.  Flat SQ is one list of
// every row: each 32 queries read the codes once.
//
// SQfp16 and SQbf16: the tiled product over rows decoded as they are loaded
// into shared memory (core/sq_code.h, the same decoding as the CPU's), plus
// the list's centroid for codes of residuals; keys are fp32 on the decoded
// floats.
//
// SQ8: integer tensor cores.  A row y decodes to c + a + s * code (c the
// list's centroid for codes of residuals, a_j = vmin_j + vdiff_j / 510, s_j =
// vdiff_j / 255, code_j in 0..255), so <q, y> = <q, c> + <q, a> + <q * s,
// code>: the last term is a dot product of the row's bytes with the query's
// weights w = q * s.  Each query's w is rounded to integers W = w / scale,
// |W| <= 127 * 2^16 (relative error 2^-23 of its largest weight, far below
// the codes' own 2^-9 steps; two bytes, 2^-15, put keys 1.3e-4 off the
// CPU's), written as three signed bytes W = 2^16 d2 + 2^8 d1 + d0, and
// mma.m16n8k32 (u8 x s8, int32 sums) computes the three byte products
// exactly: a key is the same for a pair whichever tile or batch holds it.
// L2 adds ||q||^2 and ||y||^2 (from the row's bytes in the same registers).
// The keys equal the CPU's (fp32 on decoded floats) up to the weights'
// rounding.  Where a tile's digits would not fit in shared memory (dim past
// 1,568), SQ8 takes the decoding path of SQfp16.
//
// A small batch of an inverted file (up to ivf_small_max() queries) takes
// the probe scan of ivf_probe_scan.cuh over the decoded rows, its probes
// found on the device: no host plan, a few launches.  Its SQ8 keys are the
// CPU's arithmetic (fp32 on the decoded floats), not the tensor cores'
// rounded weights, so they may differ from the batch path's in the last
// bits.
#include <assert.h>

#include "core/sq_code.h"
#include "cuda/cuda_ivf.cuh"
#include "cuda/ivf_probe_scan.cuh"
#include "cuda/knn_device.cuh"
#include "cuda/select.cuh"

namespace sml {
namespace {

constexpr size_t kCandidateBudget = (size_t)2 << 30;  // bytes of distances per batch
constexpr int kMaxBatch = 65536;

// Rows of codes of type T, stride bytes apart, decoded; with coarse, plus
// their list's centroid.
template <int T>
struct SqRows {
    static constexpr bool kFloatRows = false;
    const uint8_t *codes;
    size_t stride;
    const float *vmin;
    const float *vdiff;
    const float *coarse;
    int dim;
    __device__ float load(long long row, int d, int list) const
    {
        const float v = sml_sq_decode((sml_sq_type)T, codes + row * stride, d, vmin, vdiff);
        return coarse ? v + coarse[(long long)list * dim + d] : v;
    }
    __device__ float4 load4(long long row, int f, int list) const
    {
        return make_float4(load(row, 4 * f, list), load(row, 4 * f + 1, list),
                           load(row, 4 * f + 2, list), load(row, 4 * f + 3, list));
    }
};

// ---- SQ8 on integer tensor cores -----------------------------------------

constexpr int kSq8Threads = 128;         // four warps; a warp takes 16 rows at a time
constexpr int kSq8WideRows = 256;        // rows of a tile of more than 8 pairs
constexpr int kSq8Digits = 3;            // signed bytes per weight
constexpr int kWeightMax = 127 * 65536;  // the top digit stays within a signed byte
// The most shared memory an SQ8 tile may take, well inside the 227 KB a
// Hopper block may opt into; past it (dim above 1,568) SQ8 decodes
// instead.  At 96 dimensions a tile takes 10.5 KB.
constexpr size_t kSq8MaxShared = 160 << 10;

// Per query of a batch: the weights' scale, <q, a>, ||q||^2; its digits are
// apart, kSq8Digits rows of dimp bytes (dimp: dim rounded up to 32, zeros
// past dim), lowest first.
struct Sq8Query {
    float scale, qa, qq, unused;
};

inline int sq8_dimp(long long dim) { return (int)((dim + 31) / 32 * 32); }

// Bytes of one pair's digits in shared memory: 16 more than they take, so
// that the 8 pairs a warp reads at once start in 8 different bank groups.
__host__ __device__ inline int sq8_pair_bytes(int dimp) { return kSq8Digits * dimp + 16; }

// The shared memory of a tile of npairs pairs: the pairs' digits, and for L2
// each dimension's decoding (offset, step).
inline size_t sq8_shared(int npairs, long long dim)
{
    return (size_t)npairs * sq8_pair_bytes(sq8_dimp(dim)) + 2 * sizeof(float) * (size_t)dim;
}

struct Sq8Args {
    TileArgs g;
    const int *pair_list;
    const uint8_t *codes;
    long long stride;
    const float *vmin;
    const float *vdiff;
    const float *coarse;  // or null
    Sq8Query *query;
    int8_t *digits;       // per query: kSq8Digits x dimp
    float *pair_qc;       // per pair <q, c> (with coarse)
    int nq;
    int npairs;
    int dimp;
};

// One warp per query: its scale, <q, a>, ||q||^2 and digits.
__global__ void __launch_bounds__(kSq8Threads) sq8_query_kernel(Sq8Args s)
{
    const int q = blockIdx.x * (kSq8Threads / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (q >= s.nq) return;
    const int dim = s.g.dim;
    const float *x = s.g.queries + (long long)q * dim;
    float wmax = 0.0f, qa = 0.0f, qq = 0.0f;
    for (int d = lane; d < dim; d += 32) {
        const float v = x[d], diff = s.vdiff[d];
        wmax = fmaxf(wmax, fabsf(v * (diff / 255.0f)));
        qa = fmaf(v, s.vmin[d] + diff * (0.5f / 255.0f), qa);
        qq = fmaf(v, v, qq);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) wmax = fmaxf(wmax, __shfl_xor_sync(kFullMask, wmax, o));
    qa = warp_sum(qa);
    qq = warp_sum(qq);
    const float scale = wmax / (float)kWeightMax;
    int8_t *out = s.digits + (long long)q * kSq8Digits * s.dimp;
    for (int d = lane; d < s.dimp; d += 32) {
        int w = 0;
        if (d < dim && scale > 0.0f) {
            w = __float2int_rn(x[d] * (s.vdiff[d] / 255.0f) / scale);
            w = min(max(w, -kWeightMax), kWeightMax);
        }
#pragma unroll
        for (int i = 0; i < kSq8Digits; ++i) {
            const int up = (w + 128) >> 8;  // floor: the digit w - 256 up is in [-128, 127]
            out[i * s.dimp + d] = (int8_t)(i + 1 < kSq8Digits ? w - 256 * up : w);
            w = up;
        }
    }
    if (lane == 0) s.query[q] = Sq8Query{scale, qa, qq, 0.0f};
}

// One warp per pair: <q, c> of its query and list (codes of residuals).
__global__ void __launch_bounds__(kSq8Threads) sq8_pair_kernel(Sq8Args s)
{
    const int p = blockIdx.x * (kSq8Threads / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (p >= s.npairs) return;
    const int dim = s.g.dim;
    const float *x = s.g.queries + (long long)s.g.pair_query[p] * dim;
    const float *c = s.coarse + (long long)s.pair_list[p] * dim;
    float v = 0.0f;
    for (int d = lane; d < dim; d += 32) v = fmaf(x[d], c[d], v);
    v = warp_sum(v);
    if (lane == 0) s.pair_qc[p] = v;
}

__device__ __forceinline__ void mma_u8s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The mma's A for dimensions [k0, k0 + 32) of rows row0 and row0 + 8 stride
// bytes on: lane (g, t) takes bytes 4t.. and 16 + 4t.. of each, zeros past
// a row's code or for a row past the tile.
__device__ __forceinline__ void sq8_load_a(uint32_t (&a)[4], const uint8_t *row0,
                                           long long stride, int k0, int t, bool ok0, bool ok1)
{
    const int o0 = k0 + 4 * t, o1 = o0 + 16;
    const uint8_t *row1 = row0 + 8 * stride;
    a[0] = ok0 && o0 < stride ? __ldg(reinterpret_cast<const uint32_t *>(row0 + o0)) : 0u;
    a[1] = ok1 && o0 < stride ? __ldg(reinterpret_cast<const uint32_t *>(row1 + o0)) : 0u;
    a[2] = ok0 && o1 < stride ? __ldg(reinterpret_cast<const uint32_t *>(row0 + o1)) : 0u;
    a[3] = ok1 && o1 < stride ? __ldg(reinterpret_cast<const uint32_t *>(row1 + o1)) : 0u;
}

// yy plus the squares of the four components of word u from dimension d0,
// decoded as off + step * byte (L2's ||y||^2).
__device__ __forceinline__ float sq8_norm4(const float *off, const float *step, int dim,
                                           uint32_t u, int d0, float yy)
{
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const int d = d0 + e;
        if (d >= dim) break;
        const float y = fmaf(step[d], (float)((u >> (8 * e)) & 0xffu), off[d]);
        yy = fmaf(y, y, yy);
    }
    return yy;
}

// Keys of a tile: up to 8 * GROUPS pairs of one list against up to ROWS of
// its rows.  The pairs' digits wait in shared memory; each warp takes 16 rows
// at a time: lane (g, t) holds bytes 4t.. and 16+4t.. of rows g and g+8 of
// every 32 dimensions (the mma's A) and of pair 8j+g's digits the same
// dimensions (its B), so that no byte moves between lanes; the sums come out
// as rows g, g+8 of pairs 8j+2t, 8j+2t+1.
template <bool L2, int ROWS, int GROUPS>
__global__ void __launch_bounds__(kSq8Threads) sq8_tile_kernel(Sq8Args s)
{
    extern __shared__ __align__(16) unsigned char sq8_smem[];
    __shared__ long long p_out[8 * GROUPS];
    __shared__ float p_scale[8 * GROUPS], p_const[8 * GROUPS], p_qq[8 * GROUPS];
    const ScanTile t = s.g.tiles[blockIdx.x];
    const int np = t.npairs, dim = s.g.dim, dimp = s.dimp, pb = sq8_pair_bytes(dimp);
    assert(np >= 1 && np <= 8 * GROUPS);
    float *off = reinterpret_cast<float *>(sq8_smem + (size_t)np * pb), *step = off + dim;
    for (int p = threadIdx.x / 32; p < np; p += kSq8Threads / 32) {
        const int q = s.g.pair_query[t.pair0 + p];
        const uint4 *from = reinterpret_cast<const uint4 *>(s.digits + (long long)q * kSq8Digits * dimp);
        uint4 *to = reinterpret_cast<uint4 *>(sq8_smem + (size_t)p * pb);
        for (int i = threadIdx.x % 32; i < kSq8Digits * dimp / 16; i += 32) to[i] = from[i];
        if (threadIdx.x % 32 == 0) {
            const Sq8Query info = s.query[q];
            p_out[p] = s.g.pair_out[t.pair0 + p] + t.vector0;
            p_scale[p] = info.scale;
            p_const[p] = info.qa + (s.coarse ? s.pair_qc[t.pair0 + p] : 0.0f);
            p_qq[p] = info.qq;
        }
    }
    if (L2)
        for (int d = threadIdx.x; d < dim; d += kSq8Threads) {
            const float diff = s.vdiff[d];
            off[d] = s.vmin[d] + diff * (0.5f / 255.0f) +
                     (s.coarse ? s.coarse[(long long)t.list * dim + d] : 0.0f);
            step[d] = diff / 255.0f;
        }
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int nvec = min(ROWS, t.size - t.vector0), groups = (np + 7) / 8;
    const long long first = t.base + t.vector0;
    for (int r0 = warp * 16; r0 < nvec; r0 += kSq8Threads / 2) {
        const bool ok0 = r0 + g < nvec, ok1 = r0 + g + 8 < nvec;
        const uint8_t *row0 = s.codes + (first + r0 + g) * s.stride;
        int acc[GROUPS][kSq8Digits][4] = {};
        float yy0 = 0.0f, yy1 = 0.0f;
        uint32_t a[4];
        sq8_load_a(a, row0, s.stride, 0, tq, ok0, ok1);
        for (int k0 = 0; k0 < dimp; k0 += 32) {
            uint32_t next[4] = {0u, 0u, 0u, 0u};
            if (k0 + 32 < dimp) sq8_load_a(next, row0, s.stride, k0 + 32, tq, ok0, ok1);
            const int o0 = k0 + 4 * tq, o1 = o0 + 16;
            if (L2) {
                yy0 = sq8_norm4(off, step, dim, a[2], o1, sq8_norm4(off, step, dim, a[0], o0, yy0));
                yy1 = sq8_norm4(off, step, dim, a[3], o1, sq8_norm4(off, step, dim, a[1], o0, yy1));
            }
#pragma unroll
            for (int j = 0; j < GROUPS; ++j) {
                if (j >= groups) break;  // uniform across the warp
                const unsigned char *w = sq8_smem + (size_t)(8 * j + g) * pb;
#pragma unroll
                for (int i = 0; i < kSq8Digits; ++i) {
                    // pairs past np read the next tile slots' leftovers:
                    // their sums are never written
                    const uint32_t b0 = *reinterpret_cast<const uint32_t *>(w + i * dimp + o0);
                    const uint32_t b1 = *reinterpret_cast<const uint32_t *>(w + i * dimp + o1);
                    mma_u8s8(acc[j][i], a, b0, b1);
                }
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) a[e] = next[e];
        }
        if (L2) {
            yy0 += __shfl_xor_sync(kFullMask, yy0, 1);
            yy0 += __shfl_xor_sync(kFullMask, yy0, 2);
            yy1 += __shfl_xor_sync(kFullMask, yy1, 1);
            yy1 += __shfl_xor_sync(kFullMask, yy1, 2);
        }
#pragma unroll
        for (int j = 0; j < GROUPS; ++j) {
            if (j >= groups) break;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int p = 8 * j + 2 * tq + (e & 1), r = r0 + g + (e >= 2 ? 8 : 0);
                if (p >= np || r >= nvec) continue;
                float sum = (float)acc[j][kSq8Digits - 1][e];
#pragma unroll
                for (int i = kSq8Digits - 2; i >= 0; --i) sum = fmaf(256.0f, sum, (float)acc[j][i][e]);
                const float dot = fmaf(p_scale[p], sum, p_const[p]);
                const float key = L2 ? p_qq[p] - 2.0f * dot + (e >= 2 ? yy1 : yy0) : -dot;
                s.g.distances[p_out[p] + r] = key;
                if (s.g.rows) s.g.rows[p_out[p] + r] = (int)(first + r);
            }
        }
    }
}

template <bool L2, int ROWS, int GROUPS>
simil_status sq8_tiles(const Sq8Args &s, long long tiles, cudaStream_t st)
{
    if (tiles == 0) return SIMIL_OK;
    const size_t smem = sq8_shared(8 * GROUPS, s.g.dim);
    auto kernel = sq8_tile_kernel<L2, ROWS, GROUPS>;
    if (smem > (48 << 10))
        SML_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)smem));
    kernel<<<(int)tiles, kSq8Threads, smem, st>>>(s);
    SML_LAUNCH_TRY("sq8_tile_kernel");
    return SIMIL_OK;
}

template <bool L2>
simil_status sq8_launch(const Sq8Args &s, const TileLaunch &how)
{
    SML_TRY((sq8_tiles<L2, kThinRows, kThinQueries / 8>(s, how.nthin, how.st)));
    Sq8Args w = s;
    w.g.tiles += how.nthin;
    return sq8_tiles<L2, kSq8WideRows, kTileQueries / 8>(w, how.ntiles - how.nthin, how.st);
}

// Whether the SQ8 scan of dimension dim runs on tensor cores: its tiles'
// shared memory fits.
inline bool sq8_mma_fits(long long dim) { return sq8_shared(kTileQueries, dim) <= kSq8MaxShared; }

// A batch of SQ8 keys: the queries' digits, the pairs' <q, c>, the tiles.
simil_status sq8_batch(Device *dev, const sml_sq_scan_args *sa, const sml_ivf_scan_args &a,
                       long long q0, int nq, const RowFilter &allowed)
{
    const int dimp = sq8_dimp(a.dim);
    // per query: its Sq8Query and digits; per pair: <q, c>
    const size_t per_query = 4 + (size_t)kSq8Digits * dimp / 4;
    const TileShape shape{kThinQueries, kSq8WideRows, sa->coarse != nullptr, per_query, 1};
    return tiled_batch_by(dev, a, q0, nq, shape, allowed, [&](TileArgs g, const TileLaunch &how) {
        const long long npairs = how.plan->npairs;
        Sq8Args s{};
        s.g = g;
        s.pair_list = how.plan->pair_list;
        s.codes = static_cast<const uint8_t *>(a.lists.codes);
        s.stride = (long long)a.lists.code_stride;
        s.vmin = sa->vmin;
        s.vdiff = sa->vdiff;
        s.coarse = sa->coarse;
        s.query = reinterpret_cast<Sq8Query *>(how.extra);
        s.digits = reinterpret_cast<int8_t *>(how.extra + 4 * (size_t)nq);
        s.pair_qc = how.extra + (size_t)nq * per_query;
        s.nq = nq;
        s.npairs = (int)npairs;
        s.dimp = dimp;
        const int per = kSq8Threads / 32;
        sq8_query_kernel<<<(nq + per - 1) / per, kSq8Threads, 0, how.st>>>(s);
        SML_LAUNCH_TRY("sq8_query_kernel");
        if (s.coarse && npairs > 0) {
            sq8_pair_kernel<<<(int)((npairs + per - 1) / per), kSq8Threads, 0, how.st>>>(s);
            SML_LAUNCH_TRY("sq8_pair_kernel");
        }
        return a.metric == SIMIL_METRIC_L2 ? sq8_launch<true>(s, how) : sq8_launch<false>(s, how);
    });
}

template <int T>
simil_status sq_scan(sml_backend *b, const sml_sq_scan_args *a)
{
    const sml_ivf_scan_args *s = &a->scan;
    const BatchLimits limits{kPairShape, s->k > kMaxWarpSelectK ? (size_t)8 : (size_t)4,
                             kCandidateBudget, kMaxBatch};
    const SqRows<T> rows{static_cast<const uint8_t *>(s->lists.codes), s->lists.code_stride,
                         a->vmin, a->vdiff, a->coarse, (int)s->dim};
    return ivf_locked(b, *s, [&](Device *dev, bool host_queries) {
        // a few queries of an inverted file: the probe scan, on the decoded
        // floats (one list, flat SQ, keeps the tiles: each 32 queries read
        // the codes once)
        const bool small = s->lists.nlist > 1 && probe_scan_fits(*s, s->nq);
        RowFilter allowed;
        SML_TRY(scan_filter(dev, *s, small, &allowed));
        if (small) return probe_scan_all(dev, s, host_queries, allowed, rows);
        return scan_planned(dev, s, host_queries, limits,
                            [&](const sml_ivf_scan_args &batch, long long, long long sub, int n) {
                                if (T == SML_SQ_8BIT && sq8_mma_fits(s->dim))
                                    return sq8_batch(dev, a, batch, sub, n, allowed);
                                return tiled_batch(dev, batch, sub, n, rows, allowed);
                            });
    });
}

}  // namespace

simil_status cuda_sq_scan(sml_backend *b, const sml_sq_scan_args *a)
{
    const sml_ivf_scan_args *s = &a->scan;
    assert(sml_ivf_scan_args_ok(s));
    assert(a->type != SML_SQ_8BIT || (a->vmin != nullptr && a->vdiff != nullptr));
    SML_RETURN_IF(s->k >= INT32_MAX || s->dim >= INT32_MAX, SIMIL_ERR_UNSUPPORTED,
                  "SQ scan on the GPU: k and dim must be below 2^31");
    switch (a->type) {
    case SML_SQ_8BIT: return sq_scan<SML_SQ_8BIT>(b, a);
    case SML_SQ_FP16: return sq_scan<SML_SQ_FP16>(b, a);
    default: assert(a->type == SML_SQ_BF16); return sq_scan<SML_SQ_BF16>(b, a);
    }
}

}  // namespace sml
