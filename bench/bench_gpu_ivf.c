/* bench_gpu_ivf.c: IVF-Flat and k-means on the GPU, on the workloads of
 * docs/datasets.md, as a program (not a test).
 *
 *   bench_gpu_ivf fashion-mnist DESC [NPROBE ...]   (e.g. IVF1024,Flat or IVF256,PQ56)
 *   bench_gpu_ivf mix10M DESC [NPROBE ...]          (e.g. IVF4096,Flat, IVF4096,PQ32 or
 *                                                     IVF4096,SQ8)
 *   bench_gpu_ivf mix100M DESC [NPROBE ...]         (e.g. IVF16384,PQ16; trains on the
 *                                                     first 2M vectors; 38 GB of host memory)
 *   bench_gpu_ivf kmeans            (first 1M vectors of mix10M, k=4096, 20 iterations)
 *
 * An NPROBE may end in "/fp16" or "/fp32" to choose IVF-PQ's lookup-table
 * precision for that setting (e.g. 14/fp16); without it, the default (auto).
 *
 * Reports train and add seconds, the bytes of the lists' rows for Flat and SQ
 * encodings (codes as stored, 4-byte aligned, plus an 8-byte id each), then for each nprobe the median of 3 timed
 * searches of the 10,000 queries (after a warm-up, host input and output),
 * QPS, and recall10@10, 1-recall@1 and 1-recall@10 against exact GPU
 * search (docs/datasets.md, "Recall measures"; 1-recall@10 was printed as
 * "R@1" before 2026-11-25).  The timed searches
 * sit between cudaProfilerStart and cudaProfilerStop, so that
 * `ncu --profile-from-start off` profiles them and not the data's set-up. */
#define _POSIX_C_SOURCE 200809L /* CLOCK_MONOTONIC under -std=c11 (clang) */
#include <cuda_profiler_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "simil/simil.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "%s: %s\n", what, simil_last_error());
    exit(1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static float *generate(const char *kind, int64_t n, int64_t dim, uint64_t seed)
{
    float *x = malloc(sizeof(float) * (size_t)(n * dim));
    if (!x || simil_generate(kind, 0, n, dim, seed, x)) die("generate");
    return x;
}

/* Bytes of one stored row's code for the encodings whose layout is fixed by
 * the description (Flat, SQ8, SQfp16, SQbf16), else 0. */
static long long code_bytes(const char *desc, int64_t dim)
{
    const char *enc = strrchr(desc, ',');
    enc = enc ? enc + 1 : desc;
    if (strcmp(enc, "Flat") == 0) return 4 * (long long)dim;
    if (strcmp(enc, "SQ8") == 0) return ((long long)dim + 3) / 4 * 4;
    if (strcmp(enc, "SQfp16") == 0 || strcmp(enc, "SQbf16") == 0)
        return (2 * (long long)dim + 3) / 4 * 4;
    return 0;
}

static void sweep(const char *name, const char *desc, int64_t n, int64_t dim, const float *base,
                  const float *train, int64_t ntrain, int64_t nq, const float *q, int argc,
                  char **argv)
{
    const int64_t k = 10;
    simil_index *flat, *ivf;
    float *d = malloc(sizeof(float) * (size_t)(nq * k));
    int64_t *gt = malloc(sizeof(int64_t) * (size_t)(nq * k)), *l = malloc(sizeof(int64_t) * (size_t)(nq * k));
    if (simil_index_create(&flat, dim, "Flat", SIMIL_METRIC_L2, "gpu")) die("create");
    if (simil_index_add(flat, n, base, NULL)) die("add");
    double t0 = now();
    if (simil_index_search(flat, nq, q, k, NULL, d, gt)) die("search");
    printf("%s: exact ground truth (GPU Flat) %.3f s\n", name, now() - t0);
    simil_index_destroy(flat);
    if (simil_index_create(&ivf, dim, desc, SIMIL_METRIC_L2, "gpu")) die("create");
    t0 = now();
    if (simil_index_train(ivf, ntrain, train)) die("train");
    double train_s = now() - t0;
    t0 = now();
    if (simil_index_add(ivf, n, base, NULL)) die("add");
    printf("%s %s: train %.3f s (%lld vectors), add %.3f s, on %s\n", name, desc, train_s,
           (long long)ntrain, now() - t0, simil_backend_name(ivf));
    const long long cb = code_bytes(desc, dim);
    if (cb > 0)
        printf("%s %s: list bytes %lld x (%lld + 8) = %.1f MiB (codes alone %.1f MiB)\n", name,
               desc, (long long)n, cb, (double)n * (double)(cb + 8) / 1048576.0,
               (double)n * (double)cb / 1048576.0);
    for (int a = 0; a < argc; a++) {
        simil_search_params *p = NULL;
        char *lut = NULL;
        const long long nprobe = strtoll(argv[a], &lut, 10);
        if (simil_search_params_create(&p) || simil_search_params_set_int(p, "nprobe", nprobe) ||
            (*lut && (lut[0] != '/' || simil_search_params_set(p, "lut", lut + 1)))) {
            fprintf(stderr, "bad NPROBE '%s': a count, optionally with /fp16 or /fp32\n", argv[a]);
            exit(2);
        }
        if (simil_index_search(ivf, nq, q, k, p, d, l)) die("search");
        double s[3];
        cudaProfilerStart();
        for (int r = 0; r < 3; r++) {
            t0 = now();
            if (simil_index_search(ivf, nq, q, k, p, d, l)) die("search");
            s[r] = now() - t0;
        }
        cudaProfilerStop();
        qsort(s, 3, sizeof s[0], cmp_double);
        int64_t hits = 0, first = 0, top = 0;
        for (int64_t i = 0; i < nq; i++) {
            top += l[i * k] == gt[i * k];
            for (int64_t j = 0; j < k; j++) {
                first += l[i * k + j] == gt[i * k];
                for (int64_t t = 0; t < k; t++) hits += l[i * k + j] == gt[i * k + t];
            }
        }
        printf("%s %s nprobe=%s: %.2f ms, %.0f QPS, recall10@10 %.4f, 1-recall@1 %.4f, "
               "1-recall@10 %.4f\n",
               name, desc, argv[a], 1e3 * s[1], nq / s[1], (double)hits / (double)(nq * k),
               (double)top / (double)nq, (double)first / (double)nq);
        simil_search_params_destroy(p);
    }
    simil_index_destroy(ivf);
    free(d);
    free(gt);
    free(l);
}

int main(int argc, char **argv)
{
    if (argc < 2 || simil_gpu_count() == 0) {
        fprintf(stderr, "usage: bench_gpu_ivf fashion-mnist|mix10M|mix100M DESC [NPROBE ...] | kmeans "
                        "(needs a GPU)\n");
        return 2;
    }
    if (strcmp(argv[1], "fashion-mnist") == 0) {
        simil_matrix b, q;
        if (simil_matrix_read_float("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
                                    0, -1, &b) ||
            simil_matrix_read_float("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz",
                                    0, -1, &q))
            die("read");
        if (argc < 3) return 2;
        sweep("fashion-mnist", argv[2], b.rows, b.cols, b.data, b.data, b.rows, q.rows, q.data,
              argc - 3, argv + 3);
        return 0;
    }
    if (strcmp(argv[1], "mix10M") == 0) {
        if (argc < 3) return 2;
        double t0 = now();
        float *base = generate("mix", 10000000, 96, 11);
        float *q = generate("mix", 10000, 96, 12);
        float *train = generate("mix", 500000, 96, 13);
        printf("mix10M generated in %.1f s\n", now() - t0);
        if (argc < 3) return 2;
        sweep("mix10M", argv[2], 10000000, 96, base, train, 500000, 10000, q, argc - 3, argv + 3);
        return 0;
    }
    if (strcmp(argv[1], "mix100M") == 0) {
        if (argc < 3) return 2;
        double t0 = now();
        float *base = generate("mix", 100000000, 96, 11);
        float *q = generate("mix", 10000, 96, 12);
        printf("mix100M generated in %.1f s\n", now() - t0);
        sweep("mix100M", argv[2], 100000000, 96, base, base, 2000000, 10000, q, argc - 3, argv + 3);
        return 0;
    }
    if (strcmp(argv[1], "kmeans") == 0) {
        float *x = generate("mix", 1000000, 96, 11);
        float *c = malloc(sizeof(float) * 4096 * 96);
        simil_kmeans_params p;
        simil_kmeans_params_init(&p);
        p.k = 4096;
        p.iterations = 20;
        p.max_points_per_centroid = 0; /* all 1M points, as the Faiss figure */
        p.device = "gpu";
        double obj[20];
        if (simil_kmeans(&p, 1000000, 96, x, c, NULL, obj)) die("kmeans");
        double s[3];
        for (int r = 0; r < 3; r++) {
            double t0 = now();
            if (simil_kmeans(&p, 1000000, 96, x, c, NULL, obj)) die("kmeans");
            s[r] = now() - t0;
        }
        qsort(s, 3, sizeof s[0], cmp_double);
        printf("kmeans 1M x 96, k=4096, 20 iterations on the GPU: %.3f s (median of 3), "
               "objective %.6g -> %.6g\n", s[1], obj[0], obj[19]);
        return 0;
    }
    return 2;
}
