// cuda_xfbq.cu: the XFBQ scan on the GPU (the XFBQ paper, section 4, "Fast
// K-NN search algorithm in CUDA"; backend.h, sml_xfbq_scan_args).
//
// A batch of queries goes through these steps, all on the device:
//  1. distances: D = sum 2^{(Q-1-i)+(B-1-j)} __popcll(X_i ^ Y_j) for every row
//     of every query's probed lists, written to a buffer (uint16 where D fits)
//     and counted into a histogram of D bins in shared memory, flushed to one
//     global histogram per query (nonzero bins only);
//  2. threshold: per query, the bin b of the K-th smallest D from the
//     histogram, the limit ((min(b + extra_bins, nbins-1) + 1) << shift) - 1
//     and the exact count of candidates under it (the paper's histogram
//     selection with its "extra distance");
//  3. collect: the rows under their query's limit are appended to the
//     query's segment (a ballot and one atomic per warp), then re-ranked:
//     exact keys from their floats;
//  4. selection of the k best per query (WarpSelect / BlockSelect over ragged
//     rows, radix past k = 2048; select.cuh) and the ids (launch_finish).
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
// Also here: the queries' codes (cuda_xfbq_encode: one thread per vector and
// word, the host encoder's arithmetic from core/xfbq_code.h): on the host
// they were a noticeable share of a search (docs/benchmarks.md, "XFBQ").
#include <string.h>

#include "core/alloc.h"
#include "core/xfbq_code.h"
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_kernels.cuh"
#include "cuda/cuda_util.cuh"
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
};

// Step 1, per row: D against the group's queries, stored and counted.
template <typename DT, int G>
__device__ __forceinline__ void record(const Batch &b, const DistItem &it, unsigned *hist,
                                       const long long (&out)[G], unsigned (&d)[G], int r)
{
#pragma unroll
    for (int t = 0; t < G; ++t) {
        if (t >= it.npairs) break;
        d[t] = min(d[t], b.dclamp);  // a no-op but for damaged codes
        static_cast<DT *>(b.dist)[out[t] + r] = (DT)d[t];
        atomicAdd(&hist[t * b.nbins + (d[t] >> b.shift)], 1u);
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
    if constexpr (Q > 0) {
        for (int r = it.begin + threadIdx.x; r < it.end; r += blockDim.x) {
            const uint64_t *y =
                reinterpret_cast<const uint64_t *>(b.codes + (it.row0 + r) * b.code_stride);
            uint64_t yw[B * W];
#pragma unroll
            for (int e = 0; e < B * W; ++e) yw[e] = __ldg(y + e);
            unsigned d[G];
#pragma unroll
            for (int t = 0; t < G; ++t) d[t] = 0;
#pragma unroll
            for (int j = 0; j < B; ++j)
#pragma unroll
                for (int i = 0; i < Q; ++i)
#pragma unroll
                    for (int t = 0; t < G; ++t) {
                        unsigned c = 0;
#pragma unroll
                        for (int w = 0; w < W; ++w) c += __popcll(xq[t][i * W + w] ^ yw[j * W + w]);
                        d[t] += c << ((Q - 1 - i) + (B - 1 - j));
                    }
            record<DT, G>(b, it, hist, out, d, r);
        }
    } else {
        for (int r = it.begin + threadIdx.x; r < it.end; r += blockDim.x) {
            const uint64_t *y =
                reinterpret_cast<const uint64_t *>(b.codes + (it.row0 + r) * b.code_stride);
            unsigned d[G];
#pragma unroll
            for (int t = 0; t < G; ++t) d[t] = 0;
            for (int j = 0; j < b.bbits; ++j)
                for (int w = 0; w < b.words; ++w) {
                    const uint64_t yw = __ldg(y + j * b.words + w);
                    for (int i = 0; i < b.qbits; ++i) {
                        const int sh = (b.qbits - 1 - i) + (b.bbits - 1 - j);
#pragma unroll
                        for (int t = 0; t < G; ++t)
                            d[t] += (unsigned)__popcll(xq[t][i * b.words + w] ^ yw) << sh;
                    }
                }
            record<DT, G>(b, it, hist, out, d, r);
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < it.npairs * b.nbins; i += blockDim.x)
        if (hist[i]) {
            const int t = i / b.nbins;
            const int q = b.pair_query[it.pair0 + t];
            atomicAdd(&b.hist[(long long)q * b.nbins + i % b.nbins], hist[i]);
        }
}

// Step 2.  One block of kThreads per query.
__global__ void __launch_bounds__(kThreads) xfbq_threshold_kernel(const Batch b)
{
    __shared__ long long prefix[kThreads];
    __shared__ int found;
    const int q = blockIdx.x, tid = threadIdx.x;
    const unsigned *h = b.hist + (long long)q * b.nbins;
    const int scanned = b.scanned[q];
    const long long want = b.k < scanned ? b.k : scanned;
    const int per = (b.nbins + kThreads - 1) / kThreads;
    const int lo = min(tid * per, b.nbins), hi = min(lo + per, b.nbins);
    long long mine = 0;
    for (int i = lo; i < hi; ++i) mine += h[i];
    prefix[tid] = mine;
    if (tid == 0) found = b.nbins - 1;
    __syncthreads();
    for (int o = 1; o < kThreads; o <<= 1) {  // inclusive scan
        const long long v = tid >= o ? prefix[tid - o] : 0;
        __syncthreads();
        prefix[tid] += v;
        __syncthreads();
    }
    const long long before = prefix[tid] - mine;
    if (want > 0 && before < want && want <= prefix[tid]) {
        long long c = before;
        for (int i = lo; i < hi; ++i) {
            c += h[i];
            if (c >= want) {
                found = i;
                break;
            }
        }
    }
    __syncthreads();
    const int c = min(found + b.extra_bins, b.nbins - 1);
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
            const bool mine = pos < hi && dist[pos] <= limit;
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

// Step 3b.  The exact keys of a pass's candidates: eight lanes per candidate,
// four candidates per warp at a time; padding slots (row -1) are skipped.
__global__ void __launch_bounds__(kThreads) xfbq_rerank_kernel(const Batch b)
{
    const int lane = threadIdx.x & 31, sub = lane & 7;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    for (long long base = ((long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * 4;
         base < b.cand_total; base += warps * 4) {
        const long long c = base + (lane >> 3);
        const int row = c < b.cand_total ? b.cand_rows[c] : -1;
        float s = 0;
        if (row >= 0) {
            const float *x = b.queries + (long long)b.cand_query[c] * b.dim;
            const float *y = reinterpret_cast<const float *>(b.vectors + row * b.vector_stride);
            if (b.l2) {
                for (int j = sub; j < b.dim; j += 8) {
                    const float d = x[j] - y[j];
                    s = fmaf(d, d, s);
                }
            } else {
                for (int j = sub; j < b.dim; j += 8) s = fmaf(x[j], y[j], s);
            }
        }
        s += __shfl_xor_sync(kFullMask, s, 4);
        s += __shfl_xor_sync(kFullMask, s, 2);
        s += __shfl_xor_sync(kFullMask, s, 1);
        if (sub == 0 && row >= 0) b.cand_keys[c] = b.l2 ? s : -s;
    }
}

long long pad4(long long x) { return (x + 3) / 4 * 4; }
size_t up(size_t x) { return (x + 255) / 256 * 256; }

// The host's plan for a batch of queries [q0, q0 + nq).  It is written into
// the device's pinned buffer, laid out as its device copy will be, so that it
// goes to the GPU in one asynchronous copy (fresh heap arrays cost page
// faults on every search, and copies from pageable memory wait for the
// driver; docs/benchmarks.md, "Tried and dropped").
struct Plan {
    int nq;
    int group;         // G of the distance kernel
    char *base;        // pinned: [0, upload) is copied to the device as it is
    size_t upload;
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

// Offsets of the plan's arrays in its block, the same on the host and the
// device; those past `upload` stay on the host.
struct PlanLayout {
    size_t runs, run_start, dstart, pair_query, items, citems, upload, run_list, cstart, total;
};

PlanLayout plan_layout(int nq, long long runs, long long items, long long citems)
{
    PlanLayout l{};
    size_t at = 0;
    auto take = [&](size_t bytes) {
        const size_t offset = at;
        at += up(bytes);
        return offset;
    };
    l.runs = take(sizeof(Run) * (size_t)(runs + 1));
    l.run_start = take(sizeof(int) * 4 * (size_t)nq);
    l.dstart = take(8 * (size_t)nq);
    l.pair_query = take(sizeof(int) * 2 * (size_t)(runs + 1));
    l.items = take(sizeof(DistItem) * (size_t)(items + 1));
    l.citems = take(sizeof(CollectItem) * (size_t)(citems + 1));
    l.upload = at;
    l.run_list = take(sizeof(int) * (size_t)(runs + 1));
    l.cstart = take((8 + 4) * (size_t)nq);
    l.total = at;
    return l;
}

bool probed(const sml_xfbq_scan_args *a, int64_t l) { return l >= 0 && a->list_size[l] > 0; }

// The runs of every query and their D segments; the pairs (query, list)
// grouped by list, G at a time, cut into chunks of rows; the collect items.
// A first pass counts them, so that the block is sized before it is filled.
simil_status plan_batch(Device *dev, const sml_xfbq_scan_args *a, long long q0, int nq,
                        int group, Plan *p)
{
    memset(p, 0, sizeof *p);
    p->nq = nq;
    p->group = group;
    long long *next = nullptr;  // per list: its pairs, then where its next pair goes
    SML_TRY(sml_calloc(reinterpret_cast<void **>(&next), (size_t)(a->nlist + 1), sizeof *next,
                       "XFBQ plan"));
    long long runs = 0, citems = 0, items = 0;
    for (int q = 0; q < nq; ++q) {
        long long pos = 0;
        for (int64_t j = 0; j < a->nprobe; ++j) {
            const int64_t l = a->probes[(q0 + q) * a->nprobe + j];
            if (!probed(a, l)) continue;
            ++runs;
            pos += a->list_size[l];
            next[l + 1]++;
        }
        citems += (pos + kChunk - 1) / kChunk;
    }
    for (int64_t l = 0; l < a->nlist; ++l) {
        const long long pairs = next[l + 1];
        if (pairs > 0)
            items += (pairs + group - 1) / group * ((a->list_size[l] + kChunk - 1) / kChunk);
        next[l + 1] += next[l];
    }
    const PlanLayout lay = plan_layout(nq, runs, items, citems);
    char *base;
    simil_status s = device_pinned(dev, lay.total, reinterpret_cast<void **>(&base));
    if (s != SIMIL_OK) {
        sml_free(next);
        return s;
    }
    p->base = base;
    p->upload = lay.upload;
    p->runs = reinterpret_cast<Run *>(base + lay.runs);
    p->run_start = reinterpret_cast<int *>(base + lay.run_start);
    p->run_count = p->run_start + nq;
    p->scanned = p->run_count + nq;
    p->citem_start = p->scanned + nq;
    p->dstart = reinterpret_cast<long long *>(base + lay.dstart);
    p->pair_query = reinterpret_cast<int *>(base + lay.pair_query);
    p->pair_pos0 = p->pair_query + runs + 1;
    p->items = reinterpret_cast<DistItem *>(base + lay.items);
    p->citems = reinterpret_cast<CollectItem *>(base + lay.citems);
    p->cstart = reinterpret_cast<long long *>(base + lay.cstart);
    p->count = reinterpret_cast<int *>(p->cstart + nq);
    int *run_list = reinterpret_cast<int *>(base + lay.run_list);
    long long at = 0;
    for (int q = 0; q < nq; ++q) {
        p->run_start[q] = p->nruns;
        int pos = 0;
        for (int64_t j = 0; j < a->nprobe; ++j) {
            const int64_t l = a->probes[(q0 + q) * a->nprobe + j];
            if (!probed(a, l)) continue;
            run_list[p->nruns] = (int)l;
            p->runs[p->nruns++] = Run{a->list_offset[l], (int)a->list_size[l], pos};
            pos += (int)a->list_size[l];
        }
        p->run_count[q] = p->nruns - p->run_start[q];
        p->scanned[q] = pos;
        p->most = pos > p->most ? pos : p->most;
        p->dstart[q] = at;
        at += (pos + 7) / 8 * 8;
    }
    p->dist_total = at;
    for (int q = 0; q < nq; ++q)
        for (int r = p->run_start[q]; r < p->run_start[q] + p->run_count[q]; ++r) {
            const long long slot = next[run_list[r]]++;
            p->pair_query[slot] = q;
            p->pair_pos0[slot] = p->runs[r].pos0;
        }
    // next[l] is now where list l's pairs end; they start at next[l - 1]
    for (int64_t l = 0; l < a->nlist; ++l) {
        const long long first = l > 0 ? next[l - 1] : 0;
        const int rows = (int)a->list_size[l];
        for (long long g = first; g < next[l]; g += group) {
            const int pairs = (int)(next[l] - g < group ? next[l] - g : group);
            for (int r = 0; r < rows; r += kChunk)
                p->items[p->nitems++] =
                    DistItem{a->list_offset[l], r, min(rows, r + kChunk), (int)g, pairs};
        }
    }
    for (int q = 0; q < nq; ++q) {
        p->citem_start[q] = p->ncitems;
        for (int c = 0; c < p->scanned[q]; c += kChunk)
            p->citems[p->ncitems++] = CollectItem{q, c, min(p->scanned[q], c + kChunk)};
    }
    sml_free(next);
    return SIMIL_OK;
}

// Device memory of a batch, carved from the workspace.
struct Scratch {
    char *plan;
    Run *runs;
    int *run_start;  // run_start, run_count, scanned (nq each)
    long long *dstart;
    int *pair_query;  // pair_query, pair_pos0
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
    float *out_dist;
    int64_t *out_labels;
    void *radix;
    size_t radix_bytes;
    size_t total;
};

Scratch carve(const sml_xfbq_scan_args *a, const Plan &p, size_t dsize, long long cand_cap,
              char *base)
{
    Scratch s{};
    size_t at = 0;
    auto take = [&](size_t bytes) {
        char *ptr = base ? base + at : nullptr;
        at += up(bytes);
        return ptr;
    };
    const size_t nq = (size_t)p.nq, k = (size_t)a->k;
    // the plan's copy, at the host block's offsets
    s.plan = take(p.upload);
    const auto at_plan = [&](const void *host) {
        return s.plan ? s.plan + (static_cast<const char *>(host) - p.base) : nullptr;
    };
    s.runs = reinterpret_cast<Run *>(at_plan(p.runs));
    s.run_start = reinterpret_cast<int *>(at_plan(p.run_start));
    s.dstart = reinterpret_cast<long long *>(at_plan(p.dstart));
    s.pair_query = reinterpret_cast<int *>(at_plan(p.pair_query));
    s.items = reinterpret_cast<DistItem *>(at_plan(p.items));
    s.citems = reinterpret_cast<CollectItem *>(at_plan(p.citems));
    s.dist = take(dsize * (size_t)(p.dist_total + 8));
    s.hist = reinterpret_cast<unsigned *>(take(4 * nq * (size_t)a->nbins));
    s.limit = reinterpret_cast<unsigned *>(take(4 * nq));
    s.count = reinterpret_cast<int *>(take(4 * nq));
    s.fill = reinterpret_cast<int *>(take(4 * nq));
    s.cstart = reinterpret_cast<long long *>(take(8 * nq));
    s.cand_keys = reinterpret_cast<float *>(take(4 * (size_t)cand_cap));
    s.cand_rows = reinterpret_cast<int *>(take(4 * (size_t)cand_cap));
    s.cand_query = reinterpret_cast<int *>(take(4 * (size_t)cand_cap));
    s.final_keys = reinterpret_cast<float *>(take(4 * nq * k));
    s.final_idx = reinterpret_cast<int *>(take(4 * nq * k));
    s.out_dist = reinterpret_cast<float *>(take(4 * nq * k));
    s.out_labels = reinterpret_cast<int64_t *>(take(8 * nq * k));
    if (a->k > kMaxWarpSelectK) {
        s.radix_bytes = select_rows_radix_workspace(p.nq, 1, (int)a->k);
        s.radix = take(s.radix_bytes);
    }
    s.total = at;
    return s;
}

simil_status upload_plan(const Plan &p, const Scratch &s, cudaStream_t st)
{
    SML_CUDA_TRY(cudaMemcpyAsync(s.plan, p.base, p.upload, cudaMemcpyHostToDevice, st));
    return SIMIL_OK;
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

// Steps 3 and 4 for batch queries [first, first + n), whose candidates fit.
template <typename DT>
simil_status select_pass(Device *dev, const sml_xfbq_scan_args *a, const Plan &p, Batch &b,
                         const Scratch &s, long long q0, int first, int n, cudaStream_t st)
{
    const int *count = p.count;
    long long *cstart = p.cstart;
    long long at = 0;
    int most = 1;
    for (int q = 0; q < n; ++q) {
        cstart[q] = at;
        at += pad4(count[first + q]);
        most = count[first + q] > most ? count[first + q] : most;
    }
    // cstart is indexed by batch query: the pass's entries go to its queries
    SML_CUDA_TRY(
        cudaMemcpyAsync(s.cstart + first, cstart, 8 * (size_t)n, cudaMemcpyHostToDevice, st));
    SML_CUDA_TRY(cudaMemsetAsync(s.cand_rows, 0xff, 4 * (size_t)(at + 1), st));
    const int items =
        (first + n < p.nq ? p.citem_start[first + n] : p.ncitems) - p.citem_start[first];
    b.cstart = s.cstart;
    b.cand_total = at;
    if (items > 0 && at > 0) {
        xfbq_collect_kernel<DT><<<items, kThreads, 0, st>>>(b, s.citems + p.citem_start[first]);
        SML_LAUNCH_TRY("xfbq_collect_kernel");
        const long long blocks = (at + 31) / 32, cap = (long long)dev->sm_count * 8;
        xfbq_rerank_kernel<<<(unsigned)(blocks < cap ? blocks : cap), kThreads, 0, st>>>(b);
        SML_LAUNCH_TRY("xfbq_rerank_kernel");
    }
    SelectJob job{};
    job.scores = s.cand_keys;
    job.ld = 4;
    job.row_scale_const = 1.0f;
    job.in_idx = s.cand_rows;
    job.row_offsets = s.cstart + first;
    job.row_cols = s.count + first;
    job.rows = n;
    job.cols = most;
    job.out_keys = s.final_keys;
    job.out_idx = s.final_idx;
    job.out_ld = a->k;
    if (a->k <= kMaxWarpSelectK) {
        job.k = (int)a->k;
        SML_TRY(select_rows(job, ScoreType::f32, st));
    } else {
        job.k = (int)a->k < most ? (int)a->k : most;
        SML_CUDA_TRY(cudaMemsetAsync(s.final_idx, 0xff, 4 * (size_t)n * a->k, st));
        SML_TRY(select_rows_radix(job, ScoreType::f32, s.radix, s.radix_bytes, st));
    }
    SML_TRY(launch_finish(n, (int)a->k, s.final_keys, s.final_idx, b.l2, nullptr, a->ids,
                          s.out_dist, s.out_labels, st));
    const long long q = q0 + first;
    SML_CUDA_TRY(cudaMemcpyAsync(a->distances + q * a->k, s.out_dist, 4 * (size_t)n * a->k,
                                 cudaMemcpyDeviceToHost, st));
    SML_CUDA_TRY(cudaMemcpyAsync(a->labels + q * a->k, s.out_labels, 8 * (size_t)n * a->k,
                                 cudaMemcpyDeviceToHost, st));
    SML_CUDA_TRY(cudaStreamSynchronize(st));
    return SIMIL_OK;
}

template <typename DT>
simil_status run_batch(Device *dev, const sml_xfbq_scan_args *a, long long q0, int nq)
{
    cudaStream_t st = dev->stream[0];
    const int group = (size_t)8 * a->nbins * 4 <= kSharedHist ? 8 : 4;
    Plan p;
    SML_TRY(plan_batch(dev, a, q0, nq, group, &p));
    long long cand_cap = kCandBudget > (long long)p.most + 4 ? kCandBudget : (long long)p.most + 4;
    const Scratch need = carve(a, p, sizeof(DT), cand_cap, nullptr);
    char *ws = nullptr;
    simil_status s = device_workspace(dev, need.total, reinterpret_cast<void **>(&ws));
    Scratch sc{};
    Batch b{};
    if (s == SIMIL_OK) {
        sc = carve(a, p, sizeof(DT), cand_cap, ws);
        s = upload_plan(p, sc, st);
        b.query_codes = a->query_codes + q0 * a->query_bits * a->words;
        b.queries = a->queries + q0 * a->dim;
        b.qw = (int)(a->query_bits * a->words);
        b.qbits = a->query_bits;
        b.bbits = a->base_bits;
        b.words = (int)a->words;
        b.dim = (int)a->dim;
        b.codes = static_cast<const char *>(a->codes);
        b.code_stride = (long long)a->code_stride;
        b.vectors = reinterpret_cast<const char *>(a->vectors);
        b.vector_stride = (long long)a->vector_stride;
        b.runs = sc.runs;
        b.run_start = sc.run_start;
        b.run_count = sc.run_start + nq;
        b.scanned = sc.run_start + 2 * nq;
        b.dstart = sc.dstart;
        b.pair_query = sc.pair_query;
        b.pair_pos0 = sc.pair_query + p.nruns + 1;
        b.dist = sc.dist;
        b.hist = sc.hist;
        b.nbins = (int)a->nbins;
        b.shift = a->bin_shift;
        b.dclamp = (unsigned)(((unsigned long long)a->nbins << a->bin_shift) - 1);
        b.extra_bins = (int)a->extra_bins;
        b.k = (int)a->k;
        b.limit = sc.limit;
        b.count = sc.count;
        b.fill = sc.fill;
        b.cand_keys = sc.cand_keys;
        b.cand_rows = sc.cand_rows;
        b.cand_query = sc.cand_query;
        b.l2 = a->metric == SIMIL_METRIC_L2;
        b.codes_in_shared = (size_t)group * b.qw * 8 <= kSharedCodes;
    }
    if (s == SIMIL_OK)
        s = cuda_status(cudaMemsetAsync(sc.hist, 0, 4 * (size_t)nq * a->nbins, st),
                        "XFBQ histogram", __FILE__, __LINE__);
    if (s == SIMIL_OK)
        s = group == 8 ? launch_distances<DT, 8>(b, sc.items, p.nitems, st)
                       : launch_distances<DT, 4>(b, sc.items, p.nitems, st);
    if (s == SIMIL_OK) {
        xfbq_threshold_kernel<<<nq, kThreads, 0, st>>>(b);
        s = cuda_status(cudaGetLastError(), "xfbq_threshold_kernel", __FILE__, __LINE__);
    }
    if (s == SIMIL_OK)
        s = cuda_status(
            cudaMemcpyAsync(p.count, sc.count, 4 * (size_t)nq, cudaMemcpyDeviceToHost, st),
            "XFBQ candidates", __FILE__, __LINE__);
    if (s == SIMIL_OK) s = cuda_status(cudaStreamSynchronize(st), "XFBQ scan", __FILE__, __LINE__);
    // selection passes over runs of queries whose candidates fit
    for (int first = 0; s == SIMIL_OK && first < nq;) {
        int n = 0;
        long long total = 0;
        while (first + n < nq && (n == 0 || total + pad4(p.count[first + n]) <= cand_cap))
            total += pad4(p.count[first + n++]);
        s = select_pass<DT>(dev, a, p, b, sc, q0, first, n, st);
        first += n;
    }
    return s;
}

// Queries per batch: their D fit the budget.
int batch_queries(const sml_xfbq_scan_args *a, long long q0, size_t dsize)
{
    size_t bytes = 0;
    int n = 0;
    while (q0 + n < a->nq && n < kMaxBatch) {
        long long c = 0;
        for (int64_t j = 0; j < a->nprobe; ++j) {
            const int64_t l = a->probes[(q0 + n) * a->nprobe + j];
            if (l >= 0) c += a->list_size[l];
        }
        const size_t more = (size_t)((c + 7) / 8 * 8) * dsize;
        if (n > 0 && bytes + more > kDistBudget) break;
        bytes += more;
        ++n;
    }
    return n;
}

// One thread per (vector, word): the vector's scale, then its word of every
// plane, with the host's arithmetic (core/xfbq_code.h).
__global__ void xfbq_encode_kernel(const sml_xfbq_encode_args a)
{
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= a.n * a.words) return;
    const long long r = t / a.words;
    const float *row = a.x + r * a.dim;
    const float scale = sml_xfbq_row_scale(row, a.dim, a.alpha, a.normalize);
    sml_xfbq_encode_word(row, a.dim, scale, a.bits, a.words, t - r * a.words,
                         a.codes + r * a.bits * a.words);
}

}  // namespace

simil_status cuda_xfbq_encode(sml_backend *be, const sml_xfbq_encode_args *a)
{
    const long long threads = a->n * a->words;
    if (threads == 0) return SIMIL_OK;
    Device *dev = device_of(be);
    pthread_mutex_lock(&dev->lock);
    simil_status s = cuda_status(cudaSetDevice(dev->gpu), "cudaSetDevice", __FILE__, __LINE__);
    if (s == SIMIL_OK) s = device_join_caller(dev);
    if (s == SIMIL_OK) {
        xfbq_encode_kernel<<<(unsigned)((threads + 255) / 256), 256, 0, dev->stream[0]>>>(*a);
        s = cuda_status(cudaGetLastError(), "xfbq_encode_kernel", __FILE__, __LINE__);
    }
    if (s == SIMIL_OK)
        s = cuda_status(cudaStreamSynchronize(dev->stream[0]), "XFBQ codes", __FILE__, __LINE__);
    pthread_mutex_unlock(&dev->lock);
    return s;
}

simil_status cuda_xfbq_scan(sml_backend *be, const sml_xfbq_scan_args *a)
{
    long long rows_end = 0;
    for (int64_t l = 0; l < a->nlist; ++l) {
        const long long end = a->list_offset[l] + a->list_size[l];
        rows_end = end > rows_end ? end : rows_end;
    }
    SML_RETURN_IF(rows_end >= INT32_MAX || a->k >= INT32_MAX || a->nbins > 4096,
                  SIMIL_ERR_UNSUPPORTED,
                  "XFBQ on the GPU: at most 2^31 - 1 vectors and k below 2^31 (got %lld, k=%" PRId64
                  ")",
                  rows_end, a->k);
    if (a->nq == 0) return SIMIL_OK;
    const bool small = ((long long)a->nbins << a->bin_shift) <= 65536;  // D fits 16 bits
    const size_t dsize = small ? 2 : 4;
    Device *dev = device_of(be);
    pthread_mutex_lock(&dev->lock);
    simil_status s = cuda_status(cudaSetDevice(dev->gpu), "cudaSetDevice", __FILE__, __LINE__);
    for (long long q0 = 0; s == SIMIL_OK && q0 < a->nq;) {
        const int n = batch_queries(a, q0, dsize);
        s = small ? run_batch<unsigned short>(dev, a, q0, n) : run_batch<unsigned>(dev, a, q0, n);
        q0 += n;
    }
    if (s != SIMIL_OK) cudaStreamSynchronize(dev->stream[0]);
    pthread_mutex_unlock(&dev->lock);
    return s;
}

}  // namespace sml
