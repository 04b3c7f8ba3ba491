// cuda_ivf.cu: what the inverted-list scans on the GPU share (cuda_ivf.cuh):
// staging, probes, planning, the pair scan's plan and selection, results.
//
// A search's queries go to the device once, in batches (stage_inputs), for
// the coarse search and the scan.  A scan planned on the host takes each
// batch's probes to the host (batch_probes) and cuts the batch further so
// that its distances fit (plan_batch_queries); for each such batch its
// (query, probe) pairs are grouped by list with a counting sort (count_pairs,
// place_pairs), so that a kernel reads each list once for all the queries
// that probe it.
//
// The pair scan (IVF-Flat, IVF-PQ unfused) lays the distances out query by
// query: query q owns one segment per probe, each padded to a multiple of 4
// floats.  k <= 2048: every segment keeps its k best (WarpSelect /
// BlockSelect over ragged rows, the paper's multi-pass k-selection), then one
// more selection per query merges its nprobe lists.  k > 2048: the kernel
// also writes each candidate's arena row, and radix selection picks the k
// best of each query's whole segment run.
#include <assert.h>
#include <omp.h>
#include <string.h>

#include "core/vectors.h"
#include "cuda/cuda_ivf.cuh"
#include "cuda/cuda_kernels.cuh"
#include "cuda/cuda_replay.cuh"
#include "cuda/select.cuh"

namespace sml {

// ---- staging ------------------------------------------------------------

namespace {

// Device memory for one batch's inputs; queries per batch keep within it (and
// a grid of one block per query within one launch).
constexpr size_t kInputBudget = (size_t)256 << 20;
constexpr int kMaxBatchQueries = 65536;

// The input buffer's arrays: the list layout, the queries, the probes and
// their keys (sizes 0 where not staged).
struct InputLayout {
    int64_t *list_offset;
    int64_t *list_size;
    float *queries;
    int64_t *probes;
    float *keys;
    float *coarse;  // the coarse keys of launch_coarse
    float *table;   // the tables launch_coarse fills (QueryTable)
};

size_t carve_inputs(void *base, size_t nlist, size_t q_floats, size_t pairs, size_t coarse,
                    InputLayout *l, size_t table = 0)
{
    Carve c(base);
    l->list_offset = c.take<int64_t>(nlist);
    l->list_size = c.take<int64_t>(nlist);
    l->queries = c.take<float>(q_floats);
    l->probes = c.take<int64_t>(pairs);
    l->keys = c.take<float>(pairs);
    l->coarse = c.take<float>(coarse);
    l->table = c.take<float>(table);
    return c.used();
}

// Whether the probes of a batch of nq queries that the device finds come
// from the coarse kernels (launch_coarse, or launch_coarse_many where the
// probes stay), whose keys stage_inputs puts in the input buffer.
bool coarse_keys_staged(const sml_ivf_scan_args &a, int nq)
{
    return coarse_on_device(a, nq) || coarse_many(a, nq, true);
}

}  // namespace

int input_batch(const sml_ivf_scan_args *a, long long q0, bool host_queries, bool device_probes)
{
    long long n = a->nq - q0;
    if (n > kMaxBatchQueries) n = kMaxBatchQueries;
    // the most queries whose inputs fit the budget, with or without coarse keys
    const auto fit = [&](bool coarse) {
        const size_t per_query = (host_queries ? 4 * (size_t)a->dim : 0) +
                                 (device_probes ? 12 * (size_t)a->probes.nprobe : 0) +
                                 (coarse ? 4 * (size_t)a->lists.nlist : 0) + 1;
        const long long most = (long long)(kInputBudget / per_query);
        return n < most ? n : most > 0 ? most : 1;
    };
    // a batch whose probes the coarse kernels find has its coarse keys in
    // the input buffer too (stage_inputs).  Both kernels' bounds hold for
    // fewer queries as well, so a batch cut to fit stays one that has them.
    n = fit(false);
    if (device_probes && coarse_keys_staged(*a, (int)n)) n = fit(true);
    return (int)n;
}

// What comes from the host goes in one copy through the pinned buffer, laid
// out as the input buffer: the list layout, the queries, given probes and
// keys.  Found probes are written by the coarse search in the input buffer.
simil_status stage_inputs(Device *dev, const sml_ivf_scan_args *a, long long q0, int nq,
                          bool device_probes, bool host_queries, Inputs *in,
                          const QueryTable *table, float **table_out)
{
    cudaStream_t st = dev->stream[0];
    const bool given = a->probes.lists != nullptr;
    const int64_t np = a->probes.nprobe;
    // the list layout: the index's copy in device memory, else sent with the inputs
    const int64_t *layout = device_probes ? a->lists.layout : nullptr;
    const size_t nlist = device_probes && layout == nullptr ? (size_t)a->lists.nlist : 0;
    const size_t pairs = device_probes ? (size_t)nq * np : 0;
    const size_t q_floats = host_queries ? (size_t)nq * a->dim : 0;
    const bool on_device = device_probes && coarse_on_device(*a, nq);
    const bool many = device_probes && !on_device && coarse_many(*a, nq, true);
    assert((on_device || many) == (device_probes && coarse_keys_staged(*a, nq)));
    const size_t coarse = on_device || many ? (size_t)nq * a->lists.nlist : 0;
    // (a few queries' tables: within the input budget's slack, as the keys)
    const bool tables = on_device && table != nullptr;
    const size_t table_floats = tables ? (size_t)nq * table->m * table->ksub : 0;
    assert((table == nullptr) == (table_out == nullptr));
    if (table_out != nullptr) *table_out = nullptr;
    InputLayout lay, h{};
    const size_t total = carve_inputs(nullptr, nlist, q_floats, pairs, coarse, &lay, table_floats);
    // what goes through the pinned buffer: given probes and keys come after
    const size_t staged = given ? carve_inputs(nullptr, nlist, q_floats, pairs, 0, &h)
                                : carve_inputs(nullptr, nlist, q_floats, 0, 0, &h);
    char *io, *host = nullptr;
    SML_TRY(device_io(dev, total, reinterpret_cast<void **>(&io)));
    if (staged > 0) SML_TRY(device_pinned(dev, staged, reinterpret_cast<void **>(&host)));
    if (host != nullptr) carve_inputs(host, nlist, q_floats, given ? pairs : 0, 0, &h);
    if (nlist > 0) {
        sml_copy_parallel(h.list_offset, a->lists.offset, 8 * nlist);
        sml_copy_parallel(h.list_size, a->lists.size, 8 * nlist);
    }
    if (host_queries) sml_copy_parallel(h.queries, a->queries + q0 * a->dim, 4 * q_floats);
    if (given && device_probes) {
        sml_copy_parallel(h.probes, a->probes.lists + q0 * np, 8 * pairs);
        sml_copy_parallel(h.keys, a->probes.keys + q0 * np, 4 * pairs);
    }
    if (staged > 0) {
        SML_CUDA_TRY(copy_async(io, host, staged, cudaMemcpyHostToDevice, st));
        // No wait for the copy, but where the host writes the pinned buffer
        // next without one: a scan planned on the host writes its plan there,
        // after the coarse search's wait, or where the probes are given, right
        // away.  (A pinned buffer that grows waits for its copies itself.)
        if (given && !device_probes) SML_CUDA_TRY(cudaStreamSynchronize(st));
    }
    carve_inputs(io, nlist, q_floats, pairs, coarse, &lay, table_floats);
    in->queries = host_queries ? lay.queries : a->queries + q0 * a->dim;
    in->list_offset = layout ? layout : lay.list_offset;
    in->list_size = layout ? layout + a->lists.nlist : lay.list_size;
    in->probes = lay.probes;
    in->keys = lay.keys;
    in->key_sign = 1.0f;
    if (given || !device_probes) return SIMIL_OK;
    in->key_sign = a->probes.coarse_search.metric == SIMIL_METRIC_L2 ? 1.0f : -1.0f;
    if (on_device) {
        unsigned *tickets;
        SML_TRY(device_tickets(dev, (size_t)nq, &tickets));
        if (tables) *table_out = lay.table;
        return launch_coarse(*a, in->queries, nq, lay.coarse, tickets, lay.probes, lay.keys,
                             tables ? table : nullptr, lay.table, st);
    }
    if (many) return launch_coarse_many(*a, in->queries, nq, lay.coarse, lay.probes, lay.keys, st);
    // knn_locked issues its work directly: it would run before a recorded upload
    assert(replay_recording() == nullptr);
    const sml_knn_args knn =
        sml_knn_of(a->probes.coarse_search, in->queries, nq, np, lay.keys, lay.probes);
    return knn_locked(dev, &knn);
}

QueryStream::~QueryStream()
{
    join();
    // after a failure an upload may still read a half that the next call writes
    if (sending_) cudaStreamSynchronize(dev_->stream[1]);
    for (int h = 0; h < 2; ++h) {
        if (sent_[h]) cudaEventDestroy(sent_[h]);
        if (read_[h]) cudaEventDestroy(read_[h]);
    }
}

void QueryStream::join()
{
    if (copier_.joinable()) copier_.join();
}

simil_status QueryStream::open(int most)
{
    assert(most > 0);
    half_ = (size_t)most * row_;
    SML_TRY(device_staged(dev_, 2 * half_, reinterpret_cast<void **>(&pinned_)));
    SML_TRY(device_io(dev_, 2 * half_, reinterpret_cast<void **>(&io_)));
    for (int h = 0; h < 2; ++h) {
        SML_CUDA_TRY(cudaEventCreateWithFlags(&sent_[h], cudaEventDisableTiming));
        SML_CUDA_TRY(cudaEventCreateWithFlags(&read_[h], cudaEventDisableTiming));
    }
    return SIMIL_OK;
}

simil_status QueryStream::send(long long q0, int n, const float **device_queries)
{
    assert((size_t)n * row_ <= half_);
    const size_t bytes = (size_t)n * row_;
    char *host = pinned_ + turn_ * half_, *dst = io_ + turn_ * half_;
    join();
    if (ahead_q0_ != q0 || ahead_n_ != n) {
        // not copied ahead (the first batch, or no thread to be had)
        SML_CUDA_TRY(cudaEventSynchronize(sent_[turn_]));
        sml_copy_parallel(host, reinterpret_cast<const char *>(queries_) + q0 * row_, bytes);
    }
    ahead_q0_ = -1;
    assert(replay_recording() == nullptr);  // a recorded graph holds the first stream alone
    cudaStream_t work = dev_->stream[0], up = dev_->stream[1];
    // the work so far read the other half; the upload waits for what read this one
    SML_CUDA_TRY(cudaEventRecord(read_[turn_ ^ 1], work));
    SML_CUDA_TRY(cudaStreamWaitEvent(up, read_[turn_], 0));
    sending_ = true;
    SML_CUDA_TRY(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, up));
    SML_CUDA_TRY(cudaEventRecord(sent_[turn_], up));
    SML_CUDA_TRY(cudaStreamWaitEvent(work, sent_[turn_], 0));
    turn_ ^= 1;
    *device_queries = reinterpret_cast<const float *>(dst);
    return SIMIL_OK;
}

simil_status QueryStream::ahead(long long q0, int n)
{
    assert(!copier_.joinable() && (size_t)n * row_ <= half_);
    // the half's last upload (two batches back) is done before it is written
    SML_CUDA_TRY(cudaEventSynchronize(sent_[turn_]));
    char *host = pinned_ + turn_ * half_;
    const char *src = reinterpret_cast<const char *>(queries_) + q0 * row_;
    const size_t bytes = (size_t)n * row_;
    try {
        // one thread: its copy has the GPU's whole batch to finish in
        copier_ = std::thread([=] { memcpy(host, src, bytes); });
    } catch (...) {
        return SIMIL_OK;  // send copies it then
    }
    ahead_q0_ = q0;
    ahead_n_ = n;
    return SIMIL_OK;
}

// ---- probes on the host -------------------------------------------------

simil_status batch_probes(Device *dev, const sml_ivf_scan_args *a, const float *queries,
                          long long q0, int nq, sml_ivf_scan_args *batch, FoundProbes *found)
{
    const int64_t np = a->probes.nprobe;
    *batch = *a;
    batch->queries = queries;
    batch->nq = nq;
    batch->distances = a->distances + q0 * a->k;
    batch->labels = a->labels + q0 * a->k;
    if (a->probes.lists) {
        batch->probes.lists = a->probes.lists + q0 * np;
        batch->probes.keys = a->probes.keys ? a->probes.keys + q0 * np : nullptr;
        return SIMIL_OK;
    }
    const size_t pairs = (size_t)nq * np;
    SML_TRY(sml_alloc(reinterpret_cast<void **>(&found->lists), pairs, sizeof *found->lists,
                      "probes"));
    SML_TRY(sml_alloc(reinterpret_cast<void **>(&found->keys), pairs, sizeof *found->keys,
                      "coarse distances"));
    const sml_knn_args knn =
        sml_knn_of(a->probes.coarse_search, queries, nq, np, found->keys, found->lists);
    if (coarse_many(*a, nq, false)) {
        // keys and selection in two launches and one wait, where the general
        // exact search takes eight launches and a wait for its check flags
        cudaStream_t st = dev->stream[0];
        // the keys, rounded up to 16 bytes, then the probes and their distances
        const size_t nkeys = ((size_t)nq * a->probes.coarse_search.n + 3) / 4 * 4;
        float *scratch;
        SML_TRY(device_workspace(dev, 4 * nkeys + 12 * pairs,
                                 reinterpret_cast<void **>(&scratch)));
        int64_t *d_probes = reinterpret_cast<int64_t *>(scratch + nkeys);
        float *d_dist = reinterpret_cast<float *>(d_probes + pairs);
        SML_TRY(launch_coarse_many(*a, queries, nq, scratch, d_probes, d_dist, st));
        char *host;
        SML_TRY(device_results(dev, 12 * pairs, reinterpret_cast<void **>(&host)));
        SML_CUDA_TRY(cudaMemcpyAsync(host, d_probes, 12 * pairs, cudaMemcpyDeviceToHost, st));
        SML_CUDA_TRY(cudaStreamSynchronize(st));
        memcpy(found->lists, host, 8 * pairs);
        memcpy(found->keys, host + 8 * pairs, 4 * pairs);
    } else {
        SML_TRY(knn_locked(dev, &knn));
    }
    sml_ivf_keys_of_knn(knn.metric, found->keys, pairs);
    batch->probes.lists = found->lists;
    batch->probes.keys = found->keys;
    return SIMIL_OK;
}

// ---- planning -----------------------------------------------------------

long long segment_positions(const sml_ivf_scan_args &a, long long q, SegmentShape shape)
{
    long long c = 0;
    for (int64_t j = 0; j < a.probes.nprobe; ++j) {
        const int64_t l = a.probes.lists[q * a.probes.nprobe + j];
        if (l >= 0) c += pad_to(a.lists.size[l], shape.run_pad);
    }
    return pad_to(c, shape.query_pad);
}

int plan_batch_queries(const sml_ivf_scan_args &a, long long q0, SegmentShape shape,
                       size_t bytes_per_position, size_t budget, int max_queries)
{
    size_t bytes = 0;
    int n = 0;
    while (q0 + n < a.nq && n < max_queries) {
        const size_t more = (size_t)segment_positions(a, q0 + n, shape) * bytes_per_position;
        if (n > 0 && bytes + more > budget) break;
        bytes += more;
        ++n;
    }
    return n;
}

int plan_threads(const sml_ivf_scan_args &a, long long items)
{
    long long t = items / 8192;
    const long long most = a.threads > 0 ? a.threads : omp_get_max_threads();
    t = t < most ? t : most;
    return t < kPlanThreads ? (t > 1 ? (int)t : 1) : kPlanThreads;
}

int place_threads(const sml_ivf_scan_args &a, long long pairs, long long nlist)
{
    // each thread zeroes and sums a count per list: keep them few beside the pairs
    const long long per_list = pairs / (nlist > 0 ? nlist : 1);
    const int t = plan_threads(a, pairs);
    return per_list < t ? (per_list > 1 ? (int)per_list : 1) : t;
}

simil_status count_pairs(const sml_ivf_scan_args &a, long long q0, int nq, SegmentShape shape,
                         PairCount *count)
{
    SML_TRY(sml_calloc(reinterpret_cast<void **>(&count->by_list), (size_t)(a.lists.nlist + 1),
                       sizeof *count->by_list, "IVF plan"));
    count->nlist = a.lists.nlist;
    const int64_t np = a.probes.nprobe;
    for (long long q = q0; q < q0 + nq; ++q) {
        long long pos = 0;
        for (int64_t j = 0; j < np; ++j) {
            const int64_t l = a.probes.lists[q * np + j];
            if (l < 0 || a.lists.size[l] == 0) continue;
            count->by_list[l + 1]++;
            pos += pad_to(a.lists.size[l], shape.run_pad);
        }
        count->positions += pad_to(pos, shape.query_pad);
    }
    for (int64_t l = 0; l < a.lists.nlist; ++l) count->pairs += count->by_list[l + 1];
    return SIMIL_OK;
}

// ---- the pair scan ------------------------------------------------------

void carve_pair_plan(Carve &c, int nq, long long npairs, bool with_lists, bool with_keys,
                     PairPlan *p)
{
    const size_t pairs = (size_t)(npairs > 0 ? npairs : 1), q = (size_t)nq;
    p->nq = nq;
    p->npairs = (int)npairs;
    p->pair_query = c.take<int>(pairs);
    p->pair_out = c.take<long long>(pairs);
    p->pair_row = c.take<int>(pairs);
    p->pair_list = with_lists ? c.take<int>(pairs) : nullptr;
    p->pair_cols = c.take<int>(pairs);
    p->pair_base = c.take<int>(pairs);
    p->pair_key = with_keys ? c.take<float>(pairs) : nullptr;
    p->query_start = c.take<long long>(q);
    p->query_cols = c.take<int>(q);
}

void fill_pair_plan(const sml_ivf_scan_args &a, long long q0, int nq, PairCount *count,
                    PairPlan *p)
{
    const int64_t np = a.probes.nprobe;
    const Segments seg{p->query_start, p->query_cols, nullptr, nullptr};
    p->most = place_pairs(a, q0, nq, kPairShape, count, seg, [&](const PlacedPair &e) {
        const long long s = e.slot;
        p->pair_query[s] = e.query;
        p->pair_out[s] = p->query_start[e.query] + e.pos0;
        p->pair_row[s] = (int)(e.query * np + e.probe);
        if (p->pair_list) p->pair_list[s] = (int)e.list;
        p->pair_cols[s] = (int)a.lists.size[e.list];
        p->pair_base[s] = (int)a.lists.offset[e.list];
        if (p->pair_key)
            p->pair_key[s] = a.probes.keys ? a.probes.keys[(q0 + e.query) * np + e.probe] : 0.0f;
    });
    p->total = count->positions;
}

PairPlan mirror_pair_plan(const PairPlan &p, void *device, const void *host)
{
    PairPlan d = p;
    d.pair_query = mirror(device, host, p.pair_query);
    d.pair_out = mirror(device, host, p.pair_out);
    d.pair_row = mirror(device, host, p.pair_row);
    d.pair_list = p.pair_list ? mirror(device, host, p.pair_list) : nullptr;
    d.pair_cols = mirror(device, host, p.pair_cols);
    d.pair_base = mirror(device, host, p.pair_base);
    d.pair_key = p.pair_key ? mirror(device, host, p.pair_key) : nullptr;
    d.query_start = mirror(device, host, p.query_start);
    d.query_cols = mirror(device, host, p.query_cols);
    return d;
}

void carve_pair_scratch(Carve &c, const sml_ivf_scan_args &a, const PairPlan &host,
                        PairScratch *s)
{
    const bool radix = a.k > kMaxWarpSelectK;
    const size_t nq = (size_t)host.nq, k = (size_t)a.k;
    const size_t k1 = (size_t)(a.k < kMaxWarpSelectK ? a.k : kMaxWarpSelectK);
    s->distances = c.take<float>((size_t)(host.total + 4));
    s->rows = radix ? c.take<int>((size_t)(host.total + 4)) : nullptr;
    s->part_keys = nullptr;
    s->part_idx = nullptr;
    s->radix = nullptr;
    s->radix_bytes = 0;
    if (radix) {
        s->radix_bytes = select_rows_radix_workspace(host.nq, host.most > 1 ? host.most : 1,
                                                     (int)a.k);
        s->radix = c.take<char>(s->radix_bytes);
    } else {
        s->part_keys = c.take<float>(nq * a.probes.nprobe * k1);
        s->part_idx = c.take<int>(nq * a.probes.nprobe * k1);
    }
    s->final_keys = c.take<float>(nq * k);
    s->final_idx = c.take<int>(nq * k);
}

simil_status pair_workspace(Device *dev, const sml_ivf_scan_args &a, const void *host,
                            size_t host_bytes, const PairPlan &plan, size_t extra_floats,
                            char **ws, float **extra, PairScratch *s, PairPlan *dp)
{
    cudaStream_t st = dev->stream[0];
    const auto carve = [&](void *base) {
        Carve c(base);
        c.take<char>(host_bytes);
        *extra = c.take<float>(extra_floats);
        carve_pair_scratch(c, a, plan, s);
        return c.used();
    };
    SML_TRY(device_workspace(dev, carve(nullptr), reinterpret_cast<void **>(ws)));
    carve(*ws);
    *dp = mirror_pair_plan(plan, *ws, host);
    SML_CUDA_TRY(cudaMemcpyAsync(*ws, host, host_bytes, cudaMemcpyHostToDevice, st));
    if (a.k > kMaxWarpSelectK)
        SML_CUDA_TRY(cudaMemsetAsync(s->rows, 0xff, 4 * (size_t)(plan.total + 4), st));
    return SIMIL_OK;
}

simil_status scan_rows_allowed(Device *dev, const sml_ivf_scan_args &a, const uint32_t **bits)
{
    *bits = nullptr;
    if (a.filter == nullptr) return SIMIL_OK;
    long long rows = 0;  // the arena's rows in use: its ids cover them
    for (int64_t l = 0; l < a.lists.nlist; ++l)
        if (a.lists.size[l] > 0 && a.lists.offset[l] + a.lists.size[l] > rows)
            rows = a.lists.offset[l] + a.lists.size[l];
    void *unused;
    SML_TRY(rows_allowed(dev, a.filter, a.lists.ids, rows, 0, bits, &unused));
    trace_mark(dev->stream[0], "ivf: filter upload and rows allowed");
    return SIMIL_OK;
}

simil_status scan_filter(Device *dev, const sml_ivf_scan_args &a, bool small, RowFilter *out)
{
    const bool few_rows = a.filter != nullptr && a.nq * a.probes.nprobe < a.lists.nlist;
    if (small || few_rows) return labels_allowed(dev, a.filter, a.lists.ids, out);
    *out = RowFilter{};
    return scan_rows_allowed(dev, a, &out->rows);
}

simil_status select_pairs(const sml_ivf_scan_args &a, const PairPlan &host, const PairPlan &dev,
                          const PairScratch &s, const RowFilter &allowed, cudaStream_t st)
{
    SML_TRY(launch_mask_pairs(host.npairs, dev.pair_out, dev.pair_cols, dev.pair_base, allowed,
                              s.distances, st));
    if (a.k > kMaxWarpSelectK) {
        // the padding between segments stays marked empty (pair_workspace)
        const RaggedRows rows{s.distances, s.rows,  dev.query_start,
                              dev.query_cols, host.nq, host.most > 1 ? host.most : 1};
        return select_ragged(rows, (int)a.k, s.final_keys, s.final_idx, a.k, s.radix,
                             s.radix_bytes, st);
    }
    const int k1 = (int)a.k;
    SML_CUDA_TRY(cudaMemsetAsync(s.part_idx, 0xff, 4 * (size_t)host.nq * a.probes.nprobe * k1, st));
    if (host.npairs > 0) {
        SelectJob seg{};
        seg.scores = s.distances;
        seg.ld = 4;
        seg.row_scale_const = 1.0f;
        seg.row_offsets = dev.pair_out;
        seg.row_cols = dev.pair_cols;
        seg.row_idx_base = dev.pair_base;
        seg.out_rows = dev.pair_row;
        seg.rows = host.npairs;
        seg.cols = 1;
        seg.k = k1;
        seg.out_keys = s.part_keys;
        seg.out_idx = s.part_idx;
        seg.out_ld = k1;
        SML_TRY(select_rows(seg, ScoreType::f32, st));
    }
    SelectJob merge{};
    merge.scores = s.part_keys;
    merge.ld = (long long)a.probes.nprobe * k1;
    merge.row_scale_const = 1.0f;
    merge.in_idx = s.part_idx;
    merge.rows = host.nq;
    merge.cols = (int)(a.probes.nprobe * k1);
    merge.k = (int)a.k;
    merge.out_keys = s.final_keys;
    merge.out_idx = s.final_idx;
    merge.out_ld = a.k;
    return select_rows(merge, ScoreType::f32, st);
}

// ---- the tiled pair scan ------------------------------------------------

// A list's runs of pairs: kTileQueries at a time; the last run of a list
// (or its only one) may have few.
namespace {

// List l's tiles: thin (its last run of pairs, where that has at most
// thin_max) and wide (the other runs).
void tiles_of_list(const sml_ivf_scan_args &a, long long pairs, int64_t l, const TileShape &shape,
                   long long *thin, long long *wide)
{
    *thin = *wide = 0;
    if (pairs == 0) return;
    const long long size = a.lists.size[l];
    const long long chunks = (size + shape.wide_rows - 1) / shape.wide_rows;
    *wide = (pairs - 1) / kTileQueries * chunks;
    if ((pairs - 1) % kTileQueries + 1 <= shape.thin_max)
        *thin = (size + kThinRows - 1) / kThinRows;
    else
        *wide += chunks;
}

// List l's tiles from thin and wide on; its pairs are [first, end).
void fill_list_tiles(const sml_ivf_scan_args &a, int64_t l, long long first, long long end,
                     const TileShape &shape, long long thin, long long wide, ScanTile *tiles)
{
    const int size = (int)a.lists.size[l];
    for (long long i = first; i < end; i += kTileQueries) {
        const int n = (int)(end - i < kTileQueries ? end - i : kTileQueries);
        const bool is_thin = n <= shape.thin_max;
        long long &t = is_thin ? thin : wide;
        const int rows = is_thin ? kThinRows : shape.wide_rows;
        for (int v = 0; v < size; v += rows)
            tiles[t++] = ScanTile{a.lists.offset[l], (int)l, size, (int)i, n, v};
    }
}

}  // namespace

long long count_tiles(const sml_ivf_scan_args &a, const PairCount &count, const TileShape &shape,
                      long long *thin)
{
    long long tiles = 0;
    *thin = 0;
    for (int64_t l = 0; l < a.lists.nlist; ++l) {
        long long t, w;
        tiles_of_list(a, count.of(l), l, shape, &t, &w);
        *thin += t;
        tiles += t + w;
    }
    return tiles;
}

size_t carve_tile_plan(void *base, int nq, long long npairs, long long ntiles, bool with_lists,
                       TilePlan *p)
{
    Carve c(base);
    carve_pair_plan(c, nq, npairs, with_lists, false, &p->pairs);
    p->tiles = c.take<ScanTile>((size_t)(ntiles + 1));
    p->ntiles = ntiles;
    return c.used();
}

// List l's pairs end at count.by_list[l] after the placing pass.  Thin
// tiles first, then the others, each in list order; many tiles (10,000
// queries at nprobe 6 make 40,000 of 256 rows) are written by several
// threads, a share of the lists each, from where their lists' tiles start.
void fill_tiles(const sml_ivf_scan_args &a, const PairCount &count, const TileShape &shape,
                TilePlan *p)
{
    const long long nlist = a.lists.nlist;
    const auto first = [&](int64_t l) { return l > 0 ? count.by_list[l - 1] : 0; };
    const int threads = plan_threads(a, p->ntiles);
    // with threads: each list's first thin and wide tile, then filled apart
    long long *at = threads > 1 ? static_cast<long long *>(malloc(sizeof(long long) * 2 *
                                                                  (size_t)nlist))
                                : nullptr;
    long long thin = 0, wide = p->nthin;
    for (int64_t l = 0; l < nlist; ++l) {
        long long t, w;
        tiles_of_list(a, count.by_list[l] - first(l), l, shape, &t, &w);
        if (at != nullptr) {
            at[2 * l] = thin;
            at[2 * l + 1] = wide;
        } else {
            fill_list_tiles(a, l, first(l), count.by_list[l], shape, thin, wide, p->tiles);
        }
        thin += t;
        wide += w;
    }
    assert(thin == p->nthin && wide == p->ntiles);
    if (at == nullptr) return;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 64)
    for (long long l = 0; l < nlist; ++l)
        fill_list_tiles(a, l, first(l), count.by_list[l], shape, at[2 * l], at[2 * l + 1],
                        p->tiles);
    free(at);
}

// ---- selection and results ----------------------------------------------

simil_status select_ragged(const RaggedRows &in, int k, float *out_keys, int *out_idx,
                           long long out_ld, void *radix, size_t radix_bytes, cudaStream_t st)
{
    SelectJob job{};
    job.scores = in.keys;
    job.ld = 4;
    job.row_scale_const = 1.0f;
    job.in_idx = in.idx;
    job.row_offsets = in.offsets;
    job.row_cols = in.cols;
    job.rows = in.rows;
    job.cols = in.most;
    job.out_keys = out_keys;
    job.out_idx = out_idx;
    job.out_ld = out_ld;
    if (k <= kMaxWarpSelectK) {
        job.k = k;
        return select_rows(job, ScoreType::f32, st);
    }
    job.k = k < in.most ? k : in.most;
    SML_CUDA_TRY(cudaMemsetAsync(out_idx, 0xff, 4 * (size_t)in.rows * out_ld, st));
    return select_rows_radix(job, ScoreType::f32, radix, radix_bytes, st);
}

simil_status finish_to_host(Device *dev, const sml_ivf_scan_args &a, long long q0, int nq,
                            const float *keys, const int *rows)
{
    cudaStream_t st = dev->stream[0];
    const size_t nk = (size_t)nq * a.k;
    const bool l2 = a.metric == SIMIL_METRIC_L2;
    // through pinned memory: a copy to the caller's pageable memory would be
    // staged by the driver and wait for the stream, once for each array
    char *host;
    SML_TRY(device_results(dev, 12 * nk, reinterpret_cast<void **>(&host)));
    int64_t *host_labels = reinterpret_cast<int64_t *>(host);
    float *host_dist = reinterpret_cast<float *>(host + 8 * nk);
    if (nq <= kFinishWarpRows) {
        // a warp per row writes whole rows straight into the results buffer
        // (mapped at its host address): one launch, where device scratch took
        // a copy more (docs/benchmarks.md, online search)
        SML_TRY(launch_finish(nq, (int)a.k, keys, rows, l2, nullptr, a.lists.ids, host_dist,
                              host_labels, st));
    } else {
        // a thread per row would write entry by entry over the bus and read
        // them back: finished in device memory, then copied
        char *out;
        SML_TRY(device_out(dev, 12 * nk, reinterpret_cast<void **>(&out)));
        int64_t *labels = reinterpret_cast<int64_t *>(out);
        float *dist = reinterpret_cast<float *>(out + 8 * nk);
        SML_TRY(launch_finish(nq, (int)a.k, keys, rows, l2, nullptr, a.lists.ids, dist, labels,
                              st));
        SML_CUDA_TRY(cudaMemcpyAsync(host, out, 12 * nk, cudaMemcpyDeviceToHost, st));
    }
    SML_CUDA_TRY(cudaStreamSynchronize(st));
    trace_mark(st, "ivf: results finished, to pinned memory");
    memcpy(a.labels + q0 * a.k, host_labels, 8 * nk);
    memcpy(a.distances + q0 * a.k, host_dist, 4 * nk);
    trace_mark(st, "ivf: results to the caller");
    return SIMIL_OK;
}

std::atomic<bool> thin_staged{true};

}  // namespace sml

extern "C" void sml_cuda_ivf_thin_staged(int on) { sml::thin_staged.store(on != 0); }
