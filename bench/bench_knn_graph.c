/* bench_knn_graph.c: k-NN graph construction (k=10) on the workloads of
 * docs/datasets.md, as a program (not a test): build, search and total seconds,
 * the GPU paper's quality (10-intersection over 10,000 sampled nodes), the
 * distances computed, and on a GPU the exact search's fp32 fallbacks.
 *
 *   bench_knn_graph fashion-mnist [--index DESC] [--nprobe 1,2,4] ...
 *       the exact graph (Flat), then DESC (default IVF256,Flat) at each nprobe
 *   bench_knn_graph mix10M [--index DESC] [--nprobe 1,2,3] [--n N] ...
 *       mix(N, 96, seed 11), N = 10,000,000 by default; DESC defaults to
 *       IVF4096,Flat (the Faiss anchor of docs/datasets.md, "Anchors", which
 *       is the per-query search)
 *   common options: --device D, --method auto|join|search (default auto: the
 *       list join for Flat and IVF<n>,Flat), --batch B (rows per chunk,
 *       default 200,000), --no-exact (skip the Flat graph), --threads T,
 *       --max-train M (default 500,000)
 *
 * Everything is end to end from host memory, as in the Faiss reference: the
 * index or the lists are built (trained on a seeded sample, filled) and every
 * vector's neighbours found; each row of the table is a fresh build.  A
 * small graph is built first to warm the device up. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_backend.h"
#include "simil/simil.h"

#define FASHION_TRAIN "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"

static void die(const char *what)
{
    fprintf(stderr, "bench_knn_graph: %s: %s\n", what, simil_last_error());
    exit(1);
}

typedef struct bench_args {
    const char *dataset, *device, *index, *nprobe, *method;
    int64_t n, batch, threads, max_train;
    int exact;
} bench_args;

static void usage(void)
{
    fprintf(stderr, "usage: bench_knn_graph fashion-mnist|mix10M [--device D] [--index DESC]\n"
                    "       [--method auto|join|search] [--nprobe N,N,...] [--n N] [--batch B]\n"
                    "       [--threads T] [--max-train M] [--no-exact]\n");
    exit(2);
}

static void parse(int argc, char **argv, bench_args *a)
{
    if (argc < 2) usage();
    a->dataset = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--no-exact")) {
            a->exact = 0;
            continue;
        }
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (!strcmp(o, "--device")) a->device = v;
        else if (!strcmp(o, "--index")) a->index = v;
        else if (!strcmp(o, "--nprobe")) a->nprobe = v;
        else if (!strcmp(o, "--n")) a->n = atoll(v);
        else if (!strcmp(o, "--batch")) a->batch = atoll(v);
        else if (!strcmp(o, "--threads")) a->threads = atoll(v);
        else if (!strcmp(o, "--method")) a->method = v;
        else if (!strcmp(o, "--max-train")) a->max_train = atoll(v);
        else usage();
    }
}

static float *load_fashion(int64_t *n, int64_t *dim)
{
    simil_matrix m;
    if (simil_matrix_read_float(FASHION_TRAIN, 0, -1, &m)) die(FASHION_TRAIN);
    *n = m.rows;
    *dim = m.cols;
    float *x = malloc(sizeof(float) * (size_t)(m.rows * m.cols));
    if (!x) die("out of memory");
    memcpy(x, m.data, sizeof(float) * (size_t)(m.rows * m.cols));
    simil_matrix_free(&m);
    return x;
}

static float *generate_mix(int64_t n, int64_t dim)
{
    float *x = malloc(sizeof(float) * (size_t)(n * dim));
    if (!x) die("out of memory for the data");
    for (int64_t first = 0; first < n; first += 1000000) {
        int64_t count = n - first < 1000000 ? n - first : 1000000;
        if (simil_generate("mix", first, count, dim, 11, x + first * dim)) die("generate");
    }
    return x;
}

static simil_knn_graph_method method_of(const char *name)
{
    if (!strcmp(name, "join")) return SIMIL_KNN_GRAPH_JOIN;
    if (!strcmp(name, "search")) return SIMIL_KNN_GRAPH_SEARCH;
    if (strcmp(name, "auto")) usage();
    return SIMIL_KNN_GRAPH_AUTO;
}

/* One graph build, one table row. */
static void run_graph(const bench_args *a, const char *index, int64_t nprobe, int64_t n,
                      int64_t dim, const float *x, int64_t *ids, float *dist)
{
    simil_knn_graph_params p;
    simil_knn_graph_stats s;
    simil_search_params *search = NULL;
    simil_knn_graph_params_init(&p);
    if (simil_search_params_create(&search) ||
        (nprobe > 0 && simil_search_params_set_int(search, "nprobe", nprobe)) ||
        (a->threads && simil_search_params_set_int(search, "threads", a->threads)))
        die("search parameters");
    p.method = method_of(a->method);
    p.index = index;
    p.device = a->device;
    p.search = search;
    p.batch = a->batch;
    p.max_train = a->max_train;
    p.quality = 1;
    long long fallback = sml_cuda_fallback_queries();
    if (simil_knn_graph(&p, n, dim, x, 10, ids, dist, &s)) die(index);
    simil_search_params_destroy(search);
    fallback = sml_cuda_fallback_queries() - fallback;
    double build = s.train_seconds + s.add_seconds;
    printf("%-13s %-6s %-13s %6" PRId64 " %7.2f %7.2f %7.2f %7.2f %7.2f %8.4f %7.2f %9.3g %9lld"
           "  %s\n",
           a->dataset, s.method, s.index, nprobe, s.train_seconds, s.add_seconds, build,
           s.search_seconds, build + s.search_seconds, s.quality, s.quality_seconds,
           s.pairs / ((double)n * (double)n), fallback, s.backend);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    bench_args a = {NULL, "auto", NULL, NULL, "auto", 0, 200000, 0, 500000, 1};
    parse(argc, argv, &a);
    int fashion = !strcmp(a.dataset, "fashion-mnist");
    if (!fashion && strcmp(a.dataset, "mix10M")) usage();
    if (!a.index) a.index = fashion ? "IVF256,Flat" : "IVF4096,Flat";
    if (!a.nprobe) a.nprobe = fashion ? "1,2,4" : "1,2,3";
    int64_t n, dim = 96;
    float *x;
    if (fashion) {
        x = load_fashion(&n, &dim);
        if (a.n > 0 && a.n < n) n = a.n;
    } else {
        n = a.n > 0 ? a.n : 10000000;
        x = generate_mix(n, dim);
    }
    int64_t *ids = malloc(sizeof *ids * (size_t)(n * 10));
    float *dist = malloc(sizeof *dist * (size_t)(n * 10));
    if (!ids || !dist) die("out of memory for the graph");
    /* warm-up: initializes the device and the thread pools */
    simil_knn_graph_params w;
    simil_knn_graph_params_init(&w);
    w.device = a.device;
    if (simil_knn_graph(&w, n < 2000 ? n : 2000, dim, x, 10, ids, dist, NULL)) die("warm-up");
    printf("k-NN graph, k=10, n=%" PRId64 ", dim=%" PRId64 ", batch %" PRId64
           "; seconds; quality = 10-intersection over 10,000 sampled nodes;\n"
           "pairs = distances computed / n^2 (join); fp32 = GPU exact-search queries redone "
           "in fp32\n",
           n, dim, a.batch);
    printf("%-13s %-6s %-13s %6s %7s %7s %7s %7s %7s %8s %7s %9s %9s  %s\n", "data", "method",
           "index", "nprobe", "train", "add", "build", "search", "total", "quality", "qual_s",
           "pairs", "fp32", "backend");
    /* nprobe 0: the exact graph has none to set */
    if (fashion && a.exact) run_graph(&a, "Flat", 0, n, dim, x, ids, dist);
    char list[256];
    snprintf(list, sizeof list, "%s", a.nprobe);
    for (char *t = strtok(list, ","); t; t = strtok(NULL, ","))
        run_graph(&a, a.index, atoll(t), n, dim, x, ids, dist);
    free(dist);
    free(ids);
    free(x);
    return 0;
}
