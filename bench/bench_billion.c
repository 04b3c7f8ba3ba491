/* bench_billion.c: the billion-scale run of docs/billion-scale.md, scaled by
 * --n: mix(N, 96, seed 11) indexed on one device, searched with the queries
 * of mix10M (mix(10,000, 96, seed 12)), against exact ground truth computed
 * by streaming the whole base through the device (simil_source_search).
 *
 *   bench_billion [--steps build,gt,search,stream] [--n N] [--index DESC]
 *                 [--device D] [--nprobe 8,16,32] [--train-sample S] [--chunk R]
 *                 [--gt-chunk R] [--nq Q] [--k K] [--gt FILE] [--index-file PATH]
 *                 [--stream-rows M] [--stream-nq 100,1000] [--json FILE]
 *
 * Steps, each timed, run in this order when named in --steps (default: all):
 *   build   the host-to-GPU bandwidth of a pinned copy (CUDA builds); training
 *           on a sample; the add (on a GPU the base is generated in device
 *           memory, chunk by chunk, and never crosses the bus); with
 *           --index-file, saving the index there;
 *   gt      the exact ground truth (base generated again on the device), written
 *           to --gt FILE; a later step or run reads it from there;
 *   search  with no build step in this run, loading --index-file; searches at
 *           each nprobe (k = 10: QPS, 1-recall@1, 1-recall@10; at k = --k:
 *           1-recall@K), against --gt (computed first if the file is missing);
 *   stream  a streamed exact search of --stream-rows rows from host memory
 *           for each --stream-nq, against the measured bandwidth: rows in
 *           pinned memory (copied from where they lie; with CUDA), then the
 *           same rows in pageable memory (through the pinned ring).
 * So a run too long for one sitting goes as several processes that resume
 * from the saved index and ground truth: --steps build, then --steps
 * gt,search,stream.  With build and search in one run and --index-file, the
 * built index is saved, freed, loaded back and checked to answer alike.
 * Every figure is printed as it is measured, so a run cut short keeps what
 * it had; --json FILE writes them all at the end. */
#define _POSIX_C_SOURCE 200809L /* CLOCK_MONOTONIC under -std=c11 (clang) */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "core/vectors.h"
#include "cuda/cuda_backend.h"
#include "simil/simil.h"
#ifdef SIMIL_BENCH_CUDA
#include <cuda_runtime.h>
#endif

typedef struct bench_args {
    int64_t n, dim, nq, k, train_sample, chunk, gt_chunk, stream_rows, stream_chunk;
    const char *index, *device, *nprobe, *gt, *file, *stream_nq, *json, *steps;
} bench_args;

static FILE *json_out;
static int json_first = 1;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_billion: %s: %s\n", what, simil_last_error());
    exit(1);
}

/* A result line for people, and the same figures as a JSON object. */
static void report(const char *step, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    printf("%-10s %s\n", step, text);
    fflush(stdout);
}

static void json_add(const char *fmt, ...)
{
    if (json_out == NULL) return;
    va_list ap;
    va_start(ap, fmt);
    fputs(json_first ? "[\n  " : ",\n  ", json_out);
    json_first = 0;
    vfprintf(json_out, fmt, ap);
    va_end(ap);
}

/* The peak resident host memory (Linux: ru_maxrss in KiB, VmHWM). */
static double peak_host_gib(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / (1024.0 * 1024.0) : 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_billion [--steps build,gt,search,stream] [--n N] [--index DESC]\n"
            "       [--device D] [--nprobe 4,16,64] [--train-sample S] [--chunk R]\n"
            "       [--gt-chunk R] [--nq Q] [--k K] [--gt FILE] [--index-file PATH]\n"
            "       [--stream-rows M] [--stream-nq 100,1000] [--stream-chunk R]\n"
            "       [--json FILE]\n");
    exit(2);
}

static void parse(int argc, char **argv, bench_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (!strcmp(o, "--n")) a->n = atoll(v);
        else if (!strcmp(o, "--nq")) a->nq = atoll(v);
        else if (!strcmp(o, "--k")) a->k = atoll(v);
        else if (!strcmp(o, "--train-sample")) a->train_sample = atoll(v);
        else if (!strcmp(o, "--chunk")) a->chunk = atoll(v);
        else if (!strcmp(o, "--gt-chunk")) a->gt_chunk = atoll(v);
        else if (!strcmp(o, "--stream-rows")) a->stream_rows = atoll(v);
        else if (!strcmp(o, "--stream-chunk")) a->stream_chunk = atoll(v);
        else if (!strcmp(o, "--index")) a->index = v;
        else if (!strcmp(o, "--device")) a->device = v;
        else if (!strcmp(o, "--nprobe")) a->nprobe = v;
        else if (!strcmp(o, "--gt")) a->gt = v;
        else if (!strcmp(o, "--index-file")) a->file = v;
        else if (!strcmp(o, "--steps")) a->steps = v;
        else if (!strcmp(o, "--stream-nq")) a->stream_nq = v;
        else if (!strcmp(o, "--json")) a->json = v;
        else usage();
    }
    if (a->n < 1 || a->nq < 1 || a->k < 10) usage();
    const char *known[] = {"build", "gt", "search", "stream"};
    char list[256];
    snprintf(list, sizeof list, "%s", a->steps);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int ok = 0;
        for (int j = 0; j < 4; j++) ok |= !strcmp(tok, known[j]);
        if (!ok) usage();
    }
}

/* Pinned host-to-device copies of bytes: the best of 3, in GB/s (0 without CUDA). */
static double h2d_bandwidth(size_t bytes)
{
#ifdef SIMIL_BENCH_CUDA
    void *host = NULL, *dev = NULL;
    if (cudaMallocHost(&host, bytes) != cudaSuccess || cudaMalloc(&dev, bytes) != cudaSuccess) {
        cudaGetLastError();
        cudaFreeHost(host);
        return 0;
    }
    memset(host, 1, bytes);
    double best = 1e30;
    for (int i = 0; i < 4; i++) {
        const double t0 = now();
        cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
        cudaDeviceSynchronize();
        const double t = now() - t0;
        if (i > 0 && t < best) best = t;
    }
    cudaFree(dev);
    cudaFreeHost(host);
    return (double)bytes / best / 1e9;
#else
    (void)bytes;
    return 0;
#endif
}

/* Fraction of queries whose true nearest neighbour is among the first r found. */
static double one_recall(int64_t nq, int64_t r, const int64_t *found, int64_t kf,
                         const int64_t *truth, int64_t kt)
{
    int64_t hit = 0;
    for (int64_t q = 0; q < nq; q++)
        for (int64_t j = 0; j < r && j < kf; j++)
            if (found[q * kf + j] == truth[q * kt]) {
                hit++;
                break;
            }
    return (double)hit / (double)nq;
}

/* The ground truth: read from --gt if it exists, else streamed and written there. */
static void ground_truth(const bench_args *a, const simil_source *base, const float *q,
                         int64_t *truth)
{
    struct stat st;
    if (a->gt && stat(a->gt, &st) == 0) {
        simil_matrix m;
        if (simil_matrix_read(a->gt, 0, -1, &m) != SIMIL_OK) die(a->gt);
        if (m.rows != a->nq || m.cols < a->k || m.dtype != SIMIL_DTYPE_INT64) {
            fprintf(stderr, "bench_billion: %s is not %lld x %lld int64 ids\n", a->gt,
                    (long long)a->nq, (long long)a->k);
            exit(1);
        }
        for (int64_t i = 0; i < a->nq; i++)
            memcpy(truth + i * a->k, (int64_t *)m.data + i * m.cols, sizeof(int64_t) * a->k);
        simil_matrix_free(&m);
        report("gt", "read from %s", a->gt);
        return;
    }
    float *d = malloc(sizeof(float) * (size_t)(a->nq * a->k));
    simil_stream_params p;
    simil_stream_params_init(&p);
    p.device = a->device;
    p.chunk_rows = a->gt_chunk;
    simil_stream_stats s;
    if (!d || simil_source_search(base, SIMIL_METRIC_L2, a->nq, q, a->k, &p, d, truth, &s))
        die("exact ground truth");
    const double gb = 4.0 * (double)a->n * (double)a->dim / 1e9;
    report("gt", "%lld queries, k=%lld: %.2f s (%.2f GB/s of base vectors, %lld chunks, %s)",
           (long long)a->nq, (long long)a->k, s.seconds, gb / s.seconds, (long long)s.chunks,
           s.generated_on_device ? "generated on the GPU" : "read on the host");
    json_add("{\"step\": \"gt\", \"seconds\": %.3f, \"gb_per_second\": %.3f, \"chunks\": %lld, "
             "\"generated_on_device\": %d}",
             s.seconds, gb / s.seconds, (long long)s.chunks, s.generated_on_device);
    free(d);
    if (a->gt) {
        simil_matrix m = {a->nq, a->k, SIMIL_DTYPE_INT64, truth};
        if (simil_matrix_write(a->gt, &m) != SIMIL_OK) die(a->gt);
    }
}

/* Median of 3 timed searches after a warm-up; labels of the last. */
static double timed_search(const simil_index *index, const bench_args *a, const float *q,
                           int64_t k, int64_t nprobe, float *d, int64_t *l)
{
    simil_search_params *p;
    if (simil_search_params_create(&p) || simil_search_params_set_int(p, "nprobe", nprobe))
        die("search parameters");
    double t[3];
    if (simil_index_search(index, a->nq, q, k, p, d, l) != SIMIL_OK) die("search");
    for (int r = 0; r < 3; r++) {
        const double t0 = now();
        if (simil_index_search(index, a->nq, q, k, p, d, l) != SIMIL_OK) die("search");
        t[r] = now() - t0;
    }
    simil_search_params_destroy(p);
    const double lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
    return t[2] < lo ? lo : t[2] > hi ? hi : t[2];
}

static void searches(const simil_index *index, const bench_args *a, const float *q,
                     const int64_t *truth)
{
    float *d = malloc(sizeof(float) * (size_t)(a->nq * a->k));
    int64_t *l = malloc(sizeof(int64_t) * (size_t)(a->nq * a->k));
    if (!d || !l) die("out of memory for results");
    char list[256];
    snprintf(list, sizeof list, "%s", a->nprobe);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        const int64_t nprobe = atoll(tok);
        const double t10 = timed_search(index, a, q, 10, nprobe, d, l);
        const double r1 = one_recall(a->nq, 1, l, 10, truth, a->k);
        const double r10 = one_recall(a->nq, 10, l, 10, truth, a->k);
        const double tk = timed_search(index, a, q, a->k, nprobe, d, l);
        const double rk = one_recall(a->nq, a->k, l, a->k, truth, a->k);
        report("search", "nprobe %4lld: k=10 %8.2f ms (%9.0f QPS)  1-recall@1 %.4f  "
                         "1-recall@10 %.4f | k=%lld %8.2f ms  1-recall@%lld %.4f",
               (long long)nprobe, 1e3 * t10, (double)a->nq / t10, r1, r10, (long long)a->k,
               1e3 * tk, (long long)a->k, rk);
        json_add("{\"step\": \"search\", \"nprobe\": %lld, \"ms_k10\": %.3f, \"qps_k10\": %.1f, "
                 "\"recall1_at_1\": %.4f, \"recall1_at_10\": %.4f, \"ms_k%lld\": %.3f, "
                 "\"recall1_at_%lld\": %.4f}",
                 (long long)nprobe, 1e3 * t10, (double)a->nq / t10, r1, r10, (long long)a->k,
                 1e3 * tk, (long long)a->k, rk);
    }
    free(d);
    free(l);
}

/* Host memory for the stream step's rows: pinned where the run has CUDA and
 * asked for it, else pageable (*pinned says which). */
static float *stream_rows_alloc(size_t bytes, int want_pinned, int *pinned)
{
    *pinned = 0;
#ifdef SIMIL_BENCH_CUDA
    void *p = NULL;
    if (want_pinned) {
        if (cudaMallocHost(&p, bytes) == cudaSuccess) {
            *pinned = 1;
            return p;
        }
        cudaGetLastError();
        return NULL;
    }
#else
    if (want_pinned) return NULL;
#endif
    return malloc(bytes);
}

static void stream_rows_free(float *x, int pinned)
{
#ifdef SIMIL_BENCH_CUDA
    if (pinned) {
        cudaFreeHost(x);
        return;
    }
#endif
    (void)pinned;
    free(x);
}

/* One streamed search, k = 10, of nq queries over the first rows of x in
 * chunks of chunk_rows (0: the library's, about 1 GiB); its statistics in
 * *st.  Nonzero on failure. */
static int stream_search_once(const bench_args *a, const float *q, int64_t nq, const float *x,
                              int64_t rows, int64_t chunk_rows, simil_stream_stats *st)
{
    const int64_t k = 10;
    simil_source *s;
    if (simil_source_from_memory(&s, rows, a->dim, x)) return -1;
    float *d = malloc(sizeof(float) * (size_t)(nq * k));
    int64_t *l = malloc(sizeof(int64_t) * (size_t)(nq * k));
    simil_stream_params p;
    simil_stream_params_init(&p);
    p.device = a->device;
    p.chunk_rows = chunk_rows;
    const int err = !d || !l || simil_source_search(s, SIMIL_METRIC_L2, nq, q, k, &p, d, l, st);
    free(d);
    free(l);
    simil_source_close(s);
    return err ? -1 : 0;
}

/* Streamed exact searches of the rows x for each query count, each after a
 * warm-up. */
static void stream_searches(const bench_args *a, const float *q, double h2d, const float *x,
                            const char *where)
{
    const size_t bytes = sizeof(float) * (size_t)(a->stream_rows * a->dim);
    char list[256];
    snprintf(list, sizeof list, "%s", a->stream_nq);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        const int64_t nq = atoll(tok) < a->nq ? atoll(tok) : a->nq;
        simil_stream_stats st;
        /* untimed first: the first search of a shape in a process loads its
         * kernels (CUDA's lazy loading, cuBLAS's plans), a one-off cost that
         * is reported here, not spread over the rate */
        const int64_t warm_rows = a->stream_rows < ((int64_t)1 << 20) ? a->stream_rows
                                                                       : ((int64_t)1 << 20);
        if (stream_search_once(a, q, nq, x, warm_rows, 0, &st)) die("warm-up search");
        report("stream", "warm-up: %lld rows from %s host memory, %lld queries: %.3f s",
               (long long)warm_rows, where, (long long)nq, st.seconds);
        const long long fallbacks = sml_cuda_fallback_queries();
        if (stream_search_once(a, q, nq, x, a->stream_rows, a->stream_chunk, &st))
            die("streamed search from host memory");
        const double gbs = (double)bytes / st.seconds / 1e9;
        report("stream", "%lld rows from %s host memory, %lld queries, k=10: %.3f s, %.2f GB/s "
                         "= %.0f%% of the pinned copy (%.2f GB/s); %lld chunks, waited %.3f s "
                         "for them; %lld query-chunks redone in fp32",
               (long long)a->stream_rows, where, (long long)nq, st.seconds, gbs,
               h2d > 0 ? 100 * gbs / h2d : 0.0, h2d, (long long)st.chunks, st.wait_seconds,
               sml_cuda_fallback_queries() - fallbacks);
        json_add("{\"step\": \"stream\", \"memory\": \"%s\", \"rows\": %lld, \"nq\": %lld, "
                 "\"seconds\": %.3f, \"gb_per_second\": %.3f, \"h2d_gb_per_second\": %.3f, "
                 "\"wait_seconds\": %.3f}",
                 where, (long long)a->stream_rows, (long long)nq, st.seconds, gbs, h2d,
                 st.wait_seconds);
    }
}

/* Exact search of rows of host memory, streamed through the device, for
 * each query count, against the pinned copy bandwidth: from pinned memory
 * (where the run has CUDA), then from pageable memory. */
static void stream_from_host(const bench_args *a, const float *q, double h2d)
{
    if (a->stream_rows <= 0) return;
    const size_t bytes = sizeof(float) * (size_t)(a->stream_rows * a->dim);
    int pinned;
    float *x = stream_rows_alloc(bytes, 0, &pinned);
    if (!x) {
        report("stream", "skipped: no host memory for %.1f GB", bytes / 1e9);
        return;
    }
    if (simil_generate("mix", 0, a->stream_rows, a->dim, 11, x)) die("generate");
    if (strcmp(a->device, "cpu") != 0) {
        const double t0 = now();
        float *xp = stream_rows_alloc(bytes, 1, &pinned);
        if (xp) {
            const double t_pin = now() - t0, t1 = now();
            /* the copy the pageable search makes, piece by piece, before
             * each upload: its rate bounds that search */
            sml_copy_parallel(xp, x, bytes);
            const double t_copy = now() - t1;
            report("stream", "%.1f GB of pinned host memory (cudaMallocHost): %.2f s to pin",
                   bytes / 1e9, t_pin);
            report("stream", "host copy from pageable to pinned memory (all threads): %.2f GB/s",
                   bytes / t_copy / 1e9);
            stream_searches(a, q, h2d, xp, "pinned");
            stream_rows_free(xp, pinned);
        }
    }
    stream_searches(a, q, h2d, x, "pageable");
    stream_rows_free(x, 0);
}

/* Labels of the first (up to) 100 queries at nprobe 8, k = 10: what a
 * loaded index must answer as the saved one did. */
static int64_t check_rows(const bench_args *a) { return a->nq < 100 ? a->nq : 100; }

static void check_labels(const simil_index *index, const bench_args *a, const float *q,
                         int64_t *l)
{
    float *d = malloc(sizeof(float) * (size_t)check_rows(a) * 10);
    simil_search_params *p;
    if (!d || simil_search_params_create(&p) || simil_search_params_set_int(p, "nprobe", 8) ||
        simil_index_search(index, check_rows(a), q, 10, p, d, l))
        die("search for the load check");
    simil_search_params_destroy(p);
    free(d);
}

static void save(const simil_index *index, const bench_args *a)
{
    const double t0 = now();
    if (simil_index_save(index, a->file) != SIMIL_OK) die(a->file);
    const double save_s = now() - t0;
    struct stat st;
    stat(a->file, &st);
    report("save", "%.2f s, %.2f GB (%.2f GB/s) to %s; peak host memory %.2f GiB", save_s,
           (double)st.st_size / 1e9, (double)st.st_size / 1e9 / save_s, a->file,
           peak_host_gib());
    json_add("{\"step\": \"save\", \"seconds\": %.3f, \"bytes\": %lld}", save_s,
             (long long)st.st_size);
}

static simil_index *load(const bench_args *a)
{
    simil_index *index;
    const double t0 = now();
    if (simil_index_load(&index, a->file, a->device) != SIMIL_OK) die(a->file);
    const double load_s = now() - t0;
    report("load", "%.2f s, %lld vectors, backend %s; peak host memory %.2f GiB", load_s,
           (long long)simil_index_size(index), simil_backend_name(index), peak_host_gib());
    json_add("{\"step\": \"load\", \"seconds\": %.3f}", load_s);
    if (simil_index_size(index) != a->n) {
        fprintf(stderr, "bench_billion: %s holds %lld vectors, not --n %lld\n", a->file,
                (long long)simil_index_size(index), (long long)a->n);
        exit(1);
    }
    return index;
}

/* Train and add; with --index-file, save, and when a search step follows in
 * this run, load the file back in place of the built index (never both on
 * the device at once: two 1B indexes do not fit one card) and check that it
 * answers as the built one did. */
static simil_index *build(const bench_args *a, const simil_source *base, const float *q,
                          int then_search)
{
    simil_index *index;
    if (simil_index_create(&index, a->dim, a->index, SIMIL_METRIC_L2, a->device)) die(a->index);
    double t0 = now();
    if (simil_index_train_source(index, base, a->train_sample)) die("train");
    const double train_s = now() - t0;
    const int64_t sample = a->train_sample > 0 ? a->train_sample
                                               : simil_index_train_sample(index, a->n);
    report("train", "%.2f s on %lld sampled rows, backend %s", train_s, (long long)sample,
           simil_backend_name(index));
    simil_stream_params p;
    simil_stream_params_init(&p);
    p.chunk_rows = a->chunk;
    t0 = now();
    if (simil_index_add_source(index, base, &p)) die("add");
    const double add_s = now() - t0;
    report("add", "%.2f s for %lld rows (%.1f M rows/s); peak host memory %.2f GiB", add_s,
           (long long)a->n, (double)a->n / add_s / 1e6, peak_host_gib());
    json_add("{\"step\": \"build\", \"train_seconds\": %.3f, \"train_rows\": %lld, "
             "\"add_seconds\": %.3f, \"peak_host_gib\": %.3f}",
             train_s, (long long)sample, add_s, peak_host_gib());
    if (!a->file) return index;
    save(index, a);
    if (!then_search) return index;
    int64_t *before = malloc(sizeof(int64_t) * (size_t)check_rows(a) * 10);
    int64_t *after = malloc(sizeof(int64_t) * (size_t)check_rows(a) * 10);
    if (!before || !after) die("out of memory");
    check_labels(index, a, q, before);
    simil_index_destroy(index);
    index = load(a);
    check_labels(index, a, q, after);
    if (memcmp(before, after, sizeof(int64_t) * (size_t)check_rows(a) * 10) != 0) {
        fprintf(stderr, "bench_billion: the loaded index answers differently\n");
        exit(1);
    }
    free(before);
    free(after);
    return index;
}

/* A progress line at most every 30 s (the run's log is a file, not a
 * terminal), with the rate and the time left at that rate; a stage shorter
 * than that prints nothing. */
static void progress(const char *stage, int64_t done, int64_t total, void *user)
{
    static char last_stage[64];
    static double t0, last;
    static int64_t done0, done_last;
    const double t = now();
    (void)user;
    if (strncmp(stage, last_stage, sizeof last_stage - 1) != 0 || done < done_last) {
        snprintf(last_stage, sizeof last_stage, "%s", stage);
        t0 = last = t;
        done0 = done;
    }
    done_last = done;
    if (t - last < 30) return;
    last = t;
    const double rate = t > t0 ? (double)(done - done0) / (t - t0) : 0;
    printf("%-10s %s %lld/%lld (%.0f%%) %.3g per s, %.0f s left\n", "progress", stage,
           (long long)done, (long long)total, 100.0 * (double)done / (double)total, rate,
           rate > 0 ? (double)(total - done) / rate : 0.0);
    fflush(stdout);
}

static int has_step(const char *steps, const char *step)
{
    const size_t n = strlen(step);
    for (const char *s = steps; (s = strstr(s, step)) != NULL; s += n)
        if ((s == steps || s[-1] == ',') && (s[n] == ',' || s[n] == '\0')) return 1;
    return 0;
}

int main(int argc, char **argv)
{
    bench_args a = {1000000000, 96, 10000, 100, 0, 0, 0, 0, 0, "IVF65536,PQ32", "auto",
                    "8,12,16,24,32", NULL, NULL, "100,1000,10000", NULL, "build,gt,search,stream"};
    parse(argc, argv, &a);
    const int do_build = has_step(a.steps, "build"), do_gt = has_step(a.steps, "gt");
    const int do_search = has_step(a.steps, "search"), do_stream = has_step(a.steps, "stream");
    if (do_search && !do_build && !a.file) {
        fprintf(stderr, "bench_billion: --steps search without build loads --index-file\n");
        return 2;
    }
    if (a.json && !(json_out = fopen(a.json, "w"))) {
        perror(a.json);
        return 1;
    }
    simil_set_progress(progress, NULL);
    char spec[96];
    snprintf(spec, sizeof spec, "gen:mix:%lld:%lld:11", (long long)a.n, (long long)a.dim);
    simil_source *base;
    if (simil_source_open(&base, spec)) die(spec);
    float *q = malloc(sizeof(float) * (size_t)(a.nq * a.dim));
    int64_t *truth = malloc(sizeof(int64_t) * (size_t)(a.nq * a.k));
    if (!q || !truth || simil_generate("mix", 0, a.nq, a.dim, 12, q)) die("queries");
    const double t_start = now();
    const double h2d = do_build || do_stream ? h2d_bandwidth((size_t)1 << 30) : 0;
    report("setup", "steps %s: base %s, queries mix(%lld, %lld, seed 12), index %s, device %s",
           a.steps, spec, (long long)a.nq, (long long)a.dim, a.index, a.device);
    if (h2d > 0) report("h2d", "pinned cudaMemcpy of 1 GiB: %.2f GB/s", h2d);
    json_add("{\"step\": \"setup\", \"steps\": \"%s\", \"n\": %lld, \"dim\": %lld, "
             "\"index\": \"%s\", \"h2d_gb_per_second\": %.3f}",
             a.steps, (long long)a.n, (long long)a.dim, a.index, h2d);

    simil_index *index = do_build ? build(&a, base, q, do_search) : NULL;
    if (do_gt || do_search) ground_truth(&a, base, q, truth);
    if (do_search) {
        if (!index) index = load(&a);
        searches(index, &a, q, truth);
    }
    if (do_stream) stream_from_host(&a, q, h2d);
    report("total", "%.1f s; peak host memory %.2f GiB", now() - t_start, peak_host_gib());
    json_add("{\"step\": \"total\", \"seconds\": %.3f, \"peak_host_gib\": %.3f}",
             now() - t_start, peak_host_gib());
    if (json_out) {
        fputs("\n]\n", json_out);
        fclose(json_out);
    }
    simil_index_destroy(index);
    simil_source_close(base);
    free(q);
    free(truth);
    return 0;
}
