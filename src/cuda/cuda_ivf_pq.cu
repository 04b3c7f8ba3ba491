// cuda_ivf_pq.cu: IVF-PQ's scan on the GPU (the GPU paper, IVFADC): its
// driver, which picks one of two scans (cuda_ivf_pq.cuh):
//
// Fused scan (term-3 tables, k <= kPqFusedMaxK; cuda_ivf_pq_fused.cu): one
// block per query builds the query's table once, scans every probed list and
// selects in registers; a small batch splits each query over blocks, which
// copy the table that the coarse kernel built beside its keys (QueryTable).
// It reads the probes where the coarse search wrote them in device memory
// (stage_inputs): no plan, no distances in memory.
//
// Pair scan (residual tables, or larger k; cuda_ivf_pq_pairs.cu): the pair
// scan of cuda_ivf.cuh, planned on the host, with one block per (query,
// list) pair and chunk of up to kPqItemVectors of the list's vectors.
#include <assert.h>

#include <atomic>

#include "cuda/cuda_ivf.cuh"
#include "cuda/cuda_ivf_pq.cuh"
#include "cuda/select.cuh"

namespace sml {
namespace {

constexpr size_t kCandidateBudget = (size_t)2 << 30;  // bytes of distances per batch
constexpr int kMaxBatch = 65536;
// Blocks per query of a small batch at most: each copies the query's table
// (from the coarse kernel; built by each block with coarse_tables off).
constexpr int kPqMaxSplits = 64;
// sml_cuda_ivf_pq_coarse_tables
std::atomic<bool> coarse_tables{true};

// The table by codeword (fp32, m a power of two from 4 to 64, k <= 64).
bool pq_swizzled(const sml_ivf_pq_scan_args *a)
{
    const int64_t m = a->m;
    return !a->lut_fp16 && a->scan.k <= 64 && m >= 4 && m <= 64 && (m & (m - 1)) == 0;
}

bool pq_fused(const sml_ivf_pq_scan_args *a)
{
    return table_kind(a) == Table::term3 && a->scan.k <= kPqFusedMaxK;
}

// ---- the fused scan -----------------------------------------------------

// Queries [q0, q0 + nq) in one launch, from their inputs on the device.
simil_status fused_batch(Device *dev, const sml_ivf_pq_scan_args *a, const Inputs &in,
                         const float *tables, long long q0, int nq, const RowFilter &allowed)
{
    cudaStream_t st = dev->stream[0];
    const sml_ivf_scan_args &sc = a->scan;
    const bool swizzled = pq_swizzled(a);
    const size_t nk = (size_t)nq * sc.k;
    PqQueryScan scan{};
    // a small batch splits each query over several blocks (cuda_ivf.cuh)
    scan.splits = nq <= ivf_small_max() && sc.k <= kSmallMaxK
                      ? small_splits(dev, nq, kPqMaxSplits) : 1;
    const size_t parts = scan.splits > 1 ? nk * scan.splits : nk;
    const auto carve = [&](void *base) {
        Carve c(base);
        scan.out_keys = c.take<float>(parts);
        scan.out_idx = c.take<int>(parts);
        return c.used();
    };
    char *ws;
    SML_TRY(device_workspace(dev, carve(nullptr), reinterpret_cast<void **>(&ws)));
    carve(ws);
    if (scan.splits > 1) {
        // a recorded batch ends in small_out_to_host's submit (SmallReplay)
        SML_TRY(small_out(dev, sc, nq, &scan.out));
    } else {
        // a batch of at least four queries an SM does not split (a GPU of 16
        // SMs or fewer, or a raised ivf_small_max), and its finish issues its
        // operations directly: what a SmallReplay recorded goes first, or
        // the scan would read inputs that were never uploaded
        SML_TRY(replay_submit(dev));
    }
    scan.queries = in.queries;
    scan.probes = in.probes;
    scan.probe_keys = in.keys;
    scan.probe_key_sign = in.key_sign;
    scan.nprobe = (int)sc.probes.nprobe;
    scan.list_offset = in.list_offset;
    scan.list_size = in.list_size;
    scan.dim = (int)sc.dim;
    scan.codebooks = a->codebooks;
    scan.codebooks_by_codeword = a->codebooks_by_codeword;
    scan.tables = tables;
    assert(!swizzled || scan.codebooks_by_codeword != nullptr);
    scan.m = (int)a->m;
    scan.ksub = (int)a->ksub;
    scan.dsub = (int)a->dsub;
    scan.term3_scale = term3_scale(a);
    scan.codes = static_cast<const uint8_t *>(sc.lists.codes);
    scan.code_size = (int)sc.lists.code_stride;
    scan.term1_at = (int)a->term1_at;
    scan.k = (int)sc.k;
    scan.allowed = allowed;
    trace_mark(st, "ivf-pq: workspace");
    SML_TRY(launch_pq_fused(scan, a->lut_fp16 != 0, swizzled, nq, st));
    trace_mark(st, "ivf-pq: fused scan");
    if (scan.splits > 1)
        return small_out_to_host(dev, sc, q0, nq, scan.out);
    return finish_to_host(dev, sc, q0, nq, scan.out_keys, scan.out_idx);
}

// ---- the pair scan ------------------------------------------------------

// A batch's host block: the pair plan and the items.
struct PqPlan {
    PairPlan pairs;
    PqItem *items;
    long long nitems;
};

// Items: each pair in chunks of kPqItemVectors vectors (from the counting pass).
long long count_items(const sml_ivf_scan_args &a, const PairCount &count)
{
    long long items = 0;
    for (int64_t l = 0; l < a.lists.nlist; ++l)
        items += count.of(l) * ((a.lists.size[l] + kPqItemVectors - 1) / kPqItemVectors);
    return items;
}

size_t carve_pq_plan(void *base, int nq, long long npairs, long long nitems, PqPlan *p)
{
    Carve c(base);
    carve_pair_plan(c, nq, npairs, true, true, &p->pairs);
    p->items = c.take<PqItem>((size_t)(nitems + 1));
    p->nitems = nitems;
    return c.used();
}

void fill_items(PqPlan *p)
{
    long long t = 0;
    for (int i = 0; i < p->pairs.npairs; ++i)
        for (int v = 0; v < p->pairs.pair_cols[i]; v += kPqItemVectors) p->items[t++] = PqItem{i, v};
    assert(t == p->nitems);
}

// Queries [q0, q0 + nq) of a (device queries, host probes): plan, distances
// through per-pair tables, selection, results.
simil_status pair_batch(Device *dev, const sml_ivf_pq_scan_args *a, long long q0, int nq,
                        const RowFilter &allowed)
{
    cudaStream_t st = dev->stream[0];
    const sml_ivf_scan_args &sc = a->scan;
    PairCount count;
    SML_TRY(count_pairs(sc, q0, nq, kPairShape, &count));
    const long long nitems = count_items(sc, count);
    PqPlan hp;
    const size_t host_bytes = carve_pq_plan(nullptr, nq, count.pairs, nitems, &hp);
    char *host;
    SML_TRY(device_pinned(dev, host_bytes, reinterpret_cast<void **>(&host)));
    carve_pq_plan(host, nq, count.pairs, nitems, &hp);
    fill_pair_plan(sc, q0, nq, &count, &hp.pairs);
    fill_items(&hp);
    // the workspace: the host block's copy, the tables, the scratch
    PairScratch scratch;
    PairPlan dp;
    char *ws;
    float *tables;
    SML_TRY(pair_workspace(dev, sc, host, host_bytes, hp.pairs, pq_scratch_floats(a, nq), &ws,
                           &tables, &scratch, &dp));
    if (nitems > 0) {
        const PqBatch batch{mirror(ws, host, hp.items), (int)nitems, dp.pair_query, dp.pair_list,
                            dp.pair_cols, dp.pair_base, dp.pair_out, dp.pair_key, nq,
                            sc.queries + q0 * sc.dim};
        SML_TRY(launch_pq_distances(a, batch, tables, scratch.distances, scratch.rows, st));
    }
    SML_TRY(select_pairs(sc, hp.pairs, dp, scratch, allowed, st));
    return finish_to_host(dev, sc, q0, nq, scratch.final_keys, scratch.final_idx);
}

}  // namespace

simil_status cuda_ivf_pq_scan(sml_backend *b, const sml_ivf_pq_scan_args *a)
{
    assert(sml_ivf_pq_scan_args_ok(a));
    const sml_ivf_scan_args *sc = &a->scan;
    SML_RETURN_IF(sc->k >= INT32_MAX || sc->dim >= INT32_MAX, SIMIL_ERR_UNSUPPORTED,
                  "IVF scan on the GPU: k and dim must be below 2^31");
    return ivf_locked(b, *sc, [&](Device *dev, bool host_queries) -> simil_status {
        // a fused scan of a few queries, and any scan that reads fewer rows
        // than its lists hold, tests the filter on the labels of the rows
        // it reads
        const bool fused = pq_fused(a);
        RowFilter allowed;
        SML_TRY(scan_filter(dev, *sc, fused && sc->nq <= ivf_small_max(), &allowed));
        if (!fused) {
            const BatchLimits limits{kPairShape, sc->k > kMaxWarpSelectK ? (size_t)8 : (size_t)4,
                                     kCandidateBudget, kMaxBatch};
            return scan_planned(dev, sc, host_queries, limits,
                                [&](const sml_ivf_scan_args &batch, long long, long long sub,
                                    int n) {
                                    sml_ivf_pq_scan_args pq = *a;
                                    pq.scan = batch;
                                    return pair_batch(dev, &pq, sub, n, allowed);
                                });
        }
        // each query's term 3, built by the coarse search of a small batch
        // (a split scan's blocks would each build it)
        const bool swizzled = pq_swizzled(a);
        const QueryTable table{swizzled ? a->codebooks_by_codeword : a->codebooks,
                               (int)a->m,
                               (int)a->ksub,
                               (int)a->dsub,
                               swizzled,
                               term3_scale(a)};
        for (long long q0 = 0; q0 < sc->nq;) {
            const int n = input_batch(sc, q0, host_queries, true);
            Inputs in{};
            const SmallReplay replay(dev, *sc, n);
            trace_mark(dev->stream[0], "ivf: lock and join");
            const bool shared = coarse_tables.load();
            float *tables = nullptr;
            SML_TRY(stage_inputs(dev, sc, q0, n, true, host_queries, &in,
                                 shared ? &table : nullptr, shared ? &tables : nullptr));
            trace_mark(dev->stream[0], "ivf: inputs staged, coarse search on the device");
            SML_TRY(fused_batch(dev, a, in, tables, q0, n, allowed));
            q0 += n;
        }
        return SIMIL_OK;
    });
}

}  // namespace sml

extern "C" void sml_cuda_ivf_pq_coarse_tables(int on) { sml::coarse_tables.store(on != 0); }
