/* tools/cmd_knn_graph.c: "simil knn-graph" builds the k-NN graph of a vector
 * file, streaming the data from disk in chunks and the graph to disk, and
 * prints the build and search times and, if asked, the graph's quality. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char knn_graph_usage[] =
    "usage: simil knn-graph --data FILE -k K --index DESC --out GRAPH [OPTIONS]\n"
    "\n"
    "Build the k-nearest-neighbour graph of the vectors of FILE; each vector is\n"
    "left out of its own list.  Two methods:\n"
    "  join    the vectors are clustered into the lists of DESC (IVF4096,Flat) and\n"
    "          each list is compared with the lists that are among the --nprobe\n"
    "          nearest of any of its vectors, as dense blocks; with Flat, every\n"
    "          vector with every vector (the exact graph).  Each vector meets all\n"
    "          of its own --nprobe nearest lists, so the quality is at least that\n"
    "          of search with the same DESC and --nprobe.  Flat or IVF<n>,Flat on\n"
    "          one device.\n"
    "  search  every vector is searched against an index of all of them (any DESC,\n"
    "          any devices), as the GPU paper does\n"
    "\n"
    "  --data FILE      vectors: .fvecs .bvecs .ivecs .npy, idx[.gz], FILE.hdf5:NAME;\n"
    "                   read in chunks of --batch rows (a gzipped idx file is\n"
    "                   decompressed again for each chunk: convert big ones first)\n"
    "  -k K             neighbours per vector\n"
    "  --index DESC     Flat (exact graph) or an approximate index: IVF4096,Flat, ...\n"
    "  --out GRAPH      the graph, named by its suffix:\n"
    "                     NAME.ivecs  ids (int32) to NAME.ivecs, distances to NAME.fvecs\n"
    "                     NAME.npy    ids (int64) to NAME.npy, distances (float32)\n"
    "                                 to NAME-distances.npy\n"
    "                   row i lists the K nearest other vectors of vector i, nearest\n"
    "                   first; L2 distances are squared, ip and cosine give\n"
    "                   similarities; empty slots have id -1\n"
    "  --param NAME=VALUE  a search parameter (below); repeatable\n"
    "  --nprobe N       the same as --param nprobe=N\n"
    "  --method M       auto (default: join where it applies, else search), join\n"
    "                   or search\n"
    "  --metric M       l2 (default), ip or cosine\n"
    "  --device D       auto (default), cpu, gpu or gpu:N\n"
    "  --batch B        queries per search call, rows per chunk read (default 200000)\n"
    "  --max-train N    train on a random sample of at most N vectors (default 500000)\n"
    "  --threads T      the same as --param threads=T\n"
    "  --quality        measure the quality: the fraction of each vector's first 10\n"
    "                   neighbours that are among its exact 10, averaged over\n"
    "                   10,000 sampled vectors (the GPU paper's measure)\n"
    "  --sample S       vectors sampled by --quality (default 10000)\n"
    "  --seed S         seed of the training and quality samples (default 1234)\n"
    "\n"
    "The index (join: the vectors) must fit in the memory of its device (GPU\n"
    "memory with a GPU); the data need not fit in host memory: it is read once per\n"
    "stage, --batch rows at a time.\n";

typedef struct knn_graph_args {
    const char *data, *desc, *out, *metric, *device, *method, *nprobe, *threads;
    int64_t k, batch, max_train, sample, seed;
    int quality;
    cli_list param;
    cli_params params;  /* from param, nprobe and threads */
} knn_graph_args;

/* The distances file that goes with the ids file out (see the usage). */
static int knn_graph_distances_path(const char *out, char *buf, size_t size)
{
    size_t n = strlen(out);
    int w;
    if (n >= 6 && !strcmp(out + n - 6, ".ivecs"))
        w = snprintf(buf, size, "%.*s.fvecs", (int)(n - 6), out);
    else
        w = snprintf(buf, size, "%.*s-distances.npy", (int)(n - 4), out);
    return w > 0 && (size_t)w < size;
}

static void knn_graph_report(const knn_graph_args *a, int64_t n, int64_t dim,
                             const simil_knn_graph_stats *s, const char *dist_path)
{
    double build = s->train_seconds + s->add_seconds;
    printf("knn-graph: n=%" PRId64 " dim=%" PRId64 " k=%" PRId64 ", %s", n, dim, a->k, s->index);
    for (int i = 0; i < a->params.ngiven; i++) {
        char value[64];
        simil_search_params_get(a->params.params, a->params.given[i], value, sizeof value);
        printf(" %s=%s", a->params.given[i], value);
    }
    printf(", %s, metric %s, on %s\n", s->method, a->metric, s->backend);
    printf("build %.3f s (train %.3f s, add %.3f s), %s %.3f s, total %.3f s\n", build,
           s->train_seconds, s->add_seconds, s->method, s->search_seconds,
           build + s->search_seconds);
    if (s->pairs > 0)
        printf("%.4g distances computed, %.2f%% of all pairs\n", s->pairs,
               100.0 * s->pairs / ((double)n * (double)n));
    if (a->quality)
        printf("quality %.4f (10-intersection over %" PRId64 " sampled vectors, %.3f s)\n",
               s->quality, n < a->sample ? n : a->sample, s->quality_seconds);
    printf("wrote %s (ids) and %s (distances)\n", a->out, dist_path);
}

static int knn_graph_run(const knn_graph_args *a, simil_metric metric,
                         simil_knn_graph_method method)
{
    char dist_path[4096];
    int64_t n = 0, dim = 0;
    simil_status st = simil_matrix_info(a->data, &n, &dim, NULL);
    if (st != SIMIL_OK) return cli_fail(st, a->data);
    if (!knn_graph_distances_path(a->out, dist_path, sizeof dist_path))
        return cli_usage_error("--out: '%s' is too long", a->out);
    simil_knn_graph_params p;
    simil_knn_graph_params_init(&p);
    p.method = method;
    p.index = a->desc;
    p.metric = metric;
    p.device = a->device;
    p.search = a->params.params;
    p.batch = a->batch;
    p.max_train = a->max_train;
    p.quality = a->quality;
    p.quality_sample = a->sample;
    p.seed = (uint64_t)a->seed;
    simil_knn_graph_stats stats;
    st = simil_knn_graph_file(&p, a->data, a->k, a->out, dist_path, &stats);
    if (st != SIMIL_OK) return cli_fail(st, a->data);
    knn_graph_report(a, n, dim, &stats, dist_path);
    return CLI_EXIT_OK;
}

int cmd_knn_graph(int argc, char **argv)
{
    knn_graph_args a = {.metric = "l2", .device = "auto", .method = "auto", .batch = 200000,
                        .max_train = 500000, .sample = 10000, .seed = 1234};
    const cli_opt opts[] = {
        {"data", 0, CLI_STRING, &a.data, 1, 0, 0},
        {"k", 'k', CLI_INT, &a.k, 1, 1, INT32_MAX - 1},
        {"index", 0, CLI_STRING, &a.desc, 1, 0, 0},
        {"out", 'o', CLI_STRING, &a.out, 1, 0, 0},
        {"param", 0, CLI_LIST, &a.param, 0, 0, 0},
        {"nprobe", 0, CLI_STRING, &a.nprobe, 0, 0, 0},
        {"metric", 0, CLI_STRING, &a.metric, 0, 0, 0},
        {"method", 0, CLI_STRING, &a.method, 0, 0, 0},
        {"device", 0, CLI_STRING, &a.device, 0, 0, 0},
        {"batch", 0, CLI_INT, &a.batch, 0, 1, INT32_MAX},
        {"max-train", 0, CLI_INT, &a.max_train, 0, 1, INT64_MAX},
        {"threads", 0, CLI_STRING, &a.threads, 0, 0, 0},
        {"quality", 0, CLI_FLAG, &a.quality, 0, 0, 0},
        {"sample", 0, CLI_INT, &a.sample, 0, 1, INT32_MAX},
        {"seed", 0, CLI_INT, &a.seed, 0, 0, INT64_MAX},
        {NULL, 0, CLI_FLAG, NULL, 0, 0, 0},
    };
    static const char *const out_suffixes[] = {".ivecs", ".npy", NULL};
    simil_metric metric;
    char usage[8192];
    int rc;
    cli_params_usage(knn_graph_usage, usage, sizeof usage);
    if (!cli_parse(argc, argv, opts, usage, NULL, 0, &rc)) return rc;
    if (simil_metric_parse(a.metric, &metric) != SIMIL_OK)
        return cli_usage_error("--metric: '%s' is not l2, ip or cosine", a.metric);
    simil_knn_graph_method method;
    if (!strcmp(a.method, "auto"))
        method = SIMIL_KNN_GRAPH_AUTO;
    else if (!strcmp(a.method, "join"))
        method = SIMIL_KNN_GRAPH_JOIN;
    else if (!strcmp(a.method, "search"))
        method = SIMIL_KNN_GRAPH_SEARCH;
    else
        return cli_usage_error("--method: '%s' is not auto, join or search", a.method);
    if (!cli_check_device("--device", a.device)) return CLI_EXIT_USAGE;
    if (!cli_check_suffix("--out", a.out, out_suffixes)) return CLI_EXIT_USAGE;
    if ((rc = cli_params_init(&a.params))) return rc;
    if ((a.nprobe && !cli_params_set(&a.params, "--nprobe", "nprobe", a.nprobe)) ||
        (a.threads && !cli_params_set(&a.params, "--threads", "threads", a.threads)) ||
        !cli_params_set_all(&a.params, "--param", &a.param)) {
        rc = CLI_EXIT_USAGE;
    } else {
        cli_progress_install(0);
        rc = knn_graph_run(&a, metric, method);
    }
    cli_params_free(&a.params);
    return rc;
}
