// select_dispatch.cu: which k-selection design select_rows runs (the table),
// BlockSelect's launch, the test hook that forces a design, and the entry
// points of bench/bench_select.c.
//
// The table is a list of rules read top-down: the measured ones
// (kMeasuredRules), filled from bench_select's sweep on one card
// (docs/k-selection.md), then the fallback (kFallbackRules), the choice
// select_rows made before the paper's designs were written: WarpSelect keeps
// its queue in registers and is fastest for small k over many rows; its
// merges grow with k (a sort of 32 buffered pairs plus a bitonic merge of K
// pairs, every 32 accepted pairs), while the threshold BlockSelect sorts its
// shared-memory buffer only a handful of times per row; and when rows are
// few, one warp per row leaves most of the GPU idle.
// BlockSelect took k > 128, where it was the faster on an H200; that
// comparison was not recorded (docs/benchmarks.md, "k-selection").
#include <assert.h>
#include <limits.h>

#include <atomic>
#include <initializer_list>

#include "cuda/cuda_backend.h"
#include "cuda/select.cuh"

namespace sml {
namespace {

static_assert((int)SelectDesign::buffered_warp == SML_SELECT_BUFFERED_WARP &&
                  (int)SelectDesign::threshold_block == SML_SELECT_THRESHOLD_BLOCK &&
                  (int)SelectDesign::queue_warp == SML_SELECT_QUEUE_WARP &&
                  (int)SelectDesign::queue_block == SML_SELECT_QUEUE_BLOCK &&
                  (int)SelectDesign::buffered_block == SML_SELECT_BUFFERED_BLOCK,
              "cuda_backend.h numbers the designs as SelectDesign does");

// Jobs with k <= max_k, cols <= max_cols and rows >= min_rows_per_sm times
// the GPU's multiprocessors run design, with warps per row for the block
// designs.
struct SelectRule {
    int max_k;
    int max_cols;
    int min_rows_per_sm;
    SelectDesign design;
    int warps;
};

// The measured rules: bench_select sweep prints them, ready to paste, from
// the fastest design per (k, row length) on one card, and
// bench/select_table.sh pastes them (docs/k-selection.md).  While empty (not
// yet measured), every job takes kFallbackRules, today's choice.
//
// Filled from bench/select_table.sh on an H100 80GB HBM3 (132 SMs),
// 2026-11-25, then cut to the rules that won inside the searches too.  The
// whole sweep's table, in the same run: uniform1M exact search k = 100 44.3 ->
// 35.3 ms, but k = 10 24.0 -> 25.3 ms, k = 1024 122.8 -> 126.7 ms, and
// Fashion-MNIST IVF1024,Flat nprobe 16 (k = 10) 9.22 -> 10.13 ms: the sweep
// times whole fp32 rows, while the searches select over fp16 tiles and
// ragged rows.  The exact search keeps 2k and at least 64 per tile (k = 10
// selects 64, k = 100 256), and a table cut at k <= 32 still measured 25.5 ms
// at k = 10.  So jobs of k <= 64 keep today's choice (the first three rules,
// the fallback's, restated so that the measured rules below do not take
// them), k from 65 to 512 take the measured rules, and k > 512 falls through
// to the fallback.
constexpr std::initializer_list<SelectRule> kMeasuredRules = {
    {64, 4 * kBlockSelectStep - 1, 0, SelectDesign::buffered_warp, 1},  // today's choice
    {64, INT_MAX, 8, SelectDesign::buffered_warp, 1},                   // today's choice
    {64, INT_MAX, 0, SelectDesign::threshold_block, 1},                 // today's choice
    // Measured: bench_select sweep on NVIDIA H100 80GB HBM3 (132 SMs).
    {256, 1024, 757, SelectDesign::queue_warp, 1},  // 4% of copy at k=256, 1024 cols
    {256, 32768, 22, SelectDesign::queue_warp, 1},  // 21% of copy at k=256, 32768 cols
    {256, 100000, 75, SelectDesign::queue_warp, 1},  // 48% of copy at k=256, 100000 cols
    {256, INT_MAX, 0, SelectDesign::buffered_block, 8},  // 37% of copy at k=256, 1000000 cols
    {512, 1024, 757, SelectDesign::queue_warp, 1},  // 2% of copy at k=512, 1024 cols
    {512, 32768, 22, SelectDesign::queue_warp, 1},  // 9% of copy at k=512, 32768 cols
    {512, 100000, 75, SelectDesign::queue_warp, 1},  // 22% of copy at k=512, 100000 cols
    {512, INT_MAX, 0, SelectDesign::threshold_block, 1},  // 28% of copy at k=512, 1000000 cols
};

// Jobs no measured rule takes: the choice select_rows made before the
// paper's designs were written (see the top of this file).  The last rule
// must match every job.
constexpr SelectRule kFallbackRules[] = {
    {128, 4 * kBlockSelectStep - 1, 0, SelectDesign::buffered_warp, 1},  // short rows
    {128, INT_MAX, 8, SelectDesign::buffered_warp, 1},                   // many rows
    {kMaxWarpSelectK, INT_MAX, 0, SelectDesign::threshold_block, 1},     // the rest
};
constexpr int kFallbackRuleCount = sizeof kFallbackRules / sizeof kFallbackRules[0];
static_assert(kFallbackRules[kFallbackRuleCount - 1].max_k == kMaxWarpSelectK &&
                  kFallbackRules[kFallbackRuleCount - 1].max_cols == INT_MAX &&
                  kFallbackRules[kFallbackRuleCount - 1].min_rows_per_sm == 0,
              "the last rule takes every job");

// The table runs only the kernels select_dispatched builds (select.cuh):
// rule i can see a k only above the max_k of every earlier rule that takes
// all jobs (max_cols INT_MAX, min_rows_per_sm 0), and runs its design at the
// queue size of each such k up to its own max_k.
constexpr bool rule_builds(const SelectRule &r, int lowest_k)
{
    for (int k = lowest_k; k <= r.max_k; ++k) {
        int K = 32;
        if (r.design == SelectDesign::buffered_warp) {
            while (K < k) K <<= 1;
        } else {
            for (int q : kQueueSizes)
                if (q >= k) {
                    K = q;
                    break;
                }
        }
        if (!select_dispatched(r.design, K)) return false;
    }
    return true;
}

constexpr bool table_builds()
{
    int lowest_k = 1;
    const auto visit = [&lowest_k](const SelectRule &r) {
        const bool ok = lowest_k > r.max_k || rule_builds(r, lowest_k);
        if (r.max_cols == INT_MAX && r.min_rows_per_sm == 0 && r.max_k >= lowest_k)
            lowest_k = r.max_k + 1;
        return ok;
    };
    for (const SelectRule &r : kMeasuredRules)
        if (!visit(r)) return false;
    for (const SelectRule &r : kFallbackRules)
        if (!visit(r)) return false;
    return true;
}
static_assert(table_builds(),
              "the table picks a kernel that select_dispatched (select.cuh) does not build");

bool rule_matches(const SelectRule &r, const SelectJob &job, int sms)
{
    return job.k <= r.max_k && job.cols <= r.max_cols &&
           (long long)job.rows >= (long long)r.min_rows_per_sm * sms;
}

std::atomic<int> forced_design{0};
std::atomic<int> forced_warps{0};

bool is_design(int d)
{
    return d >= (int)SelectDesign::buffered_warp && d <= (int)SelectDesign::buffered_block;
}

}  // namespace

simil_status select_not_built(SelectDesign d, int K)
{
    return sml_error(SIMIL_ERR_UNSUPPORTED,
                     "select: %s at queue size %d is not built (only the table's kernels are; "
                     "configure with -DSIMIL_CUDA_SELECT_ALL=ON for every design)",
                     sml_cuda_select_design_name((int)d), K);
}

simil_status select_rows_block(const SelectJob &job, ScoreType type, cudaStream_t s)
{
    if (job.rows == 0) return SIMIL_OK;
    const int capacity = block_select_capacity(job.k);
    const size_t smem = (size_t)capacity * (sizeof(float) + sizeof(int));
    const bool vec = select_vectorizable(job, type);
    const auto launch = [&](auto kernel) -> simil_status {
        SML_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)smem));
        kernel<<<job.rows, kBlockSelectThreads, smem, s>>>(job, capacity);
        SML_LAUNCH_TRY("block_select_kernel");
        return SIMIL_OK;
    };
    if (type == ScoreType::f16)
        return vec ? launch(block_select_kernel<__half, true>)
                   : launch(block_select_kernel<__half, false>);
    return vec ? launch(block_select_kernel<float, true>) : launch(block_select_kernel<float, false>);
}

SelectChoice select_choice(const SelectJob &job, int sms)
{
    for (const SelectRule &r : kMeasuredRules)
        if (rule_matches(r, job, sms)) return SelectChoice{r.design, r.warps};
    for (const SelectRule &r : kFallbackRules)
        if (rule_matches(r, job, sms)) return SelectChoice{r.design, r.warps};
    assert(!"the last fallback rule matches every job");
    return SelectChoice{SelectDesign::threshold_block, 1};
}

simil_status select_rows_with(const SelectJob &job, ScoreType type, SelectChoice c,
                              cudaStream_t stream)
{
    SML_RETURN_IF(job.k < 1 || job.k > kMaxWarpSelectK, SIMIL_ERR_INTERNAL,
                  "select_rows: k=%d outside [1, %d]", job.k, kMaxWarpSelectK);
    switch (c.design) {
    case SelectDesign::buffered_warp:
        switch (warp_select_queue(job.k)) {
        case 32: return select_rows_k32(job, type, stream);
        case 64: return select_rows_k64(job, type, stream);
        case 128: return select_rows_k128(job, type, stream);
        case 256: return select_rows_k256(job, type, stream);
        case 512: return select_rows_k512(job, type, stream);
        case 1024: return select_rows_k1024(job, type, stream);
        default: return select_rows_k2048(job, type, stream);
        }
    case SelectDesign::threshold_block: return select_rows_block(job, type, stream);
    case SelectDesign::queue_warp:
    case SelectDesign::queue_block:
    case SelectDesign::buffered_block:
        switch (queue_select_size(job.k)) {
        case 32: return select_rows_queue_k32(job, type, c, stream);
        case 64: return select_rows_queue_k64(job, type, c, stream);
        case 96: return select_rows_queue_k96(job, type, c, stream);
        case 128: return select_rows_queue_k128(job, type, c, stream);
        case 192: return select_rows_queue_k192(job, type, c, stream);
        case 256: return select_rows_queue_k256(job, type, c, stream);
        case 384: return select_rows_queue_k384(job, type, c, stream);
        case 512: return select_rows_queue_k512(job, type, c, stream);
        case 768: return select_rows_queue_k768(job, type, c, stream);
        case 1024: return select_rows_queue_k1024(job, type, c, stream);
        case 1536: return select_rows_queue_k1536(job, type, c, stream);
        default: return select_rows_queue_k2048(job, type, c, stream);
        }
    default: break;
    }
    return sml_error(SIMIL_ERR_INTERNAL, "select_rows: no design %d", (int)c.design);
}

simil_status select_rows(const SelectJob &job, ScoreType type, cudaStream_t stream)
{
    SML_RETURN_IF(job.k < 1 || job.k > kMaxWarpSelectK, SIMIL_ERR_INTERNAL,
                  "select_rows: k=%d outside [1, %d]", job.k, kMaxWarpSelectK);
    const int forced = forced_design.load();
    if (is_design(forced))
        return select_rows_with(job, type, SelectChoice{(SelectDesign)forced, forced_warps.load()},
                                stream);
    int device = 0, sms = 0;
    SML_CUDA_TRY(cudaGetDevice(&device));
    SML_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return select_rows_with(job, type, select_choice(job, sms), stream);
}

}  // namespace sml

extern "C" void sml_cuda_select_force(int design, int warps)
{
    sml::forced_design.store(design);
    sml::forced_warps.store(warps < 1 ? 4 : warps > sml::kMaxRowWarps ? sml::kMaxRowWarps : warps);
}

extern "C" const char *sml_cuda_select_design_name(int design)
{
    switch (design) {
    case SML_SELECT_BUFFERED_WARP: return "buffered WarpSelect";
    case SML_SELECT_THRESHOLD_BLOCK: return "threshold BlockSelect";
    case SML_SELECT_QUEUE_WARP: return "paper WarpSelect";
    case SML_SELECT_QUEUE_BLOCK: return "paper BlockSelect";
    case SML_SELECT_BUFFERED_BLOCK: return "buffered BlockSelect";
    case SML_SELECT_RADIX: return "radix select";
    default: return "automatic";
    }
}

extern "C" int sml_cuda_select_built(int design, int64_t k)
{
    // radix takes k > kMaxWarpSelectK whatever the design forced
    if (design == SML_SELECT_AUTO || design == SML_SELECT_RADIX || k > sml::kMaxWarpSelectK)
        return 1;
    if (!sml::is_design(design) || k < 1) return 0;
    const sml::SelectDesign d = (sml::SelectDesign)design;
    const int K = d == sml::SelectDesign::buffered_warp ? sml::warp_select_queue((int)k)
                                                        : sml::queue_select_size((int)k);
    return sml::select_built(d, K) ? 1 : 0;
}

extern "C" int sml_cuda_select_choice(int64_t rows, int64_t cols, int64_t k, int *warps)
{
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
        return -1;
    sml::SelectJob job{};
    job.rows = (int)rows;
    job.cols = (int)cols;
    job.k = (int)k;
    const sml::SelectChoice c = sml::select_choice(job, sms);
    if (warps) *warps = c.warps;
    return (int)c.design;
}

extern "C" size_t sml_cuda_select_rows_workspace(int design, int64_t rows, int64_t cols,
                                                 int64_t k)
{
    return design == SML_SELECT_RADIX ? sml::select_rows_radix_workspace((int)rows, (int)cols, (int)k)
                                      : 0;
}

extern "C" simil_status sml_cuda_select_rows(int design, int warps, int64_t rows, int64_t cols,
                                             const float *d_values, int64_t k, float *d_keys,
                                             int32_t *d_idx, void *d_workspace,
                                             size_t workspace_bytes)
{
    SML_RETURN_IF(rows < 0 || rows >= INT_MAX || cols < 1 || cols >= INT_MAX, SIMIL_ERR_INVALID_ARGUMENT,
                  "select: %lld x %lld outside [0, 2^31) x [1, 2^31)", (long long)rows,
                  (long long)cols);
    const int kmax = design == SML_SELECT_RADIX ? (int)cols : sml::kMaxWarpSelectK;
    SML_RETURN_IF(k < 1 || k > kmax, SIMIL_ERR_INVALID_ARGUMENT,
                  "select: k=%lld outside [1, %d] for %s", (long long)k, kmax,
                  sml_cuda_select_design_name(design));
    SML_RETURN_IF(design != SML_SELECT_AUTO && design != SML_SELECT_RADIX && !sml::is_design(design),
                  SIMIL_ERR_INVALID_ARGUMENT, "select: no design %d", design);
    sml::SelectJob job{};
    job.scores = d_values;
    job.ld = cols;
    job.row_scale_const = 1.0f;
    job.rows = (int)rows;
    job.cols = (int)cols;
    job.k = (int)k;
    job.out_keys = d_keys;
    job.out_idx = d_idx;
    job.out_ld = k;
    if (design == SML_SELECT_RADIX)
        return sml::select_rows_radix(job, sml::ScoreType::f32, d_workspace, workspace_bytes, 0);
    if (design == SML_SELECT_AUTO) return sml::select_rows(job, sml::ScoreType::f32, 0);
    return sml::select_rows_with(
        job, sml::ScoreType::f32,
        sml::SelectChoice{(sml::SelectDesign)design, warps < 1 ? 1 : warps}, 0);
}
