/* bench_gpu_xfbq.c: XFBQ on the GPU against exact search, IVF-Flat and
 * IVF-PQ, for cosine similarity (docs/datasets.md: "mix10M normalized"), as a
 * program (not a test).
 *
 *   bench_gpu_xfbq mix10M|fashion-mnist [PART ...] [--queries N] [--flat-queries N]
 *                  [--extras E,E,...] [--nprobes P,P,...] [--ivf-extras E,E,...]
 *                  [--extra-of range|spread] [--flat-tensor auto|off|both] [--rr]
 *   PART: prep   preprocessing: XFBQ4x3_fp32 add (alpha, quantize, upload) and
 *                IVF4096,XFBQ train + add, against IVF4096,PQ32 train + add
 *         flat   XFBQ4x3_fp32 (re-ranking floats on the GPU) over the extra
 *                distances (--flat-queries of the queries)
 *         ivf    IVF4096,Flat over the nprobes
 *         ivfx   IVF4096,XFBQ4x3 over nprobes x extra distances
 *         host   XFBQ4x3_host (re-ranking floats in pinned host memory) over
 *                the extra distances, as flat
 *         fp16   XFBQ4x3_fp16, flat XFBQ's default (those, and an fp16 copy
 *                on the GPU that picks the candidates to re-rank from them),
 *                as flat
 *   (flat and prep name _fp32, which was plain XFBQ's placement before fp16
 *   became the default, so that their figures stay comparable)
 *   (default: prep, flat, ivf and ivfx; IVF256 in place of IVF4096 for
 *   fashion-mnist)
 *   --extra-of: what the extra distances are fractions of (search parameter
 *   extra_of; default range)
 *   --rr: the flat parts' indexes with the rotation (RR,XFBQ4x3_fp16, ...)
 *   --flat-tensor: where flat XFBQ computes its distances: auto (the default:
 *   integer tensor cores where they take the scan), off (XOR and popcount), or
 *   both, each extra distance timed both ways (sml_cuda_xfbq_tensor)
 *
 * Every search: 10 neighbours, host input and output, one warm-up, then the
 * median of 3.  Precision@10 is |found top 10 n true top 10| / 10 against
 * exact GPU search (Flat, cosine).  Memory per vector is the GPU memory an
 * index took (cudaMemGetInfo before and after), divided by its size.  Each
 * part ends with the fastest setting whose precision is at least 0.99. */
#define _POSIX_C_SOURCE 200809L /* CLOCK_MONOTONIC under -std=c11 (clang) */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/cuda_backend.h"
#include "simil/simil.h"

typedef struct bench {
    const char *name;
    int64_t n, dim, nq, ntrain;
    const float *base, *queries, *train;
    int64_t *truth;  /* nq x 10 */
    int64_t nlist;
    const char *extra_of;  /* search parameter extra_of: "range" or "spread" */
} bench;

enum { K = 10 };

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

static size_t gpu_used(void)
{
    size_t free_bytes = 0, total = 0;
    cudaDeviceSynchronize();
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 0;
    return total - free_bytes;
}

static float *generate(const char *kind, int64_t n, int64_t dim, uint64_t seed)
{
    float *x = malloc(sizeof(float) * (size_t)(n * dim));
    if (!x || simil_generate(kind, 0, n, dim, seed, x)) die("generate");
    return x;
}

/* Median seconds of 3 timed searches after a warm-up; precision@10. */
static double timed_search(const bench *b, const simil_index *index, int64_t nq, int64_t nprobe,
                           float extra, double *precision)
{
    simil_search_params *p = NULL;
    if (simil_search_params_create(&p) ||
        (nprobe > 0 && simil_search_params_set_int(p, "nprobe", nprobe)) ||
        (extra >= 0 && (simil_search_params_set_float(p, "extra_distance", extra) ||
                        simil_search_params_set(p, "extra_of", b->extra_of))))
        die("search parameters");
    float *d = malloc(sizeof(float) * (size_t)(nq * K));
    int64_t *l = malloc(sizeof(int64_t) * (size_t)(nq * K));
    if (simil_index_search(index, nq, b->queries, K, p, d, l)) die("search");
    double s[3];
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        if (simil_index_search(index, nq, b->queries, K, p, d, l)) die("search");
        s[r] = now() - t0;
    }
    qsort(s, 3, sizeof s[0], cmp_double);
    int64_t hits = 0;
    for (int64_t i = 0; i < nq; i++)
        for (int64_t j = 0; j < K; j++)
            for (int64_t t = 0; t < K; t++) hits += l[i * K + j] == b->truth[i * K + t];
    *precision = (double)hits / (double)(nq * K);
    free(d);
    free(l);
    simil_search_params_destroy(p);
    return s[1];
}

/* A GPU index of desc, trained on the training set (if it needs it) and
 * filled; prints the seconds and the GPU bytes per vector. */
static simil_index *build(const bench *b, const char *desc, double *seconds)
{
    simil_index *index;
    const size_t before = gpu_used();
    if (simil_index_create(&index, b->dim, desc, SIMIL_METRIC_COSINE, "gpu")) die("create");
    double t0 = now();
    if (!simil_index_is_trained(index) && simil_index_train(index, b->ntrain, b->train))
        die("train");
    const double train_s = now() - t0;
    t0 = now();
    if (simil_index_add(index, b->n, b->base, NULL)) die("add");
    const double add_s = now() - t0;
    const size_t after = gpu_used();
    printf("%s %s: train %.3f s, add %.3f s (total %.3f s), %.1f GPU bytes per vector, on %s\n",
           b->name, desc, train_s, add_s, train_s + add_s,
           (double)(after - before) / (double)b->n, simil_backend_name(index));
    if (seconds) *seconds = train_s + add_s;
    return index;
}

typedef struct best {
    double qps, precision;
    char setting[64];
} best;

static void report(const bench *b, const char *desc, int64_t nq, int64_t nprobe, float extra,
                   const simil_index *index, best *top)
{
    double precision;
    const double s = timed_search(b, index, nq, nprobe, extra, &precision);
    char setting[64];
    snprintf(setting, sizeof setting, "nprobe=%lld extra=%g%s", (long long)nprobe, (double)extra,
             strcmp(b->extra_of, "spread") == 0 ? " of spread" : "");
    printf("%s %s %s: %.2f ms for %lld queries, %.0f QPS, precision@10 %.4f\n", b->name, desc,
           setting, 1e3 * s, (long long)nq, (double)nq / s, precision);
    fflush(stdout);
    if (precision >= 0.99 && (double)nq / s > top->qps) {
        top->qps = (double)nq / s;
        top->precision = precision;
        snprintf(top->setting, sizeof top->setting, "%s", setting);
    }
}

static void report_best(const bench *b, const char *desc, const best *top)
{
    if (top->qps > 0)
        printf("%s %s: best at precision@10 >= 0.99: %s, %.0f QPS (precision %.4f)\n", b->name,
               desc, top->setting, top->qps, top->precision);
    else
        printf("%s %s: no setting reached precision@10 0.99\n", b->name, desc);
}

/* Comma-separated numbers into out (at most 32). */
static int parse_list(const char *s, double *out)
{
    int n = 0;
    while (s && *s && n < 32) {
        char *end;
        out[n++] = strtod(s, &end);
        s = *end == ',' ? end + 1 : NULL;
    }
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 2 || simil_gpu_count() == 0) {
        fprintf(stderr, "usage: bench_gpu_xfbq mix10M|fashion-mnist [prep] [flat] [ivf] [ivfx] [host] [fp16] "
                        "[--queries N] [--flat-queries N] [--extras E,..] [--nprobes P,..] "
                        "[--ivf-extras E,..] [--extra-of range|spread] "
                        "[--flat-tensor auto|off|both] [--rr]   (needs a GPU)\n");
        return 2;
    }
    bench b = {.name = argv[1], .extra_of = "range"};
    double extras[32] = {0.002, 0.005, 0.01, 0.02}, nprobes[32] = {4, 6, 8, 12, 16};
    double ivf_extras[32] = {0.002, 0.005, 0.01};
    int nextras = 4, nnprobes = 5, nivf_extras = 3;
    int64_t nq_limit = 10000, flat_nq = 10000;
    const char *flat_tensor = "auto";
    int parts = 0, rr = 0;
    for (int a = 2; a < argc; a++) {
        if (strcmp(argv[a], "prep") == 0) parts |= 1;
        else if (strcmp(argv[a], "flat") == 0) parts |= 2;
        else if (strcmp(argv[a], "ivf") == 0) parts |= 4;
        else if (strcmp(argv[a], "ivfx") == 0) parts |= 8;
        else if (strcmp(argv[a], "host") == 0) parts |= 16;
        else if (strcmp(argv[a], "fp16") == 0) parts |= 32;
        else if (a + 1 < argc && strcmp(argv[a], "--queries") == 0) nq_limit = atoll(argv[++a]);
        else if (a + 1 < argc && strcmp(argv[a], "--flat-queries") == 0) flat_nq = atoll(argv[++a]);
        else if (a + 1 < argc && strcmp(argv[a], "--extras") == 0)
            nextras = parse_list(argv[++a], extras);
        else if (a + 1 < argc && strcmp(argv[a], "--nprobes") == 0)
            nnprobes = parse_list(argv[++a], nprobes);
        else if (a + 1 < argc && strcmp(argv[a], "--ivf-extras") == 0)
            nivf_extras = parse_list(argv[++a], ivf_extras);
        else if (a + 1 < argc && strcmp(argv[a], "--extra-of") == 0)
            b.extra_of = argv[++a];
        else if (a + 1 < argc && strcmp(argv[a], "--flat-tensor") == 0)
            flat_tensor = argv[++a];
        else if (strcmp(argv[a], "--rr") == 0)
            rr = 1;
        else {
            fprintf(stderr, "bench_gpu_xfbq: unknown argument '%s'\n", argv[a]);
            return 2;
        }
    }
    if (parts == 0) parts = 15;
    double t0 = now();
    if (strcmp(b.name, "mix10M") == 0) {
        b.n = 10000000;
        b.dim = 96;
        b.nq = 10000;
        b.ntrain = 500000;
        b.base = generate("mix", b.n, b.dim, 11);
        b.queries = generate("mix", b.nq, b.dim, 12);
        b.train = generate("mix", b.ntrain, b.dim, 13);
        b.nlist = 4096;
    } else if (strcmp(b.name, "fashion-mnist") == 0) {
        simil_matrix base, q;
        if (simil_matrix_read_float("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
                                    0, -1, &base) ||
            simil_matrix_read_float("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz",
                                    0, -1, &q))
            die("read");
        b.n = base.rows;
        b.dim = base.cols;
        b.nq = q.rows;
        b.ntrain = base.rows;
        b.base = base.data;
        b.queries = q.data;
        b.train = base.data;
        b.nlist = 256;
    } else {
        fprintf(stderr, "bench_gpu_xfbq: unknown dataset '%s'\n", b.name);
        return 2;
    }
    if (b.nq > nq_limit) b.nq = nq_limit;
    if (flat_nq > b.nq) flat_nq = b.nq;
    printf("%s: %lld x %lld base, %lld queries, cosine, k=%d (data ready in %.1f s)\n", b.name,
           (long long)b.n, (long long)b.dim, (long long)b.nq, K, now() - t0);
    /* ground truth: exact GPU search */
    b.truth = malloc(sizeof(int64_t) * (size_t)(b.nq * K));
    {
        simil_index *flat = build(&b, "Flat", NULL);
        float *d = malloc(sizeof(float) * (size_t)(b.nq * K));
        if (simil_index_search(flat, b.nq, b.queries, K, NULL, d, b.truth)) die("search");
        double s[3];
        for (int r = 0; r < 3; r++) {
            t0 = now();
            if (simil_index_search(flat, b.nq, b.queries, K, NULL, d, b.truth)) die("search");
            s[r] = now() - t0;
        }
        qsort(s, 3, sizeof s[0], cmp_double);
        printf("%s Flat (exact): %.2f ms for %lld queries, %.0f QPS\n", b.name, 1e3 * s[1],
               (long long)b.nq, (double)b.nq / s[1]);
        if (flat_nq < b.nq && (parts & (2 | 16 | 32))) {  /* the flat parts' batch too */
            double precision;
            const double t = timed_search(&b, flat, flat_nq, 0, -1, &precision);
            printf("%s Flat (exact): %.2f ms for %lld queries, %.0f QPS\n", b.name, 1e3 * t,
                   (long long)flat_nq, (double)flat_nq / t);
        }
        free(d);
        simil_index_destroy(flat);
    }
    char ivf_flat[64], ivf_pq[64], ivf_xfbq[64];
    snprintf(ivf_flat, sizeof ivf_flat, "IVF%lld,Flat", (long long)b.nlist);
    snprintf(ivf_pq, sizeof ivf_pq, "IVF%lld,PQ32", (long long)b.nlist);
    snprintf(ivf_xfbq, sizeof ivf_xfbq, "IVF%lld,XFBQ4x3", (long long)b.nlist);
    if (parts & 1) {
        double xs, ps, is;
        simil_index *x = build(&b, "XFBQ4x3_fp32", &xs);
        simil_index_destroy(x);
        x = build(&b, ivf_xfbq, &is);
        simil_index_destroy(x);
        if (b.dim % 32 == 0) {
            x = build(&b, ivf_pq, &ps);
            simil_index_destroy(x);
            printf("%s preprocessing: XFBQ4x3_fp32 %.3f s, %s %.3f s, %s %.3f s (%.1fx XFBQ)\n",
                   b.name, xs, ivf_xfbq, is, ivf_pq, ps, ps / xs);
        }
    }
    static const char *const flat_kinds[] = {"XFBQ4x3_fp32", "XFBQ4x3_host", "XFBQ4x3_fp16"};
    static const int flat_parts[] = {2, 16, 32};
    for (int h = 0; h < 3; h++) {
        if (!(parts & flat_parts[h])) continue;
        char desc[64];
        snprintf(desc, sizeof desc, "%s%s", rr ? "RR," : "", flat_kinds[h]);
        simil_index *x = build(&b, desc, NULL);
        best top = {0};
        bench sub = b;
        sub.nq = flat_nq;
        const int modes[2] = {strcmp(flat_tensor, "off") == 0 ? 0 : -1, 0};
        const int nmodes = strcmp(flat_tensor, "both") == 0 ? 2 : 1;
        for (int e = 0; e < nextras; e++)
            for (int t = 0; t < nmodes; t++) {
                char label[64];
                snprintf(label, sizeof label, "%s (%s)", desc,
                         modes[t] ? "tensor cores where they fit" : "XOR/popcount");
                sml_cuda_xfbq_tensor(modes[t]);
                report(&sub, label, flat_nq, 0, (float)extras[e], x, &top);
            }
        sml_cuda_xfbq_tensor(-1);
        report_best(&sub, desc, &top);
        simil_index_destroy(x);
    }
    if (parts & 4) {
        simil_index *x = build(&b, ivf_flat, NULL);
        best top = {0};
        for (int p = 0; p < nnprobes; p++)
            report(&b, ivf_flat, b.nq, (int64_t)nprobes[p], -1, x, &top);
        report_best(&b, ivf_flat, &top);
        simil_index_destroy(x);
    }
    if (parts & 8) {
        simil_index *x = build(&b, ivf_xfbq, NULL);
        best top = {0};
        for (int p = 0; p < nnprobes; p++)
            for (int e = 0; e < nivf_extras; e++)
                report(&b, ivf_xfbq, b.nq, (int64_t)nprobes[p], (float)ivf_extras[e], x, &top);
        report_best(&b, ivf_xfbq, &top);
        simil_index_destroy(x);
    }
    return 0;
}
