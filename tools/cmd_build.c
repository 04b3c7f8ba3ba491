/* tools/cmd_build.c: "simil build" creates an index from a description,
 * trains it (on --train or on the data), adds the data and saves the index,
 * then prints a one-line summary with the timings on stderr. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char build_usage[] =
    "usage: simil build --data FILE --index DESC --out INDEX [OPTIONS]\n"
    "\n"
    "Build an index over the vectors of FILE and save it to INDEX.\n"
    "\n"
    "  --data FILE      vectors to add: .fvecs .bvecs .ivecs .npy, idx[.gz],\n"
    "                   or FILE.hdf5[:train] (an ann-benchmarks file: its train set)\n"
    "  --index DESC     index description: Flat, IVF4096,Flat, IVF4096,PQ32,\n"
    "                   OPQ32,IVF4096,PQ32, XFBQ, IVF1024,XFBQ, SQ8, SQfp16,\n"
    "                   IVF4096,SQ8, ...\n"
    "  --out INDEX      index file to write\n"
    "  --format F       simil (default) or faiss: a Faiss index file that\n"
    "                   faiss.read_index() loads (Flat, IVFn,Flat, IVFn,PQm[xb],\n"
    "                   OPQm,...); checked before training\n"
    "  --metric M       l2, ip or cosine.  Default: the metric an ann-benchmarks\n"
    "                   file declares (euclidean: l2, angular: cosine), else l2;\n"
    "                   a --metric that contradicts the file gets a warning\n"
    "  --train FILE     training vectors (default: the data itself)\n"
    "  --max-train N    train on at most the first N training vectors\n"
    "  --device D       auto (default), cpu, gpu, gpu:N, gpus, gpu:0,1, cpu:N\n"
    "                   (several devices shard the index; /rR adds R replicas)\n"
    "  --part I/N       add only part I (0-based) of N equal parts of the data, with\n"
    "                   their row numbers as ids: a shard for 'search --distributed'.\n"
    "                   Every part trains on the same vectors, so IVF parts share\n"
    "                   their quantizer when built on the same kind of device\n"
    "  --progress       report progress on stderr even when it is not a terminal:\n"
    "                   a line every 10 s and one at the end of each stage\n"
    "                   (training: kmeans, train OPQ, train PQ; then add).  On a\n"
    "                   terminal the progress line is always shown\n";

typedef struct build_args {
    const char *data, *desc, *out, *format, *metric, *train, *device, *part;
    int64_t max_train;
    int64_t part_index, parts;
    int progress;
    char paths[2][4096]; /* FILE.hdf5:train for --data and --train */
} build_args;

/* Train the index unless it needs none; *seconds gets the time taken. */
static int build_train(simil_index *index, const build_args *a, const simil_matrix *data,
                       double *seconds)
{
    simil_matrix own = {0, 0, SIMIL_DTYPE_FLOAT32, NULL};
    const simil_matrix *t = data;
    int64_t n = data->rows;
    *seconds = 0;
    if (simil_index_is_trained(index)) return CLI_EXIT_OK;
    if (a->train) {
        int rc = cli_read_float(a->train, 0, a->max_train > 0 ? a->max_train : -1, &own);
        if (rc) return rc;
        if (own.cols != data->cols) {
            int64_t cols = own.cols;
            simil_matrix_free(&own);
            return cli_error("%s has dimension %" PRId64 ", %s has %" PRId64, a->train, cols,
                             a->data, data->cols);
        }
        t = &own;
        n = own.rows;
    } else if (a->max_train > 0 && a->max_train < n) {
        n = a->max_train;
    }
    double t0 = cli_now();
    simil_status st = simil_index_train(index, n, t->data);
    *seconds = cli_now() - t0;
    simil_matrix_free(&own);
    return st == SIMIL_OK ? CLI_EXIT_OK : cli_fail(st, NULL);
}

static int build_run(const build_args *a, simil_metric metric)
{
    simil_matrix data = {0, 0, SIMIL_DTYPE_FLOAT32, NULL};
    simil_index *index = NULL;
    double train_s = 0, add_s = 0;
    simil_status st;
    int rc = cli_read_float(a->data, 0, -1, &data);
    if (rc) return rc;
    st = simil_index_create(&index, data.cols, a->desc, metric, a->device);
    if (st != SIMIL_OK) rc = cli_fail(st, NULL);
    /* before the training, which can take long: can Faiss hold it at all? */
    if (!rc && !strcmp(a->format, "faiss") && (st = simil_index_check_faiss(index)) != SIMIL_OK)
        rc = cli_fail(st, NULL);
    if (!rc) rc = build_train(index, a, &data, &train_s);
    if (!rc) {
        /* the whole data, or one part of it with global row numbers as ids */
        const int64_t lo = data.rows * a->part_index / a->parts;
        const int64_t hi = data.rows * (a->part_index + 1) / a->parts;
        int64_t *ids = a->parts > 1 ? malloc(sizeof *ids * (size_t)(hi - lo + 1)) : NULL;
        if (a->parts > 1 && ids == NULL) rc = cli_error("out of memory for ids");
        for (int64_t i = lo; ids && i < hi; i++) ids[i - lo] = i;
        double t0 = cli_now();
        if (!rc) {
            st = simil_index_add(index, hi - lo, (const float *)data.data + lo * data.cols, ids);
            if (st != SIMIL_OK) rc = cli_fail(st, NULL);
        }
        add_s = cli_now() - t0;
        free(ids);
    }
    if (!rc) {
        const int faiss = strcmp(a->format, "faiss") == 0;
        st = faiss ? simil_index_save_faiss(index, a->out) : simil_index_save(index, a->out);
        if (st != SIMIL_OK) rc = cli_fail(st, a->out);
    }
    if (!rc)
        fprintf(stderr,
                "%s: n=%" PRId64 " dim=%" PRId64 " train %.3f s, add %.3f s, backend %s\n",
                simil_index_description(index), simil_index_size(index), data.cols, train_s,
                add_s, simil_backend_name(index));
    simil_index_destroy(index);
    simil_matrix_free(&data);
    return rc;
}

int cmd_build(int argc, char **argv)
{
    build_args a = {.format = "simil", .device = "auto", .parts = 1};
    const cli_opt opts[] = {
        {"data", 0, CLI_STRING, &a.data, 1, 0, 0},
        {"index", 0, CLI_STRING, &a.desc, 1, 0, 0},
        {"out", 'o', CLI_STRING, &a.out, 1, 0, 0},
        {"format", 0, CLI_STRING, &a.format, 0, 0, 0},
        {"metric", 0, CLI_STRING, &a.metric, 0, 0, 0},
        {"train", 0, CLI_STRING, &a.train, 0, 0, 0},
        {"max-train", 0, CLI_INT, &a.max_train, 0, 1, INT64_MAX},
        {"device", 0, CLI_STRING, &a.device, 0, 0, 0},
        {"part", 0, CLI_STRING, &a.part, 0, 0, 0},
        {"progress", 0, CLI_FLAG, &a.progress, 0, 0, 0},
        {NULL, 0, CLI_FLAG, NULL, 0, 0, 0},
    };
    simil_metric metric;
    int rc;
    if (!cli_parse(argc, argv, opts, build_usage, NULL, 0, &rc)) return rc;
    a.data = cli_ann_dataset(a.data, "train", a.paths[0], sizeof a.paths[0]);
    a.train = cli_ann_dataset(a.train, "train", a.paths[1], sizeof a.paths[1]);
    if (!cli_check_device("--device", a.device)) return CLI_EXIT_USAGE;
    if (strcmp(a.format, "simil") != 0 && strcmp(a.format, "faiss") != 0)
        return cli_usage_error("--format: '%s' is not simil or faiss", a.format);
    if (a.part) {
        char tail;
        long long i, n;
        if (sscanf(a.part, "%lld/%lld%c", &i, &n, &tail) != 2 || n < 1 || i < 0 || i >= n)
            return cli_usage_error("--part: write I/N with 0 <= I < N, e.g. 0/4, got '%s'",
                                   a.part);
        a.part_index = i;
        a.parts = n;
    }
    if ((rc = cli_resolve_metric(a.metric, a.data, &metric))) return rc;
    cli_progress_install(a.progress);
    return build_run(&a, metric);
}
