/* tools/cmd_search.c: "simil search" loads an index, times the search of a
 * query file (the median of --repeat runs) with the search parameters given
 * (--param, --nprobe, --threads, --allow), writes the ids and distances if
 * asked, and measures recall against ground truth; with --radius, a range
 * search instead.  Output is a few lines for people, or one JSON object with
 * --json. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#ifdef SIMIL_HAVE_MPI
#include "simil/dist.h"
#endif

static const char search_usage[] =
    "usage: simil search --index INDEX --queries FILE (-k K | --radius R) [OPTIONS]\n"
    "\n"
    "Search the K nearest neighbours of each query, or all neighbours within a\n"
    "radius; report time, QPS and recall.\n"
    "\n"
    "  --index INDEX      index file written by 'simil build'\n"
    "  --queries FILE     query vectors (.fvecs .bvecs .npy idx[.gz] FILE.hdf5:test)\n"
    "  --queries FILE     ... or an ann-benchmarks FILE.hdf5: its test dataset\n"
    "  -k, --k K          neighbours per query\n"
    "  --radius R         range search instead: every neighbour at squared L2\n"
    "                     distance < R (IP, cosine: similarity > R); --out then\n"
    "                     writes one row per result, (query, id), and\n"
    "                     --distances one distance per row\n"
    "  --allow FILE       return only these ids (.ivecs or .npy of int32 or int64\n"
    "                     ids, any order and shape)\n"
    "  --param NAME=VALUE set a search parameter (below); repeatable, and one\n"
    "                     --param may hold several: nprobe=16,threads=4.  A\n"
    "                     parameter the index does not use is ignored, with a\n"
    "                     warning\n"
    "  --nprobe N         the same as --param nprobe=N; unset, the index's own\n"
    "                     default (simil info shows it; a Faiss file's nprobe)\n"
    "  --gt FILE          true neighbour ids (.ivecs, .npy, FILE.hdf5[:neighbors]):\n"
    "                     report 1-recall@1, 1-recall@K and recall K@K\n"
    "  --data BASE        the vectors the index holds (row i has id i), to count\n"
    "                     recall by distance as ann-benchmarks does: a result\n"
    "                     counts when within 1e-3 of the true distance, so ties\n"
    "                     count.  Default with an ann-benchmarks --gt: its train\n"
    "                     dataset and its true distances.  Without: by id\n"
    "  --out FILE         write the ids found: .ivecs (int32) or .npy (int64)\n"
    "  --distances FILE   write the distances: .fvecs or .npy (float32)\n"
    "  --threads T        the same as --param threads=T\n"
    "  --device D         auto (default), cpu, gpu or gpu:N\n"
    "  --repeat R         run the search R times and report the median time\n"
    "  --json             print one JSON object on stdout\n"
    "  --distributed      under mpirun: every rank loads its shard (\"{rank}\" in INDEX\n"
    "                     becomes the rank number), rank 0 reads the queries and\n"
    "                     reports; needs a build with MPI (docs/distributed.md)\n";

typedef struct search_args {
    const char *index, *queries, *gt, *data, *out, *dist, *device, *nprobe, *threads, *allow,
        *radius;
    float r;  /* --radius, parsed */
    int64_t k, repeat;
    int json, distributed;
    cli_list param;
    cli_params params;   /* from param, nprobe and threads */
    char paths[3][4096]; /* FILE.hdf5:test, :neighbors, :train */
} search_args;

typedef struct search_result {
    int64_t nq;
    double seconds;
    cli_recall_result recall;
    int have_recall;
} search_result;

/* Searches finished by search_time: in a distributed search, rank 0 tells
 * the other ranks to stop when it fails before finishing them all. */
static int64_t searches_done;

/* Run the search a->repeat times; r->seconds gets the median. */
static int search_time(const search_args *a, const simil_index *index, const simil_matrix *q,
                       float *dist, int64_t *labels, search_result *r)
{
    const simil_search_params *params = a->params.params;
    double *times = malloc((size_t)a->repeat * sizeof *times);
    if (!times) return cli_error("out of memory");
    for (int64_t i = 0; i < a->repeat; i++) {
        double t0 = cli_now();
#ifdef SIMIL_HAVE_MPI
        simil_status st = a->distributed ? simil_dist_search(index, q->rows, q->data, a->k,
                                                             params, dist, labels)
                                         : simil_index_search(index, q->rows, q->data, a->k,
                                                              params, dist, labels);
#else
        simil_status st =
            simil_index_search(index, q->rows, q->data, a->k, params, dist, labels);
#endif
        times[i] = cli_now() - t0;
        if (st != SIMIL_OK) {
            free(times);
            return cli_fail(st, NULL);
        }
        searches_done++;
    }
    r->seconds = cli_median(times, (int)a->repeat);
    free(times);
    return CLI_EXIT_OK;
}

static int search_write(const search_args *a, int64_t nq, float *dist, int64_t *labels)
{
    simil_matrix ids = {nq, a->k, SIMIL_DTYPE_INT64, labels};
    simil_matrix d = {nq, a->k, SIMIL_DTYPE_FLOAT32, dist};
    simil_status st;
    if (a->out && (st = simil_matrix_write(a->out, &ids)) != SIMIL_OK)
        return cli_fail(st, a->out);
    if (a->dist && (st = simil_matrix_write(a->dist, &d)) != SIMIL_OK)
        return cli_fail(st, a->dist);
    return CLI_EXIT_OK;
}

static void search_report(const search_args *a, const simil_index *index, const search_result *r)
{
    double qps = r->seconds > 0 ? (double)r->nq / r->seconds : 0.0;
    if (a->json) {
        putchar('{');
        cli_json_string(stdout, "index", simil_index_description(index), ", ");
        cli_json_string(stdout, "backend", simil_backend_name(index), ", ");
        printf("\"n_queries\": %" PRId64 ", \"k\": %" PRId64 ", ", r->nq, a->k);
        cli_params_print_json(&a->params);
        if (r->have_recall)
            printf("\"one_recall_at_1\": %.6f, \"one_recall_at_k\": %.6f, "
                   "\"recall_k_at_k\": %.6f, \"recall_by\": \"%s\", ",
                   r->recall.one_at_1, r->recall.one_at_k, r->recall.k_at_k,
                   r->recall.by_distance ? "distance" : "id");
        printf("\"seconds\": %.9f, \"qps\": %.1f}\n", r->seconds, qps);
        return;
    }
    printf("index: %s\n", simil_index_description(index));
    printf("backend: %s\n", simil_backend_name(index));
    printf("queries: %" PRId64 "  k: %" PRId64, r->nq, a->k);
    cli_params_print_text(&a->params);
    printf("\ntime: %.3f s", r->seconds);
    if (a->repeat > 1) printf(" (median of %" PRId64 ")", a->repeat);
    printf("  QPS: %.0f\n", qps);
    if (r->have_recall)
        printf("1-recall@1: %.4f  1-recall@%" PRId64 ": %.4f  recall %" PRId64 "@%" PRId64
               ": %.4f  (by %s)\n",
               r->recall.one_at_1, a->k, r->recall.one_at_k, a->k, a->k, r->recall.k_at_k,
               r->recall.by_distance ? "distance" : "id");
}

/* Recall of the ids found against the ground truth: by distance when the
 * true distances and the base vectors are known, else by id. */
static int search_recall(const search_args *a, const simil_index *index, const simil_matrix *q,
                         cli_truth *truth, const int64_t *labels, search_result *r)
{
    simil_metric metric = simil_index_metric(index);
    simil_matrix base = {0, 0, SIMIL_DTYPE_FLOAT32, NULL};
    double *found = NULL;
    const char *data = a->data ? a->data : truth->distances && *a->paths[2] ? a->paths[2] : NULL;
    int rc = data ? cli_read_float(data, 0, -1, &base) : CLI_EXIT_OK;
    if (!rc && data && base.cols != q->cols)
        rc = cli_error("%s has dimension %" PRId64 ", the queries %" PRId64, data, base.cols,
                       q->cols);
    if (!rc && data) rc = cli_truth_distances(truth, metric, &base, q);
    if (!rc && data && !(found = malloc((size_t)(q->rows * a->k) * sizeof *found + 1)))
        rc = cli_error("out of memory for the distances of the results");
    if (!rc && found) cli_exact_distances(metric, &base, q, a->k, labels, found);
    if (!rc && cli_recall(q->rows, a->k, labels, found, truth, &r->recall))
        rc = cli_error("out of memory computing recall");
    r->have_recall = !rc;
    free(found);
    simil_matrix_free(&base);
    return rc;
}

static int search_run(const search_args *a, simil_index *index, const simil_matrix *q)
{
    search_result r = {q->rows, 0, {0, 0, 0, 0}, 0};
    cli_truth truth = {0, 0, NULL, NULL};
    int64_t *labels = NULL;
    float *dist = NULL;
    int rc = CLI_EXIT_OK;
    if (q->cols != simil_index_dim(index))
        return cli_error("%s has dimension %" PRId64 ", the index %" PRId64, a->queries,
                         q->cols, simil_index_dim(index));
    if (a->gt && (rc = cli_truth_read(a->gt, q->rows, a->k, simil_index_metric(index), &truth)))
        return rc;
    if ((uint64_t)q->rows > SIZE_MAX / sizeof(int64_t) / (uint64_t)a->k) {
        cli_truth_free(&truth);
        return cli_error("%" PRId64 " x %" PRId64 " results do not fit in memory", q->rows, a->k);
    }
    size_t cells = (size_t)q->rows * (size_t)a->k + 1;
    labels = malloc(cells * sizeof *labels);
    dist = malloc(cells * sizeof *dist);
    if (!labels || !dist) rc = cli_error("out of memory for %zu results", cells - 1);
    if (!rc) rc = search_time(a, index, q, dist, labels, &r);
    if (!rc) rc = search_write(a, q->rows, dist, labels);
    if (!rc && a->gt) rc = search_recall(a, index, q, &truth, labels, &r);
    if (!rc) search_report(a, index, &r);
    cli_truth_free(&truth);
    free(labels);
    free(dist);
    return rc;
}

/* A whole ann-benchmarks file stands for its test queries and neighbors;
 * with such ground truth, its train dataset holds the base vectors. */
static void search_ann_paths(search_args *a)
{
    a->queries = cli_ann_dataset(a->queries, "test", a->paths[0], sizeof a->paths[0]);
    a->gt = cli_ann_dataset(a->gt, "neighbors", a->paths[1], sizeof a->paths[1]);
    const char *colon = a->gt ? strrchr(a->gt, ':') : NULL;
    if (colon && !strcmp(colon, ":neighbors"))
        snprintf(a->paths[2], sizeof a->paths[2], "%.*s:train", (int)(colon - a->gt), a->gt);
}

static int id_order(const void *x, const void *y)
{
    const int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* --allow: the ids of the file, sorted and without repeats, as the filter. */
static int search_allow(const search_args *a)
{
    simil_matrix m = {0, 0, SIMIL_DTYPE_INT32, NULL};
    simil_status st = simil_matrix_read(a->allow, 0, -1, &m);
    if (st != SIMIL_OK) return cli_fail(st, a->allow);
    int rc = CLI_EXIT_OK;
    const int64_t n = m.rows * m.cols;
    int64_t *ids = NULL, unique = 0;
    if (m.dtype != SIMIL_DTYPE_INT32 && m.dtype != SIMIL_DTYPE_INT64)
        rc = cli_error("%s: --allow takes int32 or int64 ids", a->allow);
    else if (!(ids = malloc(((size_t)n + 1) * sizeof *ids)))
        rc = cli_error("out of memory for %" PRId64 " allowed ids", n);
    for (int64_t i = 0; !rc && i < n; i++) {
        ids[i] = m.dtype == SIMIL_DTYPE_INT64 ? ((const int64_t *)m.data)[i]
                                              : ((const int32_t *)m.data)[i];
        if (ids[i] < 0) rc = cli_error("%s: id %" PRId64 " is negative", a->allow, ids[i]);
    }
    if (!rc) {
        qsort(ids, (size_t)n, sizeof *ids, id_order);
        for (int64_t i = 0; i < n; i++)
            if (unique == 0 || ids[unique - 1] != ids[i]) ids[unique++] = ids[i];
        st = simil_search_params_allow_ids(a->params.params, unique, ids);
        if (st != SIMIL_OK) rc = cli_fail(st, a->allow);
    }
    free(ids);
    simil_matrix_free(&m);
    return rc;
}

/* --out and --distances of a range search: a row per result. */
static int range_write(const search_args *a, const simil_range_result *r)
{
    const int64_t total = r->offsets[r->nq];
    int64_t *pairs = malloc(((size_t)total + 1) * 2 * sizeof *pairs);
    if (!pairs) return cli_error("out of memory for %" PRId64 " results", total);
    for (int64_t q = 0; q < r->nq; q++)
        for (int64_t j = r->offsets[q]; j < r->offsets[q + 1]; j++) {
            pairs[2 * j] = q;
            pairs[2 * j + 1] = r->labels[j];
        }
    simil_matrix ids = {total, 2, SIMIL_DTYPE_INT64, pairs};
    simil_matrix d = {total, 1, SIMIL_DTYPE_FLOAT32, r->distances};
    simil_status st = SIMIL_OK;
    int rc = CLI_EXIT_OK;
    if (a->out && (st = simil_matrix_write(a->out, &ids)) != SIMIL_OK) rc = cli_fail(st, a->out);
    if (!rc && a->dist && (st = simil_matrix_write(a->dist, &d)) != SIMIL_OK)
        rc = cli_fail(st, a->dist);
    free(pairs);
    return rc;
}

/* --radius: time the range search (median of --repeat), write, report. */
static int range_run(const search_args *a, const simil_index *index, const simil_matrix *q)
{
    if (q->cols != simil_index_dim(index))
        return cli_error("%s has dimension %" PRId64 ", the index %" PRId64, a->queries,
                         q->cols, simil_index_dim(index));
    double *times = malloc((size_t)a->repeat * sizeof *times);
    if (!times) return cli_error("out of memory");
    simil_range_result *r = NULL;
    int rc = CLI_EXIT_OK;
    for (int64_t i = 0; !rc && i < a->repeat; i++) {
        simil_range_result_destroy(r);
        r = NULL;
        const double t0 = cli_now();
        simil_status st = simil_index_range_search(index, q->rows, q->data, a->r,
                                                   a->params.params, &r);
        times[i] = cli_now() - t0;
        if (st != SIMIL_OK) rc = cli_fail(st, NULL);
    }
    if (!rc) rc = range_write(a, r);
    if (!rc) {
        const double seconds = cli_median(times, (int)a->repeat);
        const double qps = seconds > 0 ? (double)q->rows / seconds : 0.0;
        const int64_t total = r->offsets[r->nq];
        if (a->json) {
            putchar('{');
            cli_json_string(stdout, "index", simil_index_description(index), ", ");
            cli_json_string(stdout, "backend", simil_backend_name(index), ", ");
            printf("\"n_queries\": %" PRId64 ", \"radius\": %g, \"results\": %" PRId64 ", ",
                   q->rows, (double)a->r, total);
            cli_params_print_json(&a->params);
            printf("\"seconds\": %.9f, \"qps\": %.1f}\n", seconds, qps);
        } else {
            printf("index: %s\nbackend: %s\n", simil_index_description(index),
                   simil_backend_name(index));
            printf("queries: %" PRId64 "  radius: %g", q->rows, (double)a->r);
            cli_params_print_text(&a->params);
            printf("\nresults: %" PRId64 " (%.2f per query)\ntime: %.3f s", total,
                   q->rows ? (double)total / (double)q->rows : 0.0, seconds);
            if (a->repeat > 1) printf(" (median of %" PRId64 ")", a->repeat);
            printf("  QPS: %.0f\n", qps);
        }
    }
    simil_range_result_destroy(r);
    free(times);
    return rc;
}

#ifdef SIMIL_HAVE_MPI
/* INDEX with "{rank}" replaced by the rank number. */
static void search_shard_path(const char *pattern, int rank, char *out, size_t size)
{
    const char *at = strstr(pattern, "{rank}");
    if (at == NULL) {
        snprintf(out, size, "%s", pattern);
        return;
    }
    snprintf(out, size, "%.*s%d%s", (int)(at - pattern), pattern, rank, at + 6);
}

/* Failure on this rank, or a peer's failure: say which, return 1. */
static int search_dist_failed(simil_status local, simil_status agreed, const char *path)
{
    if (local != SIMIL_OK) return cli_fail(local, path);
    return cli_error("%s", simil_dist_last_error());
    (void)agreed;
}

/* Every rank: load its shard; rank 0 reads the queries and reports, the
 * others join each collective search.  Each step is agreed on by all ranks
 * (simil_dist_agree), so a failure anywhere stops every rank cleanly. */
static int search_distributed(const search_args *a, int argc, char **argv)
{
    int rank, ranks, rc = CLI_EXIT_OK;
    simil_status st = simil_dist_begin(&argc, &argv, &rank, &ranks);
    if (st != SIMIL_OK) return cli_error("%s", simil_dist_last_error());
    char path[4096];
    search_shard_path(a->index, rank, path, sizeof path);
    simil_index *index = NULL;
    simil_matrix q = {0, 0, SIMIL_DTYPE_FLOAT32, NULL};
    st = simil_index_load(&index, path, a->device);
    simil_status agreed = simil_dist_agree(st, "loading the shards");
    if (agreed != SIMIL_OK) rc = search_dist_failed(st, agreed, path);
    if (!rc && rank == 0) cli_params_warn_unused(&a->params, index);
    if (!rc && rank == 0) {
        st = cli_read_float(a->queries, 0, -1, &q) ? SIMIL_ERR_IO : SIMIL_OK;
        if (st == SIMIL_OK && q.cols != simil_index_dim(index))
            st = cli_error("%s has dimension %" PRId64 ", the index %" PRId64, a->queries,
                           q.cols, simil_index_dim(index)) ? SIMIL_ERR_INVALID_ARGUMENT
                                                           : SIMIL_OK;
    }
    if (!rc) {
        agreed = simil_dist_agree(rank == 0 ? st : SIMIL_OK, "reading the queries");
        if (agreed != SIMIL_OK) rc = rank == 0 ? CLI_EXIT_FAIL : search_dist_failed(SIMIL_OK, agreed, NULL);
    }
    if (!rc && rank == 0) {
        rc = search_run(a, index, &q);
        if (rc && searches_done < a->repeat) /* the others wait in a search: release them */
            simil_dist_search(index, -1, NULL, 0, NULL, NULL, NULL);
    } else if (!rc) {
        for (int64_t i = 0; i < a->repeat && !rc; i++)
            if ((st = simil_dist_search(index, 0, NULL, 0, a->params.params, NULL, NULL)) !=
                SIMIL_OK)
                rc = search_dist_failed(st == SIMIL_ERR_REMOTE ? SIMIL_OK : st, st, NULL);
    }
    simil_matrix_free(&q);
    simil_index_destroy(index);
    simil_dist_end();
    return rc;
}
#endif

int cmd_search(int argc, char **argv)
{
    static const char *const id_formats[] = {".ivecs", ".npy", NULL};
    static const char *const dist_formats[] = {".fvecs", ".npy", NULL};
    search_args a = {.device = "auto", .repeat = 1};
    const cli_opt opts[] = {
        {"index", 0, CLI_STRING, &a.index, 1, 0, 0},
        {"queries", 0, CLI_STRING, &a.queries, 1, 0, 0},
        {"k", 'k', CLI_INT, &a.k, 0, 1, INT64_C(1) << 20},
        {"radius", 0, CLI_STRING, &a.radius, 0, 0, 0},
        {"allow", 0, CLI_STRING, &a.allow, 0, 0, 0},
        {"param", 0, CLI_LIST, &a.param, 0, 0, 0},
        {"nprobe", 0, CLI_STRING, &a.nprobe, 0, 0, 0},
        {"gt", 0, CLI_STRING, &a.gt, 0, 0, 0},
        {"data", 0, CLI_STRING, &a.data, 0, 0, 0},
        {"out", 'o', CLI_STRING, &a.out, 0, 0, 0},
        {"distances", 0, CLI_STRING, &a.dist, 0, 0, 0},
        {"threads", 't', CLI_STRING, &a.threads, 0, 0, 0},
        {"device", 0, CLI_STRING, &a.device, 0, 0, 0},
        {"repeat", 0, CLI_INT, &a.repeat, 0, 1, 100000},
        {"json", 0, CLI_FLAG, &a.json, 0, 0, 0},
        {"distributed", 0, CLI_FLAG, &a.distributed, 0, 0, 0},
        {NULL, 0, CLI_FLAG, NULL, 0, 0, 0},
    };
    simil_matrix q = {0, 0, SIMIL_DTYPE_FLOAT32, NULL};
    simil_index *index = NULL;
    simil_status st;
    char usage[8192];
    int rc;
    cli_params_usage(search_usage, usage, sizeof usage);
    if (!cli_parse(argc, argv, opts, usage, NULL, 0, &rc)) return rc;
    if (!cli_check_device("--device", a.device) ||
        (a.out && !cli_check_suffix("--out", a.out, id_formats)) ||
        (a.dist && !cli_check_suffix("--distances", a.dist, dist_formats)) ||
        (a.allow && !cli_check_suffix("--allow", a.allow, id_formats)))
        return CLI_EXIT_USAGE;
    if ((a.k > 0) == (a.radius != NULL))
        return cli_usage_error("give either -k K or --radius R%s",
                               a.k > 0 ? ", not both" : " (see --help)");
    if (a.radius) {
        char *end;
        a.r = strtof(a.radius, &end);
        if (*a.radius == '\0' || *end != '\0' || !isfinite(a.r))
            return cli_usage_error("--radius: '%s' is not a finite number", a.radius);
        if (a.gt || a.data || a.distributed)
            return cli_usage_error("--radius: %s is for k-NN searches",
                                   a.gt ? "--gt" : a.data ? "--data" : "--distributed");
    }
    if ((rc = cli_params_init(&a.params))) return rc;
    if (a.allow && (rc = search_allow(&a))) {
        cli_params_free(&a.params);
        return rc;
    }
    if ((a.nprobe && !cli_params_set(&a.params, "--nprobe", "nprobe", a.nprobe)) ||
        (a.threads && !cli_params_set(&a.params, "--threads", "threads", a.threads)) ||
        !cli_params_set_all(&a.params, "--param", &a.param)) {
        cli_params_free(&a.params);
        return CLI_EXIT_USAGE;
    }
    search_ann_paths(&a);
    if (a.distributed) {
#ifdef SIMIL_HAVE_MPI
        rc = search_distributed(&a, argc, argv);
#else
        rc = cli_error("--distributed: this simil was built without MPI; install "
                       "libopenmpi-dev and rebuild");
#endif
        cli_params_free(&a.params);
        return rc;
    }
    cli_progress_install(0);
    if ((st = simil_index_load(&index, a.index, a.device)) != SIMIL_OK) {
        cli_params_free(&a.params);
        return cli_fail(st, a.index);
    }
    cli_params_warn_unused(&a.params, index);
    cli_check_metric(a.queries, simil_index_metric(index));
    rc = cli_read_float(a.queries, 0, -1, &q);
    if (!rc) rc = a.radius ? range_run(&a, index, &q) : search_run(&a, index, &q);
    simil_matrix_free(&q);
    simil_index_destroy(index);
    cli_params_free(&a.params);
    return rc;
}
