// cuda_join.cu: the join of inverted lists on the GPU (sml_join_args), for
// k-NN graphs (algo/knn_join.h).
//
// The fused join (join_kernel.cuh) does every block of a call in one launch:
// the work list (items of up to 32 rows of a block) and each block's
// candidate spans (its candidate lists, contiguous rows of the list-ordered
// x, read in place) go up, one kernel computes fp32 distances tile by tile
// and keeps each row's k best (key, label) in shared memory, and the results
// come back in one copy: the blocks' rows are contiguous in x, and so are
// theirs.  A row's k best among its candidates are exact, as on the CPU.
//
// Where k is too large for the fused kernel's lists to fit in shared memory,
// each block is one exact search instead: its rows are the queries, and the
// rows of its candidate lists, gathered into one contiguous buffer with their
// norms, labels and fp16 shadow rows, are the base.  The search is the exact
// search's own (knn_locked, cuda_knn.cu): fp16 tensor-core GEMM tiles, the
// fused k-selection, and the exact fp32 re-check with its proven bound.  The
// gathered shadow keeps the whole matrix's largest norm, which only loosens
// the bound.
#include <algorithm>
#include <vector>

#include "core/alloc.h"
#include "core/vectors.h"
#include "cuda/cuda_device.cuh"
#include "cuda/cuda_util.cuh"
#include "cuda/join_kernel.cuh"

namespace sml {
namespace {

// The work of a call (host): each block's spans (its nonempty candidate
// lists), and the fused join's items.
struct CallPlan {
    std::vector<join::Item> items;
    std::vector<join::Span> spans;
    std::vector<int64_t> span_first;
};

simil_status plan_call(const sml_join_args *a, CallPlan *p)
{
    try {
        for (int64_t b = a->block_begin; b < a->block_end; ++b) {
            const size_t first = p->spans.size();
            p->span_first.push_back((int64_t)first);
            for (int64_t c = a->cand_offset[b]; c < a->cand_offset[b + 1]; ++c) {
                const int64_t cl = a->cand_lists[c];
                const int64_t rows = a->list_offset[cl + 1] - a->list_offset[cl];
                if (rows > 0) p->spans.push_back(join::Span{a->list_offset[cl], rows});
            }
            const int64_t r0 = a->block_offset[b], r1 = a->block_offset[b + 1];
            SML_RETURN_IF(r1 > r0 && p->spans.size() == first, SIMIL_ERR_INTERNAL,
                          "list join: block %lld has rows but no candidates", (long long)b);
            for (int64_t r = r0; r < r1; r += join::kRows)
                p->items.push_back(
                    join::Item{b - a->block_begin, r, std::min<int64_t>(join::kRows, r1 - r)});
        }
        p->span_first.push_back((int64_t)p->spans.size());
        // the longest items first, so that the last CTAs of the launch are
        // short ones (the stray-probe blocks of a list have few rows and many
        // candidates); stable, so a block's items stay together and share
        // its candidates in L2
        std::vector<int64_t> cols(p->span_first.size() - 1, 0);
        for (size_t i = 0; i + 1 < p->span_first.size(); ++i)
            for (int64_t s = p->span_first[i]; s < p->span_first[i + 1]; ++s)
                cols[i] += p->spans[(size_t)s].rows;
        std::stable_sort(p->items.begin(), p->items.end(),
                         [&cols](const join::Item &u, const join::Item &v) {
                             return cols[(size_t)u.block] > cols[(size_t)v.block];
                         });
    } catch (...) {
        return sml_error(SIMIL_ERR_OUT_OF_MEMORY, "out of host memory for the list join's plan");
    }
    return SIMIL_OK;
}

// The call's results (rows x k on stream 0, the blocks' rows in order) to
// the host, if s is SIMIL_OK; then waits for stream 0, also after a failure,
// so that the caller may free what its kernels still read.  They come
// through pinned memory, then by every thread into place: straight into the
// caller's pageable arrays they came at about 1.5 GB/s (0.87 s of mix10M's
// 3.5 s join on an H100).
simil_status results_home(Device *dev, const sml_join_args *a, const float *dist,
                          const int64_t *labels, simil_status s)
{
    const int64_t first_row = a->block_offset[a->block_begin];
    const size_t out = (size_t)(a->block_offset[a->block_end] - first_row) * (size_t)a->k;
    char *pinned = nullptr;
    if (s == SIMIL_OK)
        s = device_results(dev, out * (sizeof(float) + sizeof(int64_t)),
                           reinterpret_cast<void **>(&pinned));
    int64_t *pinned_labels = reinterpret_cast<int64_t *>(pinned);
    float *pinned_dist = reinterpret_cast<float *>(pinned + out * sizeof(int64_t));
    if (s == SIMIL_OK)
        s = cuda_status(cudaMemcpyAsync(pinned_dist, dist, sizeof(float) * out,
                                        cudaMemcpyDeviceToHost, dev->stream[0]),
                        "list join results", __FILE__, __LINE__);
    if (s == SIMIL_OK)
        s = cuda_status(cudaMemcpyAsync(pinned_labels, labels, sizeof(int64_t) * out,
                                        cudaMemcpyDeviceToHost, dev->stream[0]),
                        "list join results", __FILE__, __LINE__);
    const simil_status sync = cuda_status(cudaStreamSynchronize(dev->stream[0]), "list join",
                                          __FILE__, __LINE__);
    if (s == SIMIL_OK && sync == SIMIL_OK) {
        sml_copy_parallel(a->distances + first_row * a->k, pinned_dist, sizeof(float) * out);
        sml_copy_parallel(a->labels + first_row * a->k, pinned_labels, sizeof(int64_t) * out);
    }
    return s == SIMIL_OK ? sync : s;
}

// Rows [src, src + rows) of x go to rows [dst, dst + rows) of the gathered
// block.
struct Segment {
    long long src;
    long long dst;
    long long rows;
};

// One block per segment; its warps copy a row each in turn (lanes stride the
// row, so each warp's loads and stores are coalesced).
__global__ void gather_kernel(const Segment *segments, int dim, const float *x, const __half *xh,
                              const float *norms, const float *inv_scale, const int64_t *ids,
                              float *out_x, __half *out_h, float *out_norms,
                              float *out_inv_scale, int64_t *out_ids)
{
    const Segment seg = segments[blockIdx.x];
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    for (long long r = threadIdx.x >> 5; r < seg.rows; r += warps) {
        const long long s = seg.src + r, d = seg.dst + r;
        for (int j = lane; j < dim; j += 32) out_x[d * dim + j] = x[s * dim + j];
        if (xh)
            for (int j = lane; j < dim; j += 32) out_h[d * dim + j] = xh[s * dim + j];
        if (lane == 0) {
            if (norms) out_norms[d] = norms[s];
            if (xh) out_inv_scale[d] = inv_scale[s];
            out_ids[d] = ids[s];
        }
    }
}

// The gathered candidates of one block: a base for knn_locked.
struct Gathered {
    float *x;
    __half *h;
    float *norms;
    float *inv_scale;
    int64_t *ids;
    Segment *segments;  // device: every segment of the call
    float *dist;        // the call's results, rows x k
    int64_t *labels;
};

void gathered_free(Gathered *g)
{
    device_free(g->x);
    device_free(g->h);
    device_free(g->norms);
    device_free(g->inv_scale);
    device_free(g->ids);
    device_free(g->segments);
    device_free(g->dist);
    device_free(g->labels);
}

// The plan of a call (host): block b's segments are segs[first[i] ..
// first[i + 1]) and it has cols[i] candidate rows, i = b - block_begin.
struct Plan {
    std::vector<Segment> segs;
    std::vector<long long> first;
    std::vector<long long> cols;
    long long max_cols = 0;
};

simil_status plan_segments(const sml_join_args *a, const CallPlan &f, Plan *p)
{
    try {
        for (int64_t b = a->block_begin; b < a->block_end; ++b) {
            const size_t i = (size_t)(b - a->block_begin);
            p->first.push_back((long long)p->segs.size());
            long long cols = 0;
            for (int64_t s = f.span_first[i]; s < f.span_first[i + 1]; ++s) {
                p->segs.push_back(Segment{f.spans[s].src, cols, f.spans[s].rows});
                cols += f.spans[s].rows;
            }
            p->cols.push_back(cols);
            if (cols > p->max_cols) p->max_cols = cols;
        }
        p->first.push_back((long long)p->segs.size());
    } catch (...) {
        return sml_error(SIMIL_ERR_OUT_OF_MEMORY, "out of host memory for the list join's plan");
    }
    return SIMIL_OK;
}

simil_status gathered_alloc(const sml_join_args *a, bool fast, long long cols, size_t segments,
                            long long rows, Gathered *g)
{
    const size_t c = (size_t)cols, d = (size_t)a->dim, out = (size_t)rows * (size_t)a->k;
    SML_CUDA_TRY(device_malloc(&g->x, sizeof(float) * c * d));
    if (fast) {
        SML_CUDA_TRY(device_malloc(&g->h, sizeof(__half) * c * d));
        SML_CUDA_TRY(device_malloc(&g->inv_scale, sizeof(float) * c));
    }
    if (a->norms) SML_CUDA_TRY(device_malloc(&g->norms, sizeof(float) * c));
    SML_CUDA_TRY(device_malloc(&g->ids, sizeof(int64_t) * c));
    SML_CUDA_TRY(device_malloc(&g->segments, sizeof(Segment) * segments));
    SML_CUDA_TRY(device_malloc(&g->dist, sizeof(float) * out));
    SML_CUDA_TRY(device_malloc(&g->labels, sizeof(int64_t) * out));
    return SIMIL_OK;
}

// Block b: gather its candidates, then search its rows among them.
simil_status join_block(Device *dev, const sml_join_args *a, const Shadow *shadow,
                        const Gathered &g, const Plan &p, int64_t b)
{
    const long long rows = a->block_offset[b + 1] - a->block_offset[b];
    if (rows == 0) return SIMIL_OK;
    const size_t i = (size_t)(b - a->block_begin);
    const long long cols = p.cols[i];
    gather_kernel<<<(unsigned)(p.first[i + 1] - p.first[i]), 256, 0, dev->stream[0]>>>(
        g.segments + p.first[i], (int)a->dim, a->x, shadow ? shadow->rows : nullptr, a->norms,
        shadow ? shadow->inv_scale : nullptr, a->ids, g.x, g.h, g.norms, g.inv_scale, g.ids);
    SML_LAUNCH_TRY("gather_kernel");
    Shadow gathered{};
    if (shadow) {
        gathered.rows = g.h;
        gathered.inv_scale = g.inv_scale;
        gathered.max_norm = shadow->max_norm;
        gathered.n = cols;
        gathered.capacity = cols;
        gathered.dim = a->dim;
    }
    const long long out = (a->block_offset[b] - a->block_offset[a->block_begin]) * a->k;
    sml_knn_args k{};
    k.base = g.x;
    k.base_norms = g.norms;
    k.base_ids = g.ids;
    k.n = cols;
    k.dim = a->dim;
    k.queries = a->x + a->block_offset[b] * a->dim;
    k.nq = rows;
    k.k = a->k;
    k.metric = a->metric;
    k.distances = g.dist + out;
    k.labels = g.labels + out;
    k.threads = a->threads;
    k.base_shadow = shadow ? &gathered : nullptr;
    return knn_locked(dev, &k);
}

// Every block of the call searched in turn, the slow path for large k.
simil_status search_join(Device *dev, const sml_join_args *a, const CallPlan &f)
{
    const Shadow *shadow = static_cast<const Shadow *>(a->shadow);
    const long long first_row = a->block_offset[a->block_begin];
    const long long rows = a->block_offset[a->block_end] - first_row;
    Plan p;
    SML_TRY(plan_segments(a, f, &p));
    Gathered g{};
    simil_status s = gathered_alloc(a, shadow != nullptr, p.max_cols, p.segs.size(), rows, &g);
    if (s == SIMIL_OK)
        s = cuda_status(cudaMemcpyAsync(g.segments, p.segs.data(),
                                        sizeof(Segment) * p.segs.size(), cudaMemcpyHostToDevice,
                                        dev->stream[0]),
                        "list join segments", __FILE__, __LINE__);
    // knn_locked ends with both streams idle, so the next gather may reuse
    // the block that the last search read
    for (int64_t b = a->block_begin; b < a->block_end && s == SIMIL_OK; ++b)
        s = join_block(dev, a, shadow, g, p, b);
    s = results_home(dev, a, g.dist, g.labels, s);
    gathered_free(&g);
    return s;
}

// ---- the fused join ----

// Device copies of a CallPlan, and the call's results.
struct FusedBuffers {
    join::Item *items;
    join::Span *spans;
    int64_t *span_first;
    float *dist;
    int64_t *labels;
};

void fused_free(FusedBuffers *f)
{
    device_free(f->items);
    device_free(f->spans);
    device_free(f->span_first);
    device_free(f->dist);
    device_free(f->labels);
}

simil_status fused_alloc(const CallPlan &p, size_t out, FusedBuffers *f)
{
    SML_CUDA_TRY(device_malloc(&f->items, sizeof(join::Item) * p.items.size()));
    SML_CUDA_TRY(device_malloc(&f->spans, sizeof(join::Span) * std::max<size_t>(p.spans.size(), 1)));
    SML_CUDA_TRY(device_malloc(&f->span_first, sizeof(int64_t) * p.span_first.size()));
    SML_CUDA_TRY(device_malloc(&f->dist, sizeof(float) * out));
    SML_CUDA_TRY(device_malloc(&f->labels, sizeof(int64_t) * out));
    return SIMIL_OK;
}

// Whether the fused kernel's lists of kk entries fit this GPU's shared memory.
simil_status fused_fits(Device *dev, int64_t kk, bool *fits)
{
    int optin = 0;
    SML_CUDA_TRY(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev->gpu));
    *fits = kk <= INT32_MAX && join::shared_bytes((int)kk) <= (size_t)optin;
    return SIMIL_OK;
}

simil_status fused_launch(Device *dev, const sml_join_args *a, const CallPlan &p,
                          const FusedBuffers &f, int64_t first_row)
{
    cudaStream_t st = dev->stream[0];
    SML_CUDA_TRY(cudaMemcpyAsync(f.items, p.items.data(), sizeof(join::Item) * p.items.size(),
                                 cudaMemcpyHostToDevice, st));
    SML_CUDA_TRY(cudaMemcpyAsync(f.spans, p.spans.data(), sizeof(join::Span) * p.spans.size(),
                                 cudaMemcpyHostToDevice, st));
    SML_CUDA_TRY(cudaMemcpyAsync(f.span_first, p.span_first.data(),
                                 sizeof(int64_t) * p.span_first.size(), cudaMemcpyHostToDevice,
                                 st));
    const size_t smem = join::shared_bytes((int)a->k);
    SML_CUDA_TRY(cudaFuncSetAttribute(join::join_kernel,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    join::Args args{};
    args.x = a->x;
    args.norms = a->metric == SIMIL_METRIC_L2 ? a->norms : nullptr;
    args.ids = a->ids;
    args.dim = (int)a->dim;
    args.kk = (int)a->k;
    args.items = f.items;
    args.span_first = f.span_first;
    args.spans = f.spans;
    args.first_row = first_row;
    args.out_dist = f.dist;
    args.out_labels = f.labels;
    join::join_kernel<<<(unsigned)p.items.size(), join::kThreads, smem, st>>>(args);
    SML_LAUNCH_TRY("join_kernel");
    return SIMIL_OK;
}

// The call in parts, launched back to back on stream 0, each part's results
// copied to pinned memory behind its kernel: while the GPU joins part p + 1,
// the host spreads part p's results into the caller's arrays, so that only
// the last part's spreading waits.  Serially, the results' way home was
// 0.34-0.44 s of mix10M's 1.9 s join (nprobe 2, H100, SIMIL_TRACE).  Parts
// are runs of whole blocks of about equal rows; each launch orders its own
// items, longest first.
constexpr int kJoinParts = 4;

struct JoinPart {
    sml_join_args args;  // the part's blocks
    CallPlan plan;
    FusedBuffers buffers{};
    cudaEvent_t home = nullptr;  // its results are in pinned memory
    size_t out0 = 0, out = 0;    // its results: entries [out0, out0 + out) of the call's
};

simil_status fused_join(Device *dev, const sml_join_args *a)
{
    cudaStream_t st = dev->stream[0];
    const int64_t first_row = a->block_offset[a->block_begin];
    const int64_t rows = a->block_offset[a->block_end] - first_row;
    const size_t total = (size_t)rows * (size_t)a->k;
    JoinPart parts[kJoinParts];
    int nparts = 0;
    for (int64_t b = a->block_begin; b < a->block_end && nparts < kJoinParts; ++nparts) {
        JoinPart &jp = parts[nparts];
        jp.args = *a;
        jp.args.block_begin = b;
        // the part ends at the first block boundary past its share of the rows
        const int64_t goal = first_row + rows * (nparts + 1) / kJoinParts;
        while (b < a->block_end && (a->block_offset[b + 1] <= goal || nparts == kJoinParts - 1))
            ++b;
        if (b == jp.args.block_begin) ++b;
        jp.args.block_end = b;
        jp.out0 = (size_t)(a->block_offset[jp.args.block_begin] - first_row) * (size_t)a->k;
        jp.out = (size_t)(a->block_offset[b] - a->block_offset[jp.args.block_begin]) * (size_t)a->k;
    }
    char *pinned = nullptr;
    simil_status s = device_results(dev, total * (sizeof(float) + sizeof(int64_t)),
                                    reinterpret_cast<void **>(&pinned));
    int64_t *pinned_labels = reinterpret_cast<int64_t *>(pinned);
    float *pinned_dist = reinterpret_cast<float *>(pinned + total * sizeof(int64_t));
    int launched = 0;
    for (; launched < nparts && s == SIMIL_OK; ++launched) {
        JoinPart &jp = parts[launched];
        if (jp.out == 0) continue;  // blocks without rows
        s = plan_call(&jp.args, &jp.plan);
        if (s == SIMIL_OK &&
            (jp.plan.items.size() >= INT32_MAX || jp.plan.spans.size() >= INT32_MAX))
            s = sml_error(SIMIL_ERR_UNSUPPORTED,
                          "a GPU list join call takes fewer than 2^31 pieces of rows and "
                          "candidate lists");
        if (s == SIMIL_OK) s = fused_alloc(jp.plan, jp.out, &jp.buffers);
        if (s == SIMIL_OK)
            s = cuda_status(cudaEventCreateWithFlags(&jp.home, cudaEventDisableTiming),
                            "cudaEventCreate", __FILE__, __LINE__);
        if (s == SIMIL_OK)
            s = fused_launch(dev, &jp.args, jp.plan, jp.buffers,
                             jp.args.block_offset[jp.args.block_begin]);
        if (s == SIMIL_OK)
            s = cuda_status(cudaMemcpyAsync(pinned_dist + jp.out0, jp.buffers.dist,
                                            sizeof(float) * jp.out, cudaMemcpyDeviceToHost, st),
                            "list join results", __FILE__, __LINE__);
        if (s == SIMIL_OK)
            s = cuda_status(cudaMemcpyAsync(pinned_labels + jp.out0, jp.buffers.labels,
                                            sizeof(int64_t) * jp.out, cudaMemcpyDeviceToHost, st),
                            "list join results", __FILE__, __LINE__);
        if (s == SIMIL_OK)
            s = cuda_status(cudaEventRecord(jp.home, st), "cudaEventRecord", __FILE__, __LINE__);
    }
    trace_mark(st, "join call: plan up, kernels");
    for (int i = 0; i < launched && s == SIMIL_OK; ++i) {
        const JoinPart &jp = parts[i];
        if (jp.out == 0) continue;
        s = cuda_status(cudaEventSynchronize(jp.home), "list join", __FILE__, __LINE__);
        if (s != SIMIL_OK) break;
        sml_copy_parallel(a->distances + first_row * a->k + jp.out0, pinned_dist + jp.out0,
                          sizeof(float) * jp.out);
        sml_copy_parallel(a->labels + first_row * a->k + jp.out0, pinned_labels + jp.out0,
                          sizeof(int64_t) * jp.out);
    }
    trace_mark(st, "join call: results home");
    // also after a failure: nothing may still read the buffers when they go
    const simil_status sync =
        cuda_status(cudaStreamSynchronize(st), "list join", __FILE__, __LINE__);
    for (int i = 0; i < nparts; ++i) {
        fused_free(&parts[i].buffers);
        if (parts[i].home) cudaEventDestroy(parts[i].home);
    }
    return s == SIMIL_OK ? sync : s;
}

simil_status join_locked(Device *dev, const sml_join_args *a)
{
    SML_RETURN_IF(a->n >= INT32_MAX || a->dim >= INT32_MAX, SIMIL_ERR_UNSUPPORTED,
                  "a GPU list join holds fewer than 2^31 vectors");
    if (a->block_offset[a->block_end] == a->block_offset[a->block_begin]) return SIMIL_OK;
    bool fits = false;
    SML_TRY(fused_fits(dev, a->k, &fits));
    if (fits) return fused_join(dev, a);
    CallPlan p;
    SML_TRY(plan_call(a, &p));
    trace_mark(dev->stream[0], "join call: host plan");
    return search_join(dev, a, p);
}

}  // namespace

simil_status cuda_knn_join(sml_backend *backend, const sml_join_args *a)
{
    Device *dev = device_of(backend);
    pthread_mutex_lock(&dev->lock);
    simil_status st = cuda_status(cudaSetDevice(dev->gpu), "cudaSetDevice", __FILE__, __LINE__);
    if (st == SIMIL_OK) st = device_join_caller(dev);
    if (st == SIMIL_OK) st = join_locked(dev, a);
    if (st != SIMIL_OK) {
        cudaStreamSynchronize(dev->stream[1]);
        cudaGetLastError();
    }
    pthread_mutex_unlock(&dev->lock);
    return st;
}

}  // namespace sml
