/* tools/cmd_bench.c: "simil bench", recall-QPS sweeps in the manner of
 * ann-benchmarks.  For each index description: build it (train, add), then
 * search the queries at every point of the sweep, in batch and/or
 * single-query mode (bench_measure.c: a warm-up, then the fastest of N
 * runs), and measure recall against ground truth (given, or computed once
 * with Flat and cached in the output folder).  The results go to a table on
 * stdout and, through bench_report.c and bench_plot.c, to results.csv,
 * results.json and plot.png; the vectors and the ground truth come from
 * bench_data.c.
 *
 * Nothing here knows an index type: an index that the library does not build
 * (SIMIL_ERR_UNSUPPORTED) is skipped, and a sweep parameter applies to the
 * indexes its row of bench_params says it does. */
#define _XOPEN_SOURCE 700

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

static const char bench_usage[] =
    "usage: simil bench (--data BASE --queries Q | --data FILE.hdf5 | --dataset NAME)\n"
    "                   --index DESC [--index DESC ...] --out DIR [OPTIONS]\n"
    "\n"
    "Build each index, search the queries at every point of the sweep, and\n"
    "report QPS and recall: a table on stdout, and in DIR results.csv,\n"
    "results.json and plot.png (recall against QPS, drawn by gnuplot).\n"
    "\n"
    "  --data BASE       base vectors (.fvecs .bvecs .npy idx[.gz] FILE.hdf5:train);\n"
    "                    an ann-benchmarks FILE.hdf5 alone means its train, test\n"
    "                    and neighbors datasets\n"
    "  --queries Q       query vectors\n"
    "  --dataset NAME    fashion-mnist (from /usr/share/datasets/fashion-mnist/),\n"
    "                    or uniform1M, uniform10M, mix10M, generated as in\n"
    "                    docs/datasets.md (mix10M trains on mix(500000, 96, seed 13))\n"
    "  --gt FILE         true neighbour ids (.ivecs .npy FILE.hdf5:neighbors);\n"
    "                    default: exact search with Flat, cached in\n"
    "                    DIR/gt-DATASET-METRIC-kK.ivecs and reused while its shape fits\n"
    "  --train FILE      training vectors (default: the dataset's, else the base)\n"
    "  --index DESC      index description, e.g. Flat or IVF1024,Flat; repeatable.\n"
    "                    One the library does not build is skipped with a message\n"
    "  --sweep NAME=V,V,... values of a search parameter (below) to try, e.g.\n"
    "                    nprobe=1,2,4,8 or lut=fp32,fp16; repeatable: every\n"
    "                    combination runs, the last --sweep varying fastest.  An\n"
    "                    index that does not use NAME runs once for it\n"
    "  --param NAME=VALUE a search parameter for every point; repeatable\n"
    "  -k, --k K         neighbours per query (default 10)\n"
    "  --metric M        l2, ip or cosine.  Default: the metric an ann-benchmarks\n"
    "                    file declares (euclidean: l2, angular: cosine), else l2;\n"
    "                    a --metric that contradicts the file gets a warning\n"
    "  --device D        auto (default), cpu, gpu or gpu:N\n"
    "  --threads T       CPU threads for searching (default: all)\n"
    "  --anchors FILE    CSV of label,recall,qps points to draw for comparison\n"
    "  --out DIR         output folder, created if missing\n"
    "  --mode M          batch (default): all queries in one call; single: one\n"
    "                    call per query, with latency percentiles; or both\n"
    "  --runs N          timed passes over the queries per point (default 3); QPS\n"
    "                    is that of the fastest, as in ann-benchmarks\n"
    "\n"
    "Each point is timed as one warm-up pass, then N passes over all queries;\n"
    "qps counts the fastest.  build_seconds is train + add; index_bytes is the\n"
    "memory the build took: growth of the resident set, plus of GPU memory in use.\n"
    "Exit status: 0 if every index ran or was skipped as not built (and at least\n"
    "one ran), 1 on a failure, 2 on a usage mistake.\n";

/* ---- arguments ---- */

/* One --sweep: a search parameter and the values (text) to try. */
typedef struct bench_sweep {
    const simil_search_param_info *param;
    char *text;          /* a copy of the values, cut at the commas */
    const char **values;
    int n;
} bench_sweep;

typedef struct bench_args {
    const char *data, *queries, *dataset, *gt, *train, *metric, *device, *anchors, *out, *mode;
    int64_t k, threads, runs;
    cli_list indexes, sweep, param;
    cli_params base;     /* --param: settings of every point (after --threads) */
    bench_sweep sweeps[CLI_LIST_MAX];
    int nsweeps;
} bench_args;

/* Parse "name=v1,v2,..." into s (s->text and s->values to free); a usage
 * error gives 0.  Each value is checked by the library now, so that a typo
 * fails before any index is built. */
static int bench_parse_sweep(const char *spec, const bench_args *a, bench_sweep *s)
{
    const char *eq = strchr(spec, '=');
    char name[64];
    memset(s, 0, sizeof *s);
    snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - spec) : 0, spec);
    if (!eq || !(s->param = simil_search_param_find(name))) {
        char names[512] = "";
        for (int i = 0; i < simil_search_param_count(); i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                     i ? ", " : "", simil_search_param_get_info(i)->name);
        cli_usage_error("--sweep: '%s' is not NAME=V,V,... with NAME one of %s", spec, names);
        return 0;
    }
    for (int i = 0; i < a->nsweeps; i++)
        if (a->sweeps[i].param == s->param) {
            cli_usage_error("--sweep: %s is given twice", name);
            return 0;
        }
    for (int i = 0; i < a->base.ngiven; i++)
        if (!strcmp(a->base.given[i], name)) {
            cli_usage_error("--sweep %s: %s is also set for every point (--param or --%s)",
                            name, name, name);
            return 0;
        }
    simil_search_params *check = NULL;
    s->text = strdup(eq + 1);
    s->values = malloc((strlen(eq) / 2 + 1) * sizeof *s->values);
    int ok = s->text && s->values && simil_search_params_create(&check) == SIMIL_OK;
    if (!ok) cli_usage_error("out of memory");
    for (char *v = s->text, *next; ok && v; v = next) {
        next = strchr(v, ',');
        if (next) *next++ = '\0';
        ok = simil_search_params_set(check, name, v) == SIMIL_OK;
        if (!ok) cli_usage_error("--sweep %s: %s", name, simil_last_error());
        s->values[s->n++] = v;
    }
    simil_search_params_destroy(check);
    return ok;
}

/* ---- running ---- */

/* One benchmark run: what every index is measured on, and the points so far. */
typedef struct bench_run {
    const bench_args *a;
    simil_metric metric;
    const bench_data *d;
    const cli_truth *truth;
    double *found;   /* nq x k exact distances of the results */
    float *dist;     /* nq x k, scratch for every search */
    int64_t *labels; /* nq x k */
    bench_point *points;
    size_t npoints, cap;
    int failed;      /* something failed other than an index not being built */
} bench_run;

/* 0 if st is SIMIL_OK.  Else says why desc stops, and returns 1: an index
 * this library does not build is skipped; other failures mark the run. */
static int bench_stop(bench_run *r, simil_status st, const char *desc)
{
    if (st == SIMIL_OK) return 0;
    if (st == SIMIL_ERR_UNSUPPORTED) {
        const char *msg = simil_last_error();
        fprintf(stderr, "simil bench: skipping %s: %s\n", desc,
                *msg ? msg : simil_status_name(st));
    } else {
        cli_fail(st, desc);
        r->failed = 1;
    }
    return 1;
}

/* The model name of the hardware behind a backend name such as
 * "cuda:0 (NVIDIA H200)" or "cpu (2 threads)". */
static void bench_device_name(const char *backend, char *out, size_t size)
{
    const char *open = strchr(backend, '('), *close = strrchr(backend, ')');
    snprintf(out, size, "%s", backend);
    if (strncmp(backend, "cpu", 3) != 0) {
        if (open && close > open) snprintf(out, size, "%.*s", (int)(close - open - 1), open + 1);
        return;
    }
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            const char *v = strchr(line, ':') + 1;
            v += strspn(v, " \t");
            snprintf(out, size, "%.*s", (int)strcspn(v, "\n"), v);
            break;
        }
    if (f) fclose(f);
}

/* Create, train (unless the index needs none) and fill an index; p gets
 * the time and the memory that took. */
static int bench_build(bench_run *r, const char *desc, simil_index **index, bench_point *p)
{
    const simil_matrix *t = r->d->train.data ? &r->d->train : &r->d->base;
    simil_status st = simil_index_create(index, r->d->base.cols, desc, r->metric, r->a->device);
    bench_memory before;
    bench_memory_mark(&before);
    double t0 = cli_now();
    if (!st && !simil_index_is_trained(*index)) st = simil_index_train(*index, t->rows, t->data);
    if (!st) st = simil_index_add(*index, r->d->base.rows, r->d->base.data, NULL);
    p->build_seconds = cli_now() - t0;
    p->index_bytes = bench_memory_growth(&before);
    return bench_stop(r, st, desc);
}

/* Time one mode (bench_time), then the recall of its results. */
static int bench_measure(bench_run *r, const simil_index *index,
                         const simil_search_params *params, int single, bench_point *p)
{
    const int64_t nq = r->d->queries.rows;
    const bench_search s = {index, &r->d->queries, r->a->k, params, r->dist, r->labels};
    if (bench_stop(r, bench_time(&s, single, (int)r->a->runs, p), p->index)) return 1;
    cli_exact_distances(r->metric, &r->d->base, &r->d->queries, r->a->k, r->labels, r->found);
    if (cli_recall(nq, r->a->k, r->labels, r->found, r->truth, &p->recall)) {
        cli_error("out of memory computing recall");
        r->failed = 1;
        return 1;
    }
    return 0;
}

static void bench_print_header(int64_t k)
{
    char one_k[32], k_k[40];
    snprintf(one_k, sizeof one_k, "1-recall@%" PRId64, k);
    snprintf(k_k, sizeof k_k, "recall %" PRId64 "@%" PRId64, k, k);
    printf("%-24s %-16s %-6s %8s %9s %11s %9s %9s %10s %11s %12s\n", "index", "params", "mode",
           "build s", "size MiB", "QPS", "p50 ms", "p99 ms", "1-recall@1", one_k, k_k);
    fflush(stdout);
}

static void bench_print_row(const bench_point *p)
{
    char size[32] = "-";
    if (p->index_bytes >= 0)
        snprintf(size, sizeof size, "%.1f", (double)p->index_bytes / 1048576.0);
    printf("%-24s %-16s %-6s %8.3f %9s %11.0f %9.3f %9.3f %10.4f %11.4f %12.4f\n", p->index,
           p->params, p->mode, p->build_seconds, size, p->qps, p->p50_ms, p->p99_ms,
           p->recall.one_at_1, p->recall.one_at_k, p->recall.k_at_k);
    fflush(stdout);
}

static int bench_append(bench_run *r, const bench_point *p)
{
    if (r->npoints == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 16;
        bench_point *more = realloc(r->points, cap * sizeof *more);
        if (!more) return cli_error("out of memory");
        r->points = more;
        r->cap = cap;
    }
    r->points[r->npoints++] = *p;
    return CLI_EXIT_OK;
}

/* Append ",name=value" (no comma first) to the point's text. */
static void bench_params_text(bench_point *p, const char *name, const char *value)
{
    size_t len = strlen(p->params);
    if (len < sizeof p->params)
        snprintf(p->params + len, sizeof p->params - len, "%s%s=%s", len ? "," : "", name, value);
}

/* The search parameters of one point into *params (to destroy), and their
 * text, e.g. "nprobe=16": --threads, then the --param settings, then the
 * values at odometer position at[] of the active sweeps.  The text names
 * the --param settings the index uses and the sweeps. */
static simil_status bench_point_params(const bench_run *r, const simil_index *index,
                                       const int *active, int nactive, const int *at,
                                       simil_search_params **params, bench_point *p)
{
    const bench_args *a = r->a;
    p->params[0] = '\0';
    simil_status st = simil_search_params_create(params);
    if (!st && a->threads) st = simil_search_params_set_int(*params, "threads", a->threads);
    for (int j = 0; !st && j < a->base.ngiven; j++) {
        char value[64];
        const char *name = a->base.given[j];
        st = simil_search_params_get(a->base.params, name, value, sizeof value);
        if (!st) st = simil_search_params_set(*params, name, value);
        if (!st && simil_index_uses_search_param(index, name)) bench_params_text(p, name, value);
    }
    for (int j = 0; !st && j < nactive; j++) {
        const bench_sweep *s = &a->sweeps[active[j]];
        st = simil_search_params_set(*params, s->param->name, s->values[at[j]]);
        bench_params_text(p, s->param->name, s->values[at[j]]);
    }
    return st;
}

/* Build one index and measure it at every combination of the sweeps that
 * apply to it (one point when none does). */
static void bench_index(bench_run *r, const char *desc)
{
    simil_index *index = NULL;
    bench_point p = {.k = r->a->k};
    int active[CLI_LIST_MAX], at[CLI_LIST_MAX] = {0}, nactive = 0, j, failed = 0;
    if (bench_build(r, desc, &index, &p)) {
        simil_index_destroy(index);
        return;
    }
    snprintf(p.index, sizeof p.index, "%s", simil_index_description(index));
    snprintf(p.backend, sizeof p.backend, "%s", simil_backend_name(index));
    bench_device_name(p.backend, p.device, sizeof p.device);
    for (int i = 0; i < r->a->nsweeps; i++)
        if (simil_index_uses_search_param(index, r->a->sweeps[i].param->name)) active[nactive++] = i;
    do {
        simil_search_params *params = NULL;
        simil_status st = bench_point_params(r, index, active, nactive, at, &params, &p);
        failed = bench_stop(r, st, p.index);
        for (int single = 0; single < 2 && !failed; single++) {
            if (strcmp(r->a->mode, "both") && (single != !strcmp(r->a->mode, "single"))) continue;
            failed = bench_measure(r, index, params, single, &p);
            if (!failed) bench_print_row(&p);
            if (!failed && (failed = bench_append(r, &p))) r->failed = 1;
        }
        simil_search_params_destroy(params);
        if (failed) break;
        for (j = nactive - 1; j >= 0 && ++at[j] == r->a->sweeps[active[j]].n; j--) at[j] = 0;
    } while (j >= 0);
    simil_index_destroy(index);
}

/* Create each index once before the long part, so that a mistyped
 * description or a missing GPU fails at once.  Not built is fine here. */
static int bench_check_indexes(const bench_args *a, simil_metric metric, int64_t dim)
{
    for (int i = 0; i < a->indexes.count; i++) {
        simil_index *index = NULL;
        const char *desc = a->indexes.values[i];
        simil_status st = simil_index_create(&index, dim, desc, metric, a->device);
        simil_index_destroy(index);
        if (st != SIMIL_OK && st != SIMIL_ERR_UNSUPPORTED) return cli_fail(st, desc);
    }
    return CLI_EXIT_OK;
}

/* mkdir -p dir. */
static int bench_mkdir(const char *dir)
{
    char path[4096];
    struct stat sb;
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return cli_error("%s: path too long", dir);
    for (char *p = path + 1;; p++) {
        if (*p && *p != '/') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return cli_error("cannot create %s: %s", path, strerror(errno));
        if (!(*p = c)) break;
    }
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return cli_error("%s is not a folder", dir);
    return CLI_EXIT_OK;
}

/* The sweeps over every index, the results files after each index, and
 * the plot at the end. */
static int bench_sweeps(bench_run *r, const bench_anchor *anchors, size_t nanchors)
{
    const bench_args *a = r->a;
    const bench_data *d = r->d;
    char title[512];
    int rc = CLI_EXIT_OK;
    size_t cells = (size_t)(d->queries.rows * a->k);
    if ((uint64_t)d->queries.rows > SIZE_MAX / sizeof(int64_t) / (uint64_t)a->k)
        return cli_error("%" PRId64 " x %" PRId64 " results do not fit in memory",
                         d->queries.rows, a->k);
    r->dist = malloc(cells * sizeof *r->dist);
    r->labels = malloc(cells * sizeof *r->labels);
    r->found = malloc(cells * sizeof *r->found);
    if (!r->dist || !r->labels || !r->found)
        return cli_error("out of memory for %zu results", cells);
    printf("# %s: %" PRId64 " base vectors, %" PRId64 " queries, dim %" PRId64
           ", metric %s, k %" PRId64 "\n",
           d->name, d->base.rows, d->queries.rows, d->base.cols, simil_metric_name(r->metric),
           a->k);
    bench_print_header(a->k);
    for (int i = 0; i < a->indexes.count && !rc; i++) {
        bench_index(r, a->indexes.values[i]);
        rc = bench_results_write(a->out, d->name, r->points, r->npoints);
    }
    if (rc) return rc;
    if (r->npoints == 0) return cli_error("no results: none of the indexes could be run");
    const bench_point *p = &r->points[0];
    /* a long title is cut to fit: it only labels the plot */
    if (snprintf(title, sizeof title,
                 "%s (%" PRId64 " x %" PRId64 ", %" PRId64 " queries, %s, %s) on %s%s%s, best of %"
                 PRId64 " runs",
             d->name, d->base.rows, d->base.cols, d->queries.rows, simil_metric_name(r->metric),
             strcmp(a->mode, "both") ? a->mode : "batch and single", p->backend,
             strstr(p->backend, p->device) ? "" : ", ",
             strstr(p->backend, p->device) ? "" : p->device, a->runs) < 0)
        title[0] = '\0';
    return bench_plot(a->out, title, a->k, r->points, r->npoints, anchors, nanchors);
}

static int bench_main(const bench_args *a)
{
    const bench_source src = {a->dataset, a->data, a->queries, a->gt, a->train};
    bench_anchor *anchors = NULL;
    size_t nanchors = 0;
    bench_data d;
    simil_metric metric = SIMIL_METRIC_L2;
    bench_run r = {.a = a, .d = &d};
    cli_truth truth = {0, 0, NULL, NULL};
    int rc = bench_mkdir(a->out);
    memset(&d, 0, sizeof d);
    if (!rc && a->anchors) rc = bench_anchors_read(a->anchors, &anchors, &nanchors);
    if (!rc) rc = cli_resolve_metric(a->metric, a->data, &metric);
    r.metric = metric;
    if (!rc) rc = bench_data_load(&src, &d);
    if (!rc) rc = bench_check_indexes(a, metric, d.base.cols);
    if (!rc) {
        const bench_truth_opts o = {a->k, metric, a->device, (int)a->threads, a->out};
        rc = bench_truth(&d, &o, &truth);
        r.truth = &truth;
    }
    if (!rc) rc = bench_sweeps(&r, anchors, nanchors);
    if (!rc && r.failed) rc = CLI_EXIT_FAIL;
    free(r.dist);
    free(r.labels);
    free(r.points);
    cli_truth_free(&truth);
    free(r.found);
    free(anchors);
    bench_data_free(&d);
    return rc;
}

/* ---- the command ---- */

/* Checks cli_parse cannot make; the search parameters of --param and
 * --sweep. */
static int bench_check_args(bench_args *a)
{
    simil_metric metric;
    int ok = 1;
    if (!a->data == !a->dataset)
        return cli_usage_error("give either --data or --dataset"), 0;
    if (a->dataset && !cli_check_choice("--dataset", a->dataset, bench_dataset_names)) return 0;
    if (a->dataset && a->queries)
        return cli_usage_error("--queries goes with --data, not with --dataset"), 0;
    if (a->data && !a->queries && !cli_is_ann_file(a->data))
        return cli_usage_error("--data %s needs --queries (only an ann-benchmarks .hdf5 "
                               "file holds its own queries)", a->data), 0;
    if (a->metric && simil_metric_parse(a->metric, &metric) != SIMIL_OK)
        return cli_usage_error("--metric: '%s' is not l2, ip or cosine", a->metric), 0;
    if (!cli_check_device("--device", a->device)) return 0;
    static const char *const modes[] = {"batch", "single", "both", NULL};
    if (!cli_check_choice("--mode", a->mode, modes)) return 0;
    if (!*a->out) return cli_usage_error("--out: empty folder name"), 0;
    for (int i = 0; i < a->indexes.count && ok; i++)
        if (!*a->indexes.values[i]) ok = 0, cli_usage_error("--index: empty description");
    if (ok) ok = cli_params_set_all(&a->base, "--param", &a->param);
    for (int i = 0; i < a->sweep.count && ok; i++) {
        ok = bench_parse_sweep(a->sweep.values[i], a, &a->sweeps[a->nsweeps]);
        a->nsweeps++; /* cmd_bench frees what it holds, also after a failure */
    }
    return ok;
}

int cmd_bench(int argc, char **argv)
{
    bench_args a = {.device = "auto", .k = 10, .mode = "batch", .runs = 3};
    const cli_opt opts[] = {
        {"data", 0, CLI_STRING, &a.data, 0, 0, 0},
        {"queries", 0, CLI_STRING, &a.queries, 0, 0, 0},
        {"dataset", 0, CLI_STRING, &a.dataset, 0, 0, 0},
        {"gt", 0, CLI_STRING, &a.gt, 0, 0, 0},
        {"train", 0, CLI_STRING, &a.train, 0, 0, 0},
        {"index", 0, CLI_LIST, &a.indexes, 1, 0, 0},
        {"sweep", 0, CLI_LIST, &a.sweep, 0, 0, 0},
        {"param", 0, CLI_LIST, &a.param, 0, 0, 0},
        {"k", 'k', CLI_INT, &a.k, 0, 1, INT64_C(1) << 20},
        {"metric", 0, CLI_STRING, &a.metric, 0, 0, 0},
        {"device", 0, CLI_STRING, &a.device, 0, 0, 0},
        {"threads", 't', CLI_INT, &a.threads, 0, 1, 4096},
        {"anchors", 0, CLI_STRING, &a.anchors, 0, 0, 0},
        {"mode", 0, CLI_STRING, &a.mode, 0, 0, 0},
        {"runs", 0, CLI_INT, &a.runs, 0, 1, 1000},
        {"out", 'o', CLI_STRING, &a.out, 1, 0, 0},
        {NULL, 0, CLI_FLAG, NULL, 0, 0, 0},
    };
    char usage[12288];
    int rc;
    cli_params_usage(bench_usage, usage, sizeof usage);
    if (!cli_parse(argc, argv, opts, usage, NULL, 0, &rc)) return rc;
    if ((rc = cli_params_init(&a.base))) return rc;
    if (!bench_check_args(&a)) {
        rc = CLI_EXIT_USAGE;
    } else {
        cli_progress_install(0);
        rc = bench_main(&a);
    }
    for (int i = 0; i < a.nsweeps; i++) {
        free(a.sweeps[i].text);
        free(a.sweeps[i].values);
    }
    cli_params_free(&a.base);
    return rc;
}
