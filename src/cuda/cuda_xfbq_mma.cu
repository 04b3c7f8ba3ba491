// cuda_xfbq_mma.cu: flat XFBQ's D on integer tensor cores (what and why:
// cuda_xfbq_mma.cuh).
//
// Launch shape of steps 1 and 2.  A block of 8 warps takes rows_per_block
// rows (a chunk), 256 at a time (a tile): each thread turns one row's planes
// (staged in shared memory by cp.async during the tile before) into its B-bit
// levels, one byte per dimension, in shared memory; each warp runs its 32
// rows against every query of the batch, 64 at a time: mma.sync m16n8k32
// with the queries on the m side and the rows on the n side, 4 x 4 tiles of
// 16 queries x 8 rows per warp, kp / 32 steps of 32 dimensions.  The
// queries' fragments are read straight from global memory (L1 and L2 hold
// them), laid out so that each is one 16-byte load a lane (frag_offset): the
// warps of a block need no barrier between query tiles.  A thread's
// accumulators hold 8 rows of each of its 8 queries, so a query's minimum
// or test over the rows is mostly in registers.  A row's levels are made
// once for all the batch's queries.  Rows and queries go to the k and n
// sides in the same order, so any order of dimensions in a byte row does:
// the one where a plane's bits reach their bytes by a shift and a mask
// (levels32).  Shared rows are kp + 16 bytes apart, an odd multiple of 16,
// so ldmatrix's eight rows fall in distinct banks.  A batch of at most 16 or
// 32 queries runs 1 or 2 slabs of 16 a tile, not 4 (xfbq_mma_kernel's MT):
// the padding queries' mma and tests would cost more than the row's bytes.
#include <assert.h>
#include <limits.h>

#include <algorithm>

#include "cuda/cuda_util.cuh"
#include "cuda/cuda_workspace.cuh"
#include "cuda/cuda_xfbq_d.cuh"
#include "cuda/cuda_xfbq_mma.cuh"

namespace sml {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 256;     // rows per tile: 32 per warp
constexpr int kQTile = 64;     // queries per tile
constexpr int kMaxKs = 4;      // xfbq_mma_kernel: dimensions up to 128
constexpr int kMaxDim = 1024;  // xfbq_mma_wide_kernel past that, to this
// a query's planes: at most 7 of at most kMaxDim / 64 words
constexpr int kMaxQueryWords = 7 * (kMaxDim / 64);
constexpr unsigned kFull = 0xffffffffu;  // every lane of a warp

__host__ __device__ constexpr int padded_queries(int nq) { return (nq + kQTile - 1) / kQTile * kQTile; }

__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const unsigned char *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// Where dimension d of a step of 32 sits in the step's bytes (k): byte t of
// word o is dimension o + 8 t (see levels32).
__host__ __device__ constexpr int k_of(int c) { return 4 * (c % 8) + c / 8; }

// A row's levels of dimensions 32 s .. 32 s + 31 from its planes y (bbits
// planes of `words` 64-bit words), in the order of k_of: out[o]'s byte t is
// dimension 32 s + o + 8 t, so a plane's bit for it is bit o + 8 t of the
// plane's word, and one shift and one mask put a plane's four bits of out[o]
// in place (two instructions, where a multiply spreading a nibble of
// consecutive dimensions took about six).
__device__ __forceinline__ void levels32(const uint64_t *y, int words, int bbits, int s,
                                         unsigned (&out)[8])
{
#pragma unroll
    for (int o = 0; o < 8; ++o) out[o] = 0;
    for (int j = 0; j < bbits; ++j) {
        const int sh = bbits - 1 - j;  // plane j is the level's bit sh
        const uint64_t u = (y[j * words + s / 2] >> (32 * (s % 2)) & 0xffffffffu) << sh;
        const unsigned mask = 0x01010101u << sh;
#pragma unroll
        for (int o = 0; o < 8; ++o) out[o] |= (unsigned)(u >> o) & mask;
    }
}

// Where query q's dimension d sits in m.qvec: the queries' a_d in mma's A
// fragment order, so that a lane's share of 16 queries x 32 dimensions is
// one 16-byte load.  For query tile qt (64 queries), step ks (32
// dimensions) and slab mt (16 queries), lane 4 g + t holds four registers:
// the slab's queries g (registers 0, 2) and g + 8 (1, 3) at the step's k
// 4 t .. 4 t + 3 (registers 0, 1) and 16 + 4 t .. 16 + 4 t + 3 (2, 3).
__device__ __forceinline__ long long frag_offset(int q, int d, int steps)
{
    const int qt = q / kQTile, mt = q % kQTile / 16, s = q % 16;
    const int ks = d / 32, k = k_of(d % 32);
    const int lane = (s % 8) * 4 + k % 16 / 4, reg = s / 8 + 2 * (k / 16);
    return ((((long long)qt * steps + ks) * 4 + mt) * 32 + lane) * 16 + reg * 4 + k % 4;
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
    m.qvec[frag_offset(q, d, kp / 32)] = (int8_t)a;
    __syncthreads();
    if (d == 0 && q < m.nq) {
        m.qconst[q] = ((1 << m.bbits) - 1) * sum;
        m.scanned[q] = m.n;
    }
}

// One row's levels into dst (kp bytes, levels32's order) from its planes at
// y (shared memory), or zeros (a row past the chunk).
template <int KS>
__device__ __forceinline__ void row_levels(const XfbqMma &m, const uint64_t *y, bool live,
                                           unsigned char *dst)
{
#pragma unroll
    for (int s = 0; s < KS; ++s) {
        unsigned out[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (live) levels32(y, m.words, m.bbits, s, out);
        reinterpret_cast<uint4 *>(dst)[2 * s] = make_uint4(out[0], out[1], out[2], out[3]);
        reinterpret_cast<uint4 *>(dst)[2 * s + 1] = make_uint4(out[4], out[5], out[6], out[7]);
    }
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

// Step 2, arena row `row` (its D d) under query q's bound: into q's buffer
// while it has room (the count goes on).
__device__ __forceinline__ void buffer(const XfbqMma &m, int q, int row, unsigned d)
{
    const int slot = atomicAdd(&m.fill[q], 1);
    if (slot < m.cap) {
        m.buf_row[(long long)q * m.cap + slot] = row;
        m.buf_d[(long long)q * m.cap + slot] = d;
    }
}

// Step 2's rows under their bounds, staged in shared memory during a tile of
// rows and flushed to the buffers after it: a global atomicAdd whose slot a
// lane waits for would stall its warp for the round trip at every hit.
constexpr int kHits = 1024;
struct Hits {
    int *n;             // staged so far (may pass kHits: those went direct)
    int *q;
    int *row;
    unsigned *d;
};

__device__ __forceinline__ void stage_hit(const XfbqMma &m, const Hits &h, int q, int row,
                                          unsigned d)
{
    const int i = atomicAdd(h.n, 1);
    if (i < kHits) {
        h.q[i] = q;
        h.row[i] = row;
        h.d[i] = d;
    } else {
        buffer(m, q, row, d);
    }
}

// After a tile of rows, by the whole block: its staged hits to the buffers.
__device__ __forceinline__ void flush_hits(const XfbqMma &m, const Hits &h)
{
    __syncthreads();
    const int n = min(*h.n, kHits);
    for (int i = threadIdx.x; i < n; i += kThreads) buffer(m, h.q[i], h.row[i], h.d[i]);
    __syncthreads();
    if (threadIdx.x == 0) *h.n = 0;
}

// The accumulators of a warp's MT slabs of 16 queries (queries q0 on) against
// its 32 rows (from row r): acc[mt][nt] holds <a, y> (step 2: plus a start)
// for queries 16 mt + g (+8 in its elements 2, 3) and rows 8 nt + 2t (+1 in
// its odd elements).
template <int MT>
using Acc = int[MT][4][4];

// Step 1's epilogue: each query's smallest <a, y> into qv (atomicMin).
// kAllRows: every row is in the chunk (a row past it has levels 0, so a
// <a, y> of 0 that is no row's).
template <bool kAllRows, int MT>
__device__ __forceinline__ void epilogue_min(const XfbqMma &m, const Acc<MT> &acc, int *qv, int q0,
                                             long long r, long long last, int g, int t)
{
    bool valid[4][2];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int p = 0; p < 2; ++p) valid[nt][p] = kAllRows || r + nt * 8 + 2 * t + p < last;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int q = q0 + mt * 16 + h * 8 + g;
            int v = INT_MAX;
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int p = 0; p < 2; ++p)
                    if (valid[nt][p]) v = min(v, acc[mt][nt][2 * h + p]);
            v = min(v, __shfl_xor_sync(kFull, v, 1));
            v = min(v, __shfl_xor_sync(kFull, v, 2));
            if (t == 0 && q < m.nq && v < INT_MAX) atomicMin(&qv[q], v);
        }
}

// Step 2's epilogue.  The accumulators started at C_q - T_q - 1, so a row is
// under its query's bound where its accumulator is negative: one OR of all
// of them finds the few threads with any (at 5,000 rows a query in 10M,
// about 3% at MT = 4), and only those decode each hit's query, row and D
// (the accumulator + T_q + 1) from its place.  Rows past the chunk (levels
// 0) may test negative: the row check drops them.  A padding query's
// accumulators stay 0.  A hit's accumulator is picked from its slab's 16 by
// a chain of selects: copying them all to a local array that a hit could
// index cost more than the selects wherever hits are many (mix10M: 10.2M
// rows buffered per 2,048 queries made 10,000 queries 5% slower, H200).
template <int MT>
__device__ __forceinline__ void epilogue_collect(const XfbqMma &m, const unsigned *limit,
                                                 const Acc<MT> &acc, const Hits &hits, int q0,
                                                 long long r, long long last, int g, int t)
{
    int any = 0;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) any |= acc[mt][nt][e];
    if (any >= 0) return;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        unsigned bits = 0;  // bit 4 nt + e: acc[mt][nt][e] is a hit
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                bits |= ((unsigned)acc[mt][nt][e] >> 31) << (nt * 4 + e);
        while (bits) {
            const int i = __ffs(bits) - 1;
            bits &= bits - 1;
            int v = acc[mt][0][0];
#pragma unroll
            for (int j = 1; j < 16; ++j)
                if (i == j) v = acc[mt][j >> 2][j & 3];
            const int nt = i >> 2, e = i & 3;
            const int q = q0 + mt * 16 + (e >> 1) * 8 + g;
            const long long row = r + nt * 8 + 2 * t + (e & 1);
            assert(q < m.nq);
            // D = C_q + <a, y> = the accumulator + T_q + 1 (clamped: a no-op but for damaged codes)
            const unsigned d = min((unsigned)(v + (int)limit[q] + 1), m.dclamp);
            if (row < last) stage_hit(m, hits, q, (int)(m.row0 + row), d);
        }
    }
}

// c = a b + {c0, c0, c1, c1} (a step's first), or c += a b.
__device__ __forceinline__ void mma_first(int (&c)[4], const uint4 &a, unsigned b0, unsigned b1,
                                          int c0, int c1)
{
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%10,%11,%11};\n"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1), "r"(c0), "r"(c1));
}

__device__ __forceinline__ void mma_add(int (&c)[4], const uint4 &a, unsigned b0, unsigned b1)
{
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}

// The end of step 1, by the whole block: each query's chunk minimum (qv)
// into its histogram.
__device__ __forceinline__ void minima_to_hist(const XfbqMma &m, const int *qv)
{
    __syncthreads();
    for (int q = threadIdx.x; q < m.nq; q += kThreads)
        if (qv[q] < INT_MAX) {
            // C_q + <a, y> is D >= 0; the clamp is a no-op but for damaged codes
            const unsigned d = min((unsigned)(m.qconst[q] + qv[q]), m.dclamp);
            atomicAdd(&m.hist[(long long)q * m.nbins + (d >> m.shift)], 1u);
        }
}

// What both tile kernels set up first: the block's chunk of rows, its query
// tiles (those of grid row blockIdx.y: every gridDim.y-th, where the chunks
// alone leave SMs idle: split_tiles), and, in shared memory at `words`, the
// per-query words and step 2's staged hits.
struct BlockStart {
    long long first, last;  // the chunk's rows
    int nqt;                // query tiles of the batch
    int *qv;  // per padded query: step 1, the chunk's smallest <a, y>; step
              // 2, the accumulators' start C_q - T_q - 1 (0 for padding)
    Hits hits;
};

template <bool kCollect>
__device__ __forceinline__ BlockStart block_start(const XfbqMma &m, const unsigned *limit,
                                                  unsigned char *words)
{
    BlockStart b;
    const int nqp = padded_queries(m.nq);
    b.nqt = nqp / kQTile;
    b.qv = reinterpret_cast<int *>(words);
    // step 2: the staged hits (kHits queries, kHits rows, kHits D, then the count)
    int *hit_words = b.qv + nqp;
    b.hits = Hits{hit_words + (kCollect ? 3 * kHits : 0), hit_words, hit_words + kHits,
                  reinterpret_cast<unsigned *>(hit_words + 2 * kHits)};
    if (kCollect && threadIdx.x == 0) *b.hits.n = 0;
    // step 1 takes every chunk_step-th chunk (a bound from fewer chunk minima
    // is looser, never wrong); step 2 takes every chunk
    b.first = (long long)blockIdx.x * (kCollect ? 1 : m.chunk_step) * m.rows_per_block;
    b.last = min(b.first + m.rows_per_block, (long long)m.n);
    // every query's word, though the block runs only its tiles: the others
    // stay INT_MAX (step 1: no minimum) or are never read (step 2)
    for (int q = threadIdx.x; q < nqp; q += kThreads)
        b.qv[q] = !kCollect ? INT_MAX : q < m.nq ? m.qconst[q] - (int)limit[q] - 1 : 0;
    return b;
}

// Steps 1 (kCollect false) and 2 (true); see the file comment.  MT: slabs
// of 16 queries a tile (4, or fewer where the batch has at most 16 MT
// queries: one tile).
template <bool kCollect, int KS, int MT>
__global__ void __launch_bounds__(kThreads, 2) xfbq_mma_kernel(const XfbqMma m,
                                                               const unsigned *limit)
{
    static_assert(MT == 1 || MT == 2 || MT == 4, "slabs of a tile of kQTile queries");
    assert(MT == kQTile / 16 || m.nq <= 16 * MT);  // fewer slabs: one tile
    constexpr int kp = KS * 32, stride = kp + 16;
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char *ys = smem;
    unsigned char *rs = ys + kTile * stride;  // the rows' planes (raw_bytes each)
    const BlockStart bs = block_start<kCollect>(m, limit, rs + kTile * raw_bytes(m));
    const long long first = bs.first, last = bs.last;
    int *const qv = bs.qv;
    const Hits hits = bs.hits;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    // fragment (qt, ks, mt) of this lane: qf[((qt * KS + ks) * 4 + mt) * 32]
    const uint4 *qf = reinterpret_cast<const uint4 *>(m.qvec) + lane;
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
        __syncthreads();  // the last tile's readers are done with ys
        row_levels<KS>(m, reinterpret_cast<const uint64_t *>(mine), r0 + threadIdx.x < last,
                       ys + threadIdx.x * stride);
        if (r0 + kTile < last) stage(r0 + kTile);
        __syncthreads();
        const long long r = r0 + warp * 32;  // this warp's rows
        const bool full = r0 + kTile <= last;
        // the queries' fragments come from L1/L2 (every warp of the block
        // reads the same), each step's while the one before runs: no
        // shared copy, so no barrier between query tiles
        const int qt0 = blockIdx.y, nqt = bs.nqt;
        uint4 a[MT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) a[mt] = __ldg(qf + ((long long)qt0 * KS * 4 + mt) * 32);
        for (int qt = qt0; qt < nqt; qt += gridDim.y) {
            int c0[MT], c1[MT];  // the starts, queries g and g + 8 of each slab
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) c0[mt] = c1[mt] = 0;
            if constexpr (kCollect) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    c0[mt] = qv[qt * kQTile + mt * 16 + g];
                    c1[mt] = qv[qt * kQTile + mt * 16 + 8 + g];
                }
            }
            Acc<MT> acc;
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                // the next fragments: this tile's next step, or the next
                // tile's first (the last tile reloads its own: harmless)
                const long long next =
                    ks + 1 < KS ? (long long)qt * KS + ks + 1
                                : (long long)(qt + (int)gridDim.y < nqt ? qt + (int)gridDim.y : qt) * KS;
                uint4 an[MT];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) an[mt] = __ldg(qf + (next * 4 + mt) * 32);
#pragma unroll
                for (int np = 0; np < 2; ++np) {
                    unsigned b[4];  // rows 16 np .. 16 np + 15 of the warp's
                    ldsm_x4(b, ys + (warp * 32 + np * 16 + (lane >> 4) * 8 + (lane & 7)) * stride +
                                   ks * 32 + ((lane >> 3) & 1) * 16);
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        if (ks == 0) {
                            mma_first(acc[mt][2 * np], a[mt], b[0], b[1], c0[mt], c1[mt]);
                            mma_first(acc[mt][2 * np + 1], a[mt], b[2], b[3], c0[mt], c1[mt]);
                        } else {
                            mma_add(acc[mt][2 * np], a[mt], b[0], b[1]);
                            mma_add(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
                        }
                    }
                }
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) a[mt] = an[mt];
            }
            if constexpr (kCollect)
                epilogue_collect<MT>(m, limit, acc, hits, qt * kQTile, r, last, g, t);
            else if (full)
                epilogue_min<true, MT>(m, acc, qv, qt * kQTile, r, last, g, t);
            else
                epilogue_min<false, MT>(m, acc, qv, qt * kQTile, r, last, g, t);
        }
        if constexpr (kCollect) flush_hits(m, hits);
    }
    if constexpr (!kCollect) minima_to_hist(m, qv);
}

// Wide rows (more than 128 dimensions, up to kMaxDim): 64 rows a tile, since
// their levels take kp + 16 bytes each in shared memory.  The 8 warps are 2
// groups of 32 rows by 4 slabs of 16 queries: each warp runs its 32 rows
// against its slab of every query tile of its grid row, over kp / 32 steps
// (a loop, not unrolled).  The threads turn the rows' planes into levels 32
// dimensions at a time, any thread any row, so a barrier comes between that
// and staging the next tile's planes.  Otherwise as xfbq_mma_kernel.
constexpr int kWideTile = 64;

template <bool kCollect>
__global__ void __launch_bounds__(kThreads, 2) xfbq_mma_wide_kernel(const XfbqMma m,
                                                                    const unsigned *limit)
{
    const int steps = (m.dim + 31) / 32, stride = steps * 32 + 16, rb = raw_bytes(m);
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char *ys = smem;
    unsigned char *rs = ys + kWideTile * stride;  // the rows' planes (rb each)
    const BlockStart bs = block_start<kCollect>(m, limit, rs + kWideTile * rb);
    const long long first = bs.first, last = bs.last;
    int *const qv = bs.qv;
    const Hits hits = bs.hits;
    const int nqt = bs.nqt;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int group = warp & 1, slab = warp >> 1;  // this warp's rows and queries
    const uint4 *qf = reinterpret_cast<const uint4 *>(m.qvec) + lane;
    auto stage = [&](long long r0) {
        const int pieces = (int)min((long long)kWideTile, last - r0) * (rb / 16);
        for (int i = threadIdx.x; i < pieces; i += kThreads) {
            const int row = i / (rb / 16), c = i % (rb / 16) * 16;
            cp_async16(rs + row * rb + c, m.codes + (m.row0 + r0 + row) * m.stride + c);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    stage(first);
    for (long long r0 = first; r0 < last; r0 += kWideTile) {
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        __syncthreads();  // every thread's planes are in; ys is free
        const int live = (int)min((long long)kWideTile, last - r0);
        for (int i = threadIdx.x; i < kWideTile * steps; i += kThreads) {
            const int row = i / steps, s = i % steps;  // dimensions 32 s .. 32 s + 31
            unsigned out[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (row < live)
                levels32(reinterpret_cast<const uint64_t *>(rs + row * rb), m.words, m.bbits, s,
                         out);
            uint4 *dst = reinterpret_cast<uint4 *>(ys + row * stride + s * 32);
            dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
            dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
        }
        __syncthreads();  // ys is whole; the planes are read
        if (r0 + kWideTile < last) stage(r0 + kWideTile);
        const long long r = r0 + group * 32;
        const bool full = r0 + kWideTile <= last;
        const unsigned char *yb =
            ys + (group * 32 + (lane >> 4) * 8 + (lane & 7)) * stride + ((lane >> 3) & 1) * 16;
        for (int qt = blockIdx.y; qt < nqt; qt += gridDim.y) {
            int c0 = 0, c1 = 0;  // the starts, queries g and g + 8 of the slab
            if constexpr (kCollect) {
                c0 = qv[qt * kQTile + slab * 16 + g];
                c1 = qv[qt * kQTile + slab * 16 + 8 + g];
            }
            // fragment (qt, step, slab): qa[step * 4 * 32]
            const uint4 *qa = qf + ((long long)qt * steps * 4 + slab) * 32;
            int acc[1][4][4];
            uint4 a = __ldg(qa);
            for (int ks = 0; ks < steps; ++ks) {
                const uint4 an = __ldg(qa + (long long)min(ks + 1, steps - 1) * 4 * 32);
#pragma unroll
                for (int np = 0; np < 2; ++np) {
                    unsigned b[4];  // rows 16 np .. 16 np + 15 of the warp's
                    ldsm_x4(b, yb + np * 16 * stride + ks * 32);
                    if (ks == 0) {
                        mma_first(acc[0][2 * np], a, b[0], b[1], c0, c1);
                        mma_first(acc[0][2 * np + 1], a, b[2], b[3], c0, c1);
                    } else {
                        mma_add(acc[0][2 * np], a, b[0], b[1]);
                        mma_add(acc[0][2 * np + 1], a, b[2], b[3]);
                    }
                }
                a = an;
            }
            const int q0 = qt * kQTile + slab * 16;
            if constexpr (kCollect)
                epilogue_collect<1>(m, limit, acc, hits, q0, r, last, g, t);
            else if (full)
                epilogue_min<true, 1>(m, acc, qv, q0, r, last, g, t);
            else
                epilogue_min<false, 1>(m, acc, qv, q0, r, last, g, t);
        }
        if constexpr (kCollect) flush_hits(m, hits);
    }
    if constexpr (!kCollect) minima_to_hist(m, qv);
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

// ---- a few queries: XOR and popcount ----------------------------------
//
// With at most kPopQueries queries, turning each row's planes into bytes
// costs more than the popcounts themselves: the same two steps run with D
// from the paper's formula, a thread per row against every query of the
// batch (G of them, their planes in shared memory), so that each step reads
// the codes once at close to the bandwidth.  (Measured on an H200, 10M
// rows, p50 of a whole search: 1 query 0.372 ms against 0.560 ms on tensor
// cores, 2 queries 0.511 against 0.570, 4 queries 0.822 against 0.587.)

constexpr int kPopQueries = 2;

// After step 2, a block per query: the histogram of its buffered rows' D
// (every D up to T_q), built in shared memory and written whole.  Step 2
// wrote each row's D beside it (from its accumulator); worked out again here
// from the row's planes by XOR and popcount, they took 0.12 ms of 2,048
// Fashion-MNIST queries (ncu, H200).
__global__ void xfbq_mma_hist_kernel(const XfbqMma m)
{
    extern __shared__ unsigned h[];
    const int q = blockIdx.x;
    for (int i = threadIdx.x; i < m.nbins; i += blockDim.x) h[i] = 0;
    __syncthreads();
    const int nb = min(m.fill[q], m.cap);
    const long long base = (long long)q * m.cap;
    for (int i = threadIdx.x; i < nb; i += blockDim.x) atomicAdd(&h[m.buf_d[base + i] >> m.shift], 1u);
    __syncthreads();
    for (int i = threadIdx.x; i < m.nbins; i += blockDim.x) m.hist[(long long)q * m.nbins + i] = h[i];
}

// Steps 1 and 2 for nq <= G queries: a block per chunk (step 1: every
// chunk_step-th), a warp per 32 consecutive rows at a time.  Step 2 appends
// a warp's rows under a query's bound with one atomic.
template <bool kCollect, int G, int Q, int B, int W>
__global__ void __launch_bounds__(kThreads) xfbq_pop_kernel(const XfbqMma m, const unsigned *limit)
{
    __shared__ uint64_t xs[kPopQueries * kMaxQueryWords];
    __shared__ unsigned qmin[kPopQueries];
    const int qw = m.qbits * m.words, nq = m.nq, lane = threadIdx.x & 31;
    for (int i = threadIdx.x; i < nq * qw; i += kThreads) xs[i] = m.query_codes[i];
    if (threadIdx.x < kPopQueries) qmin[threadIdx.x] = UINT_MAX;
    unsigned lim[G], best[G];
    const uint64_t *xq[G];  // past nq: query 0 again (its D unused)
#pragma unroll
    for (int t = 0; t < G; ++t) {
        xq[t] = xs + (t < nq ? t : 0) * qw;
        lim[t] = kCollect && t < nq ? limit[t] : 0;
        best[t] = UINT_MAX;
    }
    __syncthreads();
    const long long first =
        (long long)blockIdx.x * (kCollect ? 1 : m.chunk_step) * m.rows_per_block;
    const long long last = min(first + m.rows_per_block, (long long)m.n);
    // the bounds are warp-uniform, so the ballots below see every lane
    for (long long r0 = first + (threadIdx.x - lane); r0 < last; r0 += kThreads) {
        const long long r = r0 + lane;
        const bool live = r < last;
        unsigned d[G];
        xfbq_row_d<G, Q, B, W>(
            xq, reinterpret_cast<const uint64_t *>(m.codes + (m.row0 + (live ? r : r0)) * m.stride),
            m.qbits, m.bbits, m.words, d);
#pragma unroll
        for (int t = 0; t < G; ++t) {
            if (t >= nq) break;
            d[t] = min(d[t], m.dclamp);  // a no-op but for damaged codes
            if constexpr (kCollect) {
                const bool hit = live && d[t] <= lim[t];
                const unsigned mask = __ballot_sync(kFull, hit);
                if (mask == 0) continue;
                int slot = 0;
                if (lane == __ffs(mask) - 1) slot = atomicAdd(&m.fill[t], __popc(mask));
                slot = __shfl_sync(kFull, slot, __ffs(mask) - 1) + __popc(mask & ((1u << lane) - 1));
                if (hit && slot < m.cap) {
                    m.buf_row[(long long)t * m.cap + slot] = (int)(m.row0 + r);
                    m.buf_d[(long long)t * m.cap + slot] = d[t];
                }
            } else if (live) {
                best[t] = min(best[t], d[t]);
            }
        }
    }
    if constexpr (!kCollect) {
#pragma unroll
        for (int t = 0; t < G; ++t) {
            unsigned v = best[t];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(kFull, v, o));
            if (lane == 0 && t < nq && v < UINT_MAX) atomicMin(&qmin[t], v);
        }
        __syncthreads();
        if (threadIdx.x < nq && qmin[threadIdx.x] < UINT_MAX)
            atomicAdd(&m.hist[(long long)threadIdx.x * m.nbins + (qmin[threadIdx.x] >> m.shift)],
                      1u);
    }
}

template <bool kCollect, int G>
simil_status launch_pop_g(const XfbqMma &m, const unsigned *limit, long long blocks,
                          cudaStream_t st)
{
    if (m.qbits == 4 && m.bbits == 3 && m.words == 1)
        xfbq_pop_kernel<kCollect, G, 4, 3, 1><<<(unsigned)blocks, kThreads, 0, st>>>(m, limit);
    else if (m.qbits == 4 && m.bbits == 3 && m.words == 2)
        xfbq_pop_kernel<kCollect, G, 4, 3, 2><<<(unsigned)blocks, kThreads, 0, st>>>(m, limit);
    else
        xfbq_pop_kernel<kCollect, G, 0, 0, 0><<<(unsigned)blocks, kThreads, 0, st>>>(m, limit);
    SML_LAUNCH_TRY("xfbq_pop_kernel");
    return SIMIL_OK;
}

template <bool kCollect>
simil_status launch_pop(const XfbqMma &m, const unsigned *limit, cudaStream_t st)
{
    assert(m.nq >= 1 && m.nq <= kPopQueries && m.qbits * m.words <= kMaxQueryWords);
    const long long chunks = ((long long)m.n + m.rows_per_block - 1) / m.rows_per_block;
    const long long blocks = kCollect ? chunks : (chunks + m.chunk_step - 1) / m.chunk_step;
    static_assert(kPopQueries == 2, "a G for every batch size up to kPopQueries");
    if (m.nq == 1) return launch_pop_g<kCollect, 1>(m, limit, blocks, st);
    return launch_pop_g<kCollect, 2>(m, limit, blocks, st);
}

// Shared memory of a kernel whose tiles hold rows (levels kp + 16 bytes
// apart, then planes): the tile, the per-query words, step 2's hits.
size_t tile_smem(const XfbqMma &m, bool collect, int rows)
{
    const int kp = (m.dim + 31) / 32 * 32;
    return (size_t)rows * (kp + 16) + (size_t)rows * raw_bytes(m) +
           4 * (size_t)padded_queries(m.nq) + (collect ? 4 * (size_t)(3 * kHits + 1) : 0);
}

// Grid rows that split each chunk's query tiles: where the chunks are fewer
// than four blocks an SM (Fashion-MNIST's 60,000 rows are 235 chunks on 132
// SMs, and step 1 reads a quarter of them), enough rows to fill the SMs, at
// most one a tile.  Each grid row makes its chunk's levels again, which is
// cheap beside its tiles' mma (Fashion-MNIST's step 1 at 2,048 queries: 0.147
// ms split, 0.254 ms not; H200).
int split_tiles(const XfbqMma &m, long long blocks)
{
    const int nqt = padded_queries(m.nq) / kQTile;
    const long long want = 4LL * (m.sm_count > 0 ? m.sm_count : 1);
    if (blocks >= want || nqt == 1) return 1;
    const long long y = (want + blocks - 1) / blocks;
    return (int)(y < nqt ? y : nqt);
}

template <typename Kernel>
simil_status launch_tiles(Kernel kernel, const char *name, size_t smem, const XfbqMma &m,
                          bool collect, const unsigned *limit, cudaStream_t st)
{
    SML_CUDA_TRY(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const long long chunks = ((long long)m.n + m.rows_per_block - 1) / m.rows_per_block;
    const long long blocks = collect ? chunks : (chunks + m.chunk_step - 1) / m.chunk_step;
    const dim3 grid((unsigned)blocks, (unsigned)split_tiles(m, blocks));
    kernel<<<grid, kThreads, smem, st>>>(m, limit);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? SIMIL_OK : cuda_status(e, name, __FILE__, __LINE__);
}

template <bool kCollect, int KS>
simil_status launch_as(const XfbqMma &m, const unsigned *limit, cudaStream_t st)
{
    const size_t smem = tile_smem(m, kCollect, kTile);
    if (m.nq <= 16)
        return launch_tiles(xfbq_mma_kernel<kCollect, KS, 1>, "launch of xfbq_mma_kernel", smem,
                            m, kCollect, limit, st);
    if (m.nq <= 32)
        return launch_tiles(xfbq_mma_kernel<kCollect, KS, 2>, "launch of xfbq_mma_kernel", smem,
                            m, kCollect, limit, st);
    return launch_tiles(xfbq_mma_kernel<kCollect, KS, 4>, "launch of xfbq_mma_kernel", smem, m,
                        kCollect, limit, st);
}

template <bool kCollect>
simil_status launch(const XfbqMma &m, const unsigned *limit, cudaStream_t st)
{
    assert(m.nq >= 1 && m.nq <= kXfbqMmaMaxQueries && m.n >= 1 && m.rows_per_block % kTile == 0);
    assert(raw_bytes(m) <= m.stride && m.stride % 16 == 0);  // staging reads within a row
    static_assert(kMaxKs == 4, "a case for every width of xfbq_mma_kernel");
    switch ((m.dim + 31) / 32) {
    case 1: return launch_as<kCollect, 1>(m, limit, st);
    case 2: return launch_as<kCollect, 2>(m, limit, st);
    case 3: return launch_as<kCollect, 3>(m, limit, st);
    case 4: return launch_as<kCollect, 4>(m, limit, st);
    default:
        assert(m.dim <= kMaxDim);
        return launch_tiles(xfbq_mma_wide_kernel<kCollect>, "launch of xfbq_mma_wide_kernel",
                            tile_smem(m, kCollect, kWideTile), m, kCollect, limit, st);
    }
}

}  // namespace

bool xfbq_mma_fits(int qbits, int bbits, int dim)
{
    // |a_d| <= 2^Q - 1 and y_d <= 2^B - 1 fit int8; the dot products fit int32
    return qbits >= 1 && qbits <= 7 && bbits >= 1 && bbits <= 7 && dim >= 1 &&
           dim <= kMaxDim;
}

int xfbq_mma_chunk_step(long long n, int rows_per_block, long long want)
{
    // keep at least 64 want chunks (and 256): the want-th smallest of their
    // minima then stays near the want-th smallest D; but read at most a
    // quarter of the chunks where that leaves 4 want of them: the looser
    // bound buffers more rows in step 2, which costs less than step 1 saves
    // (Fashion-MNIST, 235 chunks, k = 10, 2,048 queries on an H200: steps 1
    // and 2 took 0.427 + 0.638 ms reading every chunk, 0.147 + 0.751 ms every
    // fourth, 0.084 + 0.845 ms every eighth)
    const long long chunks = (n + rows_per_block - 1) / rows_per_block;
    const long long keep = std::max(64 * want, 256LL);
    const long long step = std::max(chunks / keep, std::min(chunks / (4 * want), 4LL));
    return (int)std::min(std::max(step, 1LL), 64LL);
}

int xfbq_mma_rows_per_block(long long n, int sm_count)
{
    // at least eight blocks per SM where n allows; chunks of at most 2,048
    // rows, so that the K smallest chunk minima are rarely two of one chunk
    const long long tiles = n / ((long long)kTile * 8 * (sm_count > 0 ? sm_count : 1));
    return kTile * (int)(tiles < 1 ? 1 : tiles > 8 ? 8 : tiles);
}

void xfbq_mma_carve(Carve &c, XfbqMma *m)
{
    const size_t nq = (size_t)m->nq, kp = (size_t)(m->dim + 31) / 32 * 32;
    m->qvec = c.take<int8_t>((size_t)padded_queries(m->nq) * kp);
    m->qconst = c.take<int>(nq);
    m->scanned = c.take<int>(nq);
    m->hist = c.take<unsigned>(nq * (size_t)m->nbins);
    m->fill = c.take<int>(nq);
    m->buf_row = c.take<int>(nq * (size_t)m->cap);
    m->buf_d = c.take<unsigned>(nq * (size_t)m->cap);
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
    return m.nq <= kPopQueries ? launch_pop<false>(m, nullptr, st) : launch<false>(m, nullptr, st);
}

simil_status xfbq_mma_collect(const XfbqMma &m, const unsigned *limit, cudaStream_t st)
{
    SML_TRY(m.nq <= kPopQueries ? launch_pop<true>(m, limit, st) : launch<true>(m, limit, st));
    xfbq_mma_hist_kernel<<<m.nq, kThreads, 4 * (size_t)m.nbins, st>>>(m);
    SML_LAUNCH_TRY("xfbq_mma_hist_kernel");
    return SIMIL_OK;
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
