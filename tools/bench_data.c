/* tools/bench_data.c: the vectors and the ground truth of "simil bench"
 * (see bench.h).  Named datasets are the ones of docs/datasets.md, read from
 * the Debian package or generated with simil_generate; files are read
 * through the public dataset API.  Ground truth that has to be computed is
 * exact search with a Flat index, cached in the output folder because it is
 * often the slowest part of a short sweep. */
#define _XOPEN_SOURCE 700

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

typedef struct bench_gen {
    const char *kind;  /* NULL: none */
    int64_t n, dim;
    uint64_t seed;
} bench_gen;

#define BENCH_FMNIST "/usr/share/datasets/fashion-mnist/"

/* The datasets of docs/datasets.md: files, or generators (simil_generate). */
static const struct bench_named {
    const char *name;
    const char *base_file, *query_file;  /* NULL: generated */
    bench_gen base, queries, train;
} bench_named[] = {
    {"fashion-mnist", BENCH_FMNIST "train-images-idx3-ubyte.gz",
     BENCH_FMNIST "t10k-images-idx3-ubyte.gz", {0}, {0}, {0}},
    {"uniform1M", NULL, NULL, {"uniform", 1000000, 128, 1}, {"uniform", 10000, 128, 2}, {0}},
    {"uniform10M", NULL, NULL, {"uniform", 10000000, 96, 1}, {"uniform", 10000, 96, 2}, {0}},
    {"mix10M", NULL, NULL, {"mix", 10000000, 96, 11}, {"mix", 10000, 96, 12},
     {"mix", 500000, 96, 13}},
};

const char *const bench_dataset_names[] = {"fashion-mnist", "uniform1M", "uniform10M", "mix10M",
                                           NULL};

/* ---- vectors ---- */

static int bench_generate(const bench_gen *g, simil_matrix *m)
{
    if ((uint64_t)g->n > SIZE_MAX / sizeof(float) / (uint64_t)g->dim)
        return cli_error("%" PRId64 " x %" PRId64 " floats do not fit in memory", g->n, g->dim);
    fprintf(stderr, "simil bench: generating %s(%" PRId64 ", %" PRId64 ", seed %" PRIu64 ")\n",
            g->kind, g->n, g->dim, g->seed);
    float *x = malloc((size_t)g->n * (size_t)g->dim * sizeof *x);
    if (!x) return cli_error("out of memory for %" PRId64 " x %" PRId64 " floats", g->n, g->dim);
    simil_status st = simil_generate(g->kind, 0, g->n, g->dim, g->seed, x);
    if (st != SIMIL_OK) {
        free(x);
        return cli_fail(st, NULL);
    }
    *m = (simil_matrix){g->n, g->dim, SIMIL_DTYPE_FLOAT32, x};
    return CLI_EXIT_OK;
}

/* Set i of d (0 base, 1 queries, 2 train) from file, or else from gen. */
static int bench_fill(bench_data *d, int i, const char *file, const bench_gen *gen)
{
    simil_matrix *m[3] = {&d->base, &d->queries, &d->train};
    if (file) return cli_read_float(file, 0, -1, m[i]);
    d->generated[i] = 1;
    return bench_generate(gen, m[i]);
}

void bench_data_free(bench_data *d)
{
    simil_matrix *m[3] = {&d->base, &d->queries, &d->train};
    for (int i = 0; i < 3; i++) {
        if (d->generated[i]) free(m[i]->data);
        else simil_matrix_free(m[i]);
        m[i]->data = NULL;
        d->generated[i] = 0;
    }
}

/* The dataset's name for a file: its base name up to the first dot. */
static void bench_file_label(const char *path, char *out, size_t size)
{
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    size_t len = strcspn(base, ".:");
    if (!len) base = "data", len = 4;
    snprintf(out, size, "%.*s", (int)(len < size ? len : size - 1), base);
}

static int bench_load_named(const bench_source *src, bench_data *d)
{
    const struct bench_named *nd = &bench_named[0];
    while (strcmp(nd->name, src->dataset)) nd++;
    snprintf(d->name, sizeof d->name, "%s", nd->name);
    int rc = bench_fill(d, 1, nd->query_file, &nd->queries);
    if (!rc) rc = bench_fill(d, 0, nd->base_file, &nd->base);
    if (!rc && nd->train.kind && !src->train) rc = bench_fill(d, 2, NULL, &nd->train);
    if (rc && nd->query_file && access(nd->query_file, R_OK) != 0)
        cli_error("hint: the Debian package dataset-%s installs it", nd->name);
    return rc;
}

static int bench_load_files(const bench_source *src, bench_data *d)
{
    const char *base = src->data, *queries = src->queries;
    bench_file_label(src->data, d->name, sizeof d->name);
    if (cli_is_ann_file(src->data)) {
        snprintf(d->paths[0], sizeof d->paths[0], "%s:train", src->data);
        snprintf(d->paths[1], sizeof d->paths[1], "%s:test", src->data);
        snprintf(d->paths[2], sizeof d->paths[2], "%s:neighbors", src->data);
        base = d->paths[0];
        if (!queries) queries = d->paths[1];
        d->gt = d->paths[2];
    }
    int rc = cli_read_float(queries, 0, -1, &d->queries);
    if (!rc) rc = cli_read_float(base, 0, -1, &d->base);
    return rc;
}

int bench_data_load(const bench_source *src, bench_data *d)
{
    memset(d, 0, sizeof *d);
    int rc = src->dataset ? bench_load_named(src, d) : bench_load_files(src, d);
    if (src->gt) d->gt = src->gt;
    if (!rc && src->train) rc = cli_read_float(src->train, 0, -1, &d->train);
    if (rc) return rc;
    if (d->base.rows < 1 || d->queries.rows < 1)
        return cli_error("%s: no %s vectors", d->name, d->base.rows < 1 ? "base" : "query");
    if (d->queries.cols != d->base.cols)
        return cli_error("%s: the queries have dimension %" PRId64 ", the base %" PRId64,
                         d->name, d->queries.cols, d->base.cols);
    if (d->train.data && d->train.cols != d->base.cols)
        return cli_error("%s has dimension %" PRId64 ", the base %" PRId64, src->train,
                         d->train.cols, d->base.cols);
    return CLI_EXIT_OK;
}

/* ---- ground truth ---- */

/* The cached ground truth, if path holds nq x k int32 ids below nb; 1 when
 * *truth was filled. */
static int bench_truth_cached(const char *path, int64_t nq, int64_t k, int64_t nb,
                              cli_truth *truth)
{
    simil_matrix m = {0, 0, SIMIL_DTYPE_INT32, NULL};
    int64_t rows = 0, cols = 0;
    simil_dtype dtype;
    int fits = 0;
    if (access(path, F_OK) != 0) return 0;
    if (simil_matrix_info(path, &rows, &cols, &dtype) == SIMIL_OK && rows == nq && cols == k &&
        dtype == SIMIL_DTYPE_INT32 && simil_matrix_read(path, 0, -1, &m) == SIMIL_OK) {
        fits = 1;
        for (int64_t i = 0; i < rows * cols; i++)
            if (((const int32_t *)m.data)[i] >= nb || ((const int32_t *)m.data)[i] < -1) fits = 0;
    }
    if (fits && cli_truth_take(path, &m, nq, k, truth)) fits = 0;
    simil_matrix_free(&m);
    if (!fits)
        fprintf(stderr, "simil bench: %s does not fit this data; computing it again\n", path);
    return fits;
}

/* Exact search with Flat on o->device; saves the ids to path. */
static int bench_truth_compute(const bench_data *d, const bench_truth_opts *o, const char *path,
                               cli_truth *t)
{
    int64_t **truth = &t->ids;
    int64_t nq = d->queries.rows, k = o->k;
    simil_index *flat = NULL;
    simil_search_params *params = NULL;
    double t0 = cli_now();
    if ((uint64_t)nq > SIZE_MAX / sizeof(int64_t) / (uint64_t)k)
        return cli_error("%" PRId64 " x %" PRId64 " results do not fit in memory", nq, k);
    float *dist = malloc((size_t)(nq * k) * sizeof *dist);
    *truth = malloc((size_t)(nq * k) * sizeof **truth);
    if (!dist || !*truth) {
        free(dist);
        return cli_error("out of memory for the ground truth");
    }
    simil_status st = simil_search_params_create(&params);
    if (!st) st = simil_search_params_set_int(params, "threads", o->threads);
    if (!st) st = simil_index_create(&flat, d->base.cols, "Flat", o->metric, o->device);
    if (!st) st = simil_index_add(flat, d->base.rows, d->base.data, NULL);
    if (!st) st = simil_index_search(flat, nq, d->queries.data, k, params, dist, *truth);
    if (!st) {
        simil_matrix ids = {nq, k, SIMIL_DTYPE_INT64, *truth};
        if ((st = simil_matrix_write(path, &ids)) == SIMIL_OK)
            fprintf(stderr, "simil bench: ground truth by Flat on %s in %.2f s, saved to %s\n",
                    simil_backend_name(flat), cli_now() - t0, path);
    }
    simil_index_destroy(flat);
    simil_search_params_destroy(params);
    free(dist);
    t->nq = nq;
    t->cols = k;
    return st == SIMIL_OK ? CLI_EXIT_OK : cli_fail(st, st == SIMIL_ERR_IO ? path : NULL);
}

/* The true ids: from the file given, else from the cache, else computed. */
static int bench_truth_ids(const bench_data *d, const bench_truth_opts *o, cli_truth *t)
{
    static const char safe[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_";
    char name[160], path[4096];
    if (d->gt) return cli_truth_read(d->gt, d->queries.rows, o->k, o->metric, t);
    snprintf(name, sizeof name, "gt-%s-%s-k%" PRId64 ".ivecs", d->name,
             simil_metric_name(o->metric), o->k);
    for (char *c = name; *c; c++)
        if (!strchr(safe, *c)) *c = '_';
    if (!bench_path(path, sizeof path, o->dir, name)) return cli_error("%s: path too long", o->dir);
    if (bench_truth_cached(path, d->queries.rows, o->k, d->base.rows, t)) {
        fprintf(stderr, "simil bench: ground truth from %s\n", path);
        return CLI_EXIT_OK;
    }
    return bench_truth_compute(d, o, path, t);
}

int bench_truth(const bench_data *d, const bench_truth_opts *o, cli_truth *t)
{
    memset(t, 0, sizeof *t);
    int rc = bench_truth_ids(d, o, t);
    if (!rc) rc = cli_truth_distances(t, o->metric, &d->base, &d->queries);
    if (rc) cli_truth_free(t);
    return rc;
}
