/* bench_latency.c: latency of online search, per batch size and with many
 * callers, as a program (not a test).
 *
 *   bench_latency [options] INDEX[@NPROBE | @SETTINGS] ...
 *
 * The data is mix10M of docs/datasets.md (base mix(10M, 96, seed 11), queries
 * mix(10,000, 96, seed 12), training mix(500,000, 96, seed 13)), or with
 * --n N the first N base vectors (and min(500,000, N / 2) training vectors).
 * For each index (e.g. Flat, IVF4096,Flat@6, IVF4096,PQ32@16, XFBQ; @N is
 * nprobe=N, and @SETTINGS any search settings, e.g. IVF4096,PQ32@nprobe=16,lut=fp16):
 *   - per batch size B of --batch: --reps calls of B queries (fewer for large
 *     B: at most 20,000 / B, at least 3), host input and output, timed one by one on
 *     the host clock after a warm-up; reports p50 and p99 latency and the
 *     QPS at p50 (B / p50);
 *   - with --threads T: T threads, each searching one query per call for
 *     --seconds, with batching on (max_wait_us 0, and --wait-us W when given)
 *     and off; reports QPS and the p50 / p99 latency of a call;
 *   - recall10@10 of the 10,000 queries against Flat, as a sanity check.
 * With a GPU, also: the device-to-device copy bandwidth of this run and the
 * floor it gives for one exact query (the bytes of the fp16 shadow of the
 * base read once), and the fixed cost of a call (Flat over 1,024 vectors, one
 * query, host input and output).  For an inverted-file index, its fixed cost
 * of a call: one query with nprobe 1 (CSV mode "fixed-cost").
 *
 * Options:
 *   --n N              base vectors (default 10,000,000)
 *   --metric M         cosine (default), l2 or ip
 *   --device D         gpu (default when one is usable) or cpu
 *   --k K              neighbours (default 10)
 *   --batch LIST       batch sizes (default 1,4,16,64,256,1024,10000)
 *   --reps R           timed calls per batch size, at most (default 200)
 *   --threads T        concurrent callers (default 16; 0 skips)
 *   --seconds S        per concurrent run (default 1)
 *   --wait-us W        also run the callers with this batching wait
 *   --lanes LIST       GPU: run the callers with each number of lanes, the
 *                      small batches that may run side by side (e.g. 1,2,4,8;
 *                      default: the library's, once)
 *   --small-max Q      GPU exact search: largest batch of the small-batch
 *                      path (default: the library's; 0 turns it off)
 *   --ivf-small-max Q  GPU IVF search: largest batch that keeps its probes on
 *                      the device (default: the library's; 0 turns it off)
 *   --ivf-coarse-many-max Q  GPU IVF search: largest batch past
 *                      --ivf-small-max whose coarse search is a kernel of
 *                      keys and a selection per query, not the general exact
 *                      search (default: the library's; 0 turns it off)
 *   --small-cores C    GPU exact search: the small-batch path's dot products
 *                      on tensor cores (tensor, the default, where 16 divides
 *                      the dimension) or CUDA cores (cuda)
 *   --knn-one 0|1      GPU exact search: one host query in one launch (1, the
 *                      default) or in three (0: scaling, scan, finish)
 *   --ivf-thin staged|plain  GPU IVF-Flat batch path: thin tiles' rows staged
 *                      through shared memory (staged, the default) or read
 *                      lane by lane (plain)
 *   --pq-tables coarse|block  GPU IVF-PQ small batches: each query's table
 *                      built once by the coarse search (coarse, the default)
 *                      or by every block of the split scan (block)
 *   --replay 0|1|both  GPU IVF small batches: each call's work as one CUDA
 *                      graph launch (1, the default) or operation by
 *                      operation (0); both: the callers run with 0, 1, 0, 1
 *                      (the batch sizes with the default)
 *   --csv FILE         append the results as CSV (header when new)
 *   --write-fvecs DIR  write DIR/base.fvecs, DIR/train.fvecs and
 *                      DIR/queries-B.fvecs (B of --batch) of exactly the
 *                      vectors searched (normalized for cosine), for
 *                      bench/torch_latency.py and bench/faiss_latency.cpp
 * With SIMIL_BENCH_PROFILE set in the environment, only the timed calls of
 * each batch size are in the profiler's range, for
 *   ncu --profile-from-start off --metrics gpu__time_duration.sum ...
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#ifdef SIMIL_HAVE_CUDA
#include <cuda_profiler_api.h>

#include "bench_cuda.h"
#endif

#include "cuda/cuda_backend.h"
#include "index/index_internal.h"
#include "simil/simil.h"

enum { MAX_BATCHES = 32, MAX_INDEXES = 16, NQ = 10000, DIM = 96, MAX_THREADS = 256 };

typedef struct options {
    int64_t n;
    simil_metric metric;
    const char *device;
    int64_t k;
    int64_t batch[MAX_BATCHES];
    int nbatch;
    int reps;
    int threads;
    double seconds;
    int64_t wait_us;  /* -1: none */
    int lanes[16];    /* --lanes */
    int nlanes;       /* 0: the library's */
    long long small_max;  /* -1: the library's */
    const char *csv;
    int replay;  /* --replay: -1 (not given: the default, on), 0, 1 or 2 (both) */
    const char *fvecs_dir;
} options;

/* The replay setting of the callers now running (--replay), -1: not set. */
static int replay_now = -1;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_latency: %s: %s\n", what, simil_last_error());
    exit(1);
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "bench_latency: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The p-th percentile (0..100) of n sorted values: the smallest value with
 * at least p% of the values at or below it. */
static double percentile(const double *sorted, int64_t n, double p)
{
    int64_t i = (int64_t)ceil(p / 100.0 * (double)n) - 1;
    if (i < 0) i = 0;
    if (i >= n) i = n - 1;
    return sorted[i];
}

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_latency [--n N] [--metric cosine|l2|ip] [--device gpu|cpu] [--k K]\n"
            "                     [--batch 1,4,...] [--reps R] [--threads T] [--seconds S]\n"
            "                     [--wait-us W] [--lanes 1,2,...] [--small-max Q]\n"
            "                     [--ivf-small-max Q] [--ivf-coarse-many-max Q]\n"
            "                     [--small-cores tensor|cuda] [--knn-one 0|1]\n"
            "                     [--ivf-thin staged|plain] [--pq-tables coarse|block]\n"
            "                     [--replay 0|1|both]\n"
            "                     [--csv FILE]\n"
            "                     [--write-fvecs DIR] INDEX[@NPROBE] ...\n"
            "(see the comment at the top of bench/bench_latency.c)\n");
    exit(2);
}

static int parse_batches(const char *s, options *o)
{
    o->nbatch = 0;
    while (*s) {
        char *end;
        long long b = strtoll(s, &end, 10);
        if (end == s || b < 1 || b > NQ || o->nbatch == MAX_BATCHES) return 0;
        o->batch[o->nbatch++] = b;
        s = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0') return 0;
    }
    return o->nbatch > 0;
}

/* ---- the CSV ---- */

static FILE *csv_open(const char *path)
{
    if (!path) return NULL;
    struct stat st;
    const int fresh = stat(path, &st) != 0 || st.st_size == 0;
    FILE *f = fopen(path, "a");
    if (!f) {
        perror(path);
        exit(1);
    }
    if (fresh)
        fprintf(f, "system,device,index,params,k,batch,threads,mode,calls,p50_ms,p99_ms,qps\n");
    return f;
}

static void csv_row(FILE *f, const char *device, const char *index, const char *params,
                    int64_t k, int64_t batch, int threads, const char *mode, int64_t calls,
                    double p50, double p99, double qps)
{
    if (!f) return;
    fprintf(f, "simil,\"%s\",\"%s\",\"%s\",%" PRId64 ",%" PRId64 ",%d,%s,%" PRId64
               ",%.4f,%.4f,%.1f\n",
            device, index, params, k, batch, threads, mode, calls, p50, p99, qps);
    fflush(f);
}

/* ---- files for the other libraries ---- */

static void write_fvecs(const char *dir, const char *name, const float *x, int64_t n, int64_t dim)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    simil_matrix m = {n, dim, SIMIL_DTYPE_FLOAT32, (void *)x};
    if (simil_matrix_write(path, &m)) die(path);
    printf("wrote %s (%" PRId64 " x %" PRId64 ")\n", path, n, dim);
}

static void normalize_rows(float *x, int64_t n, int64_t dim)
{
    for (int64_t i = 0; i < n; i++) {
        double s = 0;
        for (int64_t j = 0; j < dim; j++) s += (double)x[i * dim + j] * x[i * dim + j];
        if (s > 0)
            for (int64_t j = 0; j < dim; j++) x[i * dim + j] = (float)(x[i * dim + j] / sqrt(s));
    }
}

/* The queries of batch b of size size: the query set taken in turn. */
static const float *batch_queries(const float *q, int64_t size, int64_t call, float *scratch)
{
    const int64_t first = (call * size) % NQ;
    if (first + size <= NQ) return q + first * DIM;
    for (int64_t i = 0; i < size; i++)
        memcpy(scratch + i * DIM, q + ((first + i) % NQ) * DIM, sizeof(float) * DIM);
    return scratch;
}

static void write_files(const options *o, const float *base, const float *train, int64_t ntrain,
                        const float *q)
{
    mkdir(o->fvecs_dir, 0755);
    const int cosine = o->metric == SIMIL_METRIC_COSINE;
    float *copy = xmalloc(sizeof(float) * (size_t)(o->n * DIM));
    memcpy(copy, base, sizeof(float) * (size_t)(o->n * DIM));
    if (cosine) normalize_rows(copy, o->n, DIM);
    write_fvecs(o->fvecs_dir, "base.fvecs", copy, o->n, DIM);
    memcpy(copy, train, sizeof(float) * (size_t)(ntrain * DIM));
    if (cosine) normalize_rows(copy, ntrain, DIM);
    write_fvecs(o->fvecs_dir, "train.fvecs", copy, ntrain, DIM);
    float *qn = xmalloc(sizeof(float) * NQ * DIM);
    memcpy(qn, q, sizeof(float) * NQ * DIM);
    if (cosine) normalize_rows(qn, NQ, DIM);
    write_fvecs(o->fvecs_dir, "queries.fvecs", qn, NQ, DIM);
    for (int b = 0; b < o->nbatch; b++) {
        char name[64];
        snprintf(name, sizeof name, "queries-%" PRId64 ".fvecs", o->batch[b]);
        write_fvecs(o->fvecs_dir, name, qn, o->batch[b], DIM);
    }
    free(qn);
    free(copy);
}

/* ---- one call at a time ---- */

/* With SIMIL_BENCH_PROFILE set, the timed calls of each batch size (not
 * the fixed-cost ones) are the profiler's range (ncu --profile-from-start
 * off), and nothing else: index building and warm-up stay out of a kernel
 * profile. */
static void profile_calls(int on)
{
#ifdef SIMIL_HAVE_CUDA
    static int wanted = -1;
    if (wanted < 0) wanted = getenv("SIMIL_BENCH_PROFILE") != NULL;
    if (!wanted) return;
    if (on) cudaProfilerStart();
    else cudaProfilerStop();
#else
    (void)on;
#endif
}

static void sweep_batches(const options *o, simil_index *index, const char *name,
                          const simil_search_params *p, const char *params, const float *q,
                          const char *mode, FILE *csv)
{
    const int64_t k = o->k;
    float *d = xmalloc(sizeof(float) * (size_t)(NQ * k));
    int64_t *l = xmalloc(sizeof(int64_t) * (size_t)(NQ * k));
    float *scratch = xmalloc(sizeof(float) * NQ * DIM);
    double *ms = xmalloc(sizeof(double) * (size_t)o->reps);
    for (int b = 0; b < o->nbatch; b++) {
        const int64_t size = o->batch[b];
        int64_t reps = 20000 / size;
        if (reps > o->reps) reps = o->reps;
        if (reps < 3) reps = 3;
        /* warm-up: workspace, pinned buffers, kernels' first launch */
        for (int w = 0; w < 2; w++)
            if (simil_index_search(index, size, batch_queries(q, size, w, scratch), k, p, d, l))
                die("search");
        profile_calls(!strcmp(mode, "call"));
        for (int64_t r = 0; r < reps; r++) {
            const float *qb = batch_queries(q, size, r, scratch);
            const double t0 = now();
            if (simil_index_search(index, size, qb, k, p, d, l)) die("search");
            ms[r] = 1e3 * (now() - t0);
        }
        profile_calls(0);
        qsort(ms, (size_t)reps, sizeof *ms, cmp_double);
        const double p50 = percentile(ms, reps, 50), p99 = percentile(ms, reps, 99);
        printf("  %-18s %-10s batch %6" PRId64 ": p50 %9.3f ms  p99 %9.3f ms  %11.0f QPS"
               "  (%" PRId64 " calls)%s\n",
               name, params, size, p50, p99, size / (p50 * 1e-3), reps,
               strcmp(mode, "call") ? "  [fixed cost]" : "");
        csv_row(csv, o->device, name, params, k, size, 1, mode, reps, p50, p99,
                size / (p50 * 1e-3));
    }
    free(ms);
    free(scratch);
    free(d);
    free(l);
}

/* ---- many callers ---- */

typedef struct caller {
    const simil_index *index;
    const simil_search_params *params;
    const float *queries;
    int64_t k;
    int id;
    double stop_at;
    pthread_barrier_t *start;
    double *ms;  /* latencies of this caller's calls */
    int64_t cap, calls;
    int failed;
} caller;

static void *caller_loop(void *arg)
{
    caller *c = arg;
    float d[1024];
    int64_t l[1024];
    pthread_barrier_wait(c->start);
    for (int64_t i = c->id;; i += 7919) {
        const double t0 = now();
        if (t0 >= c->stop_at) break;
        if (simil_index_search(c->index, 1, c->queries + (i % NQ) * DIM, c->k, c->params, d, l)) {
            c->failed = 1;
            break;
        }
        if (c->calls < c->cap) c->ms[c->calls++] = 1e3 * (now() - t0);
    }
    return NULL;
}

static void run_callers(const options *o, simil_index *index, const char *name,
                        const simil_search_params *p, const char *params, const float *q,
                        int batching, int64_t wait_us, FILE *csv)
{
    if (simil_index_set_batching(index, batching, wait_us) != SIMIL_OK && batching) {
        printf("  %-18s %-10s %d callers: no batching for this index type\n", name, params,
               o->threads);
        return;
    }
    caller c[MAX_THREADS];
    pthread_t t[MAX_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)o->threads);
    const int64_t cap = (int64_t)(o->seconds * 2e6) + 16; /* 2 calls per us at most */
    const double t0 = now() + 0.05;
    for (int i = 0; i < o->threads; i++) {
        c[i] = (caller){.index = index, .params = p, .queries = q, .k = o->k, .id = i,
                        .stop_at = t0 + o->seconds, .start = &start, .cap = cap};
        c[i].ms = xmalloc(sizeof(double) * (size_t)cap);
        if (pthread_create(&t[i], NULL, caller_loop, &c[i])) {
            fprintf(stderr, "bench_latency: pthread_create failed\n");
            exit(1);
        }
    }
    int64_t total = 0;
    for (int i = 0; i < o->threads; i++) {
        pthread_join(t[i], NULL);
        if (c[i].failed) die("search from a caller thread");
        total += c[i].calls;
    }
    const double elapsed = now() - t0;
    pthread_barrier_destroy(&start);
    double *all = xmalloc(sizeof(double) * (size_t)(total ? total : 1));
    int64_t at = 0;
    for (int i = 0; i < o->threads; i++) {
        memcpy(all + at, c[i].ms, sizeof(double) * (size_t)c[i].calls);
        at += c[i].calls;
        free(c[i].ms);
    }
    qsort(all, (size_t)total, sizeof *all, cmp_double);
    const double p50 = percentile(all, total, 50), p99 = percentile(all, total, 99);
    const double qps = (double)total / (elapsed > o->seconds ? elapsed : o->seconds);
    char mode[64];
    const int lanes = index->backend->batch_lanes;
    if (!batching) snprintf(mode, sizeof mode, "threads-alone-lanes%d", lanes);
    else snprintf(mode, sizeof mode, "threads-batching-wait%" PRId64 "-lanes%d", wait_us, lanes);
    if (o->replay >= 0)
        snprintf(mode + strlen(mode), sizeof mode - strlen(mode), "-replay%d", replay_now);
    long long hits, builds, direct, dropped;
    sml_cuda_replay_counts(&hits, &builds, &direct, &dropped);
    printf("  %-18s %-10s %3d callers, %-26s %10.0f QPS  p50 %8.3f ms  p99 %8.3f ms"
           "  (graphs so far: %lld reused, %lld made, %lld one by one, %lld dropped)\n",
           name, params, o->threads, mode, qps, p50, p99, hits, builds, direct, dropped);
    csv_row(csv, o->device, name, params, o->k, 1, o->threads, mode, total, p50, p99, qps);
    free(all);
    simil_index_set_batching(index, 1, 0);
}

/* ---- the floor and the fixed cost (GPU) ---- */

static void floor_and_fixed_cost(const options *o, const float *base, const float *q, FILE *csv)
{
#ifdef SIMIL_HAVE_CUDA
    if (strcmp(o->device, "cpu") != 0) {
        const double gbs = bench_copy_bandwidth((size_t)1 << 31);
        /* the small path reads each row's fp16 values and its scale (and, for
         * L2, its norm) once */
        const double rows = 2.0 * (double)o->n * DIM;
        const double all = rows + 4.0 * (double)o->n * (o->metric == SIMIL_METRIC_L2 ? 2 : 1);
        printf("device copy: %.0f GB/s (read + written).  One exact query reads %.2f GB of fp16 "
               "rows (%.2f GB with scales%s): floor %.3f ms (%.3f ms); 1.3x floor %.3f ms\n",
               gbs, rows / 1e9, all / 1e9, o->metric == SIMIL_METRIC_L2 ? " and norms" : "",
               rows / (gbs * 1e9) * 1e3, all / (gbs * 1e9) * 1e3, 1.3 * rows / (gbs * 1e9) * 1e3);
        if (csv)
            fprintf(csv, "simil,\"%s\",copy-bandwidth-GBps,,0,0,0,floor,0,%.4f,%.4f,%.1f\n",
                    o->device, rows / (gbs * 1e9) * 1e3, all / (gbs * 1e9) * 1e3, gbs);
    }
#else
    (void)csv;
#endif
    /* the fixed cost of a call: Flat over 1,024 vectors, one query */
    simil_index *tiny;
    if (simil_index_create(&tiny, DIM, "Flat", o->metric, o->device)) die("create");
    if (simil_index_add(tiny, 1024, base, NULL)) die("add");
    options one = *o;
    one.batch[0] = 1;
    one.nbatch = 1;
    one.reps = 1000;
    sweep_batches(&one, tiny, "Flat-1024-vectors", NULL, "", q, "fixed-cost", csv);
    simil_index_destroy(tiny);
}

/* The fixed cost of a call to an inverted-file index: one query probing one
 * list (about n / nlist vectors), with the index's other settings; what it
 * takes beyond the fixed cost is the scan of that one list. */
static void ivf_fixed_cost(const options *o, simil_index *index, const char *name,
                           const char *params, const float *q, FILE *csv)
{
    if (!simil_index_uses_search_param(index, "nprobe")) return;
    simil_search_params *p;
    if (simil_search_params_create(&p)) die("search parameters");
    if (*params && simil_search_params_parse(p, params)) die(params);
    if (simil_search_params_set(p, "nprobe", "1")) die("nprobe=1");
    options one = *o;
    one.batch[0] = 1;
    one.nbatch = 1;
    one.reps = 1000;
    sweep_batches(&one, index, name, p, "nprobe=1", q, "fixed-cost", csv);
    simil_search_params_destroy(p);
}

/* ---- main ---- */

static void recall_check(const options *o, simil_index *index, const char *name,
                         const simil_search_params *p, const float *q, const int64_t *gt)
{
    const int64_t k = o->k;
    float *d = xmalloc(sizeof(float) * (size_t)(NQ * k));
    int64_t *l = xmalloc(sizeof(int64_t) * (size_t)(NQ * k));
    if (simil_index_search(index, NQ, q, k, p, d, l)) die("search");
    int64_t hits = 0;
    for (int64_t i = 0; i < NQ; i++)
        for (int64_t j = 0; j < k; j++)
            for (int64_t t = 0; t < k; t++) hits += l[i * k + j] == gt[i * k + t];
    printf("  %-18s recall%" PRId64 "@%" PRId64 " %.4f (against Flat)\n", name, k, k,
           (double)hits / (double)(NQ * k));
    free(d);
    free(l);
}

int main(int argc, char **argv)
{
    options o = {.n = 10000000, .metric = SIMIL_METRIC_COSINE, .k = 10, .reps = 200,
                 .threads = 16, .seconds = 1, .wait_us = -1, .small_max = -1, .replay = -1};
    o.device = simil_gpu_count() > 0 ? "gpu" : "cpu";
    parse_batches("1,4,16,64,256,1024,10000", &o);
    const char *specs[MAX_INDEXES];
    int nspecs = 0;
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a], *val = a + 1 < argc ? argv[a + 1] : NULL;
        if (strncmp(arg, "--", 2) != 0) {
            if (nspecs == MAX_INDEXES) usage();
            specs[nspecs++] = arg;
            continue;
        }
        if (!val) usage();
        a++;
        if (!strcmp(arg, "--n")) o.n = atoll(val);
        else if (!strcmp(arg, "--metric")) {
            if (simil_metric_parse(val, &o.metric)) usage();
        } else if (!strcmp(arg, "--device")) o.device = val;
        else if (!strcmp(arg, "--k")) o.k = atoll(val);
        else if (!strcmp(arg, "--batch")) {
            if (!parse_batches(val, &o)) usage();
        } else if (!strcmp(arg, "--reps")) o.reps = atoi(val);
        else if (!strcmp(arg, "--threads")) o.threads = atoi(val);
        else if (!strcmp(arg, "--seconds")) o.seconds = atof(val);
        else if (!strcmp(arg, "--wait-us")) o.wait_us = atoll(val);
        else if (!strcmp(arg, "--lanes")) {
            for (const char *v = val; *v && o.nlanes < 16;) {
                char *end;
                const long l = strtol(v, &end, 10);
                if (end == v || l < 1 || l > 16) usage();
                o.lanes[o.nlanes++] = (int)l;
                v = *end == ',' ? end + 1 : end;
            }
        }
        else if (!strcmp(arg, "--small-max")) o.small_max = atoll(val);
        else if (!strcmp(arg, "--ivf-small-max")) sml_cuda_ivf_small_max(atoll(val));
        else if (!strcmp(arg, "--ivf-coarse-many-max")) sml_cuda_ivf_coarse_many_max(atoll(val));
        else if (!strcmp(arg, "--small-cores")) {
            if (strcmp(val, "tensor") && strcmp(val, "cuda")) usage();
            sml_cuda_knn_small_tensor(!strcmp(val, "tensor"));
        } else if (!strcmp(arg, "--ivf-thin")) {
            if (strcmp(val, "staged") && strcmp(val, "plain")) usage();
            sml_cuda_ivf_thin_staged(!strcmp(val, "staged"));
        } else if (!strcmp(arg, "--pq-tables")) {
            if (strcmp(val, "coarse") && strcmp(val, "block")) usage();
            sml_cuda_ivf_pq_coarse_tables(!strcmp(val, "coarse"));
        } else if (!strcmp(arg, "--knn-one")) {
            if (strcmp(val, "0") && strcmp(val, "1")) usage();
            sml_cuda_knn_small_one_launch(atoi(val));
        } else if (!strcmp(arg, "--replay")) {
            if (strcmp(val, "0") && strcmp(val, "1") && strcmp(val, "both")) usage();
            o.replay = !strcmp(val, "both") ? 2 : atoi(val);
        } else if (!strcmp(arg, "--csv")) o.csv = val;
        else if (!strcmp(arg, "--write-fvecs")) o.fvecs_dir = val;
        else usage();
    }
    if (o.n < 1024 || o.k < 1 || o.k > 1024 || o.reps < 1 || o.threads < 0 ||
        o.threads > MAX_THREADS || o.seconds <= 0 || nspecs == 0)
        usage();
    if (o.small_max >= 0) sml_cuda_knn_small_max(o.small_max);
    if (o.replay == 0 || o.replay == 1) sml_cuda_replay(o.replay);
    const int64_t ntrain = o.n / 2 < 500000 ? o.n / 2 : 500000;
    double t0 = now();
    float *base = xmalloc(sizeof(float) * (size_t)(o.n * DIM));
    float *train = xmalloc(sizeof(float) * (size_t)(ntrain * DIM));
    float *q = xmalloc(sizeof(float) * NQ * DIM);
    if (simil_generate("mix", 0, o.n, DIM, 11, base) || simil_generate("mix", 0, NQ, DIM, 12, q) ||
        simil_generate("mix", 0, ntrain, DIM, 13, train))
        die("generate");
    printf("mix(%" PRId64 ", %d) generated in %.1f s; metric %s, k=%" PRId64 ", device %s\n", o.n,
           DIM, now() - t0, simil_metric_name(o.metric), o.k, o.device);
    if (o.fvecs_dir) write_files(&o, base, train, ntrain, q);
    FILE *csv = csv_open(o.csv);
    floor_and_fixed_cost(&o, base, q, csv);
    int64_t *gt = xmalloc(sizeof(int64_t) * (size_t)(NQ * o.k));
    float *gd = xmalloc(sizeof(float) * (size_t)(NQ * o.k));
    int have_gt = 0;
    for (int s = 0; s < nspecs; s++) {
        char desc[128], params[160] = "";
        snprintf(desc, sizeof desc, "%s", specs[s]);
        simil_search_params *p;
        if (simil_search_params_create(&p)) die("search parameters");
        char *at = strchr(desc, '@');
        if (at) {
            /* @N is nprobe=N; anything else is a list of name=value settings */
            *at = '\0';
            const char *text = at + 1;
            if (*text && strspn(text, "0123456789") == strlen(text))
                snprintf(params, sizeof params, "nprobe=%s", text);
            else
                snprintf(params, sizeof params, "%s", text);
            if (simil_search_params_parse(p, params)) die(specs[s]);
        }
        simil_index *index;
        if (simil_index_create(&index, DIM, desc, o.metric, o.device)) die(desc);
        t0 = now();
        if (simil_index_train(index, ntrain, train)) die("train");
        if (simil_index_add(index, o.n, base, NULL)) die("add");
        printf("%s: train + add %.1f s on %s\n", desc, now() - t0, simil_backend_name(index));
        if (!have_gt && strcmp(desc, "Flat") == 0) {
            if (simil_index_search(index, NQ, q, o.k, NULL, gd, gt)) die("ground truth");
            have_gt = 1;
        }
        if (have_gt) recall_check(&o, index, desc, p, q, gt);
        sweep_batches(&o, index, desc, p, params, q, "call", csv);
        ivf_fixed_cost(&o, index, desc, params, q, csv);
        for (int l = 0; o.threads > 0 && l < (o.nlanes ? o.nlanes : 1); l++) {
            if (o.nlanes) {
                /* the GPU's lanes, and the batcher's count of them (set at open) */
                sml_cuda_lanes(o.lanes[l]);
                index->backend->batch_lanes = o.lanes[l];
            }
            /* --replay both: off, on, off, on, on the same lanes */
            const int runs = o.replay == 2 ? 4 : 1;
            for (int i = 0; i < runs; i++) {
                replay_now = o.replay == 2 ? i % 2 : o.replay;
                if (o.replay == 2) sml_cuda_replay(replay_now);
                run_callers(&o, index, desc, p, params, q, 1, 0, csv);
                if (o.wait_us > 0)
                    run_callers(&o, index, desc, p, params, q, 1, o.wait_us, csv);
                run_callers(&o, index, desc, p, params, q, 0, 0, csv);
            }
            if (o.replay == 2) sml_cuda_replay(1); /* the default */
        }
        simil_index_destroy(index);
        simil_search_params_destroy(p);
    }
    if (csv) fclose(csv);
    free(gt);
    free(gd);
    free(base);
    free(train);
    free(q);
    return 0;
}
