// cuda_ivf.cuh: the skeleton every inverted-list scan on the GPU is built on
// (the GPU paper, section 5.2).  Each code type owns its driver and its scan
// kernels: IVF-Flat in cuda_ivf_flat.cu and scalar quantizers in
// cuda_ivf_sq.cu (both on the tiled pair scan below, and for small batches
// on ivf_probe_scan.cuh's scan of rows that a loader turns into floats), IVF-PQ in
// cuda_ivf_pq.cu (kernels: cuda_ivf_pq_fused.cu, cuda_ivf_pq_pairs.cu), XFBQ
// in cuda_xfbq.cu; what they share is here (cuda_ivf.cu):
//   - the frame: the device's lock, the caller's pending work joined
//     (ivf_locked);
//   - staging: the search's queries to the device in batches, and for a
//     scan that reads its probes on the device, the probes (stage_inputs);
//   - probes on the host, the caller's or found by the coarse search, for
//     the scans planned on the host (batch_probes);
//   - planning: a batch's (query, probe) pairs grouped by list with a
//     counting sort, and each query's segment of scanned positions
//     (count_pairs, place_pairs, plan_batch_queries);
//   - the pair scan of IVF-Flat and IVF-PQ: one segment of distances per
//     pair, its plan and scratch, and the multi-pass selection (PairPlan,
//     select_pairs);
//   - selection over ragged rows, and the results to the host
//     (select_ragged, finish_to_host).
//
// Adding a code type (a scalar quantizer, say): in core/backend.h an args
// wrapper around sml_ivf_scan_args and an op; on the CPU one scan file on
// cpu_ivf.h; here one file with the scan kernel and a small driver:
// ivf_locked, then scan_planned with a batch function (for a pair scan:
// count_pairs, a host block of a PairPlan and the kernel's work in the
// pinned buffer, fill_pair_plan, pair_workspace, the launch, select_pairs,
// finish_to_host), or, for a scan that reads its probes on the device,
// stage_inputs with device probes and one launch per batch.  Nothing here
// changes.  Scratch comes from the device workspace, carved as
// cuda_workspace.cuh shows; a batch's host plan is laid out as its device
// copy, so that it goes to the GPU in one copy.
#pragma once

#include <assert.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "core/alloc.h"
#include "core/backend.h"
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_filter.cuh"
#include "cuda/cuda_replay.cuh"
#include "cuda/cuda_util.cuh"
#include "cuda/cuda_workspace.cuh"

namespace sml {

// ---- the frame ----------------------------------------------------------

// Small batches: see "small batches" below.
long long ivf_small_max();

// scan(dev, host_queries) on a lane of b's GPU (a small batch's own,
// cuda_device.cuh), under its lock, after the caller's pending work; after a
// failure the stream is waited for, so that nothing still runs on the lane's
// buffers when the lock is released.  host_queries: whether a's queries are
// host memory, asked of the driver once here (cudaPointerGetAttributes costs
// as a launch does when lanes issue at once) and handed down.
// The caller's pending work matters only where the scan reads its memory on
// the GPU: a scan whose queries are host memory (everything else it reads
// from the caller is too) skips the join, an event and two waits per call.
template <typename Scan>
simil_status ivf_locked(sml_backend *b, const sml_ivf_scan_args &a, Scan scan)
{
    // what the caller knows is not asked again (sml_ivf_scan_args)
    const bool join = !a.queries_host && is_device_pointer(a.queries);
    Device *dev = lane_lock(device_of(b), a.nq <= ivf_small_max());
    simil_status s = cuda_status(cudaSetDevice(dev->gpu), "cudaSetDevice", __FILE__, __LINE__);
    if (s == SIMIL_OK && join) s = device_join_caller(dev);
    if (s == SIMIL_OK) s = scan(dev, !join);
    if (s != SIMIL_OK) {
        cudaStreamSynchronize(dev->stream[0]);
        device_tickets_reset(dev);  // a scan stopped part way may have left some
    }
    pthread_mutex_unlock(&dev->lock);
    return s;
}

// The arena rows a's filter allows (cuda_filter.cuh), over every row of its
// lists; null without a filter.  Once per call, before its batches.
simil_status scan_rows_allowed(Device *dev, const sml_ivf_scan_args &a, const uint32_t **bits);

// The same as a RowFilter (cuda_filter.cuh); or, for a scan that reads few
// rows, the filter tested on the labels of the rows it reads, without the
// rows' bitset, which costs a pass over every label: where the caller says
// so (small: a small batch), or where a's pairs read fewer rows than its
// lists hold (nq x nprobe below nlist, lists of even size).
simil_status scan_filter(Device *dev, const sml_ivf_scan_args &a, bool small, RowFilter *out);

// ---- staging ------------------------------------------------------------

// A batch's inputs in device memory: its queries, and for a scan that reads
// its probes on the device, those with their coarse keys and the list layout.
struct Inputs {
    const float *queries;        // nq x dim
    const int64_t *probes;       // nq x nprobe (device probes only)
    const float *keys;           // nq x nprobe: coarse keys ...
    float key_sign;              // ... times this
    const int64_t *list_offset;  // nlist each (device probes only), as the search holds them
    const int64_t *list_size;
};

// Queries of a batch from q0: as many as keep its inputs within the input
// budget (and a grid within one launch).
int input_batch(const sml_ivf_scan_args *a, long long q0, bool host_queries, bool device_probes);

// A table of dot products of each query's slices with a set of codewords,
// which the coarse search of a small batch (launch_coarse) fills beside its
// keys: IVF-PQ's term 3, built once per query there rather than once per
// block of a split scan.  Entry e is scale * <x_i, codewords + e * dsub>,
// with i = e % m (by_codeword: e = j * m + i) or i = e / ksub (e = i * ksub
// + j).
struct QueryTable {
    const float *codewords;  // m * ksub x dsub floats, in the table's order
    int m, ksub, dsub;
    bool by_codeword;
    float scale;
};

// scale * <xi, c> over dsub floats: an entry of a QueryTable (IVF-PQ's term 3).
__device__ __forceinline__ float scaled_dot(const float *xi, const float *c, int dsub, float scale)
{
    float s = 0;
    for (int t = 0; t < dsub; ++t) s = fmaf(xi[t], c[t], s);
    return scale * s;
}

// Entry e of query x's table t.
__device__ __forceinline__ float table_entry(const QueryTable &t, const float *x, int e)
{
    const int i = t.by_codeword ? e % t.m : e / t.ksub;
    return scaled_dot(x + i * t.dsub, t.codewords + (long long)e * t.dsub, t.dsub, t.scale);
}

// Queries [q0, q0 + nq) to the device (unless there already: host_queries
// false), and with device_probes their probes: the caller's, or the coarse
// search's, which writes them in device memory.  With a table, *table_out is
// where the coarse search writes it (nq x m * ksub floats, device), or null
// where the batch's probes are not found on the device: the scan then builds
// its tables itself.
simil_status stage_inputs(Device *dev, const sml_ivf_scan_args *a, long long q0, int nq,
                          bool device_probes, bool host_queries, Inputs *in,
                          const QueryTable *table = nullptr, float **table_out = nullptr);

// ---- probes on the host -------------------------------------------------

// Probes that batch_probes found (host memory), freed by their holder.
struct FoundProbes {
    int64_t *lists = nullptr;
    float *keys = nullptr;
    FoundProbes() = default;
    FoundProbes(const FoundProbes &) = delete;
    FoundProbes &operator=(const FoundProbes &) = delete;
    ~FoundProbes()
    {
        sml_free(keys);
        sml_free(lists);
    }
};

// *batch = a for queries [q0, q0 + nq), which are in device memory at
// queries: its outputs from row q0, and its probes (lists and coarse keys)
// from q0, or, where a has none, found now by the coarse search into found.
simil_status batch_probes(Device *dev, const sml_ivf_scan_args *a, const float *queries,
                          long long q0, int nq, sml_ivf_scan_args *batch, FoundProbes *found);

// ---- planning -----------------------------------------------------------

// How a batch lays out the positions it scans: each query owns a segment;
// each of its probes with a non-empty list (a run) takes pad(rows, run_pad)
// positions of it, in probe order, and the segment pad(sum, query_pad).
struct SegmentShape {
    int run_pad;
    int query_pad;
};

// x rounded up to a multiple of pad, a power of two.  A mask, not a division:
// the planner pads every (query, list) pair several times, and a 64-bit
// division per pair made planning 10,000 queries at nprobe 16 take ms.
inline long long pad_to(long long x, int pad)
{
    assert(pad > 0 && (pad & (pad - 1)) == 0);
    return (x + pad - 1) & ~(long long)(pad - 1);
}

// The positions query q of a scans, in a segment of this shape.
long long segment_positions(const sml_ivf_scan_args &a, long long q, SegmentShape shape);

// Queries of a batch from q0 whose segments take at most budget bytes at
// bytes_per_position each (at least one query), and at most max_queries.
int plan_batch_queries(const sml_ivf_scan_args &a, long long q0, SegmentShape shape,
                       size_t bytes_per_position, size_t budget, int max_queries);

// The counting pass over queries [q0, q0 + nq) of a (host probes): the pairs
// of each list (by_list[l + 1]), the pairs in all, and the positions of all
// segments (shape).
struct PairCount {
    long long *by_list = nullptr;  // nlist + 1
    long long nlist = 0;
    long long pairs = 0;
    long long positions = 0;
    long long of(int64_t l) const { return by_list[l + 1]; }
    PairCount() = default;
    PairCount(const PairCount &) = delete;
    PairCount &operator=(const PairCount &) = delete;
    ~PairCount() { sml_free(by_list); }
};

simil_status count_pairs(const sml_ivf_scan_args &a, long long q0, int nq, SegmentShape shape,
                         PairCount *count);

// Per query, what place_pairs writes: its segment's start and length (its
// runs' positions, before query_pad), and where the runs are null, its first
// run and their count.
struct Segments {
    long long *start;
    int *length;
    int *run_start;  // or null
    int *run_count;  // or null
};

// A pair as place_pairs hands it out.
struct PlacedPair {
    long long slot;  // its place among the pairs grouped by list
    int run;         // its place among the runs in query order
    int query;       // within the batch
    int probe;       // j: the pair is probe j of its query
    int64_t list;
    int pos0;        // where the list starts in the query's segment
};

// Queries [qa, qb) of the placing pass, in query order from the places
// next (per list), *run and *at; returns their largest segment length.
template <typename Visit>
int place_queries(const sml_ivf_scan_args &a, long long q0, int qa, int qb, SegmentShape shape,
                  long long *next, int *run, long long *at, const Segments &seg, Visit &visit)
{
    const int64_t np = a.probes.nprobe;
    int most = 0;
    for (int q = qa; q < qb; ++q) {
        seg.start[q] = *at;
        if (seg.run_start) seg.run_start[q] = *run;
        long long pos = 0;
        for (int64_t j = 0; j < np; ++j) {
            const int64_t l = a.probes.lists[(q0 + q) * np + j];
            if (l < 0 || a.lists.size[l] == 0) continue;
            visit(PlacedPair{next[l]++, (*run)++, q, (int)j, l, (int)pos});
            pos += pad_to(a.lists.size[l], shape.run_pad);
        }
        if (seg.run_count) seg.run_count[q] = *run - seg.run_start[q];
        seg.length[q] = (int)pos;
        most = (int)pos > most ? (int)pos : most;
        *at += pad_to(pos, shape.query_pad);
    }
    return most;
}

// Threads for a planning pass over this many items (1: in line): one per
// 8,192, at most kPlanThreads (on the H200's 16-core host, 16 threads once
// took 10.7 ms to place what 8 placed in 1.7 ms) and at most a's threads.
constexpr int kPlanThreads = 8;
int plan_threads(const sml_ivf_scan_args &a, long long items);

// Threads for placing this many pairs.  Their scattered writes took 1.4 ms
// for 10,000 queries at nprobe 6 and 4.8 ms at nprobe 16 on one core of the
// H200's host; 0.9 ms on 14 threads and 1.7 ms on 8.
int place_threads(const sml_ivf_scan_args &a, long long pairs, long long nlist);

// The placing pass: lays out the segments, and hands visit every pair.
// Pairs of one list take consecutive slots, in query order: after it,
// count->by_list[l] is where list l's pairs end (they start at by_list[l -
// 1], or 0).  Large batches are placed by several threads, each a run of
// queries from the places the runs before it leave (visit must take pairs
// of different slots, runs and queries at once); the plan is the same.
// Returns the largest segment length.
template <typename Visit>
int place_pairs(const sml_ivf_scan_args &a, long long q0, int nq, SegmentShape shape,
                PairCount *count, const Segments &seg, Visit visit)
{
    const long long nlist = count->nlist;
    long long *next = count->by_list;  // per list: where its next pair goes
    for (long long l = 0; l < nlist; ++l) next[l + 1] += next[l];
    const int threads = place_threads(a, count->pairs, nlist);
    // per thread: its queries' pairs of each list, then where they start
    long long *from = nullptr;
    if (threads > 1)
        from = static_cast<long long *>(malloc(sizeof(long long) * (size_t)(threads * (nlist + 2))));
    if (from == nullptr) {  // in line (or short of memory for the threads)
        int run = 0;
        long long at = 0;
        return place_queries(a, q0, 0, nq, shape, next, &run, &at, seg, visit);
    }
    const int64_t np = a.probes.nprobe;
    const auto first = [&](int t) { return (int)((long long)nq * t / threads); };
    // its pairs of each list, its runs and positions at [nlist], [nlist + 1]
    const auto mine = [&](int t) { return from + (size_t)t * (size_t)(nlist + 2); };
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; ++t) {
        long long *c = mine(t);
        memset(c, 0, sizeof(long long) * (size_t)(nlist + 2));
        for (int q = first(t); q < first(t + 1); ++q) {
            long long pos = 0;
            for (int64_t j = 0; j < np; ++j) {
                const int64_t l = a.probes.lists[(q0 + q) * np + j];
                if (l < 0 || a.lists.size[l] == 0) continue;
                c[l]++;
                c[nlist]++;
                pos += pad_to(a.lists.size[l], shape.run_pad);
            }
            c[nlist + 1] += pad_to(pos, shape.query_pad);
        }
    }
    // counts to starts: per list over the threads, from the list's start;
    // runs and positions over the threads, from 0
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long long l = 0; l < nlist + 2; ++l) {
        long long s = l < nlist ? next[l] : 0;
        for (int t = 0; t < threads; ++t) {
            const long long n = mine(t)[l];
            mine(t)[l] = s;
            s += n;
        }
    }
    int most = 0;
#pragma omp parallel for num_threads(threads) schedule(static, 1) reduction(max : most)
    for (int t = 0; t < threads; ++t) {
        long long *c = mine(t);
        int run = (int)c[nlist];
        long long at = c[nlist + 1];
        const int m = place_queries(a, q0, first(t), first(t + 1), shape, c, &run, &at, seg, visit);
        most = m > most ? m : most;
    }
    free(from);
    for (long long l = 0; l < nlist; ++l) next[l] = next[l + 1];  // ends, as in line
    return most;
}

// ---- the frame of a scan planned on the host ---------------------------

// How a planned scan cuts its batches (plan_batch_queries).
struct BatchLimits {
    SegmentShape shape;
    size_t bytes_per_position;
    size_t budget;
    int max_queries;
};

// Host queries to the device a batch at a time, through two halves of
// pinned (device_staged) and device (device_io) memory: while the GPU runs
// batch i, a host thread copies batch i + 1 into the other pinned half, and
// the copy engine takes it up on the second stream, as the exact search's
// slots do (cuda_knn.cu).  Staged all at once, a flat scan's queries waited
// for the host's copy and the upload before any kernel ran (Fashion-MNIST,
// 10,000 queries: 1.5 ms; docs/benchmarks.md).  send(q0, n) uploads batch
// [q0, q0 + n) (copied by ahead(q0, n) before, or now), makes the first
// stream wait for it, and returns its device copy, valid until the send
// after the next.
class QueryStream {
public:
    QueryStream(Device *dev, const float *queries, long long dim) :
        dev_(dev), queries_(queries), row_(4 * (size_t)dim) {}
    QueryStream(const QueryStream &) = delete;
    QueryStream &operator=(const QueryStream &) = delete;
    ~QueryStream();
    // room for batches of at most `most` queries
    simil_status open(int most);
    simil_status send(long long q0, int n, const float **device_queries);
    // start copying batch [q0, q0 + n), the next send's, on a host thread
    simil_status ahead(long long q0, int n);

private:
    void join();
    Device *dev_;
    const float *queries_;
    size_t row_, half_ = 0;
    char *pinned_ = nullptr, *io_ = nullptr;
    cudaEvent_t sent_[2] = {nullptr, nullptr};  // each half's last upload
    cudaEvent_t read_[2] = {nullptr, nullptr};  // the first stream's work on each half
    bool sending_ = false;                      // an upload was issued
    int turn_ = 0;                              // the next send's half
    std::thread copier_;
    long long ahead_q0_ = -1;  // the batch the copier fills, or -1
    int ahead_n_ = 0;
};

// The queries of a (host memory where host_queries) in batches: staged
// (stage_inputs), their probes on the host (batch_probes), then cut to the
// limits; batch(args, first, sub, n) scans queries [sub, sub + n) of args,
// a's queries from first on.  With host queries and given probes (a flat
// scan's one list: no coarse search wants a whole input batch on the
// device), each cut goes up on its own while the one before runs
// (QueryStream).  Caller holds the device (ivf_locked).
template <typename Batch>
simil_status scan_planned(Device *dev, const sml_ivf_scan_args *a, bool host_queries,
                          const BatchLimits &limits, Batch batch)
{
    if (host_queries && a->probes.lists != nullptr && a->nq > 1) {
        // batches of at most 32 MB of queries, so that the halves stay small
        const long long most_fit = (long long)(((size_t)32 << 20) / (4 * (size_t)a->dim));
        const int most = (int)std::max(1LL, std::min({most_fit, (long long)limits.max_queries,
                                                      (long long)a->nq}));
        QueryStream qs(dev, a->queries, a->dim);
        SML_TRY(qs.open(most));
        auto cut = [&](long long q0) {
            return std::min(most, plan_batch_queries(*a, q0, limits.shape,
                                                     limits.bytes_per_position, limits.budget,
                                                     limits.max_queries));
        };
        int n = cut(0);
        for (long long q0 = 0; q0 < a->nq;) {
            const float *queries;
            SML_TRY(qs.send(q0, n, &queries));
            trace_mark(dev->stream[0], "ivf: a batch's queries sent");
            const long long next = q0 + n;
            const int n_next = next < a->nq ? cut(next) : 0;
            if (n_next > 0) SML_TRY(qs.ahead(next, n_next));
            sml_ivf_scan_args args;
            FoundProbes found;
            SML_TRY(batch_probes(dev, a, queries, q0, n, &args, &found));
            SML_TRY(batch(args, q0, 0, n));
            q0 = next;
            n = n_next;
        }
        return SIMIL_OK;
    }
    for (long long q0 = 0; q0 < a->nq;) {
        const int n = input_batch(a, q0, host_queries, false);
        Inputs in{};
        trace_mark(dev->stream[0], "ivf: lock and join");
        SML_TRY(stage_inputs(dev, a, q0, n, false, host_queries, &in));
        trace_mark(dev->stream[0], "ivf: queries staged");
        sml_ivf_scan_args args;
        FoundProbes found;
        SML_TRY(batch_probes(dev, a, in.queries, q0, n, &args, &found));
        trace_mark(dev->stream[0], "ivf: coarse search, probes on the host");
        for (long long sub = 0; sub < n;) {
            const int m = plan_batch_queries(args, sub, limits.shape, limits.bytes_per_position,
                                             limits.budget, limits.max_queries);
            sml_trace_mark("ivf: batch cut");
            SML_TRY(batch(args, q0, sub, m));
            sub += m;
        }
        q0 += n;
    }
    return SIMIL_OK;
}

// ---- the pair scan (IVF-Flat; IVF-PQ with per-pair tables or a large k) ---

// Each pair gets a segment of distances padded to 4 floats, a query's pairs
// one after another; the code type's kernel fills them (and with radix, each
// candidate's arena row).
constexpr SegmentShape kPairShape{4, 1};

// A batch's pairs, grouped by list, in the host block; the same struct
// mirrored onto the block's device copy (mirror_pair_plan).
struct PairPlan {
    int nq;
    int npairs;
    long long total;         // floats of distances
    int most;                // the longest query segment
    int *pair_query;         // per pair: its query within the batch,
    long long *pair_out;     //   its segment's start,
    int *pair_row;           //   its row q x nprobe + j of partial results,
    int *pair_list;          //   its list (with_lists),
    int *pair_cols;          //   the list's rows,
    int *pair_base;          //   the list's first arena row,
    float *pair_key;         //   its coarse key (with_keys)
    long long *query_start;  // per query: its segment's start and length
    int *query_cols;
};

// Take the plan's arrays for nq queries and npairs pairs from c.
void carve_pair_plan(Carve &c, int nq, long long npairs, bool with_lists, bool with_keys,
                     PairPlan *p);

// Fill the plan of queries [q0, q0 + nq) of a (the placing pass).
void fill_pair_plan(const sml_ivf_scan_args &a, long long q0, int nq, PairCount *count,
                    PairPlan *p);

// The plan's arrays in the device copy at device of the host block at host.
PairPlan mirror_pair_plan(const PairPlan &p, void *device, const void *host);

// The pair scan's device scratch beside the plan: distances, (radix) rows,
// the selection's lists, the results.
struct PairScratch {
    float *distances;  // total (+ 4)
    int *rows;         // k > kMaxWarpSelectK only
    float *part_keys;  // nq x nprobe x k1
    int *part_idx;
    void *radix;
    size_t radix_bytes;
    float *final_keys;  // nq x k
    int *final_idx;
};

void carve_pair_scratch(Carve &c, const sml_ivf_scan_args &a, const PairPlan &host,
                        PairScratch *s);

// The workspace of a pair-scan batch: the copy of the host block (host_bytes
// at host, the plan and the code type's work), extra_floats for the code
// type (*extra), then the pair scratch (*s).  Uploads the block in one copy
// and, with radix selection, marks every candidate's row empty (the padding
// between segments must not count).  *dp: the plan in the block's copy.
simil_status pair_workspace(Device *dev, const sml_ivf_scan_args &a, const void *host,
                            size_t host_bytes, const PairPlan &plan, size_t extra_floats,
                            char **ws, float **extra, PairScratch *s, PairPlan *dp);

// Each pair keeps its k1 = min(k, 2048) best into its query's row of
// nprobe x k1, and one more selection per query merges them (the paper's
// multi-pass k-selection); past k = 2048, radix selection over each query's
// whole segment, reading the rows the kernel wrote.  Results: final_keys,
// final_idx (arena rows).  The rows allowed refuses (scan_filter) get +inf
// distances first.
simil_status select_pairs(const sml_ivf_scan_args &a, const PairPlan &host, const PairPlan &dev,
                          const PairScratch &s, const RowFilter &allowed, cudaStream_t st);

// ---- small batches (cuda_ivf_small.cu) -----------------------------------
//
// A batch of at most ivf_small_max() queries (sml_cuda_ivf_small_max; 64 by
// default) keeps its probes on the device: stage_inputs finds them with
// launch_coarse (no wait, nothing back to the host), and the code type's
// scan splits each query's work over several blocks, each keeping its k
// best (a part), and the query's last block folds them into its k best.
// Every step ranks (key, row) pairs as the batch path does, so a query gets
// the same bits on either path.  Small batches of several threads run side
// by side, each on a lane of its own (ivf_locked).

// The coarse search of launch_coarse: up to this many probes.
constexpr int kCoarseMaxProbes = 256;

// Whether a batch of nq queries of a finds its probes with launch_coarse.
bool coarse_on_device(const sml_ivf_scan_args &a, int nq);

// The nprobe nearest centroids of nq device queries, as the coarse search
// (a.probes.coarse_search) reports them: list numbers into probes and its
// distances into distances (nq x nprobe each, device); scratch: nq x nlist
// floats of device memory; tickets: nq of device_tickets.  With a table, its
// entries into table_out (nq x m * ksub floats, device).  Queued on st.
simil_status launch_coarse(const sml_ivf_scan_args &a, const float *queries, int nq,
                           float *scratch, unsigned *tickets, int64_t *probes, float *distances,
                           const QueryTable *table, float *table_out, cudaStream_t st);

// Whether a batch of nq queries of a, too many for launch_coarse, finds its
// probes with launch_coarse_many rather than the general exact search: at
// most sml_cuda_ivf_coarse_many_max queries (by default 256, or 512 where
// the probes stay on the device: probes_stay), dimensions up to 128, and
// queries times lists up to 2^26 (the keys' 256 MB of scratch).
bool coarse_many(const sml_ivf_scan_args &a, int nq, bool probes_stay);

// launch_coarse's probes and distances, the same bits, for such a batch: a
// kernel of keys with a thread per centroid, held in registers across
// queries, then one selection block per query.  scratch: nq x nlist floats of device memory.
// Queued on st.
simil_status launch_coarse_many(const sml_ivf_scan_args &a, const float *queries, int nq,
                                float *scratch, int64_t *probes, float *distances,
                                cudaStream_t st);

// The largest k of a small batch's split scans.
constexpr int kSmallMaxK = 128;

// Where a split scan puts a small batch's results: its kernel merges each
// query's parts in the query's last block (ivf_small_merge.cuh) and writes
// labels and distances, as finish_to_host gives them, straight into the
// lane's pinned results buffer (pinned memory is mapped at its host address
// under unified addressing: no copy back).
struct SmallOut {
    unsigned *tickets;    // per query: its blocks that are done (0 between calls)
    const int64_t *ids;   // the arena rows' ids, or null
    bool l2;
    int k;                // <= kSmallMaxK
    int64_t *labels;      // pinned: nq x k
    float *distances;     // pinned: nq x k
};

// o for a batch of nq queries of a on dev's lane.
simil_status small_out(Device *dev, const sml_ivf_scan_args &a, int nq, SmallOut *o);

// After the scan kernel is queued: issues the batch's recorded work (a
// SmallReplay's), waits for the stream, and copies queries [q0, q0 + nq)'s
// results from o to a's outputs.
simil_status small_out_to_host(Device *dev, const sml_ivf_scan_args &a, long long q0, int nq,
                               const SmallOut &o);

// A small batch of nq queries of a, from staging to small_out_to_host, as one
// graph launch on dev's lane (cuda_replay.cuh) where every stream operation
// of it can be recorded: its probes given or found by launch_coarse, and
// split (k <= kSmallMaxK).  A filter is uploaded before (scan_filter).  Each
// buffer that a recorded operation names is sized before its first use in the
// batch and not grown again before the submit, so none is freed under the
// record.
struct SmallReplay {
    SmallReplay(Device *dev, const sml_ivf_scan_args &a, int nq)
        : replay(nq <= ivf_small_max() && a.k <= kSmallMaxK &&
                         (a.probes.lists != nullptr || coarse_on_device(a, nq))
                     ? dev
                     : nullptr)
    {
    }
    Replay replay;
};

// How many blocks to split each of `blocks` units of work into: about four
// blocks per SM in all, at most `most`, at least 1.
int small_splits(const Device *dev, long long blocks, long long most);

// ---- selection and results ----------------------------------------------

// A ragged row per query: rows keys (4-aligned starts offsets[r], cols[r]
// columns) and their indices idx; the k best of each into out_keys and
// out_idx (rows of out_ld), with WarpSelect / BlockSelect up to k = 2048
// and radix selection (radix scratch) past it.  most: the longest row.
struct RaggedRows {
    const float *keys;
    const int *idx;
    const long long *offsets;
    const int *cols;
    int rows;
    int most;
};
simil_status select_ragged(const RaggedRows &in, int k, float *out_keys, int *out_idx,
                           long long out_ld, void *radix, size_t radix_bytes, cudaStream_t st);

// Results of queries [q0, q0 + nq) of a from their k sorted (key, arena row)
// pairs on dev's first stream: up to kFinishWarpRows queries, the finish
// kernel writes distances and ids straight into the results buffer (pinned,
// mapped at its host address, as SmallOut below); more are finished in
// device memory and copied there.  The results buffer is copied to a's host
// outputs once the stream is done; waits for the stream.
simil_status finish_to_host(Device *dev, const sml_ivf_scan_args &a, long long q0, int nq,
                            const float *keys, const int *rows);

// ---- the tiled pair scan (IVF-Flat, scalar quantizers) ------------------
//
// A list's pairs are read against its rows in tiles: each block takes up to
// 32 pairs of one list and up to 64 of its rows, like a small GEMM in shared
// memory (queries x rows x dimensions), so a list streams from memory about
// nq * nprobe / (32 nlist) times instead of nq * nprobe.  The code type
// gives the rows as floats (a Rows functor: load(row, d, list), the
// component d of arena row `row` of list `list`); keys are exact fp32 on
// those floats, as the CPU scans compute them.

constexpr int kTileQueries = 32;
constexpr int kTileVectors = 64;
constexpr int kTileDims = 32;

// The work of one block: up to 32 pairs of one list against up to 64 of its
// rows.  The tile carries its list's place, so that a batch uploads no
// per-list table (nlist entries, for a batch of one query too).
struct ScanTile {
    long long base;  // the list's first arena row
    int list;        // for the Rows functor (a residual code's centroid)
    int size;        // the list's rows
    int pair0;       // first pair (in the list-grouped pair order)
    int npairs;
    int vector0;     // first row of the list
};

// What a tile kernel reads: the tiles, the plan's pairs (device), the
// batch's queries; what it writes: each pair's segment of distances, and
// (radix selection) their arena rows.
struct TileArgs {
    const ScanTile *tiles;
    const int *pair_query;
    const long long *pair_out;
    const float *queries;
    int dim;
    float *distances;
    int *rows;
};

// Tiled keys: 128 threads, each 4 queries x 4 rows; shared memory holds 32
// query rows and 64 decoded rows, 32 dimensions at a time.  Keys: L2 the sum
// of squared differences, IP minus the dot product, one fmaf per dimension
// in order (thin_tile_kernel's arithmetic too).
template <bool L2, typename Rows>
__global__ void __launch_bounds__(128) tile_distance_kernel(TileArgs g, Rows rows)
{
    __shared__ float qs[kTileQueries][kTileDims + 1];
    __shared__ float ys[kTileVectors][kTileDims + 1];
    const ScanTile t = g.tiles[blockIdx.x];
    const long long base = t.base;
    const int nvec = min(kTileVectors, t.size - t.vector0);
    const int dim = g.dim;
    const int tq = threadIdx.x / 16, tv = threadIdx.x % 16;  // 8 x 16 threads
    float acc[4][4] = {};
    for (int d0 = 0; d0 < dim; d0 += kTileDims) {
        for (int e = threadIdx.x; e < kTileQueries * kTileDims; e += blockDim.x) {
            const int i = e / kTileDims, d = e % kTileDims;
            qs[i][d] = (i < t.npairs && d0 + d < dim)
                           ? g.queries[(long long)g.pair_query[t.pair0 + i] * dim + d0 + d]
                           : 0.0f;
        }
        for (int e = threadIdx.x; e < kTileVectors * kTileDims; e += blockDim.x) {
            const int i = e / kTileDims, d = e % kTileDims;
            ys[i][d] = (i < nvec && d0 + d < dim) ? rows.load(base + t.vector0 + i, d0 + d, t.list)
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
        const long long out = g.pair_out[t.pair0 + i];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const int v = tv + 16 * b;
            if (v >= nvec) continue;
            g.distances[out + t.vector0 + v] = L2 ? acc[a][b] : -acc[a][b];
            if (g.rows) g.rows[out + t.vector0 + v] = (int)(base + t.vector0 + v);
        }
    }
}


// A tile of at most kThinQueries pairs (the common case below a few thousand
// queries per batch, where a list is probed by one or two of them) would
// leave most of the tiled product's 32 query slots idle: such tiles go to
// this kernel instead.  A thin tile spans kThinRows rows of its list (a
// tiled one 64), so that the plan a batch uploads stays small; each thread
// takes rows in turn and sums each row's keys against the tile's queries
// (staged in shared memory) over the dimensions in order, four at a time
// (Rows::load4).  The arithmetic is the tiled product's, one fmaf per
// dimension from the first, so that a key does not depend on which kernel
// its tile took, that is, on which other queries share the batch
// (search_batch.c promises a caller the results it would get alone).  The
// shared memory is the queries' alone, so that L1 keeps the rows' lines
// between a thread's loads.  Needs dim a multiple of 4 (tile_thin_fits).
constexpr int kThinQueries = 8;
constexpr int kThinRows = 512;
constexpr int kThinThreads = 128;

inline bool tile_thin_fits(long long dim)
{
    return dim % 4 == 0 && (size_t)kThinQueries * dim * sizeof(float) <= (size_t)48 << 10;
}

template <bool L2>
__device__ __forceinline__ float tile_term(float4 q, float4 y, float acc)
{
    if (L2) {
        float diff = q.x - y.x;
        acc = fmaf(diff, diff, acc);
        diff = q.y - y.y;
        acc = fmaf(diff, diff, acc);
        diff = q.z - y.z;
        acc = fmaf(diff, diff, acc);
        diff = q.w - y.w;
        return fmaf(diff, diff, acc);
    }
    return fmaf(q.w, y.w, fmaf(q.z, y.z, fmaf(q.y, y.y, fmaf(q.x, y.x, acc))));
}

// A thin tile's queries (its pairs') into shared memory, as thin_queries
// (npairs x dim / 4 float4); every thread of the block calls it.
__device__ __forceinline__ void stage_thin_queries(const TileArgs &g, const ScanTile &t,
                                                   float4 *thin_queries)
{
    const int dim = g.dim, np = t.npairs;
    float *qs = reinterpret_cast<float *>(thin_queries);
    for (int e = threadIdx.x; e < np * dim; e += blockDim.x) {
        const int i = e / dim;
        qs[e] = g.queries[(long long)g.pair_query[t.pair0 + i] * dim + (e - i * dim)];
    }
    __syncthreads();
}

// The keys of tile row r (arena row `row`) for the tile's pairs.
template <bool L2>
__device__ __forceinline__ void write_thin_keys(const TileArgs &g, const ScanTile &t, int r,
                                                long long row, const float (&acc)[kThinQueries])
{
#pragma unroll
    for (int a = 0; a < kThinQueries; ++a) {
        if (a >= t.npairs) break;
        const long long out = g.pair_out[t.pair0 + a] + t.vector0 + r;
        g.distances[out] = L2 ? acc[a] : -acc[a];
        if (g.rows) g.rows[out] = (int)row;
    }
}

template <bool L2, typename Rows>
__global__ void __launch_bounds__(kThinThreads) thin_tile_kernel(TileArgs g, Rows rows)
{
    extern __shared__ float4 thin_queries[];  // npairs x dim / 4
    const ScanTile t = g.tiles[blockIdx.x];
    assert(t.npairs <= kThinQueries);
    const int dim = g.dim, d4 = dim / 4, np = t.npairs;
    stage_thin_queries(g, t, thin_queries);
    const int nvec = min(kThinRows, t.size - t.vector0);
    for (int r = threadIdx.x; r < nvec; r += blockDim.x) {
        const long long row = t.base + t.vector0 + r;
        float acc[kThinQueries] = {};
#pragma unroll 4
        for (int f = 0; f < d4; ++f) {
            const float4 y = rows.load4(row, f, t.list);
#pragma unroll
            for (int a = 0; a < kThinQueries; ++a)
                if (a < np) acc[a] = tile_term<L2>(thin_queries[a * d4 + f], y, acc[a]);
        }
        write_thin_keys<L2>(g, t, r, row, acc);
    }
}

// thin_tile_kernel for rows of dim fp32 values stored one after another
// (Rows::kFloatRows): each warp takes 32 consecutive rows of the tile at a
// time and stages them through shared memory 32 dimensions at a time, so
// that its loads read whole 128-byte lines (four rows' lines a load, where
// thin_tile_kernel's lanes each read a line of their own row); each lane
// then sums its own row from the stage, in the same order as
// thin_tile_kernel: the same bits.  A stage row is padded to 9 float4, so
// that eight lanes reading eight rows fall in distinct banks.  The rows go
// to shared memory by cp.async (no registers on the way: 8 float4 a lane in
// flight at 66-68 registers, where loads through registers took 91-96).
constexpr int kStageF4 = 8;  // float4 of a row per stage: 32 dimensions

extern std::atomic<bool> thin_staged;  // off: thin_tile_kernel (sml_cuda_ivf_thin_staged)

// Whether the staged kernel's shared memory (the queries, then the warps'
// stages: 18 KB) stays within the 48 KB a launch takes without opting in:
// dim up to 960; larger dims keep thin_tile_kernel.
inline bool thin_staged_fits(long long dim)
{
    const size_t stages = sizeof(float4) * (kThinThreads / 32) * 32 * (kStageF4 + 1);
    return (size_t)kThinQueries * dim * sizeof(float) + stages <= (size_t)48 << 10;
}

template <bool L2, typename Rows>
__global__ void __launch_bounds__(kThinThreads) thin_staged_kernel(TileArgs g, Rows rows)
{
    extern __shared__ float4 thin_queries[];  // npairs x dim / 4
    __shared__ float4 stage[kThinThreads / 32][32 * (kStageF4 + 1)];
    const ScanTile t = g.tiles[blockIdx.x];
    assert(t.npairs <= kThinQueries);
    const int dim = g.dim, d4 = dim / 4, np = t.npairs;
    stage_thin_queries(g, t, thin_queries);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float4 *st = stage[warp];
    const int nvec = min(kThinRows, t.size - t.vector0);
    for (int r0 = warp * 32; r0 < nvec; r0 += kThinThreads) {
        const int nrows = min(32, nvec - r0);
        const long long row0 = t.base + t.vector0 + r0;
        const float4 *src = reinterpret_cast<const float4 *>(rows.codes + row0 * dim);
        float acc[kThinQueries] = {};
        for (int f0 = 0; f0 < d4; f0 += kStageF4) {
            const int w = min(kStageF4, d4 - f0);
            __syncwarp();  // every lane is done with the last stage
            // element e of the stage: row e / w, float4 f0 + e % w of it,
            // copied without passing through registers (cp.async, sm_80 on)
#pragma unroll
            for (int i = 0; i < kStageF4; ++i) {
                const int e = lane + 32 * i, r = e / w;
                if (i < w && r < nrows) {
                    const unsigned to = static_cast<unsigned>(
                        __cvta_generic_to_shared(st + r * (kStageF4 + 1) + (e - r * w)));
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to),
                                 "l"(src + (long long)r * d4 + f0 + (e - r * w)));
                }
            }
            asm volatile("cp.async.wait_all;\n" ::: "memory");
            __syncwarp();
            if (lane < nrows) {
                for (int c = 0; c < w; ++c) {
                    const float4 y = st[lane * (kStageF4 + 1) + c];
#pragma unroll
                    for (int a = 0; a < kThinQueries; ++a)
                        if (a < np) acc[a] = tile_term<L2>(thin_queries[a * d4 + f0 + c], y, acc[a]);
                }
            }
        }
        if (lane >= nrows) continue;
        write_thin_keys<L2>(g, t, r0 + lane, row0 + lane, acc);
    }
}

// A batch's host block of a tiled scan: the pair plan and the tiles.
struct TilePlan {
    PairPlan pairs;
    ScanTile *tiles;
    long long ntiles;
    long long nthin;  // tiles [0, nthin) have at most thin_max pairs
};

// How a code type's kernels cut a batch into tiles: runs of up to
// kTileQueries pairs of a list, times chunks of its rows: kThinRows rows for
// runs of at most thin_max pairs (thin tiles), wide_rows for the others.
// with_lists: the plan holds each pair's list; per_query and per_pair:
// floats of device scratch the code type asks for each query and each pair
// of a batch (TileLaunch::extra).
struct TileShape {
    int thin_max;
    int wide_rows;
    bool with_lists;
    size_t per_query;
    size_t per_pair;
};

// The tiles of a batch (from the counting pass); *thin of them thin.
long long count_tiles(const sml_ivf_scan_args &a, const PairCount &count, const TileShape &shape,
                      long long *thin);

// Take the plan's arrays from the block at base (nullptr: only measure), with
// each pair's list where with_lists; returns its bytes.
size_t carve_tile_plan(void *base, int nq, long long npairs, long long ntiles, bool with_lists,
                       TilePlan *p);

// After the placing pass (fill_pair_plan): the tiles, the thin ones first
// (p->nthin of them).
void fill_tiles(const sml_ivf_scan_args &a, const PairCount &count, const TileShape &shape,
                TilePlan *p);

// What a code type's tile kernels get besides TileArgs: the device plan (its
// pairs, with their lists where asked), the tiles' count and how many are
// thin, and the scratch TileShape asked for (the batch's queries' floats,
// then its pairs').
struct TileLaunch {
    const PairPlan *plan;
    long long ntiles;
    long long nthin;
    float *extra;
    cudaStream_t st;
};

// Queries [q0, q0 + nq) of a (device queries, host probes): plan (tiles cut
// as shape says), keys by launch(g, how) over the tiles, selection of the
// rows allowed (scan_filter; none: all), results.  Caller holds the
// device (ivf_locked, scan_planned).
template <typename Launch>
simil_status tiled_batch_by(Device *dev, const sml_ivf_scan_args &a, long long q0, int nq,
                            const TileShape &shape, const RowFilter &allowed, Launch launch)
{
    cudaStream_t st = dev->stream[0];
    PairCount count;
    SML_TRY(count_pairs(a, q0, nq, kPairShape, &count));
    long long nthin;
    const long long ntiles = count_tiles(a, count, shape, &nthin);
    TilePlan hp;
    const size_t host_bytes =
        carve_tile_plan(nullptr, nq, count.pairs, ntiles, shape.with_lists, &hp);
    char *host;
    SML_TRY(device_pinned(dev, host_bytes, reinterpret_cast<void **>(&host)));
    carve_tile_plan(host, nq, count.pairs, ntiles, shape.with_lists, &hp);
    hp.nthin = nthin;
    fill_pair_plan(a, q0, nq, &count, &hp.pairs);
    fill_tiles(a, count, shape, &hp);
    PairScratch sc;
    PairPlan dp;
    char *ws;
    float *extra;
    const size_t extra_floats =
        (size_t)nq * shape.per_query + (size_t)count.pairs * shape.per_pair;
    SML_TRY(pair_workspace(dev, a, host, host_bytes, hp.pairs, extra_floats, &ws, &extra, &sc,
                           &dp));
    trace_mark(st, "ivf: tiled plan and upload");
    const TileArgs g{mirror(ws, host, hp.tiles), dp.pair_query, dp.pair_out,
                     a.queries + q0 * a.dim, (int)a.dim, sc.distances, sc.rows};
    SML_TRY(launch(g, TileLaunch{&dp, ntiles, nthin, extra, st}));
    trace_mark(st, "ivf: tiled distances");
    SML_TRY(select_pairs(a, hp.pairs, dp, sc, allowed, st));
    trace_mark(st, "ivf: pair selection");
    return finish_to_host(dev, a, q0, nq, sc.final_keys, sc.final_idx);
}

// The thin tiles of a batch: staged through shared memory (thin_staged_kernel)
// where the rows are floats and they fit, else thin_tile_kernel.
template <bool L2, typename Rows>
simil_status launch_thin(const TileArgs &g, const Rows &rows, int tiles, cudaStream_t st)
{
    const size_t smem = sizeof(float) * kThinQueries * (size_t)g.dim;
    if constexpr (Rows::kFloatRows) {
        if (thin_staged.load(std::memory_order_relaxed) && thin_staged_fits(g.dim)) {
            thin_staged_kernel<L2><<<tiles, kThinThreads, smem, st>>>(g, rows);
            SML_LAUNCH_TRY("thin_staged_kernel");
            return SIMIL_OK;
        }
    }
    thin_tile_kernel<L2><<<tiles, kThinThreads, smem, st>>>(g, rows);
    SML_LAUNCH_TRY("thin_tile_kernel");
    return SIMIL_OK;
}

// tiled_batch_by with the thin tiles' kernel and tile_distance_kernel over rows.
template <typename Rows>
simil_status tiled_batch(Device *dev, const sml_ivf_scan_args &a, long long q0, int nq,
                         const Rows &rows, const RowFilter &allowed)
{
    const TileShape shape{tile_thin_fits(a.dim) ? kThinQueries : 0, kTileVectors, false, 0, 0};
    const bool l2 = a.metric == SIMIL_METRIC_L2;
    return tiled_batch_by(
        dev, a, q0, nq, shape, allowed, [&](TileArgs g, const TileLaunch &how) {
            if (how.nthin > 0) {
                const int thin = (int)how.nthin;
                SML_TRY(l2 ? launch_thin<true>(g, rows, thin, how.st)
                           : launch_thin<false>(g, rows, thin, how.st));
            }
            g.tiles += how.nthin;
            if (how.ntiles > how.nthin) {
                const int wide = (int)(how.ntiles - how.nthin);
                if (l2)
                    tile_distance_kernel<true><<<wide, 128, 0, how.st>>>(g, rows);
                else
                    tile_distance_kernel<false><<<wide, 128, 0, how.st>>>(g, rows);
                SML_LAUNCH_TRY("tile_distance_kernel");
            }
            return SIMIL_OK;
        });
}

}  // namespace sml
