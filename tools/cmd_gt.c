/* tools/cmd_gt.c: "simil gt" computes exact nearest neighbours of queries
 * among every row of a data set that may be larger than memory, streamed in
 * chunks (simil_source_search): the ground truth of a billion-scale run.
 * It prints the time and the rate at which the base went through. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char gt_usage[] =
    "usage: simil gt --data DATA --queries Q -k K --out FILE [OPTIONS]\n"
    "\n"
    "Exact K nearest neighbours of each query among every row of DATA, read in\n"
    "chunks: ground truth for data larger than host or GPU memory.\n"
    "\n"
    "  --data DATA       base vectors: .fvecs .bvecs .npy FILE.hdf5:train, read by\n"
    "                    row ranges, or gen:KIND:ROWS:DIM:SEED (docs/datasets.md),\n"
    "                    which a GPU generates in its own memory\n"
    "  --queries Q       query vectors: a file or gen:KIND:ROWS:DIM:SEED\n"
    "  -k, --k K         neighbours per query\n"
    "  --out FILE        write the ids: .ivecs (int32) or .npy (int64)\n"
    "  --distances FILE  write the distances: .fvecs or .npy (float32)\n"
    "  --metric M        l2 (default), ip or cosine\n"
    "  --device D        auto (default), cpu, gpu or gpu:N\n"
    "  --chunk N         base rows per chunk (default: about 1 GiB of floats)\n"
    "  --threads T       CPU threads (default: all)\n"
    "  --json            print one JSON object on stdout\n";

typedef struct gt_args {
    const char *data, *queries, *out, *dist, *metric, *device;
    int64_t k, chunk, threads;
    int json;
} gt_args;

static void gt_report(const gt_args *a, const simil_source *base, int64_t nq,
                      const simil_stream_stats *st)
{
    const double bytes = 4.0 * (double)simil_source_rows(base) * (double)simil_source_dim(base);
    const double secs = st->seconds > 0 ? st->seconds : 1e-9;
    if (a->json) {
        printf("{\"rows\": %" PRId64 ", \"dim\": %" PRId64 ", \"n_queries\": %" PRId64
               ", \"k\": %" PRId64 ", \"device\": \"%s\", \"seconds\": %.6f, "
               "\"rows_per_second\": %.1f, \"gb_per_second\": %.3f, \"chunks\": %" PRId64
               ", \"read_seconds\": %.6f, \"wait_seconds\": %.6f, \"bytes_uploaded\": %llu, "
               "\"generated_on_device\": %d}\n",
               simil_source_rows(base), simil_source_dim(base), nq, a->k, a->device,
               st->seconds, (double)simil_source_rows(base) / secs, bytes / secs / 1e9,
               st->chunks, st->read_seconds, st->wait_seconds,
               (unsigned long long)st->bytes_uploaded, st->generated_on_device);
        return;
    }
    printf("base: %s (%" PRId64 " x %" PRId64 ")\n", simil_source_name(base),
           simil_source_rows(base), simil_source_dim(base));
    printf("queries: %" PRId64 "  k: %" PRId64 "  device: %s\n", nq, a->k, a->device);
    printf("time: %.3f s  rate: %.1f M rows/s, %.2f GB/s of base vectors\n", st->seconds,
           (double)simil_source_rows(base) / secs / 1e6, bytes / secs / 1e9);
    printf("chunks: %" PRId64 "  reading: %.3f s  waiting for chunks: %.3f s  ", st->chunks,
           st->read_seconds, st->wait_seconds);
    if (st->generated_on_device)
        printf("generated on the GPU\n");
    else
        printf("uploaded: %.2f GB\n", (double)st->bytes_uploaded / 1e9);
}

static int gt_run(const gt_args *a, simil_metric metric)
{
    simil_source *base = NULL;
    simil_matrix q = {0, 0, SIMIL_DTYPE_FLOAT32, NULL};
    simil_status st = simil_source_open(&base, a->data);
    int rc = st == SIMIL_OK ? CLI_EXIT_OK : cli_fail(st, a->data);
    if (!rc) rc = cli_read_source(a->queries, &q);
    if (!rc && q.cols != simil_source_dim(base))
        rc = cli_error("%s has dimension %" PRId64 ", %s %" PRId64, a->queries, q.cols, a->data,
                       simil_source_dim(base));
    if (!rc && (uint64_t)q.rows > SIZE_MAX / sizeof(int64_t) / (uint64_t)a->k)
        rc = cli_error("%" PRId64 " x %" PRId64 " results do not fit in memory", q.rows, a->k);
    const size_t cells = rc ? 0 : (size_t)q.rows * (size_t)a->k + 1;
    float *dist = rc ? NULL : malloc(cells * sizeof *dist);
    int64_t *labels = rc ? NULL : malloc(cells * sizeof *labels);
    if (!rc && (!dist || !labels)) rc = cli_error("out of memory for %zu results", cells - 1);
    simil_stream_params p;
    simil_stream_params_init(&p);
    p.device = a->device;
    p.chunk_rows = a->chunk;
    p.threads = (int)a->threads;
    simil_stream_stats stats;
    if (!rc) {
        st = simil_source_search(base, metric, q.rows, q.data, a->k, &p, dist, labels, &stats);
        if (st != SIMIL_OK) rc = cli_fail(st, NULL);
    }
    simil_matrix ids = {q.rows, a->k, SIMIL_DTYPE_INT64, labels};
    simil_matrix d = {q.rows, a->k, SIMIL_DTYPE_FLOAT32, dist};
    if (!rc && (st = simil_matrix_write(a->out, &ids)) != SIMIL_OK) rc = cli_fail(st, a->out);
    if (!rc && a->dist && (st = simil_matrix_write(a->dist, &d)) != SIMIL_OK)
        rc = cli_fail(st, a->dist);
    if (!rc) gt_report(a, base, q.rows, &stats);
    free(dist);
    free(labels);
    free(q.data);
    simil_source_close(base);
    return rc;
}

int cmd_gt(int argc, char **argv)
{
    static const char *const id_formats[] = {".ivecs", ".npy", NULL};
    static const char *const dist_formats[] = {".fvecs", ".npy", NULL};
    gt_args a = {NULL, NULL, NULL, NULL, "l2", "auto", 0, 0, 0, 0};
    const cli_opt opts[] = {
        {"data", 0, CLI_STRING, &a.data, 1, 0, 0},
        {"queries", 0, CLI_STRING, &a.queries, 1, 0, 0},
        {"k", 'k', CLI_INT, &a.k, 1, 1, INT64_C(1) << 20},
        {"out", 'o', CLI_STRING, &a.out, 1, 0, 0},
        {"distances", 0, CLI_STRING, &a.dist, 0, 0, 0},
        {"metric", 0, CLI_STRING, &a.metric, 0, 0, 0},
        {"device", 0, CLI_STRING, &a.device, 0, 0, 0},
        {"chunk", 0, CLI_INT, &a.chunk, 0, 1, INT64_C(1) << 40},
        {"threads", 't', CLI_INT, &a.threads, 0, 1, 4096},
        {"json", 0, CLI_FLAG, &a.json, 0, 0, 0},
        {NULL, 0, CLI_FLAG, NULL, 0, 0, 0},
    };
    simil_metric metric;
    int rc;
    if (!cli_parse(argc, argv, opts, gt_usage, NULL, 0, &rc)) return rc;
    if (simil_metric_parse(a.metric, &metric) != SIMIL_OK)
        return cli_usage_error("--metric: '%s' is not l2, ip or cosine", a.metric);
    if (!cli_check_device("--device", a.device) || !cli_check_suffix("--out", a.out, id_formats) ||
        (a.dist && !cli_check_suffix("--distances", a.dist, dist_formats)))
        return CLI_EXIT_USAGE;
    cli_progress_install(0);
    return gt_run(&a, metric);
}
