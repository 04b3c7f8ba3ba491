// cuda_replay.cu: a small IVF call's stream work as one CUDA graph launch
// (cuda_replay.cuh).
#include <assert.h>
#include <string.h>

#include <atomic>

#include "core/trace.h"
#include "cuda/cuda_replay.cuh"
#include "cuda/cuda_util.cuh"

namespace sml {

namespace {

constexpr int kMaxOps = 4;          // a small call records three
constexpr int kMaxParams = 16;      // coarse_kernel has 11
constexpr size_t kMaxBytes = 4096;  // the kernels' arguments together
// Graphs a lane keeps: one per batch size that the batcher hands it, say.
constexpr int kEntries = 8;

struct Op {
    bool kernel;
    // a kernel
    const void *func;
    dim3 grid, block;
    size_t smem;
    int nparams;
    unsigned offset[kMaxParams];
    unsigned size[kMaxParams];
    // a copy
    void *dst;
    const void *src;
    size_t bytes;
    cudaMemcpyKind kind;
};

std::atomic<bool> replay_on{true};  // sml_cuda_replay
std::atomic<long long> count_hits{0}, count_builds{0}, count_direct{0}, count_dropped{0};

bool same_dim(dim3 a, dim3 b) { return a.x == b.x && a.y == b.y && a.z == b.z; }

bool same_op(const Op &a, const Op &b)
{
    if (a.kernel != b.kernel) return false;
    if (!a.kernel)
        return a.dst == b.dst && a.src == b.src && a.bytes == b.bytes && a.kind == b.kind;
    if (a.func != b.func || !same_dim(a.grid, b.grid) || !same_dim(a.block, b.block) ||
        a.smem != b.smem || a.nparams != b.nparams)
        return false;
    for (int i = 0; i < a.nparams; ++i)
        if (a.offset[i] != b.offset[i] || a.size[i] != b.size[i]) return false;
    return true;
}

}  // namespace

struct ReplayRecord {
    Device *dev;  // the lane: its stream 0 takes the work
    bool spilled;  // issued in part: what follows is issued directly
    int nops;
    Op op[kMaxOps];
    size_t used;
    alignas(16) unsigned char bytes[kMaxBytes];
};

namespace {

thread_local ReplayRecord tl_record;
thread_local bool tl_open = false;

bool same_record(const ReplayRecord &a, const ReplayRecord &b)
{
    if (a.nops != b.nops || a.used != b.used) return false;
    for (int i = 0; i < a.nops; ++i)
        if (!same_op(a.op[i], b.op[i])) return false;
    return memcmp(a.bytes, b.bytes, a.used) == 0;
}

// The kernel op's arguments where r holds them, as cudaLaunchKernel and a
// kernel node take them.
void params_of(const ReplayRecord &r, const Op &op, void **params)
{
    assert(op.kernel && op.nparams <= kMaxParams);
    for (int i = 0; i < op.nparams; ++i)
        params[i] = const_cast<unsigned char *>(r.bytes) + op.offset[i];
}

cudaError_t issue(const ReplayRecord &r, const Op &op, cudaStream_t st)
{
    if (!op.kernel) return cudaMemcpyAsync(op.dst, op.src, op.bytes, op.kind, st);
    void *params[kMaxParams];
    params_of(r, op, params);
    return cudaLaunchKernel(op.func, op.grid, op.block, params, op.smem, st);
}

cudaError_t issue_all(const ReplayRecord &r, cudaStream_t st)
{
    for (int i = 0; i < r.nops; ++i) {
        const cudaError_t e = issue(r, r.op[i], st);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

// The record as a graph of its operations in order.
cudaError_t build(const ReplayRecord &r, cudaGraphExec_t *exec)
{
    cudaGraph_t g;
    cudaError_t e = cudaGraphCreate(&g, 0);
    if (e != cudaSuccess) return e;
    cudaGraphNode_t prev = nullptr;
    for (int i = 0; i < r.nops && e == cudaSuccess; ++i) {
        const Op &op = r.op[i];
        cudaGraphNode_t node;
        const size_t ndeps = prev != nullptr ? 1 : 0;
        if (op.kernel) {
            void *params[kMaxParams];
            params_of(r, op, params);
            cudaKernelNodeParams kp{};
            kp.func = const_cast<void *>(op.func);
            kp.gridDim = op.grid;
            kp.blockDim = op.block;
            kp.sharedMemBytes = (unsigned)op.smem;
            kp.kernelParams = params;
            e = cudaGraphAddKernelNode(&node, g, &prev, ndeps, &kp);
        } else {
            e = cudaGraphAddMemcpyNode1D(&node, g, &prev, ndeps, op.dst, op.src, op.bytes,
                                         op.kind);
        }
        prev = node;
    }
    if (e == cudaSuccess) e = cudaGraphInstantiate(exec, g, 0);
    cudaGraphDestroy(g);
    return e;
}

}  // namespace

// A lane's graphs and the records they were made from.
struct ReplayCache {
    ReplayRecord record[kEntries];
    cudaGraphExec_t exec[kEntries];  // null: an empty entry
    unsigned long long last_use[kEntries];
    unsigned long long clock;
};

ReplayRecord *replay_recording()
{
    return tl_open && !tl_record.spilled ? &tl_record : nullptr;
}

bool replay_kernel(ReplayRecord *r, const void *func, dim3 grid, dim3 block, size_t smem,
                   void **params, const size_t *sizes, int nparams)
{
    assert(r == &tl_record && !r->spilled);
    if (r->nops == kMaxOps || nparams > kMaxParams) return false;
    size_t at = r->used;
    Op &op = r->op[r->nops];
    op = Op{};
    op.kernel = true;
    op.func = func;
    op.grid = grid;
    op.block = block;
    op.smem = smem;
    op.nparams = nparams;
    for (int i = 0; i < nparams; ++i) {
        const size_t aligned = (at + 15) / 16 * 16;
        if (aligned + sizes[i] > kMaxBytes) return false;
        // the alignment gap zeroed, so that records compare by their bytes
        memset(r->bytes + at, 0, aligned - at);
        memcpy(r->bytes + aligned, params[i], sizes[i]);
        op.offset[i] = (unsigned)aligned;
        op.size[i] = (unsigned)sizes[i];
        at = aligned + sizes[i];
    }
    r->used = at;
    ++r->nops;
    return true;
}

bool replay_copy(ReplayRecord *r, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    assert(r == &tl_record && !r->spilled);
    if (r->nops == kMaxOps) return false;
    Op &op = r->op[r->nops++];
    op = Op{};
    op.dst = dst;
    op.src = src;
    op.bytes = bytes;
    op.kind = kind;
    return true;
}

cudaError_t replay_spill(ReplayRecord *r)
{
    assert(r == &tl_record && !r->spilled);
    r->spilled = true;
    count_direct.fetch_add(1, std::memory_order_relaxed);
    return issue_all(*r, r->dev->stream[0]);
}

cudaError_t copy_async(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                       cudaStream_t st)
{
    if (ReplayRecord *r = replay_recording()) {
        if (replay_copy(r, dst, src, bytes, kind)) return cudaSuccess;
        const cudaError_t e = replay_spill(r);
        if (e != cudaSuccess) return e;
    }
    return cudaMemcpyAsync(dst, src, bytes, kind, st);
}

Replay::Replay(Device *dev) : record_(nullptr)
{
    if (dev == nullptr || tl_open || !replay_on.load(std::memory_order_relaxed) || sml_trace_on())
        return;
    tl_record.dev = dev;
    tl_record.spilled = false;
    tl_record.nops = 0;
    tl_record.used = 0;
    tl_open = true;
    record_ = &tl_record;
}

Replay::~Replay()
{
    // not submitted: the call failed before its work, which is dropped
    if (record_ != nullptr) tl_open = false;
}

simil_status replay_submit(Device *dev)
{
    if (!tl_open) return SIMIL_OK;
    tl_open = false;
    ReplayRecord &r = tl_record;
    assert(r.dev == dev);
    if (r.spilled || r.nops == 0) return SIMIL_OK;
    cudaStream_t st = dev->stream[0];
    if (dev->replay == nullptr) {
        // calloc, not sml_calloc: no room for graphs is no error (and the
        // tests' injected host failures stay where they were)
        void *c = calloc(1, sizeof(ReplayCache));
        if (c == nullptr) {  // the work goes one by one
            count_direct.fetch_add(1, std::memory_order_relaxed);
            SML_CUDA_TRY(issue_all(r, st));
            return SIMIL_OK;
        }
        dev->replay = static_cast<ReplayCache *>(c);
    }
    ReplayCache &c = *dev->replay;
    ++c.clock;
    int oldest = 0;
    for (int i = 0; i < kEntries; ++i) {
        if (c.exec[i] != nullptr && same_record(c.record[i], r)) {
            c.last_use[i] = c.clock;
            count_hits.fetch_add(1, std::memory_order_relaxed);
            SML_CUDA_TRY(cudaGraphLaunch(c.exec[i], st));
            return SIMIL_OK;
        }
        if (c.exec[oldest] != nullptr && (c.exec[i] == nullptr || c.last_use[i] < c.last_use[oldest]))
            oldest = i;
    }
    cudaGraphExec_t exec = nullptr;
    if (build(r, &exec) != cudaSuccess) {
        // a graph the driver will not make: the same work, one by one
        cudaGetLastError();
        count_direct.fetch_add(1, std::memory_order_relaxed);
        SML_CUDA_TRY(issue_all(r, st));
        return SIMIL_OK;
    }
    if (c.exec[oldest] != nullptr) cudaGraphExecDestroy(c.exec[oldest]);
    c.exec[oldest] = exec;
    c.record[oldest] = r;
    c.record[oldest].dev = nullptr;
    c.last_use[oldest] = c.clock;
    count_builds.fetch_add(1, std::memory_order_relaxed);
    SML_CUDA_TRY(cudaGraphLaunch(exec, st));
    return SIMIL_OK;
}

void replay_forget(Device *dev)
{
    if (dev->replay == nullptr) return;
    for (int i = 0; i < kEntries; ++i) {
        cudaGraphExec_t &e = dev->replay->exec[i];
        if (e == nullptr) continue;
        // one in flight is freed when it completes
        cudaGraphExecDestroy(e);
        e = nullptr;
        count_dropped.fetch_add(1, std::memory_order_relaxed);
    }
}

void replay_free(Device *dev)
{
    replay_forget(dev);
    free(dev->replay);
    dev->replay = nullptr;
}

}  // namespace sml

extern "C" void sml_cuda_replay(int on) { sml::replay_on.store(on != 0); }

extern "C" void sml_cuda_replay_counts(long long *hits, long long *builds, long long *direct,
                                       long long *dropped)
{
    *hits = sml::count_hits.load();
    *builds = sml::count_builds.load();
    *direct = sml::count_direct.load();
    *dropped = sml::count_dropped.load();
}
