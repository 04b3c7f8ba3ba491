/* bench_gpu_exact.c: exact GPU search on the workloads of docs/datasets.md, as a
 * program (not a test).
 *
 *   bench_gpu_exact uniform1M|uniform10M K [K ...]
 *   bench_gpu_exact select ROWS COLS K [K ...]
 *
 * Search: generates the dataset with the exact generators, adds it to a GPU
 * Flat index, and reports the median of 3 timed searches of the 10,000
 * queries (after a warm-up), host input and host output, with the number of
 * queries that fell back to the fp32 path.  Select: k-selection alone over a
 * ROWS x COLS matrix in GPU memory, against the device-to-device copy
 * bandwidth measured in the same run. */
#define _POSIX_C_SOURCE 200809L /* CLOCK_MONOTONIC under -std=c11 (clang) */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_cuda.h"
#include "cuda/cuda_backend.h"
#include "simil/simil.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(const char *what)
{
    fprintf(stderr, "%s: %s\n", what, simil_last_error());
    exit(1);
}

static int bench_search(const char *name, int argc, char **argv)
{
    int64_t n, dim;
    if (strcmp(name, "uniform1M") == 0) {
        n = 1000000;
        dim = 128;
    } else if (strcmp(name, "uniform10M") == 0) {
        n = 10000000;
        dim = 96;
    } else {
        fprintf(stderr, "unknown workload %s\n", name);
        return 2;
    }
    const int64_t nq = 10000;
    float *base = malloc(sizeof(float) * (size_t)(n * dim));
    float *q = malloc(sizeof(float) * (size_t)(nq * dim));
    if (!base || !q) return 1;
    if (simil_generate("uniform", 0, n, dim, 1, base) || simil_generate("uniform", 0, nq, dim, 2, q))
        die("generate");
    simil_index *index;
    if (simil_index_create(&index, dim, "Flat", SIMIL_METRIC_L2, "gpu")) die("create");
    double t0 = now();
    if (simil_index_add(index, n, base, NULL)) die("add");
    printf("%s: n=%lld dim=%lld add %.3f s on %s\n", name, (long long)n, (long long)dim,
           now() - t0, simil_backend_name(index));
    for (int a = 0; a < argc; a++) {
        int64_t k = atoll(argv[a]);
        float *d = malloc(sizeof(float) * (size_t)(nq * k));
        int64_t *l = malloc(sizeof(int64_t) * (size_t)(nq * k));
        if (simil_index_search(index, nq, q, k, NULL, d, l)) die("search");
        double ms[3];
        long long fb = sml_cuda_fallback_queries();
        for (int r = 0; r < 3; r++) {
            t0 = now();
            if (simil_index_search(index, nq, q, k, NULL, d, l)) die("search");
            ms[r] = 1e3 * (now() - t0);
        }
        qsort(ms, 3, sizeof ms[0], cmp_double);
        printf("%s k=%lld: %.1f ms (median of 3; %.1f..%.1f) %.0f QPS, fp32 re-runs %lld/%lld\n",
               name, (long long)k, ms[1], ms[0], ms[2], nq / (ms[1] * 1e-3),
               (sml_cuda_fallback_queries() - fb) / 3, (long long)nq);
        free(d);
        free(l);
    }
    simil_index_destroy(index);
    free(base);
    free(q);
    return 0;
}

static int bench_select(int argc, char **argv)
{
    if (argc < 3) return 2;
    const int64_t rows = atoll(argv[0]), cols = atoll(argv[1]);
    const size_t count = (size_t)(rows * cols);
    float *host = malloc(sizeof(float) * count);
    if (!host) return 1;
    simil_generate("uniform", 0, rows, cols, 3, host);
    float *d_v;
    if (cudaMalloc((void **)&d_v, sizeof(float) * count)) return 1;
    cudaMemcpy(d_v, host, sizeof(float) * count, cudaMemcpyHostToDevice);
    const double copy = bench_copy_bandwidth(sizeof(float) * count);
    printf("select: %lld x %lld floats (%.2f GB); device copy %.0f GB/s (read + write)\n",
           (long long)rows, (long long)cols, 4e-9 * (double)count, copy);
    for (int a = 2; a < argc; a++) {
        int64_t k = atoll(argv[a]);
        float *d_out;
        int64_t *d_idx;
        cudaMalloc((void **)&d_out, sizeof(float) * (size_t)(rows * k));
        cudaMalloc((void **)&d_idx, sizeof(int64_t) * (size_t)(rows * k));
        if (simil_select_k(rows, cols, d_v, k, 0, d_out, d_idx)) die("select");
        double ms[3];
        for (int r = 0; r < 3; r++) {
            double t0 = now();
            if (simil_select_k(rows, cols, d_v, k, 0, d_out, d_idx)) die("select");
            ms[r] = 1e3 * (now() - t0);
        }
        qsort(ms, 3, sizeof ms[0], cmp_double);
        const double gbs = 4e-9 * (double)count / (ms[1] * 1e-3);
        printf("select k=%lld: %.2f ms, %.0f GB/s read = %.0f%% of copy bandwidth\n",
               (long long)k, ms[1], gbs, 100.0 * gbs / copy);
        cudaFree(d_out);
        cudaFree(d_idx);
    }
    cudaFree(d_v);
    free(host);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_gpu_exact uniform1M|uniform10M K [K ...]\n"
                        "       bench_gpu_exact select ROWS COLS K [K ...]\n");
        return 2;
    }
    if (simil_gpu_count() == 0) {
        fprintf(stderr, "no GPU\n");
        return 1;
    }
    if (strcmp(argv[1], "select") == 0) return bench_select(argc - 2, argv + 2);
    return bench_search(argv[1], argc - 2, argv + 2);
}
