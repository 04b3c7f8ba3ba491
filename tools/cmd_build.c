/* tools/cmd_build.c: "simil build" creates an index from a description,
 * trains it (on --train, or on a sample of the data), adds the data and saves
 * the index, then prints a one-line summary with the timings on stderr.  The
 * data is read chunk by chunk (simil/stream.h), so it may be larger than
 * memory: a file read by row ranges, or a generator. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char build_usage[] =
    "usage: simil build --data DATA --index DESC --out INDEX [OPTIONS]\n"
    "\n"
    "Build an index over the vectors of DATA and save it to INDEX.\n"
    "\n"
    "  --data DATA        vectors to add: .fvecs .bvecs .ivecs .npy, idx[.gz],\n"
    "                     FILE.hdf5[:train] (an ann-benchmarks file: its train\n"
    "                     set), or a generator of docs/datasets.md,\n"
    "                     gen:KIND:ROWS:DIM:SEED (e.g. gen:mix:1000000000:96:11);\n"
    "                     read in chunks, so it may be larger than memory\n"
    "  --index DESC       index description: Flat, IVF4096,Flat, IVF4096,PQ32,\n"
    "                     OPQ32,IVF4096,PQ32, XFBQ (on a GPU: re-ranking floats\n"
    "                     in host memory, an fp16 copy of them on the GPU),\n"
    "                     XFBQ_host (the floats in host memory alone),\n"
    "                     XFBQ_fp32 (the floats on the GPU), IVF1024,XFBQ,\n"
    "                     RR,XFBQ (codes of randomly rotated vectors),\n"
    "                     SQ8, SQfp16, IVF4096,SQ8, ...\n"
    "  --out INDEX        index file to write\n"
    "  --format F         simil (default) or faiss: a Faiss index file that\n"
    "                     faiss.read_index() loads (Flat, IVFn,Flat, IVFn,PQm[xb],\n"
    "                     OPQm,...); checked before training\n"
    "  --metric M         l2, ip or cosine.  Default: the metric an ann-benchmarks\n"
    "                     file declares (euclidean: l2, angular: cosine), else l2;\n"
    "                     a --metric that contradicts the file gets a warning\n"
    "  --train FILE       training vectors (default: a sample of the data)\n"
    "  --max-train N      train on the first N training vectors (or data rows)\n"
    "  --train-sample N   train on N data rows, 256 evenly spaced runs (default:\n"
    "                     100,000, or 64 per list for inverted files of more\n"
    "                     than 1,562 lists)\n"
    "  --chunk N          rows read and added at a time (default 1,048,576). Host\n"
    "                     memory: two chunks of floats, plus for IVF-PQ m + 12\n"
    "                     bytes a row (staged codes and lists, and the ids),\n"
    "                     docs/billion-scale.md. Progress shows the rate and the\n"
    "                     time left (in a log with --progress, every 10 s)\n"
    "  --device D         auto (default), cpu, gpu, gpu:N, gpus, gpu:0,1, cpu:N\n"
    "                     (several devices shard the index; /rR adds R replicas)\n"
    "  --part I/N         add only part I (0-based) of N equal parts of the data, with\n"
    "                     their row numbers as ids: a shard for 'search --distributed'.\n"
    "                     Every part trains on the same vectors, so IVF parts share\n"
    "                     their quantizer when built on the same kind of device\n"
    "  --progress         report progress on stderr even when it is not a terminal:\n"
    "                     a line every 10 s and one at the end of each stage\n"
    "                     (training: kmeans, train OPQ, train PQ; then add).  On a\n"
    "                     terminal the progress line is always shown\n";

typedef struct build_args {
    const char *data, *desc, *out, *format, *metric, *train, *device, *part;
    int64_t max_train, train_sample, chunk;
    int64_t part_index, parts;
    int progress;
    char paths[2][4096]; /* FILE.hdf5:train for --data and --train */
} build_args;

/* Train from --train (all of it, or its first --max-train rows), the data's
 * first --max-train rows, or a sample of the data. */
static int build_train(simil_index *index, const build_args *a, const simil_source *data)
{
    simil_source *own = NULL, *first = NULL;
    const simil_source *t = data;
    int64_t sample = a->train_sample;
    simil_status st = SIMIL_OK;
    if (simil_index_is_trained(index)) return CLI_EXIT_OK;
    if (a->train) {
        st = simil_source_open(&own, a->train);
        if (st != SIMIL_OK) return cli_fail(st, a->train);
        if (simil_source_dim(own) != simil_source_dim(data)) {
            int rc = cli_error("%s has dimension %" PRId64 ", %s has %" PRId64, a->train,
                               simil_source_dim(own), a->data, simil_source_dim(data));
            simil_source_close(own);
            return rc;
        }
        t = own;
        sample = simil_source_rows(own);
    }
    if (a->max_train > 0) {
        int64_t n = a->max_train < simil_source_rows(t) ? a->max_train : simil_source_rows(t);
        st = simil_source_slice(&first, t, 0, n);
        t = first;
        sample = n;
    }
    if (st == SIMIL_OK) st = simil_index_train_source(index, t, sample);
    simil_source_close(first);
    simil_source_close(own);
    return st == SIMIL_OK ? CLI_EXIT_OK : cli_fail(st, a->train);
}

/* Add the data, or its part --part with global row numbers as ids. */
static int build_add(simil_index *index, const build_args *a, const simil_source *data)
{
    const int64_t rows = simil_source_rows(data);
    const int64_t lo = rows * a->part_index / a->parts;
    const int64_t hi = rows * (a->part_index + 1) / a->parts;
    simil_stream_params p;
    simil_stream_params_init(&p);
    p.chunk_rows = a->chunk;
    simil_source *part = NULL;
    simil_status st = SIMIL_OK;
    if (a->parts > 1) {
        st = simil_source_slice(&part, data, lo, hi - lo);
        p.first_id = lo;
    }
    if (st == SIMIL_OK) st = simil_index_add_source(index, part ? part : data, &p);
    simil_source_close(part);
    return st == SIMIL_OK ? CLI_EXIT_OK : cli_fail(st, a->data);
}

static int build_run(const build_args *a, simil_metric metric)
{
    simil_source *data = NULL;
    simil_index *index = NULL;
    double train_s = 0, add_s = 0;
    simil_status st = simil_source_open(&data, a->data);
    int rc = st == SIMIL_OK ? CLI_EXIT_OK : cli_fail(st, a->data);
    if (!rc) {
        st = simil_index_create(&index, simil_source_dim(data), a->desc, metric, a->device);
        if (st != SIMIL_OK) rc = cli_fail(st, NULL);
    }
    /* before the training, which can take long: can Faiss hold it at all? */
    if (!rc && !strcmp(a->format, "faiss") && (st = simil_index_check_faiss(index)) != SIMIL_OK)
        rc = cli_fail(st, NULL);
    double t0 = cli_now();
    if (!rc) rc = build_train(index, a, data);
    train_s = cli_now() - t0;
    t0 = cli_now();
    if (!rc) rc = build_add(index, a, data);
    add_s = cli_now() - t0;
    if (!rc) {
        const int faiss = strcmp(a->format, "faiss") == 0;
        st = faiss ? simil_index_save_faiss(index, a->out) : simil_index_save(index, a->out);
        if (st != SIMIL_OK) rc = cli_fail(st, a->out);
    }
    if (!rc) {
        fprintf(stderr,
                "%s: n=%" PRId64 " dim=%" PRId64 " train %.3f s, add %.3f s, backend %s",
                simil_index_description(index), simil_index_size(index),
                simil_source_dim(data), train_s, add_s, simil_backend_name(index));
        const double peak = cli_peak_memory();
        if (peak > 0) fprintf(stderr, ", peak host memory %.2f GiB", peak / 1073741824.0);
        fputc('\n', stderr);
    }
    simil_index_destroy(index);
    simil_source_close(data);
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
        {"train-sample", 0, CLI_INT, &a.train_sample, 0, 1, INT64_MAX},
        {"chunk", 0, CLI_INT, &a.chunk, 0, 1, INT64_C(1) << 40},
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
