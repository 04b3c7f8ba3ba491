/* bench_gpu_multi.c: one index over several GPUs, as a program (not a test).
 *
 *   bench_gpu_multi uniform1M|mix10M DESC [NPROBE [PARTS]]
 *
 * Builds the index on GPU 0, then replicated over PARTS GPUs ("gpu:0,1/r2")
 * and sharded over them ("gpu:0,1"), and reports the median of 3 searches of
 * the 10,000 queries for each, with the speed-up over one GPU and the share
 * of ids equal to the one-GPU results.  PARTS is the number of GPUs unless
 * given; with more parts than GPUs, parts share GPUs round-robin and the
 * speed-ups measure only what the multi-GPU layer costs.  Two more rows:
 * the bound that batch size sets (one GPU searching 1/PARTS of the queries:
 * no split of the queries can beat that time), and the ceiling for
 * replication (one separate index per part, each searching its share of the
 * queries from its own thread, with no simil code between them). */
#define _POSIX_C_SOURCE 200809L /* CLOCK_MONOTONIC under -std=c11 (clang) */
#include <pthread.h>
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

static double timed(const simil_index *index, int64_t nq, const float *q, int64_t k,
                    const simil_search_params *p, float *d, int64_t *l)
{
    if (simil_index_search(index, nq, q, k, p, d, l)) die("search");
    double s[3];
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        if (simil_index_search(index, nq, q, k, p, d, l)) die("search");
        s[r] = now() - t0;
    }
    qsort(s, 3, sizeof s[0], cmp_double);
    return s[1];
}

typedef struct share {
    simil_index *index;
    int64_t nq, k;
    const float *q;
    const simil_search_params *p;
    float *d;
    int64_t *l;
    int failed;
} share;

static void *search_share(void *arg)
{
    share *s = arg;
    s->failed = simil_index_search(s->index, s->nq, s->q, s->k, s->p, s->d, s->l) != SIMIL_OK;
    return NULL;
}

/* Median of 3 (after a warm-up) of all parts searching their shares at once. */
static double timed_independent(simil_index **indexes, int parts, int64_t nq, int64_t dim,
                                const float *q, int64_t k, const simil_search_params *p,
                                float *d, int64_t *l)
{
    double s[3];
    for (int r = -1; r < 3; r++) {
        share shares[16];
        pthread_t threads[16];
        double t0 = now();
        for (int g = 0; g < parts; g++) {
            const int64_t lo = nq * g / parts, hi = nq * (g + 1) / parts;
            shares[g] = (share){indexes[g], hi - lo, k, q + lo * dim, p, d + lo * k, l + lo * k, 0};
            if (pthread_create(&threads[g], NULL, search_share, &shares[g])) die("pthread_create");
        }
        for (int g = 0; g < parts; g++) {
            pthread_join(threads[g], NULL);
            if (shares[g].failed) die("search");
        }
        if (r >= 0) s[r] = now() - t0;
    }
    qsort(s, 3, sizeof s[0], cmp_double);
    return s[1];
}

int main(int argc, char **argv)
{
    const int gpus = simil_gpu_count();
    const int parts = argc > 4 ? atoi(argv[4]) : gpus > 2 ? gpus : 2;
    if (argc < 3 || gpus < 1 || parts < 2 || parts > 16) {
        fprintf(stderr, "usage: bench_gpu_multi uniform1M|mix10M DESC [NPROBE [PARTS]] "
                        "(needs GPUs; PARTS 2..16, default: the number of GPUs, at least 2)\n");
        return 2;
    }
    const int mix = strcmp(argv[1], "mix10M") == 0;
    const int64_t n = mix ? 10000000 : 1000000, dim = mix ? 96 : 128, nq = 10000, k = 10;
    float *x = malloc(sizeof(float) * (size_t)(n * dim)), *q = malloc(sizeof(float) * (size_t)(nq * dim));
    float *t = mix ? malloc(sizeof(float) * 500000 * 96) : NULL;
    if (!x || !q || simil_generate(mix ? "mix" : "uniform", 0, n, dim, mix ? 11 : 1, x) ||
        simil_generate(mix ? "mix" : "uniform", 0, nq, dim, mix ? 12 : 2, q) ||
        (mix && simil_generate("mix", 0, 500000, 96, 13, t)))
        die("generate");
    /* part i on GPU i % gpus: "gpu:0,1", or "gpu:0,0" on one GPU */
    char sharded[96] = "gpu:", replicated[112];
    for (int i = 0; i < parts; i++)
        snprintf(sharded + strlen(sharded), sizeof sharded - strlen(sharded), "%s%d",
                 i ? "," : "", i % gpus);
    snprintf(replicated, sizeof replicated, "%s/r%d", sharded, parts);
    const char *devices[3] = {"gpu:0", replicated, sharded};
    simil_search_params *p = NULL;
    const long long nprobe = argc > 3 ? atoll(argv[3]) : 1;
    if (simil_search_params_create(&p) || simil_search_params_set_int(p, "nprobe", nprobe))
        die("nprobe");
    float *d = malloc(sizeof(float) * (size_t)(nq * k));
    int64_t *l = malloc(sizeof(int64_t) * (size_t)(nq * k)), *ref = malloc(sizeof(int64_t) * (size_t)(nq * k));
    double base = 0;
    printf("%s %s, %d GPU(s), %d part(s)%s, nprobe=%lld\n", argv[1], argv[2], gpus, parts,
           parts > gpus ? " sharing GPUs: speed-ups show the multi-GPU layer's cost only" : "",
           nprobe);
    simil_index *one = NULL;
    for (int i = 0; i < 3; i++) {
        simil_index *index;
        double t0 = now();
        if (simil_index_create(&index, dim, argv[2], SIMIL_METRIC_L2, devices[i])) die("create");
        if (simil_index_train(index, mix ? 500000 : n, mix ? t : x)) die("train");
        if (simil_index_add(index, n, x, NULL)) die("add");
        double build = now() - t0;
        double s = timed(index, nq, q, k, p, d, l);
        if (i == 0) {
            base = s;
            memcpy(ref, l, sizeof(int64_t) * (size_t)(nq * k));
        }
        int64_t same = 0;
        for (int64_t j = 0; j < nq * k; j++) same += l[j] == ref[j];
        printf("%-16s %-28s build %.2f s, search %.2f ms, %.0f QPS, speed-up %.2fx, "
               "same ids as one GPU %.4f\n",
               devices[i], simil_index_description(index), build, 1e3 * s, nq / s, base / s,
               (double)same / (double)(nq * k));
        if (i == 0) one = index;
        else simil_index_destroy(index);
    }
    /* the batch-size bound: one part's share of the queries on one GPU */
    const int64_t share = (nq + parts - 1) / parts;
    double s = timed(one, share, q, k, p, d, l);
    printf("%-16s %-28s %lld queries on one GPU: search %.2f ms, bound on the speed-up %.2fx\n",
           "batch bound", argv[2], (long long)share, 1e3 * s, base / s);
    simil_index_destroy(one);
    /* the ceiling: independent indexes, one per part */
    simil_index *indexes[16];
    for (int g = 0; g < parts; g++) {
        char device[16];
        snprintf(device, sizeof device, "gpu:%d", g % gpus);
        if (simil_index_create(&indexes[g], dim, argv[2], SIMIL_METRIC_L2, device)) die("create");
        if (simil_index_train(indexes[g], mix ? 500000 : n, mix ? t : x)) die("train");
        if (simil_index_add(indexes[g], n, x, NULL)) die("add");
    }
    s = timed_independent(indexes, parts, nq, dim, q, k, p, d, l);
    printf("%-16s %-28s %d separate indexes, one thread each: search %.2f ms, %.0f QPS, "
           "speed-up %.2fx\n", "ceiling", argv[2], parts, 1e3 * s, nq / s, base / s);
    for (int g = 0; g < parts; g++) simil_index_destroy(indexes[g]);
    free(x);
    free(q);
    free(t);
    free(d);
    free(l);
    free(ref);
    simil_search_params_destroy(p);
    return 0;
}
