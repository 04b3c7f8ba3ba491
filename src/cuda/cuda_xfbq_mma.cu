// cuda_xfbq_mma.cu: flat XFBQ's D on integer tensor cores (what and why:
// cuda_xfbq_mma.cuh).
//
// Launch shape of steps 1 and 2.  A block of 8 warps takes rows_per_block
// rows (a chunk), 256 at a time (a tile): each thread turns one row's planes
// (staged in shared memory by cp.async during the tile before) into its B-bit
// levels, one byte per dimension, in shared memory; each warp
// runs its 32 rows against every query of the batch, 64 at a time from
// shared memory (the next 64 loaded into registers meanwhile): mma.sync
// m16n8k32 with the queries on the m side and the rows on the n side, 4 x 4
// tiles of 16 queries x 8 rows per warp, kp / 32 steps of 32 dimensions.  A
// thread's accumulators then hold 8 rows of each of its 8 queries, so a
// query's minimum or test over the rows is mostly in registers.  A row's levels are
// made once for all the batch's queries, and the queries' bytes come from L2.
// Rows and queries go to the k and n sides in the same order, so any order of
// dimensions in a byte row would do; it is the natural one.  Shared rows are
// kp + 16 bytes apart, an odd multiple of 16, so ldmatrix's eight rows fall
// in distinct banks.
#include <assert.h>
#include <limits.h>

#include "cuda/cuda_util.cuh"
#include "cuda/cuda_workspace.cuh"
#include "cuda/cuda_xfbq_mma.cuh"

namespace sml {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 256;     // rows per tile: 32 per warp
constexpr int kQTile = 64;     // queries per tile
constexpr int kMaxKs = 4;      // dimensions up to 128
constexpr unsigned kFull = 0xffffffffu;

__host__ __device__ constexpr int padded_queries(int nq) { return (nq + kQTile - 1) / kQTile * kQTile; }

__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const unsigned char *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// c (+)= a b; fresh: c = a b (the accumulators need no zeroing first).
__device__ __forceinline__ void mma_s8(int (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1,
                                       bool fresh)
{
    if (fresh)
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%10,%10,%10,%10};\n"
            : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
    else
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Per query (a block of kp threads, one per dimension): a_d and C_q; zeros
// for the padding queries past nq.
__global__ void xfbq_mma_prepare_kernel(const XfbqMma m, int kp)
{
    __shared__ int sum;
    const int q = blockIdx.x, d = threadIdx.x;
    if (d == 0) sum = 0;
    __syncthreads();
    int a = 0;
    if (q < m.nq && d < m.dim) {
        const uint64_t *x = m.query_codes + (long long)q * m.qbits * m.words;
        int level = 0;
        for (int i = 0; i < m.qbits; ++i)
            level = level << 1 | (int)((x[i * m.words + d / 64] >> (d % 64)) & 1u);
        a = ((1 << m.qbits) - 1) - 2 * level;
        atomicAdd(&sum, level);
    }
    m.qvec[(long long)q * kp + d] = (int8_t)a;
    __syncthreads();
    if (d == 0 && q < m.nq) {
        m.qconst[q] = ((1 << m.bbits) - 1) * sum;
        m.scanned[q] = m.n;
    }
}

// One row's levels into dst (kp bytes) from its planes at y (shared
// memory), or zeros (a row past the chunk).  Four dimensions of a plane are a
// nibble; the multiply spreads its bits to the low bits of four bytes (no
// carries: the partial products land on distinct bits).
template <int KS>
__device__ __forceinline__ void row_levels(const XfbqMma &m, const uint64_t *y, bool live,
                                           unsigned char *dst)
{
    unsigned out[KS * 8];
#pragma unroll
    for (int i = 0; i < KS * 8; ++i) out[i] = 0;
    if (live) {
        for (int j = 0; j < m.bbits; ++j) {
            const int sh = m.bbits - 1 - j;
#pragma unroll
            for (int w = 0; w < (KS + 1) / 2; ++w) {
                const uint64_t word = y[j * m.words + w];
#pragma unroll
                for (int e = 0; e < 16; ++e)
                    if (w * 16 + e < KS * 8) {
                        const unsigned nib = (unsigned)(word >> (4 * e)) & 15u;
                        out[w * 16 + e] |= ((nib * 0x00204081u) & 0x01010101u) << sh;
                    }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < KS * 2; ++i)
        reinterpret_cast<uint4 *>(dst)[i] =
            make_uint4(out[4 * i], out[4 * i + 1], out[4 * i + 2], out[4 * i + 3]);
}

// Bytes of a row's planes as staged in shared memory: a multiple of 16 (a
// code row is at least that long: rows are 16-byte aligned apart).
__host__ __device__ inline int raw_bytes(const XfbqMma &m)
{
    return (m.bbits * m.words * 8 + 15) / 16 * 16;
}

__device__ __forceinline__ void cp_async16(void *dst, const void *src)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}

// Step 2, for a row with D <= T_q: into query q's buffer (while it has
// room) and histogram.
__device__ __forceinline__ void buffer(const XfbqMma &m, int q, int dot, long long row)
{
    const unsigned d = (unsigned)(m.qconst[q] + dot);
    assert(d <= m.dclamp);  // d <= T_q <= dclamp
    const int slot = atomicAdd(&m.fill[q], 1);
    if (slot < m.cap) {
        m.buf_row[(long long)q * m.cap + slot] = (int)row;
        m.buf_d[(long long)q * m.cap + slot] = d;
    }
    atomicAdd(&m.hist[(long long)q * m.nbins + (d >> m.shift)], 1u);
}

// The epilogue of one query tile (queries q0 on) against a warp's 32 rows
// (from row r): acc[mt][nt] holds <a, y> for queries 16 mt + g (+8 in its
// elements 2, 3) and rows 8 nt + 2t (+1 in its odd elements).  kFull: every
// row is in the chunk.  Step 1: each query's smallest into qv (atomicMin);
// step 2: the rows with <a, y> <= qv[q] = T_q - C_q to the buffers.
template <bool kCollect, bool kFull>
__device__ __forceinline__ void epilogue(const XfbqMma &m, const int (&acc)[4][4][4], int *qv,
                                         int q0, long long r, long long last, int g, int t)
{
    bool valid[4][2];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int p = 0; p < 2; ++p) valid[nt][p] = kFull || r + nt * 8 + 2 * t + p < last;
#pragma unroll
    for (int mt = 0; mt < 4; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int q = q0 + mt * 16 + h * 8 + g;
            if constexpr (!kCollect) {
                int v = INT_MAX;
#pragma unroll
                for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                    for (int p = 0; p < 2; ++p)
                        if (valid[nt][p]) v = min(v, acc[mt][nt][2 * h + p]);
                v = min(v, __shfl_xor_sync(kFull, v, 1));
                v = min(v, __shfl_xor_sync(kFull, v, 2));
                if (t == 0 && q < m.nq && v < INT_MAX) atomicMin(&qv[q], v);
            } else {
                const int u = q < m.nq ? qv[q] : INT_MIN;
                bool hit = false;
#pragma unroll
                for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                    for (int p = 0; p < 2; ++p) hit |= valid[nt][p] && acc[mt][nt][2 * h + p] <= u;
                if (hit) {  // rare: about the candidates' share of the rows
#pragma unroll
                    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                        for (int p = 0; p < 2; ++p)
                            if (valid[nt][p] && acc[mt][nt][2 * h + p] <= u)
                                buffer(m, q, acc[mt][nt][2 * h + p], m.row0 + r + nt * 8 + 2 * t + p);
                }
            }
        }
}

// Steps 1 (kCollect false) and 2 (true); see the file comment.
template <bool kCollect, int KS>
__global__ void __launch_bounds__(kThreads, 2) xfbq_mma_kernel(const XfbqMma m,
                                                               const unsigned *limit)
{
    constexpr int kp = KS * 32, stride = kp + 16;
    constexpr int kPieces = kQTile * kp / 16;  // 16-byte pieces of a query tile
    constexpr int kPre = (kPieces + kThreads - 1) / kThreads;
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char *ys = smem;
    unsigned char *qs = smem + kTile * stride;
    unsigned char *rs = qs + 2 * kQTile * stride;  // the rows' planes (raw_bytes each)
    // per query: step 1, the smallest <a, y> of the chunk; step 2, T_q - C_q
    int *qv = reinterpret_cast<int *>(rs + kTile * raw_bytes(m));
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const long long first = (long long)blockIdx.x * m.rows_per_block;
    const long long last = min(first + m.rows_per_block, (long long)m.n);
    const int nqt = padded_queries(m.nq) / kQTile;
    for (int q = threadIdx.x; q < m.nq; q += kThreads)
        qv[q] = kCollect ? (int)limit[q] - m.qconst[q] : INT_MAX;
    const uint4 *qsrc = reinterpret_cast<const uint4 *>(m.qvec);
    uint4 pre[kPre];
    auto fetch = [&](int qt) {
#pragma unroll
        for (int i = 0; i < kPre; ++i) {
            const int c = threadIdx.x + i * kThreads;
            if (c < kPieces) pre[i] = qsrc[(long long)qt * kPieces + c];
        }
    };
    auto place = [&](unsigned char *buf) {
#pragma unroll
        for (int i = 0; i < kPre; ++i) {
            const int c = threadIdx.x + i * kThreads;
            if (c < kPieces)
                *reinterpret_cast<uint4 *>(buf + (c / (kp / 16)) * stride + (c % (kp / 16)) * 16) =
                    pre[i];
        }
    };
    // each thread's row of the next tile comes in (cp.async) while this tile
    // runs; only that thread reads it, so its own wait is enough
    const int rb = raw_bytes(m);
    unsigned char *mine = rs + threadIdx.x * rb;
    auto stage = [&](long long r0) {
        if (r0 + threadIdx.x < last) {
            const char *src = m.codes + (m.row0 + r0 + threadIdx.x) * m.stride;
            for (int c = 0; c < rb; c += 16) cp_async16(mine + c, src + c);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    stage(first);
    for (long long r0 = first; r0 < last; r0 += kTile) {
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        __syncthreads();  // the last tile's readers are done with ys and qs
        row_levels<KS>(m, reinterpret_cast<const uint64_t *>(mine), r0 + threadIdx.x < last,
                       ys + threadIdx.x * stride);
        if (r0 + kTile < last) stage(r0 + kTile);
        fetch(0);
        place(qs);
        __syncthreads();
        const long long r = r0 + warp * 32;  // this warp's rows
        const bool full = r0 + kTile <= last;
        for (int qt = 0; qt < nqt; ++qt) {
            const unsigned char *qb = qs + (qt & 1) * kQTile * stride;
            if (qt + 1 < nqt) fetch(qt + 1);
            int acc[4][4][4];
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                unsigned a[4][4];  // queries 16 mt .. 16 mt + 15
#pragma unroll
                for (int mt = 0; mt < 4; ++mt)
                    ldsm_x4(a[mt], qb + (mt * 16 + (lane & 15)) * stride + ks * 32 +
                                       (lane >> 4) * 16);
#pragma unroll
                for (int np = 0; np < 2; ++np) {
                    unsigned b[4];  // rows 16 np .. 16 np + 15 of the warp's
                    ldsm_x4(b, ys + (warp * 32 + np * 16 + (lane >> 4) * 8 + (lane & 7)) * stride +
                                   ks * 32 + ((lane >> 3) & 1) * 16);
#pragma unroll
                    for (int mt = 0; mt < 4; ++mt) {
                        mma_s8(acc[mt][2 * np], a[mt], b[0], b[1], ks == 0);
                        mma_s8(acc[mt][2 * np + 1], a[mt], b[2], b[3], ks == 0);
                    }
                }
            }
            if (full)
                epilogue<kCollect, true>(m, acc, qv, qt * kQTile, r, last, g, t);
            else
                epilogue<kCollect, false>(m, acc, qv, qt * kQTile, r, last, g, t);
            if (qt + 1 < nqt) place(qs + ((qt + 1) & 1) * kQTile * stride);
            __syncthreads();
        }
    }
    if constexpr (!kCollect) {
        __syncthreads();
        for (int q = threadIdx.x; q < m.nq; q += kThreads)
            if (qv[q] < INT_MAX) {
                // C_q + <a, y> is D >= 0; the clamp is a no-op but for damaged codes
                const unsigned d = min((unsigned)(m.qconst[q] + qv[q]), m.dclamp);
                atomicAdd(&m.hist[(long long)q * m.nbins + (d >> m.shift)], 1u);
            }
    }
}

// Step 3: a block per query of the pass; a warp ballots 32 buffered rows at a
// time and appends those under the limit with one shared atomic.
__global__ void xfbq_mma_compact_kernel(const XfbqMma m, const unsigned *limit,
                                        const long long *cstart, int first, int *cand_rows,
                                        int *cand_query)
{
    __shared__ int at;
    const int q = first + blockIdx.x, lane = threadIdx.x & 31;
    const int nb = min(m.fill[q], m.cap);
    const unsigned lim = limit[q];
    if (threadIdx.x == 0) at = 0;
    __syncthreads();
    const long long base = (long long)q * m.cap;
    for (int i0 = threadIdx.x - lane; i0 < nb; i0 += blockDim.x) {
        const int i = i0 + lane;
        const bool take = i < nb && m.buf_d[base + i] <= lim;
        const unsigned mask = __ballot_sync(kFull, take);
        if (mask == 0) continue;
        int slot = 0;
        if (lane == 0) slot = atomicAdd(&at, __popc(mask));
        slot = __shfl_sync(kFull, slot, 0) + __popc(mask & ((1u << lane) - 1));
        if (take) {
            cand_rows[cstart[q] + slot] = m.buf_row[base + i];
            cand_query[cstart[q] + slot] = q;
        }
    }
}

template <bool kCollect, int KS>
simil_status launch_as(const XfbqMma &m, const unsigned *limit, cudaStream_t st)
{
    const int stride = KS * 32 + 16;
    const size_t smem =
        (size_t)(kTile + 2 * kQTile) * stride + (size_t)kTile * raw_bytes(m) + 4 * (size_t)m.nq;
    const auto kernel = xfbq_mma_kernel<kCollect, KS>;
    SML_CUDA_TRY(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const long long blocks = ((long long)m.n + m.rows_per_block - 1) / m.rows_per_block;
    kernel<<<(unsigned)blocks, kThreads, smem, st>>>(m, limit);
    SML_LAUNCH_TRY("xfbq_mma_kernel");
    return SIMIL_OK;
}

template <bool kCollect>
simil_status launch(const XfbqMma &m, const unsigned *limit, cudaStream_t st)
{
    assert(m.nq >= 1 && m.nq <= kXfbqMmaMaxQueries && m.n >= 1 && m.rows_per_block % kTile == 0);
    assert(raw_bytes(m) <= m.stride && m.stride % 16 == 0);  // staging reads within a row
    switch ((m.dim + 31) / 32) {
    case 1: return launch_as<kCollect, 1>(m, limit, st);
    case 2: return launch_as<kCollect, 2>(m, limit, st);
    case 3: return launch_as<kCollect, 3>(m, limit, st);
    case 4: return launch_as<kCollect, 4>(m, limit, st);
    default: assert(!"dimensions past xfbq_mma_fits"); return SIMIL_ERR_UNSUPPORTED;
    }
}

}  // namespace

bool xfbq_mma_fits(int qbits, int bbits, int dim)
{
    // |a_d| <= 2^Q - 1 and y_d <= 2^B - 1 fit int8; the dot products fit int32
    return qbits >= 1 && qbits <= 7 && bbits >= 1 && bbits <= 7 && dim >= 1 &&
           dim <= 32 * kMaxKs;
}

int xfbq_mma_rows_per_block(long long n, int sm_count)
{
    // at least eight blocks per SM where n allows; chunks of at most 2,048
    // rows, so that the K smallest chunk minima are rarely two of one chunk
    const long long tiles = n / ((long long)kTile * 8 * (sm_count > 0 ? sm_count : 1));
    return kTile * (int)(tiles < 1 ? 1 : tiles > 8 ? 8 : tiles);
}

size_t xfbq_mma_carve(void *base, XfbqMma *m)
{
    Carve c(base);
    const size_t nq = (size_t)m->nq, kp = (size_t)(m->dim + 31) / 32 * 32;
    m->qvec = c.take<int8_t>((size_t)padded_queries(m->nq) * kp);
    m->qconst = c.take<int>(nq);
    m->scanned = c.take<int>(nq);
    m->hist = c.take<unsigned>(nq * (size_t)m->nbins);
    m->fill = c.take<int>(nq);
    m->buf_row = c.take<int>(nq * (size_t)m->cap);
    m->buf_d = c.take<unsigned>(nq * (size_t)m->cap);
    return c.used();
}

simil_status xfbq_mma_prepare(const XfbqMma &m, cudaStream_t st)
{
    const int kp = (m.dim + 31) / 32 * 32;
    xfbq_mma_prepare_kernel<<<padded_queries(m.nq), kp, 0, st>>>(m, kp);
    SML_LAUNCH_TRY("xfbq_mma_prepare_kernel");
    return SIMIL_OK;
}

simil_status xfbq_mma_chunk_minima(const XfbqMma &m, cudaStream_t st)
{
    return launch<false>(m, nullptr, st);
}

simil_status xfbq_mma_collect(const XfbqMma &m, const unsigned *limit, cudaStream_t st)
{
    return launch<true>(m, limit, st);
}

simil_status xfbq_mma_compact(const XfbqMma &m, const unsigned *limit, const long long *cstart,
                              int first, int n, int *cand_rows, int *cand_query, cudaStream_t st)
{
    if (n == 0) return SIMIL_OK;
    xfbq_mma_compact_kernel<<<n, kThreads, 0, st>>>(m, limit, cstart, first, cand_rows,
                                                    cand_query);
    SML_LAUNCH_TRY("xfbq_mma_compact_kernel");
    return SIMIL_OK;
}

}  // namespace sml
