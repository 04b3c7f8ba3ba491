/* tools/bench_measure.c: how "simil bench" times searches and sizes indexes
 * (see bench.h), after ann-benchmarks.
 *
 * Batch mode searches all queries in one call; single-query mode makes one
 * call per query, as a service answering one request at a time would.  Each
 * mode runs the whole query set `runs` times after one warm-up pass, and
 * keeps the fastest run: QPS is the number of queries over that run's time
 * (ann-benchmarks' best of N).  Latency percentiles are those of each query
 * in the fastest single-query run; in batch mode every query of a call
 * waits for the whole call, so they are the percentiles of the calls' times.
 *
 * The size of an index is the memory its build left in use: the growth of
 * the host memory the process has allocated (glibc's mallinfo2: heap blocks
 * in use plus mmapped ones) over train and add, plus the growth of what the
 * GPUs hold (cudaMemGetInfo).  ann-benchmarks measures its indexsize by the
 * resident set, in a fresh process per run; in one process freed memory is
 * reused without growing the resident set, so the allocator's count is the
 * one that sees each index whole.  Without glibc's allocator (another libc,
 * or AddressSanitizer's) the resident set is used. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

/* ---- memory ---- */

/* Host memory in use: what malloc has handed out, where glibc says, else
 * the resident set. */
static int64_t bench_host_bytes(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    /* 0 when another allocator replaced glibc's (AddressSanitizer's) */
    if (mi.uordblks + mi.hblkhd > 0) return (int64_t)(mi.uordblks + mi.hblkhd);
#endif
    long long pages = -1, resident = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%lld %lld", &pages, &resident) != 2) resident = -1;
    if (f) fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return resident >= 0 && page > 0 ? (int64_t)resident * page : -1;
}

void bench_memory_mark(bench_memory *m)
{
    m->host = bench_host_bytes();
    m->gpu = 0;
    for (int g = 0; g < simil_gpu_count(); g++) {
        size_t free_bytes, total;
        if (simil_gpu_memory(g, &free_bytes, &total) == SIMIL_OK)
            m->gpu += (int64_t)(total - free_bytes);
    }
}

int64_t bench_memory_growth(const bench_memory *before)
{
    bench_memory now;
    bench_memory_mark(&now);
    if (before->host < 0 || now.host < 0) return -1;
    int64_t host = now.host - before->host, gpu = now.gpu - before->gpu;
    return (host > 0 ? host : 0) + (gpu > 0 ? gpu : 0);
}

/* ---- timing ---- */

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (0..1) of n sorted values, by the nearest rank. */
static double bench_quantile(const double *sorted, int64_t n, double q)
{
    int64_t at = (int64_t)ceil(q * (double)n) - 1;
    if (at < 0) at = 0;
    if (at >= n) at = n - 1;
    return sorted[at];
}

static void bench_latencies(bench_point *p, double *seconds, int64_t n)
{
    qsort(seconds, (size_t)n, sizeof *seconds, bench_cmp_double);
    p->p50_ms = 1e3 * bench_quantile(seconds, n, 0.50);
    p->p95_ms = 1e3 * bench_quantile(seconds, n, 0.95);
    p->p99_ms = 1e3 * bench_quantile(seconds, n, 0.99);
    p->p999_ms = 1e3 * bench_quantile(seconds, n, 0.999);
}

/* One pass over the queries, one call each; seconds[i] gets query i's time. */
static simil_status bench_single_pass(const bench_search *s, double *seconds, double *total)
{
    const int64_t nq = s->queries->rows, dim = s->queries->cols;
    const float *q = s->queries->data;
    double t0 = cli_now();
    for (int64_t i = 0; i < nq; i++) {
        double t = cli_now();
        simil_status st = simil_index_search(s->index, 1, q + i * dim, s->k, s->params,
                                             s->distances + i * s->k, s->labels + i * s->k);
        if (st != SIMIL_OK) return st;
        if (seconds) seconds[i] = cli_now() - t;
    }
    *total = cli_now() - t0;
    return SIMIL_OK;
}

static simil_status bench_time_single(const bench_search *s, int runs, bench_point *p)
{
    const int64_t nq = s->queries->rows;
    double *now = malloc((size_t)nq * sizeof *now), *best = malloc((size_t)nq * sizeof *best);
    double total, fastest = INFINITY;
    simil_status st = now && best ? SIMIL_OK : SIMIL_ERR_OUT_OF_MEMORY;
    if (st == SIMIL_OK) st = bench_single_pass(s, NULL, &total); /* warm-up */
    for (int r = 0; r < runs && st == SIMIL_OK; r++) {
        st = bench_single_pass(s, now, &total);
        if (st == SIMIL_OK && total < fastest) {
            double *swap = best;
            best = now;
            now = swap;
            fastest = total;
        }
    }
    if (st == SIMIL_OK) {
        p->qps = fastest > 0 ? (double)nq / fastest : 0.0;
        bench_latencies(p, best, nq);
    }
    free(now);
    free(best);
    return st;
}

static simil_status bench_time_batch(const bench_search *s, int runs, bench_point *p)
{
    double *seconds = malloc((size_t)runs * sizeof *seconds), fastest = INFINITY;
    simil_status st = seconds ? SIMIL_OK : SIMIL_ERR_OUT_OF_MEMORY;
    for (int r = -1; r < runs && st == SIMIL_OK; r++) { /* r = -1: the warm-up */
        double t0 = cli_now();
        st = simil_index_search(s->index, s->queries->rows, s->queries->data, s->k, s->params,
                                s->distances, s->labels);
        double t = cli_now() - t0;
        if (r >= 0) seconds[r] = t;
        if (r >= 0 && t < fastest) fastest = t;
    }
    if (st == SIMIL_OK) {
        p->qps = fastest > 0 ? (double)s->queries->rows / fastest : 0.0;
        bench_latencies(p, seconds, runs);
    }
    free(seconds);
    return st;
}

simil_status bench_time(const bench_search *s, int single, int runs, bench_point *p)
{
    snprintf(p->mode, sizeof p->mode, "%s", single ? "single" : "batch");
    p->runs = runs;
    return single ? bench_time_single(s, runs, p) : bench_time_batch(s, runs, p);
}
