// cuda_xfbq.cu: the XFBQ scan on the GPU (the XFBQ paper, section 4, "Fast
// K-NN search algorithm in CUDA"; backend.h, sml_xfbq_scan_args).
//
// A batch of queries goes through these steps, all on the device:
//  1. distances: D = sum 2^{(Q-1-i)+(B-1-j)} __popcll(X_i ^ Y_j) for every row
//     of every query's probed lists, written to a buffer (uint16 where D fits)
//     and counted into a histogram of D bins in shared memory, flushed to one
//     global histogram per query (nonzero bins only);
//  2. threshold: per query, the bin b of the K-th smallest D from the
//     histogram, the limit ((min(b + window, nbins-1) + 1) << shift) - 1, the
//     window extra_bins, or a fraction of the bins from its smallest D to its
//     median (sml_xfbq_window_bins, core/xfbq_code.h)
//     and the exact count of candidates under it (the paper's histogram
//     selection with its "extra distance");
//  3. collect: the rows under their query's limit are appended to the
//     query's segment (a ballot and one atomic per warp), then re-ranked:
//     exact keys from their floats;
//  4. selection of the k best per query (WarpSelect / BlockSelect over ragged
//     rows, radix past k = 2048; select_ragged) and the ids (finish_to_host).
// Flat XFBQ, where it fits, replaces steps 1 to 3a with D on integer tensor
// cores (cuda_xfbq_mma.cuh: no D written, the same limits and candidates;
// run_flat_mma below); steps 3b and 4 are shared.
// With a shadow (XFBQ_fp16: the floats in host memory, a scaled fp16 copy on
// the GPU; cuda_shadow.cu), step 3 re-ranks every candidate from the fp16
// copy, selects each query's k best of those approximate keys, and re-ranks
// from the floats only the candidates whose approximate key is at most the
// k-th one plus twice the bound on any key's error (fp16_bound): every
// candidate that can rank in the true top k is among them, so the results are
// those of re-ranking them all from the floats.
// The frame, the probes (the caller's, or the coarse search's on the
// device, taken to the host), the batches and the grouping of (query, list)
// pairs by list are the shared IVF skeleton's (cuda_ivf.cuh).
// The selection arithmetic is the CPU's (cpu_xfbq.c): both take the same
// candidates, so results differ only by the rounding of the float keys.
//
// Layout and loads.  Codes are rows of code_stride bytes (flat XFBQ: packed
// codes, 48 bytes for 96 dimensions at 4x3 bits; IVF: arena rows, code then
// floats).  A list's rows are consecutive, and a warp takes 32 consecutive
// rows, one per lane: the warp's bundle of 32 codes is one contiguous block
// (flat) or 32 evenly spaced ones (IVF), each lane reading its code word by
// word, so a warp's loads cover whole 32-byte sectors that L1 keeps between
// the word loads.  The (query, list) pairs of a batch are grouped by list, G
// at a time, so each code is read once for G queries (flat XFBQ: every query
// scans the one list).  Query codes sit in shared memory, read as broadcasts.
//
// Launch shapes.  Distances: 256 threads per block, a block per (list, group
// of G <= 8 of its pairs, 16384 rows); each thread one row at a time against
// the group's queries; shared memory holds G histograms of nbins <= 4096
// counters (G = 8 where they fit in 96 KiB, else 4) and the G query codes.
// Threshold: a block of 256 per query.  Collect: 256 threads per (query,
// 16384 positions), a warp ballots 32 positions at a time.  Re-rank: eight
// lanes per candidate (four per warp), lanes over dimensions, a grid of up to
// 8 blocks per SM striding over the candidates.  (Reading the floats four at
// a time, so that a warp's load fetches whole 128-byte spans, was no faster:
// the re-ranking is bound by DRAM, scattered rows, not by its L2 requests;
// docs/benchmarks.md, "Tried and dropped".)
//
// The queries' codes: the caller's, or, where it gives none, coded here from
// the staged queries (rotated first with RR), one launch or two per batch
// (cuda_xfbq_encode.cu).
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include <atomic>

#include "core/xfbq_code.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_ivf.cuh"
#include "cuda/cuda_xfbq_d.cuh"
#include "cuda/cuda_xfbq_mma.cuh"
#include "cuda/select.cuh"

namespace sml {
namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 16384;                      // rows or positions per block
constexpr size_t kDistBudget = (size_t)1 << 30;    // bytes of D per batch
constexpr long long kCandBudget = 64ll << 20;      // candidates per selection pass
constexpr int kMaxBatch = 16384;
constexpr size_t kSharedCodes = 32 << 10;          // query codes in shared memory up to this
constexpr size_t kSharedHist = 96 << 10;           // histograms of a group in shared memory

struct Run {          // one probed list of one query
    long long row0;   // its first row
    int rows;
    int pos0;         // where it starts among the query's scanned positions
};

struct DistItem {     // distances: rows [begin, end) of the list at row0, for pairs
    long long row0;   // pair0 .. pair0 + npairs - 1 (queries probing that list)
    int begin;
    int end;
    int pair0;
    int npairs;
};

struct CollectItem {  // collect: query q, positions [begin, end)
    int q;
    int begin;
    int end;
};

// What the kernels of a batch share.
struct Batch {
    const uint64_t *query_codes;  // the batch's first query
    const float *queries;
    int qw;                       // words of a query code
    int qbits, bbits, words, dim;
    const char *codes;
    long long code_stride;
    const char *vectors;
    long long vector_stride;
    const __half *half_rows;      // the shadow's rows (dim each), or null
    const float *inv_scale;       //   and their scales
    float max_norm;               //   and the largest row norm
    float *thresholds;            // per query: re-rank from the floats up to this key
    const Run *runs;
    const int *run_start;         // per query
    const int *run_count;
    const int *scanned;
    const long long *dstart;      // per query, its D segment
    const int *pair_query;        // per pair (grouped by list): its query
    const int *pair_pos0;         //   and where the list starts in its scan
    void *dist;                   // uint16 or uint32
    unsigned *hist;               // nq x nbins
    int nbins;
    int shift;
    unsigned dclamp;              // (nbins << shift) - 1
    int extra_bins;
    unsigned spread_q16;          // 0: the window is extra_bins alone
    int k;
    unsigned *limit;              // per query
    int *count;                   // per query: candidates
    int *fill;                    // per query: candidates written
    const long long *cstart;      // per query of the selection pass
    float *cand_keys;
    int *cand_rows;
    int *cand_query;
    long long cand_total;         // slots of the selection pass
    bool l2;
    bool codes_in_shared;
    const uint32_t *allowed;      // the arena rows a filter allows, or null (cuda_filter.cuh)
};

// Step 1, per row: D against the group's queries, stored and counted.
template <typename DT, int G>
__device__ __forceinline__ void record(const Batch &b, const DistItem &it, unsigned *hist,
                                       const long long (&out)[G], unsigned (&d)[G], int r)
{
    // a row the filter refuses is not counted, and collect passes it over:
    // the thresholds are those of the allowed rows alone, as on the CPU
    const bool counted = row_allowed(b.allowed, it.row0 + r);
#pragma unroll
    for (int t = 0; t < G; ++t) {
        if (t >= it.npairs) break;
        d[t] = min(d[t], b.dclamp);  // a no-op but for damaged codes
        static_cast<DT *>(b.dist)[out[t] + r] = (DT)d[t];
        if (counted) atomicAdd(&hist[t * b.nbins + (d[t] >> b.shift)], 1u);
    }
}

// Step 1.  Up to G queries that probe one list against a chunk of its rows:
// each code is read once for all of them.  Q, B, W > 0 fix the bit counts and
// the words per plane at compile time (the loops unroll, a row's words load at
// once, the query words are read from shared memory at fixed offsets); 0
// reads them from the batch.
template <typename DT, int G, int Q, int B, int W>
__global__ void __launch_bounds__(kThreads) xfbq_distance_kernel(const Batch b,
                                                                 const DistItem *items)
{
    extern __shared__ __align__(16) unsigned char smem[];
    const DistItem it = items[blockIdx.x];
    unsigned *hist = reinterpret_cast<unsigned *>(smem);
    uint64_t *xs = reinterpret_cast<uint64_t *>(smem + (size_t)G * b.nbins * 4 + 8 -
                                                ((size_t)G * b.nbins * 4) % 8);
    for (int i = threadIdx.x; i < G * b.nbins; i += blockDim.x) hist[i] = 0;
    const uint64_t *xq[G];
    long long out[G];
#pragma unroll
    for (int t = 0; t < G; ++t) {
        const int pair = it.pair0 + (t < it.npairs ? t : it.npairs - 1);
        const int query = b.pair_query[pair];
        out[t] = b.dstart[query] + b.pair_pos0[pair];
        xq[t] = b.query_codes + (long long)query * b.qw;
        if (b.codes_in_shared) {
            for (int i = threadIdx.x; i < b.qw; i += blockDim.x) xs[t * b.qw + i] = xq[t][i];
            xq[t] = xs + t * b.qw;
        }
    }
    __syncthreads();
    for (int r = it.begin + threadIdx.x; r < it.end; r += blockDim.x) {
        unsigned d[G];
        xfbq_row_d<G, Q, B, W>(
            xq, reinterpret_cast<const uint64_t *>(b.codes + (it.row0 + r) * b.code_stride),
            b.qbits, b.bbits, b.words, d);
        record<DT, G>(b, it, hist, out, d, r);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < it.npairs * b.nbins; i += blockDim.x)
        if (hist[i]) {
            const int t = i / b.nbins;
            const int q = b.pair_query[it.pair0 + t];
            atomicAdd(&b.hist[(long long)q * b.nbins + i % b.nbins], hist[i]);
        }
}

// Step 2, in one thread of the block: if the want-th smallest D falls in
// this thread's bins [lo, hi) (before of them below lo), its bin into *found.
__device__ __forceinline__ void find_bin(const unsigned *h, int lo, int hi, long long before,
                                         long long total, long long want, int *found)
{
    if (want > 0 && before < want && want <= total) {
        long long c = before;
        for (int i = lo; i < hi; ++i) {
            c += h[i];
            if (c >= want) {
                *found = i;
                return;
            }
        }
    }
}

// Step 2.  One block of kThreads per query.
__global__ void __launch_bounds__(kThreads) xfbq_threshold_kernel(const Batch b)
{
    __shared__ long long prefix[kThreads];
    __shared__ int found, lowest, median;
    const int q = blockIdx.x, tid = threadIdx.x;
    const unsigned *h = b.hist + (long long)q * b.nbins;
    const int scanned = b.scanned[q];
    const long long want = b.k < scanned ? b.k : scanned;
    const int per = (b.nbins + kThreads - 1) / kThreads;
    const int lo = min(tid * per, b.nbins), hi = min(lo + per, b.nbins);
    long long mine = 0;
    for (int i = lo; i < hi; ++i) mine += h[i];
    prefix[tid] = mine;
    if (tid == 0) found = lowest = median = b.nbins - 1;
    __syncthreads();
    for (int o = 1; o < kThreads; o <<= 1) {  // inclusive scan
        const long long v = tid >= o ? prefix[tid - o] : 0;
        __syncthreads();
        prefix[tid] += v;
        __syncthreads();
    }
    const long long before = prefix[tid] - mine;
    find_bin(h, lo, hi, before, prefix[tid], want, &found);
    if (b.spread_q16 > 0) {
        find_bin(h, lo, hi, before, prefix[tid], 1, &lowest);
        find_bin(h, lo, hi, before, prefix[tid], ((long long)scanned + 1) / 2, &median);
    }
    __syncthreads();
    const long long window =
        b.spread_q16 > 0 ? sml_xfbq_window_bins(b.extra_bins, b.spread_q16, lowest, median)
                         : b.extra_bins;
    const int c = (int)min((long long)found + window, (long long)b.nbins - 1);
    if (c >= lo && c < hi) {
        long long n = before;
        for (int i = lo; i <= c; ++i) n += h[i];
        b.count[q] = want > 0 ? (int)n : 0;
        b.limit[q] = (unsigned)((((unsigned long long)c + 1) << b.shift) - 1);
        b.fill[q] = 0;
    }
}

// Step 3a.  kThreads per item; a warp ballots 32 positions at a time and
// appends the candidates' rows with one atomic.
template <typename DT>
__global__ void __launch_bounds__(kThreads) xfbq_collect_kernel(const Batch b,
                                                                const CollectItem *items)
{
    const CollectItem it = items[blockIdx.x];
    const int q = it.q;
    const int count = b.count[q];
    if (count == 0) return;
    const unsigned limit = b.limit[q];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const DT *dist = static_cast<const DT *>(b.dist) + b.dstart[q];
    const int r0 = b.run_start[q], nr = b.run_count[q];
    for (int r = 0; r < nr; ++r) {
        const Run run = b.runs[r0 + r];
        const int lo = max(run.pos0, it.begin), hi = min(run.pos0 + run.rows, it.end);
        for (int base = lo + warp * 32; base < hi; base += warps * 32) {
            const int pos = base + lane;
            const bool mine = pos < hi && dist[pos] <= limit &&
                              row_allowed(b.allowed, run.row0 + (pos - run.pos0));
            const unsigned mask = __ballot_sync(kFullMask, mine);
            if (mask == 0) continue;
            int first = 0;
            if (lane == 0) first = atomicAdd(&b.fill[q], __popc(mask));
            first = __shfl_sync(kFullMask, first, 0);
            const int slot = first + __popc(mask & ((1u << lane) - 1));
            if (mine && slot < count) {
                b.cand_rows[b.cstart[q] + slot] = (int)(run.row0 + (pos - run.pos0));
                b.cand_query[b.cstart[q] + slot] = q;
            }
        }
    }
}

// Step 3b.  The keys of a pass's candidates: L lanes per candidate (8, or
// 32 past 128 dimensions, where eight lanes read 16 bytes of a row at a time
// and wait out a long chain of loads), 32 / L candidates per warp at a
// time; padding slots (row -1) are skipped.  What a candidate's key is:
enum class Rerank {
    exact,    // from its floats
    shadow,   // from the fp16 shadow: within fp16_bound of the exact key
    refine    // from its floats where its shadow key is at most its query's
              // threshold, else +inf
};

template <Rerank R, int L>
__global__ void __launch_bounds__(kThreads) xfbq_rerank_kernel(const Batch b)
{
    static_assert(L == 8 || L == 32, "lanes per candidate");
    constexpr int kPer = 32 / L;  // candidates per warp at a time
    const int lane = threadIdx.x & 31, sub = lane % L;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    for (long long base = ((long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * kPer;
         base < b.cand_total; base += warps * kPer) {
        const long long c = base + lane / L;
        const int row = c < b.cand_total ? b.cand_rows[c] : -1;
        const int q = row >= 0 ? b.cand_query[c] : 0;
        // every lane of the L takes the same branch: the shuffles below are
        // over the whole warp
        const bool skip = R == Rerank::refine && row >= 0 && !(b.cand_keys[c] <= b.thresholds[q]);
        float s = 0;
        if (row >= 0 && !skip) {
            const float *x = b.queries + (long long)q * b.dim;
            if constexpr (R == Rerank::shadow) {
                // y ~ y^ inv_scale: y^ holds y scaled to a norm in [64, 128)
                const __half *y = b.half_rows + (long long)row * b.dim;
                const float inv = b.inv_scale[row];
                if (b.l2) {
                    for (int j = sub; j < b.dim; j += L) {
                        const float d = x[j] - __half2float(y[j]) * inv;
                        s = fmaf(d, d, s);
                    }
                } else {
                    for (int j = sub; j < b.dim; j += L) s = fmaf(x[j], __half2float(y[j]), s);
                }
            } else {
                const float *y =
                    reinterpret_cast<const float *>(b.vectors + row * b.vector_stride);
                if (b.l2) {
                    for (int j = sub; j < b.dim; j += L) {
                        const float d = x[j] - y[j];
                        s = fmaf(d, d, s);
                    }
                } else {
                    for (int j = sub; j < b.dim; j += L) s = fmaf(x[j], y[j], s);
                }
            }
        }
#pragma unroll
        for (int o = L / 2; o > 0; o >>= 1) s += __shfl_xor_sync(kFullMask, s, o);
        if constexpr (R == Rerank::shadow) {
            if (!b.l2) s *= b.inv_scale[row >= 0 ? row : 0];  // a power of two: exact
        }
        if (sub == 0 && row >= 0) b.cand_keys[c] = skip ? INFINITY : b.l2 ? s : -s;
    }
}

// A bound on |shadow key - exact key| for a query of norm xn and rows of norm
// at most m, dim components.  With s the row's scale (s ||y|| in [64, 128)),
// each |y_j - y^_j / s| <= 2^-11 |y_j| + 2^-25 / s (fp16 rounding, subnormals
// below 2^-14), and 1 / s <= ||y|| / 64, so the rows differ by at most
// d = ||y|| (2^-11 + 2^-31 sqrt(dim)) in norm.  IP: |<x, y - y^/s>| <= xn d.
// L2: |sum (x-y)^2 - (x-y^/s)^2| <= d (2 xn + 2 m + d).  Each float sum
// adds at most (dim + 4) 2^-24 of the sum of its terms' magnitudes (L
// interleaved partial sums, log2 L shuffles: at most dim / L + log2 L
// roundings in a chain; L = 32 only past 128 dimensions), twice over;
// doubled for margin.
__device__ __forceinline__ float fp16_bound(float xn, float m, int dim, bool l2)
{
    const float d = m * (0x1p-11f + 0x1p-31f * sqrtf((float)dim));
    const float sums = 4.0f * (dim + 4) * 0x1p-24f;
    if (l2) return 2.0f * d * (2.0f * xn + 2.0f * m + d) + sums * (xn + m) * (xn + m) + 0x1p-100f;
    return 2.0f * xn * d + sums * xn * (m + d) + 0x1p-100f;
}

// Step 3c (shadow): per query of the pass (a warp each), the threshold of its
// refinement: the k-th best shadow key plus twice fp16_bound (+inf where it
// has fewer than k candidates).  A true top-k candidate c has shadow key <=
// exact(c) + E <= exact k-th + E, and the k candidates with shadow keys up to
// the k-th have exact keys up to it + E, so the exact k-th <= it + E.
__global__ void xfbq_refine_threshold_kernel(const Batch b, int first, int n,
                                             const float *kth_keys, long long ld)
{
    const int i = (int)(((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
    if (i >= n) return;
    const float *x = b.queries + (long long)(first + i) * b.dim;
    float s = 0;
    for (int j = threadIdx.x & 31; j < b.dim; j += 32) s = fmaf(x[j], x[j], s);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(kFullMask, s, o);
    if ((threadIdx.x & 31) == 0) {
        // read the k-th key only where there is one: past a query's
        // candidates radix selection (k > 2048) leaves the slots as they were
        const float kth =
            b.count[first + i] < b.k ? INFINITY : kth_keys[(long long)i * ld + (b.k - 1)];
        b.thresholds[first + i] = kth + 2.0f * fp16_bound(sqrtf(s), b.max_norm, b.dim, b.l2);
    }
}

// The host's plan for a batch of queries [q0, q0 + nq) (the planner of
// cuda_ivf.cuh, segments of kXfbqShape).  It is written into the device's
// pinned buffer, laid out as its device copy will be, so that it goes to the
// GPU in one asynchronous copy (fresh heap arrays cost page faults on every
// search, and copies from pageable memory wait for the driver;
// docs/benchmarks.md, "Tried and dropped").
struct Plan {
    int nq;
    int group;         // G of the distance kernel
    char *base;        // the block, in the pinned buffer
    size_t upload;     // [0, upload) of the block goes to the device as it is
    Run *runs;         // per query, in query order
    int nruns;
    int *run_start;    // per query: first run, runs, scanned, first collect item
    int *run_count;
    int *scanned;
    int *citem_start;
    long long *dstart;
    int *pair_query;   // one pair per run, grouped by list
    int *pair_pos0;
    DistItem *items;
    int nitems;
    CollectItem *citems;
    int ncitems;
    long long *cstart; // host only: a selection pass's segments, then the counts
    int *count;
    long long dist_total;
    int most;          // largest scanned
};

// A query's D segment: its runs back to back, padded to 8 positions.
constexpr SegmentShape kXfbqShape{1, 8};

size_t carve_plan(void *base, int nq, long long runs, long long items, long long citems, Plan *p)
{
    Carve c(base);
    const size_t q = (size_t)nq;
    p->runs = c.take<Run>((size_t)(runs + 1));
    p->run_start = c.take<int>(q);
    p->run_count = c.take<int>(q);
    p->scanned = c.take<int>(q);
    p->citem_start = c.take<int>(q);
    p->dstart = c.take<long long>(q);
    p->pair_query = c.take<int>((size_t)(runs + 1));
    p->pair_pos0 = c.take<int>((size_t)(runs + 1));
    p->items = c.take<DistItem>((size_t)(items + 1));
    p->citems = c.take<CollectItem>((size_t)(citems + 1));
    p->upload = c.used();
    p->cstart = c.take<long long>(q);
    p->count = c.take<int>(q);
    return c.used();
}

// The runs of every query and their D segments; the pairs (query, list)
// grouped by list, G at a time, cut into chunks of rows; the collect items.
// The counting pass sizes the block before it is filled.
simil_status plan_batch(Device *dev, const sml_ivf_scan_args &a, long long q0, int nq, int group,
                        Plan *p)
{
    memset(p, 0, sizeof *p);
    p->nq = nq;
    p->group = group;
    PairCount count;
    SML_TRY(count_pairs(a, q0, nq, kXfbqShape, &count));
    sml_trace_mark("xfbq: plan: count");
    long long items = 0, citems = 0;
    for (int64_t l = 0; l < a.lists.nlist; ++l)
        items += (count.of(l) + group - 1) / group * ((a.lists.size[l] + kChunk - 1) / kChunk);
    for (long long q = q0; q < q0 + nq; ++q)
        citems += (segment_positions(a, q, SegmentShape{1, 1}) + kChunk - 1) / kChunk;
    char *base;
    SML_TRY(device_pinned(dev, carve_plan(nullptr, nq, count.pairs, items, citems, p),
                          reinterpret_cast<void **>(&base)));
    carve_plan(base, nq, count.pairs, items, citems, p);
    p->base = base;
    sml_trace_mark("xfbq: plan: items counted, pinned block");
    const Segments seg{p->dstart, p->scanned, p->run_start, p->run_count};
    p->most = place_pairs(a, q0, nq, kXfbqShape, &count, seg, [&](const PlacedPair &e) {
        p->runs[e.run] = Run{a.lists.offset[e.list], (int)a.lists.size[e.list], e.pos0};
        p->pair_query[e.slot] = e.query;
        p->pair_pos0[e.slot] = e.pos0;
    });
    p->nruns = (int)count.pairs;
    p->dist_total = count.positions;
    sml_trace_mark("xfbq: plan: pairs placed");
    // by_list[l] is now where list l's pairs end; they start at by_list[l - 1]
    for (int64_t l = 0; l < a.lists.nlist; ++l) {
        const long long first = l > 0 ? count.by_list[l - 1] : 0, end = count.by_list[l];
        const int rows = (int)a.lists.size[l];
        for (long long g = first; g < end; g += group) {
            const int pairs = (int)(end - g < group ? end - g : group);
            for (int r = 0; r < rows; r += kChunk)
                p->items[p->nitems++] =
                    DistItem{a.lists.offset[l], r, min(rows, r + kChunk), (int)g, pairs};
        }
    }
    for (int q = 0; q < nq; ++q) {
        p->citem_start[q] = p->ncitems;
        for (int c = 0; c < p->scanned[q]; c += kChunk)
            p->citems[p->ncitems++] = CollectItem{q, c, min(p->scanned[q], c + kChunk)};
    }
    assert(p->nitems == items && p->ncitems == citems);
    return SIMIL_OK;
}

// Device memory of a batch, carved from the workspace: the plan's copy, then
// the scratch.
struct Scratch {
    Run *runs;
    int *run_start;
    int *run_count;
    int *scanned;
    long long *dstart;
    int *pair_query;
    int *pair_pos0;
    DistItem *items;
    CollectItem *citems;
    void *dist;
    unsigned *hist;
    unsigned *limit;
    int *count;
    int *fill;
    long long *cstart;
    float *cand_keys;
    int *cand_rows;
    int *cand_query;
    float *final_keys;
    int *final_idx;
    float *thresholds;  // per query, with a shadow
    void *radix;
    size_t radix_bytes;
    uint64_t *query_codes;  // where the caller gives none
    float *rotated;         //   and the queries rotated, with RR
};

// The selection's scratch of a batch of nq queries (both paths).
void carve_select(Carve &c, const sml_xfbq_scan_args *a, int nq, long long cand_cap, Scratch *s)
{
    const size_t q = (size_t)nq, k = (size_t)a->scan.k;
    s->limit = c.take<unsigned>(q);
    s->count = c.take<int>(q);
    s->fill = c.take<int>(q);
    s->cstart = c.take<long long>(q);
    s->cand_keys = c.take<float>((size_t)cand_cap);
    s->cand_rows = c.take<int>((size_t)cand_cap);
    s->cand_query = c.take<int>((size_t)cand_cap);
    s->final_keys = c.take<float>(q * k);
    s->final_idx = c.take<int>(q * k);
    s->thresholds = c.take<float>(a->shadow ? q : 0);
    s->radix = nullptr;
    s->radix_bytes = 0;
    if (a->scan.k > kMaxWarpSelectK) {
        s->radix_bytes = select_rows_radix_workspace(nq, 1, (int)a->scan.k);
        s->radix = c.take<char>(s->radix_bytes);
    }
    s->query_codes = c.take<uint64_t>(a->query_codes ? 0 : q * (size_t)(a->query_bits * a->words));
    s->rotated =
        c.take<float>(a->query_codes || !a->rotation ? 0 : q * (size_t)a->scan.dim);
}

size_t carve_scratch(void *base, const sml_xfbq_scan_args *a, const Plan &p, size_t dsize,
                     long long cand_cap, Scratch *s)
{
    Carve c(base);
    // the plan's copy, at the host block's offsets
    c.take<char>(p.upload);
    s->runs = mirror(base, p.base, p.runs);
    s->run_start = mirror(base, p.base, p.run_start);
    s->run_count = mirror(base, p.base, p.run_count);
    s->scanned = mirror(base, p.base, p.scanned);
    s->dstart = mirror(base, p.base, p.dstart);
    s->pair_query = mirror(base, p.base, p.pair_query);
    s->pair_pos0 = mirror(base, p.base, p.pair_pos0);
    s->items = mirror(base, p.base, p.items);
    s->citems = mirror(base, p.base, p.citems);
    s->dist = c.take<char>(dsize * (size_t)(p.dist_total + 8));
    s->hist = c.take<unsigned>((size_t)p.nq * (size_t)a->nbins);
    carve_select(c, a, p.nq, cand_cap, s);
    return c.used();
}

template <typename DT, int G, int Q, int B, int W>
simil_status launch_distances_as(const Batch &b, const DistItem *items, int n, cudaStream_t st)
{
    size_t smem = (size_t)G * b.nbins * 4 + 8;
    if (b.codes_in_shared) smem += (size_t)G * b.qw * 8;
    const auto kernel = xfbq_distance_kernel<DT, G, Q, B, W>;
    SML_CUDA_TRY(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kernel<<<n, kThreads, smem, st>>>(b, items);
    SML_LAUNCH_TRY("xfbq_distance_kernel");
    return SIMIL_OK;
}

// The default 4x3 bits on up to 128 dimensions get an unrolled kernel per
// number of words (more words would spill its registers); everything else
// the generic one.
template <typename DT, int G>
simil_status launch_distances(const Batch &b, const DistItem *items, int n, cudaStream_t st)
{
    if (n == 0) return SIMIL_OK;
    if constexpr (sizeof(DT) == 2) {
        if (b.qbits == 4 && b.bbits == 3 && b.codes_in_shared) {
            switch (b.words) {
            case 1: return launch_distances_as<DT, G, 4, 3, 1>(b, items, n, st);
            case 2: return launch_distances_as<DT, G, 4, 3, 2>(b, items, n, st);
            default: break;
            }
        }
    }
    return launch_distances_as<DT, G, 0, 0, 0>(b, items, n, st);
}

// Step 3b's kernel R over the pass's candidates: 32 lanes a candidate past
// 128 dimensions, else 8 (xfbq_rerank_kernel).
template <Rerank R>
void launch_rerank(const Batch &b, unsigned grid, cudaStream_t st)
{
    if (b.dim > 128)
        xfbq_rerank_kernel<R, 32><<<grid, kThreads, 0, st>>>(b);
    else
        xfbq_rerank_kernel<R, 8><<<grid, kThreads, 0, st>>>(b);
}

// Steps 3 and 4 for batch queries [first, first + n), whose candidates fit:
// count (host, by batch query) sizes their slots, laid out in cstart (host),
// and collect(first, n) fills the slots with their rows.
template <typename Collect>
simil_status select_pass(Device *dev, const sml_xfbq_scan_args *a, const int *count,
                         long long *cstart, Batch &b, const Scratch &s, long long q0, int first,
                         int n, cudaStream_t st, Collect collect)
{
    long long at = 0;
    int most = 1;
    for (int q = 0; q < n; ++q) {
        cstart[q] = at;
        at += pad_to(count[first + q], 4);
        most = count[first + q] > most ? count[first + q] : most;
    }
    // cstart is indexed by batch query: the pass's entries go to its queries
    SML_CUDA_TRY(
        cudaMemcpyAsync(s.cstart + first, cstart, 8 * (size_t)n, cudaMemcpyHostToDevice, st));
    SML_CUDA_TRY(cudaMemsetAsync(s.cand_rows, 0xff, 4 * (size_t)(at + 1), st));
    b.cstart = s.cstart;
    b.cand_total = at;
    if (at > 0) {
        SML_TRY(collect(first, n));
        const long long blocks = (at + 31) / 32, cap = (long long)dev->sm_count * 8;
        const unsigned grid = (unsigned)(blocks < cap ? blocks : cap);
        trace_mark(st, "xfbq: collect");
        if (b.half_rows == nullptr) {
            launch_rerank<Rerank::exact>(b, grid, st);
            SML_LAUNCH_TRY("xfbq_rerank_kernel");
        } else {
            launch_rerank<Rerank::shadow>(b, grid, st);
            SML_LAUNCH_TRY("xfbq_rerank_kernel (shadow)");
            const RaggedRows approx{s.cand_keys, s.cand_rows, s.cstart + first,
                                    s.count + first,  n,           most};
            SML_TRY(select_ragged(approx, (int)a->scan.k, s.final_keys, s.final_idx, a->scan.k,
                                  s.radix, s.radix_bytes, st));
            xfbq_refine_threshold_kernel<<<(unsigned)((n + 3) / 4), 128, 0, st>>>(
                b, first, n, s.final_keys, a->scan.k);
            SML_LAUNCH_TRY("xfbq_refine_threshold_kernel");
            launch_rerank<Rerank::refine>(b, grid, st);
            SML_LAUNCH_TRY("xfbq_rerank_kernel (refine)");
        }
        trace_mark(st, "xfbq: re-rank");
    }
    const RaggedRows rows{s.cand_keys, s.cand_rows, s.cstart + first, s.count + first, n, most};
    SML_TRY(select_ragged(rows, (int)a->scan.k, s.final_keys, s.final_idx, a->scan.k, s.radix,
                          s.radix_bytes, st));
    trace_mark(st, "xfbq: select");
    return finish_to_host(dev, a->scan, q0 + first, n, s.final_keys, s.final_idx);
}

// The selection passes of a batch of nq queries: runs of queries whose
// candidates (count, host) fit cand_cap, each a select_pass.
template <typename Collect>
simil_status select_passes(Device *dev, const sml_xfbq_scan_args *a, const int *count,
                           long long *cstart, long long cand_cap, Batch &b, const Scratch &s,
                           long long q0, int nq, cudaStream_t st, Collect collect)
{
    for (int first = 0; first < nq;) {
        int n = 0;
        long long total = 0;
        while (first + n < nq && (n == 0 || total + pad_to(count[first + n], 4) <= cand_cap))
            total += pad_to(count[first + n++], 4);
        SML_TRY(select_pass(dev, a, count, cstart, b, s, q0, first, n, st, collect));
        first += n;
    }
    return SIMIL_OK;
}

// What every batch's kernels share: the queries, the rows' floats (or their
// shadow), the bins, k and the selection scratch of s.
void batch_common(const sml_xfbq_scan_args *a, long long q0, const Scratch &s, Batch *b)
{
    const sml_ivf_scan_args &sc = a->scan;
    b->queries = sc.queries + q0 * sc.dim;
    b->qw = (int)(a->query_bits * a->words);
    b->qbits = a->query_bits;
    b->bbits = a->base_bits;
    b->words = (int)a->words;
    b->dim = (int)sc.dim;
    b->codes = static_cast<const char *>(sc.lists.codes);
    b->code_stride = (long long)sc.lists.code_stride;
    b->vectors = reinterpret_cast<const char *>(a->vectors);
    b->vector_stride = (long long)a->vector_stride;
    if (a->shadow != nullptr) {
        const Shadow *sh = static_cast<const Shadow *>(a->shadow);
        assert(sh->dim == sc.dim);
        b->half_rows = sh->rows;
        b->inv_scale = sh->inv_scale;
        b->max_norm = sh->max_norm;
        b->thresholds = s.thresholds;
    }
    b->nbins = (int)a->nbins;
    b->shift = a->bin_shift;
    b->dclamp = (unsigned)(((unsigned long long)a->nbins << a->bin_shift) - 1);
    b->extra_bins = (int)a->extra_bins;
    b->spread_q16 = a->spread_q16;
    b->k = (int)sc.k;
    b->limit = s.limit;
    b->count = s.count;
    b->fill = s.fill;
    b->cand_keys = s.cand_keys;
    b->cand_rows = s.cand_rows;
    b->cand_query = s.cand_query;
    b->l2 = sc.metric == SIMIL_METRIC_L2;
}

// The queries' codes: the caller's, or coded here into s.query_codes (with
// RR, from the queries rotated into s.rotated).
simil_status query_codes_of(const sml_xfbq_scan_args *a, long long q0, int nq, const Scratch &s,
                            cudaStream_t st, const uint64_t **out)
{
    if (a->query_codes) {
        *out = a->query_codes + q0 * a->query_bits * a->words;
        return SIMIL_OK;
    }
    const sml_ivf_scan_args &sc = a->scan;
    const float *coded = sc.queries + q0 * sc.dim;
    if (a->rotation) {
        SML_TRY(launch_xfbq_rotate(coded, a->rotation, (int)sc.dim, nq, s.rotated, st));
        coded = s.rotated;
    }
    const sml_xfbq_encode_args enc{coded, nq, sc.dim, a->query_bits,
                                   a->words, a->alpha, a->normalize, s.query_codes};
    SML_TRY(launch_xfbq_encode(&enc, st));
    *out = s.query_codes;
    return SIMIL_OK;
}

// Queries [q0, q0 + nq) of a (device queries, their codes or none, host
// probes).
template <typename DT>
simil_status run_batch(Device *dev, const sml_xfbq_scan_args *a, long long q0, int nq,
                       const uint32_t *allowed)
{
    cudaStream_t st = dev->stream[0];
    const sml_ivf_scan_args &sc = a->scan;
    const int group = (size_t)8 * a->nbins * 4 <= kSharedHist ? 8 : 4;
    Plan p;
    SML_TRY(plan_batch(dev, sc, q0, nq, group, &p));
    trace_mark(st, "xfbq: plan");
    long long cand_cap = kCandBudget > (long long)p.most + 4 ? kCandBudget : (long long)p.most + 4;
    Scratch s{};
    char *ws = nullptr;
    SML_TRY(device_workspace(dev, carve_scratch(nullptr, a, p, sizeof(DT), cand_cap, &s),
                             reinterpret_cast<void **>(&ws)));
    carve_scratch(ws, a, p, sizeof(DT), cand_cap, &s);
    SML_CUDA_TRY(cudaMemcpyAsync(ws, p.base, p.upload, cudaMemcpyHostToDevice, st));
    Batch b{};
    SML_TRY(query_codes_of(a, q0, nq, s, st, &b.query_codes));
    trace_mark(st, "xfbq: workspace, plan upload, query codes");
    batch_common(a, q0, s, &b);
    b.runs = s.runs;
    b.run_start = s.run_start;
    b.run_count = s.run_count;
    b.scanned = s.scanned;
    b.dstart = s.dstart;
    b.pair_query = s.pair_query;
    b.pair_pos0 = s.pair_pos0;
    b.dist = s.dist;
    b.hist = s.hist;
    b.codes_in_shared = (size_t)group * b.qw * 8 <= kSharedCodes;
    b.allowed = allowed;
    SML_CUDA_TRY(cudaMemsetAsync(s.hist, 0, 4 * (size_t)nq * a->nbins, st));
    SML_TRY((group == 8 ? launch_distances<DT, 8>(b, s.items, p.nitems, st)
                        : launch_distances<DT, 4>(b, s.items, p.nitems, st)));
    trace_mark(st, "xfbq: distances");
    xfbq_threshold_kernel<<<nq, kThreads, 0, st>>>(b);
    SML_LAUNCH_TRY("xfbq_threshold_kernel");
    SML_CUDA_TRY(cudaMemcpyAsync(p.count, s.count, 4 * (size_t)nq, cudaMemcpyDeviceToHost, st));
    SML_CUDA_TRY(cudaStreamSynchronize(st));
    trace_mark(st, "xfbq: thresholds");
    return select_passes(dev, a, p.count, p.cstart, cand_cap, b, s, q0, nq, st,
                         [&](int first, int n) {
                             const int items = (first + n < p.nq ? p.citem_start[first + n]
                                                                 : p.ncitems) -
                                               p.citem_start[first];
                             if (items > 0) {
                                 xfbq_collect_kernel<DT><<<items, kThreads, 0, st>>>(
                                     b, s.citems + p.citem_start[first]);
                                 SML_LAUNCH_TRY("xfbq_collect_kernel");
                             }
                             return SIMIL_OK;
                         });
}

// Queries [q0, q0 + nq) of a on the XOR/popcount path, in batches whose D
// fit kDistBudget.
template <typename DT>
simil_status run_batches(Device *dev, const sml_xfbq_scan_args *a, long long q0, int nq,
                         const uint32_t *allowed)
{
    for (int sub = 0; sub < nq;) {
        const int n = plan_batch_queries(a->scan, q0 + sub, kXfbqShape, sizeof(DT), kDistBudget,
                                         nq - sub);
        SML_TRY(run_batch<DT>(dev, a, q0 + sub, n, allowed));
        sub += n;
    }
    return SIMIL_OK;
}

// ---- flat XFBQ on tensor cores (cuda_xfbq_mma.cuh) ----------------------

// -1: where it fits (flat_mma_fits); 0: never; 1: also below the size where
// the chunk minima bound anything (sml_cuda_xfbq_tensor).
std::atomic<int> g_flat_mma{-1};

constexpr int kFlatBatch = kXfbqMmaMaxQueries;         // queries per batch
constexpr int kFlatCapMin = 4096;                     // buffered rows per query
constexpr int kFlatCapMax = 1 << 18;
// a query's candidates (at most its buffered rows) fit one selection pass
static_assert(kFlatCapMax <= kCandBudget, "buffer past the selection budget");
constexpr size_t kFlatBufBudget = (size_t)1 << 30;    // bytes of buffered rows per batch

// Whether flat XFBQ scan a runs on tensor cores: one list, no filter, the
// window of the range alone (the spread needs every query's median D), bits
// and dimensions that fit int8 fragments; by default also enough chunks that
// the K-th smallest chunk minimum bounds D well.
bool flat_mma_fits(const sml_xfbq_scan_args *a, int sm_count)
{
    const sml_ivf_scan_args &sc = a->scan;
    const int mode = g_flat_mma.load();
    if (mode == 0 || sc.lists.nlist != 1 || sc.filter != nullptr || a->spread_q16 != 0 ||
        !xfbq_mma_fits((int)a->query_bits, (int)a->base_bits, (int)sc.dim))
        return false;
    const long long n = sc.lists.size[0];
    const int rows = xfbq_mma_rows_per_block(n, sm_count);
    const long long chunks = (n + rows - 1) / rows;
    return n > 0 && (mode == 1 || chunks >= 16 * sc.k);
}

// Queries [q0, q0 + nq) of flat XFBQ scan a on tensor cores: the chunk
// minima bound each query's limit; the rows under the bound are buffered,
// and their histogram gives the limit and count that the XOR/popcount path
// would find; the selection passes are that path's.  If a query's rows under
// its bound pass the buffer, the batch runs on the XOR/popcount path.
template <typename DT>
simil_status run_flat_mma(Device *dev, const sml_xfbq_scan_args *a, long long q0, int nq)
{
    cudaStream_t st = dev->stream[0];
    const sml_ivf_scan_args &sc = a->scan;
    XfbqMma m{};
    m.codes = static_cast<const char *>(sc.lists.codes);
    m.stride = (long long)sc.lists.code_stride;
    m.row0 = sc.lists.offset[0];
    m.n = (int)sc.lists.size[0];
    m.qbits = (int)a->query_bits;
    m.bbits = (int)a->base_bits;
    m.words = (int)a->words;
    m.dim = (int)sc.dim;
    m.nq = nq;
    m.shift = a->bin_shift;
    m.nbins = (int)a->nbins;
    m.rows_per_block = xfbq_mma_rows_per_block(m.n, dev->sm_count);
    m.sm_count = dev->sm_count;
    m.chunk_step = xfbq_mma_chunk_step(m.n, m.rows_per_block, sc.k < m.n ? sc.k : m.n);
    // rows buffered per query: what kFlatBufBudget allows, within
    // [kFlatCapMin, kFlatCapMax] (a small batch's lane keeps its buffer)
    const long long cap = (long long)(kFlatBufBudget / (8 * (size_t)nq));
    m.cap = (int)(cap < kFlatCapMin ? kFlatCapMin : cap > kFlatCapMax ? kFlatCapMax : cap);
    m.cap = m.cap < m.n ? m.cap : m.n;
    Scratch s{};
    auto carve = [&](Carve &c) {
        carve_select(c, a, nq, kCandBudget, &s);
        xfbq_mma_carve(c, &m);
    };
    Carve sizing(nullptr);
    carve(sizing);
    char *ws = nullptr;
    SML_TRY(device_workspace(dev, sizing.used(), reinterpret_cast<void **>(&ws)));
    Carve c(ws);
    carve(c);
    // host: the selection passes' segments, the counts
    char *host;
    SML_TRY(device_pinned(dev, (size_t)nq * 16, reinterpret_cast<void **>(&host)));
    long long *cstart = reinterpret_cast<long long *>(host);
    int *count = reinterpret_cast<int *>(host + (size_t)nq * 8);
    Batch b{};
    SML_TRY(query_codes_of(a, q0, nq, s, st, &m.query_codes));
    batch_common(a, q0, s, &b);
    m.dclamp = b.dclamp;
    b.hist = m.hist;
    b.scanned = m.scanned;
    SML_TRY(xfbq_mma_prepare(m, st));
    SML_CUDA_TRY(cudaMemsetAsync(m.hist, 0, 4 * (size_t)nq * a->nbins, st));
    trace_mark(st, "xfbq: tensor cores: workspace, query codes, levels");
    SML_TRY(xfbq_mma_chunk_minima(m, st));
    trace_mark(st, "xfbq: tensor cores: chunk minima");
    xfbq_threshold_kernel<<<nq, kThreads, 0, st>>>(b);  // s.limit: each query's bound
    SML_LAUNCH_TRY("xfbq_threshold_kernel (bound)");
    SML_CUDA_TRY(cudaMemsetAsync(m.fill, 0, 4 * (size_t)nq, st));
    SML_TRY(xfbq_mma_collect(m, s.limit, st));
    trace_mark(st, "xfbq: tensor cores: rows under the bounds");
    SML_CUDA_TRY(cudaMemcpyAsync(count, m.fill, 4 * (size_t)nq, cudaMemcpyDeviceToHost, st));
    SML_CUDA_TRY(cudaStreamSynchronize(st));
    int most = 0;
    long long buffered = 0;
    for (int q = 0; q < nq; ++q) {
        most = count[q] > most ? count[q] : most;
        buffered += count[q];
    }
    // past the buffer: a bound far above the limit (few chunks for k, or a
    // window that takes most rows); the popcount path needs no bound
    if (most > m.cap) return run_batches<DT>(dev, a, q0, nq, nullptr);
    xfbq_threshold_kernel<<<nq, kThreads, 0, st>>>(b);  // the limits and counts
    SML_LAUNCH_TRY("xfbq_threshold_kernel");
    SML_CUDA_TRY(cudaMemcpyAsync(count, s.count, 4 * (size_t)nq, cudaMemcpyDeviceToHost, st));
    SML_CUDA_TRY(cudaStreamSynchronize(st));
    if (sml_trace_on()) {
        long long total = 0;
        for (int q = 0; q < nq; ++q) total += count[q];
        char what[160];
        snprintf(what, sizeof what,
                 "xfbq: tensor cores: thresholds (%d queries: %lld rows buffered, most %d; "
                 "%lld candidates)",
                 nq, buffered, most, total);
        sml_trace_mark(what);
    }
    return select_passes(dev, a, count, cstart, kCandBudget, b, s, q0, nq, st,
                         [&](int first, int n) {
                             return xfbq_mma_compact(m, s.limit, s.cstart, first, n,
                                                     s.cand_rows, s.cand_query, st);
                         });
}

}  // namespace

simil_status cuda_xfbq_scan(sml_backend *be, const sml_xfbq_scan_args *a)
{
    assert(sml_xfbq_scan_args_ok(a));
    const sml_ivf_scan_args &scan = a->scan;
    long long rows_end = 0;
    for (int64_t l = 0; l < scan.lists.nlist; ++l) {
        const long long end = scan.lists.offset[l] + scan.lists.size[l];
        rows_end = end > rows_end ? end : rows_end;
    }
    SML_RETURN_IF(rows_end >= INT32_MAX || scan.k >= INT32_MAX || a->nbins > 4096,
                  SIMIL_ERR_UNSUPPORTED,
                  "XFBQ on the GPU: at most 2^31 - 1 vectors and k below 2^31 (got %lld, k=%" PRId64
                  ")",
                  rows_end, scan.k);
    if (scan.nq == 0) return SIMIL_OK;
    const bool small = ((long long)a->nbins << a->bin_shift) <= 65536;  // D fits 16 bits
    const long long qw = a->query_bits * a->words;
    return ivf_locked(be, scan, [&](Device *dev, bool host_queries) {
        const uint32_t *allowed;
        SML_TRY(scan_rows_allowed(dev, scan, &allowed));
        const bool mma = flat_mma_fits(a, dev->sm_count);
        // the tensor-core path writes no D: its batches are bounded by queries alone
        const BatchLimits limits{kXfbqShape, mma ? (size_t)0 : small ? (size_t)2 : (size_t)4,
                                 kDistBudget, mma ? kFlatBatch : kMaxBatch};
        return scan_planned(dev, &scan, host_queries, limits,
                            [&](const sml_ivf_scan_args &batch, long long first, long long sub,
                                int n) {
                                sml_xfbq_scan_args x = *a;
                                x.scan = batch;
                                if (a->query_codes) x.query_codes = a->query_codes + first * qw;
                                if (mma)
                                    return small ? run_flat_mma<unsigned short>(dev, &x, sub, n)
                                                 : run_flat_mma<unsigned>(dev, &x, sub, n);
                                return small ? run_batch<unsigned short>(dev, &x, sub, n, allowed)
                                             : run_batch<unsigned>(dev, &x, sub, n, allowed);
                            });
    });
}

}  // namespace sml

extern "C" void sml_cuda_xfbq_tensor(int mode)
{
    sml::g_flat_mma.store(mode < 0 ? -1 : mode > 0 ? 1 : 0);
}
