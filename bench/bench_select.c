/* bench_select.c: the GPU k-selection designs side by side, on one card, in
 * one run (docs/k-selection.md).
 *
 *   bench_select sweep [--quick]
 *   bench_select dispatch [ROWS]
 *   bench_select one DESIGN[:WARPS] ROWS COLS K [K ...]
 *
 * sweep: for each row length (1,024 x 100,000 rows, 32,768 x 3,000,
 * 100,000 x 10,000, the case, and 1,000,000 x 300), a
 * device-to-device copy of the same bytes (cudaMemcpy, best of 3) as the
 * bandwidth reference; then every design at k = 1, 10, 32, 100, 128, 256,
 * 512, 1024 and 2048 (k <= cols): the median of 3 timed runs after one
 * warm-up (1 run where the warm-up took more than 200 ms), with CUDA events
 * around the selection kernel alone (select_rows: no output conversion, no
 * copies).  Every design's result must equal the first one's, bit for bit.
 * Prints one CSV line per case, then markdown tables of the share of copy
 * bandwidth and the fastest design per (k, row length), then those fastest
 * designs as kMeasuredRules of src/cuda/select_dispatch.cu (C++, ready to
 * paste), then the sweep's wall time.  Cases past a budget of 150 s are
 * skipped (and the rules left out), so that the sweep ends within about
 * 3 minutes whatever a design does.  --quick: k = 10, 100 and 1024 on the
 * 100,000-column rows only, and no rules (they would not cover every k).
 *
 * Bandwidth: the copy's GB/s count bytes read plus bytes written (2 x the
 * matrix over the copy's time), as bench_gpu_exact and docs/benchmarks.md
 * count them; a selection's count the bytes it reads (the matrix over its
 * time).  "% of copy" is the ratio of the two.
 *
 * dispatch: the design that select_rows' table picks for each (k, row length)
 * at the sweep's row counts, or at ROWS rows.
 *
 * one: one design (numbers of cuda_backend.h: 1 buffered WarpSelect, 2
 * threshold BlockSelect, 3 paper WarpSelect, 4 paper BlockSelect, 5 buffered
 * BlockSelect, 6 radix, 0 the table's choice; WARPS per row for 4 and 5) on
 * uniform data.
 *
 * Radix select launches one grid row per matrix row, so it is left out of
 * the sweep where rows pass 65,535. */
#define _POSIX_C_SOURCE 200809L /* CLOCK_MONOTONIC under -std=c11 (clang) */
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/cuda_backend.h"
#include "simil/simil.h"

typedef struct {
    int design, warps;
} design;

static const design kSweepDesigns[] = {
    {SML_SELECT_BUFFERED_WARP, 1},  {SML_SELECT_THRESHOLD_BLOCK, 1}, {SML_SELECT_QUEUE_WARP, 1},
    {SML_SELECT_QUEUE_BLOCK, 4},    {SML_SELECT_QUEUE_BLOCK, 8},     {SML_SELECT_BUFFERED_BLOCK, 4},
    {SML_SELECT_BUFFERED_BLOCK, 8}, {SML_SELECT_RADIX, 1},
};
#define N_DESIGNS (sizeof kSweepDesigns / sizeof kSweepDesigns[0])

static const int64_t kSweepKs[] = {1, 10, 32, 100, 128, 256, 512, 1024, 2048};
#define N_KS (sizeof kSweepKs / sizeof kSweepKs[0])

typedef struct {
    int64_t cols, rows;
} shape;

static const shape kShapes[] = {{1024, 100000}, {32768, 3000}, {100000, 10000}, {1000000, 300}};
#define N_SHAPES (sizeof kShapes / sizeof kShapes[0])

/* Seconds after which the sweep times no more cases (a slow design must not
 * hold the GPU): it is expected to take about a minute on an H100. */
static const double kBudgetSeconds = 150;

static void die(const char *what)
{
    fprintf(stderr, "bench_select: %s: %s\n", what, simil_last_error());
    exit(1);
}

static void cuda_check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "bench_select: %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

static const char *label(design d)
{
    static char buf[8][64];
    static int next;
    char *b = buf[next++ % 8];
    if (d.design == SML_SELECT_QUEUE_BLOCK || d.design == SML_SELECT_BUFFERED_BLOCK)
        snprintf(b, 64, "%s, %d warps", sml_cuda_select_design_name(d.design), d.warps);
    else
        snprintf(b, 64, "%s", sml_cuda_select_design_name(d.design));
    return b;
}

/* rows x cols uniform floats in [0, 1) on the GPU: a 64 MB block made on
 * the host (splitmix64), copied over the matrix again and again. */
static float *uniform_matrix(size_t count)
{
    const size_t block = (size_t)1 << 24;
    float *host = malloc(sizeof(float) * block);
    if (!host) {
        fprintf(stderr, "bench_select: out of host memory\n");
        exit(1);
    }
    uint64_t s = 12345;
    for (size_t i = 0; i < block; i++) {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        host[i] = (float)((z ^ (z >> 31)) >> 40) * (1.0f / 16777216.0f);
    }
    float *d;
    cuda_check(cudaMalloc((void **)&d, sizeof(float) * count), "cudaMalloc (matrix)");
    for (size_t at = 0; at < count; at += block) {
        size_t n = count - at < block ? count - at : block;
        cuda_check(cudaMemcpy(d + at, host, sizeof(float) * n, cudaMemcpyHostToDevice), "upload");
    }
    free(host);
    return d;
}

static float elapsed(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    return ms;
}

/* GB/s of a device-to-device copy of bytes, read plus written; best of 3. */
static double copy_bandwidth(const float *d_src, size_t bytes, double *ms_out)
{
    void *dst;
    cuda_check(cudaMalloc(&dst, bytes), "cudaMalloc (copy)");
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cuda_check(cudaMemcpy(dst, d_src, bytes, cudaMemcpyDeviceToDevice), "copy");
    float best = 1e30f;
    for (int r = 0; r < 3; r++) {
        cudaEventRecord(e0, 0);
        cudaMemcpyAsync(dst, d_src, bytes, cudaMemcpyDeviceToDevice, 0);
        cudaEventRecord(e1, 0);
        cuda_check(cudaEventSynchronize(e1), "copy");
        float ms = elapsed(e0, e1);
        if (ms < best) best = ms;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(dst);
    *ms_out = best;
    return 2.0 * (double)bytes / (best * 1e-3) / 1e9;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef struct {
    float *keys;
    int32_t *idx;
    void *ws;
    size_t ws_bytes;
} outputs;

/* Median milliseconds of one design on the matrix; -1 if it failed. */
static double time_design(design d, const float *d_v, int64_t rows, int64_t cols, int64_t k,
                          outputs *o)
{
    const size_t need = sml_cuda_select_rows_workspace(d.design, rows, cols, k);
    if (need > o->ws_bytes) {
        cudaFree(o->ws);
        o->ws = NULL;
        o->ws_bytes = 0;
        cuda_check(cudaMalloc(&o->ws, need), "cudaMalloc (workspace)");
        o->ws_bytes = need;
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float ms[3];
    int runs = 3;
    for (int r = -1; r < runs; r++) {
        cudaEventRecord(e0, 0);
        if (sml_cuda_select_rows(d.design, d.warps, rows, cols, d_v, k, o->keys, o->idx, o->ws,
                                 o->ws_bytes) != SIMIL_OK)
            die(label(d));
        cudaEventRecord(e1, 0);
        cuda_check(cudaEventSynchronize(e1), label(d));
        const float t = elapsed(e0, e1);
        if (r < 0) {
            if (t > 200) runs = 1;
        } else {
            ms[r] = t;
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(ms, (size_t)runs, sizeof ms[0], cmp_float);
    return ms[runs / 2];
}

/* The first design's result (keys and indices, on the host); every other
 * design must match it.  Returns 0 on a mismatch. */
static int same_result(const outputs *o, size_t count, float **ref_keys, int32_t **ref_idx,
                       const char *what)
{
    float *k = malloc(sizeof(float) * count);
    int32_t *i = malloc(sizeof(int32_t) * count);
    if (!k || !i) {
        fprintf(stderr, "bench_select: out of host memory\n");
        exit(1);
    }
    cuda_check(cudaMemcpy(k, o->keys, sizeof(float) * count, cudaMemcpyDeviceToHost), "result");
    cuda_check(cudaMemcpy(i, o->idx, sizeof(int32_t) * count, cudaMemcpyDeviceToHost), "result");
    if (*ref_keys == NULL) {
        *ref_keys = k;
        *ref_idx = i;
        return 1;
    }
    int same = memcmp(k, *ref_keys, sizeof(float) * count) == 0 &&
               memcmp(i, *ref_idx, sizeof(int32_t) * count) == 0;
    if (!same) fprintf(stderr, "MISMATCH: %s differs from the first design's result\n", what);
    free(k);
    free(i);
    return same;
}

/* The head of a markdown table with one column per k. */
static void table_head(const char *first)
{
    printf("| %s |", first);
    for (size_t ki = 0; ki < N_KS; ki++) printf(" k=%lld |", (long long)kSweepKs[ki]);
    printf("\n|---|");
    for (size_t ki = 0; ki < N_KS; ki++) printf("---|");
    printf("\n");
}

/* The C++ name of a design in select_dispatch.cu (SelectDesign). */
static const char *enumerator(int d)
{
    switch (d) {
    case SML_SELECT_BUFFERED_WARP: return "buffered_warp";
    case SML_SELECT_THRESHOLD_BLOCK: return "threshold_block";
    case SML_SELECT_QUEUE_WARP: return "queue_warp";
    case SML_SELECT_QUEUE_BLOCK: return "queue_block";
    default: return "buffered_block";
    }
}

/* Rows per SM from which a measured rule of design d holds: the sweep's rows
 * of that row length for one warp per row (the designs that idle the GPU
 * where rows are few), any number for the block designs. */
static int min_rows_per_sm(int d, int s, int sms)
{
    const int one_warp = kSweepDesigns[d].design == SML_SELECT_BUFFERED_WARP ||
                         kSweepDesigns[d].design == SML_SELECT_QUEUE_WARP;
    return one_warp ? (int)(kShapes[s].rows / sms) : 0;
}

/* The fastest design per (k, row length) as kMeasuredRules: for each k of
 * the sweep, ascending, one rule per row length, ascending, "k <= this k,
 * cols <= these cols and rows >= min_rows_per_sm x SMs", the longest rows'
 * rule for any cols and the last k's for any k up to kMaxWarpSelectK.  A k
 * whose winners are those of the next k gives no rules of its own (the next
 * k's cover it), nor does a row length whose rule is the next longer one's.
 * Jobs that no rule takes (fewer rows than measured) go on to
 * kFallbackRules.  best[s][ki]: index into kSweepDesigns, or -1 where
 * k > cols. */
static void print_rules(int best[N_SHAPES][N_KS], double pct[N_SHAPES][N_DESIGNS][N_KS],
                        const char *device, int sms)
{
    printf("\n## Dispatch table (kMeasuredRules in src/cuda/select_dispatch.cu)\n\n");
    printf("constexpr std::initializer_list<SelectRule> kMeasuredRules = {\n");
    printf("    // Measured: bench_select sweep on %s (%d SMs).\n", device, sms);
    for (size_t ki = 0; ki < N_KS; ki++) {
        int same_as_next = ki + 1 < N_KS;
        for (size_t s = 0; same_as_next && s < N_SHAPES; s++)
            same_as_next = best[s][ki] == best[s][ki + 1];
        if (same_as_next) continue;
        for (size_t s = 0; s < N_SHAPES; s++) {
            const int b = best[s][ki];
            if (b < 0) continue;
            const int rows = min_rows_per_sm(b, (int)s, sms);
            size_t next = s + 1;
            while (next < N_SHAPES && best[next][ki] < 0) next++;
            if (next < N_SHAPES && best[next][ki] == b &&
                min_rows_per_sm(b, (int)next, sms) == rows)
                continue;
            const design d = kSweepDesigns[b];
            char max_k[24], max_cols[24];
            if (ki + 1 == N_KS)
                snprintf(max_k, sizeof max_k, "kMaxWarpSelectK");
            else
                snprintf(max_k, sizeof max_k, "%lld", (long long)kSweepKs[ki]);
            if (next == N_SHAPES)
                snprintf(max_cols, sizeof max_cols, "INT_MAX");
            else
                snprintf(max_cols, sizeof max_cols, "%lld", (long long)kShapes[s].cols);
            printf("    {%s, %s, %d, SelectDesign::%s, %d},  // %.0f%% of copy at k=%lld, %lld cols\n",
                   max_k, max_cols, rows, enumerator(d.design), d.warps, pct[s][b][ki],
                   (long long)kSweepKs[ki], (long long)kShapes[s].cols);
        }
    }
    printf("};\n");
}

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int sweep(int quick)
{
    const double start = seconds_now();
    static double pct[N_SHAPES][N_DESIGNS][N_KS];
    static double copy_gbs[N_SHAPES];
    const int64_t quick_ks[] = {10, 100, 1024};
    int ok = 1, skipped = 0;
    printf("# bench_select sweep%s\n", quick ? " --quick" : "");
    int dev = 0;
    struct cudaDeviceProp prop;
    cudaGetDevice(&dev);
    cudaGetDeviceProperties(&prop, dev);
    printf("# device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    printf("cols,rows,design,warps,name,k,ms,gb_per_s_read,pct_of_copy\n");
    for (size_t s = 0; s < N_SHAPES; s++) {
        const int64_t cols = kShapes[s].cols, rows = kShapes[s].rows;
        for (size_t d = 0; d < N_DESIGNS; d++)
            for (size_t ki = 0; ki < N_KS; ki++) pct[s][d][ki] = -1;
        if (quick && cols != 100000) continue;
        const size_t bytes = sizeof(float) * (size_t)(rows * cols);
        float *d_v = uniform_matrix((size_t)(rows * cols));
        double copy_ms;
        copy_gbs[s] = copy_bandwidth(d_v, bytes, &copy_ms);
        printf("# %lld x %lld floats (%.2f GB): device copy %.3f ms, %.0f GB/s (read + write)\n",
               (long long)rows, (long long)cols, 1e-9 * (double)bytes, copy_ms, copy_gbs[s]);
        outputs o = {0};
        cuda_check(cudaMalloc((void **)&o.keys, sizeof(float) * (size_t)rows * 2048), "cudaMalloc");
        cuda_check(cudaMalloc((void **)&o.idx, sizeof(int32_t) * (size_t)rows * 2048), "cudaMalloc");
        for (size_t ki = 0; ki < N_KS; ki++) {
            const int64_t k = kSweepKs[ki];
            if (k > cols) continue;
            if (quick && k != quick_ks[0] && k != quick_ks[1] && k != quick_ks[2]) continue;
            float *ref_keys = NULL;
            int32_t *ref_idx = NULL;
            for (size_t d = 0; d < N_DESIGNS; d++) {
                const design ds = kSweepDesigns[d];
                if (ds.design == SML_SELECT_RADIX && rows > 65535) continue; /* its grid's y */
                if (seconds_now() - start > kBudgetSeconds) {
                    skipped++;
                    continue;
                }
                const double ms = time_design(ds, d_v, rows, cols, k, &o);
                const double gbs = (double)bytes / (ms * 1e-3) / 1e9;
                pct[s][d][ki] = 100.0 * gbs / copy_gbs[s];
                printf("%lld,%lld,%d,%d,%s,%lld,%.3f,%.0f,%.1f\n", (long long)cols, (long long)rows,
                       ds.design, ds.warps, label(ds), (long long)k, ms, gbs, pct[s][d][ki]);
                fflush(stdout);
                char what[128];
                snprintf(what, sizeof what, "%s at k=%lld, %lld x %lld", label(ds), (long long)k,
                         (long long)rows, (long long)cols);
                ok &= same_result(&o, (size_t)(rows * k), &ref_keys, &ref_idx, what);
            }
            free(ref_keys);
            free(ref_idx);
        }
        cudaFree(o.keys);
        cudaFree(o.idx);
        cudaFree(o.ws);
        cudaFree(d_v);
    }

    printf("\n## Share of copy bandwidth (bytes read by the selection / bytes read and written "
           "per second by a device copy)\n");
    for (size_t s = 0; s < N_SHAPES; s++) {
        if (quick && kShapes[s].cols != 100000) continue;
        printf("\n%lld rows x %lld floats (copy %.0f GB/s)\n\n", (long long)kShapes[s].rows,
               (long long)kShapes[s].cols, copy_gbs[s]);
        table_head("design");
        for (size_t d = 0; d < N_DESIGNS; d++) {
            printf("| %s |", label(kSweepDesigns[d]));
            for (size_t ki = 0; ki < N_KS; ki++)
                if (pct[s][d][ki] < 0)
                    printf(" - |");
                else
                    printf(" %.1f%% |", pct[s][d][ki]);
            printf("\n");
        }
    }
    printf("\n## Fastest design (radix left out: select_rows has no workspace for it)\n\n");
    static int best[N_SHAPES][N_KS];
    table_head("cols (rows)");
    for (size_t s = 0; s < N_SHAPES; s++) {
        for (size_t ki = 0; ki < N_KS; ki++) {
            best[s][ki] = -1;
            for (size_t d = 0; d < N_DESIGNS; d++)
                if (kSweepDesigns[d].design != SML_SELECT_RADIX && pct[s][d][ki] >= 0 &&
                    (best[s][ki] < 0 || pct[s][d][ki] > pct[s][best[s][ki]][ki]))
                    best[s][ki] = (int)d;
        }
        if (quick && kShapes[s].cols != 100000) continue;
        printf("| %lld (%lld rows) |", (long long)kShapes[s].cols, (long long)kShapes[s].rows);
        for (size_t ki = 0; ki < N_KS; ki++) {
            const int b = best[s][ki];
            if (b < 0)
                printf(" - |");
            else
                printf(" %s (%.0f%%) |", label(kSweepDesigns[b]), pct[s][b][ki]);
        }
        printf("\n");
    }
    if (skipped)
        printf("\n# %d cases skipped: past the sweep's %.0f s budget; no rules printed\n", skipped,
               kBudgetSeconds);
    else if (!quick)
        print_rules(best, pct, prop.name, prop.multiProcessorCount);
    printf("\n# sweep: %.0f s wall time\n", seconds_now() - start);
    if (!ok) fprintf(stderr, "bench_select: results differ between designs (see MISMATCH)\n");
    return ok ? 0 : 1;
}

static int dispatch(int64_t rows_arg)
{
    table_head("cols (rows)");
    for (size_t s = 0; s < N_SHAPES; s++) {
        const int64_t rows = rows_arg > 0 ? rows_arg : kShapes[s].rows;
        printf("| %lld (%lld) |", (long long)kShapes[s].cols, (long long)rows);
        for (size_t ki = 0; ki < N_KS; ki++) {
            design d = {0, 1};
            d.design = sml_cuda_select_choice(rows, kShapes[s].cols, kSweepKs[ki], &d.warps);
            if (d.design < 0) die("no GPU");
            printf(" %s |", label(d));
        }
        printf("\n");
    }
    return 0;
}

static int one(int argc, char **argv)
{
    if (argc < 4) return 2;
    design d = {atoi(argv[0]), 1};
    const char *colon = strchr(argv[0], ':');
    if (colon) d.warps = atoi(colon + 1);
    const int64_t rows = atoll(argv[1]), cols = atoll(argv[2]);
    const size_t bytes = sizeof(float) * (size_t)(rows * cols);
    float *d_v = uniform_matrix((size_t)(rows * cols));
    double copy_ms;
    const double copy = copy_bandwidth(d_v, bytes, &copy_ms);
    printf("%lld x %lld floats (%.2f GB): device copy %.3f ms, %.0f GB/s (read + write)\n",
           (long long)rows, (long long)cols, 1e-9 * (double)bytes, copy_ms, copy);
    outputs o = {0};
    for (int a = 3; a < argc; a++) {
        const int64_t k = atoll(argv[a]);
        cuda_check(cudaMalloc((void **)&o.keys, sizeof(float) * (size_t)(rows * k)), "cudaMalloc");
        cuda_check(cudaMalloc((void **)&o.idx, sizeof(int32_t) * (size_t)(rows * k)), "cudaMalloc");
        const double ms = time_design(d, d_v, rows, cols, k, &o);
        const double gbs = (double)bytes / (ms * 1e-3) / 1e9;
        printf("%s k=%lld: %.3f ms, %.0f GB/s read = %.1f%% of copy bandwidth\n", label(d),
               (long long)k, ms, gbs, 100.0 * gbs / copy);
        cudaFree(o.keys);
        cudaFree(o.idx);
    }
    cudaFree(o.ws);
    cudaFree(d_v);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_select sweep [--quick]\n"
                        "       bench_select dispatch [ROWS]\n"
                        "       bench_select one DESIGN[:WARPS] ROWS COLS K [K ...]\n");
        return 2;
    }
    if (simil_gpu_count() == 0) {
        fprintf(stderr, "no GPU\n");
        return 1;
    }
    if (strcmp(argv[1], "sweep") == 0) return sweep(argc > 2 && strcmp(argv[2], "--quick") == 0);
    if (strcmp(argv[1], "dispatch") == 0) return dispatch(argc > 2 ? atoll(argv[2]) : 0);
    if (strcmp(argv[1], "one") == 0) return one(argc - 2, argv + 2);
    fprintf(stderr, "bench_select: unknown mode %s\n", argv[1]);
    return 2;
}
