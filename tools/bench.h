/* tools/bench.h: the pieces of "simil bench".  cmd_bench.c parses the
 * command line and runs the sweeps; bench_data.c loads or generates the
 * vectors and finds the ground truth; bench_measure.c times searches
 * (batch and single-query) and sizes indexes; bench_report.c writes the
 * results files (results.csv, results.json) and reads anchor points;
 * bench_plot.c draws the recall-QPS plot with gnuplot. */
#ifndef SIMIL_TOOLS_BENCH_H
#define SIMIL_TOOLS_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "simil/simil.h"

int cmd_bench(int argc, char **argv);

/* ---- data (bench_data.c) ---- */

/* The named datasets of docs/datasets.md that --dataset accepts, NULL-ended. */
extern const char *const bench_dataset_names[];

/* Where the vectors come from: a named dataset, or files. */
typedef struct bench_source {
    const char *dataset;  /* one of bench_dataset_names, or NULL for files */
    const char *data;     /* base file; FILE.hdf5 alone: train/test/neighbors */
    const char *queries;  /* query file; may be NULL for a named set or .hdf5 */
    const char *gt;       /* ground truth file, or NULL */
    const char *train;    /* training file, or NULL for the dataset's own */
} bench_source;

typedef struct bench_data {
    char name[64];                      /* "fashion-mnist", or the base file's name */
    simil_matrix base, queries, train;  /* float32; train.data NULL: train on base */
    int generated[3];                   /* data from malloc, not from the library */
    const char *gt;                     /* ground truth file, or NULL */
    char paths[3][4096];                /* FILE.hdf5:train, :test, :neighbors */
} bench_data;

/* Read or generate the vectors into *d (zeroed first), checking that the
 * dimensions agree.  Returns a CLI exit code, having named what failed. */
int bench_data_load(const bench_source *src, bench_data *d);
void bench_data_free(bench_data *d);

/* What the ground truth is computed with when no file is given. */
typedef struct bench_truth_opts {
    int64_t k;
    simil_metric metric;
    const char *device;
    int threads;     /* 0: all */
    const char *dir; /* where the computed ground truth is cached */
} bench_truth_opts;

/* The true neighbours into *t (cli_truth_free() it): ids from d->gt; else
 * from DIR/gt-NAME-METRIC-kK.ivecs when it fits the queries; else by exact
 * search with Flat, saved to that file.  Their distances come from an
 * ann-benchmarks file of the same metric, else from the base vectors. */
int bench_truth(const bench_data *d, const bench_truth_opts *o, cli_truth *t);

/* ---- results (bench_report.c) ---- */

/* One measured point of a sweep: one index at one setting of the search
 * parameters, in one mode. */
typedef struct bench_point {
    char index[128];       /* normalized description, e.g. "IVF1024,Flat" */
    char params[128];      /* e.g. "nprobe=16", or "" for the index's defaults */
    char mode[8];          /* "batch" or "single" */
    int64_t k;
    double build_seconds;  /* train + add */
    int64_t index_bytes;   /* memory the build took (bench_memory_growth); -1 if unknown */
    double qps;            /* queries / the fastest of the runs */
    int runs;
    double p50_ms, p95_ms, p99_ms, p999_ms; /* latency percentiles (bench_measure.c) */
    cli_recall_result recall;
    char backend[128];     /* simil_backend_name() */
    char device[128];      /* the GPU's or CPU's model name */
} bench_point;

/* ---- measuring (bench_measure.c) ---- */

/* A search to time: results go to distances and labels (nq x k). */
typedef struct bench_search {
    const simil_index *index;
    const simil_matrix *queries;
    int64_t k;
    const simil_search_params *params;
    float *distances;
    int64_t *labels;
} bench_search;

/* Time s in batch mode (all queries in one call) or single-query mode (one
 * call per query): one warm-up pass, then runs passes; fills p's mode,
 * runs, qps (from the fastest pass) and latency percentiles, and leaves the
 * last pass's results in s.  Returns the first failing call's status. */
simil_status bench_time(const bench_search *s, int single, int runs, bench_point *p);

/* What the process holds: host memory allocated (or resident, without
 * glibc), and memory in use on the GPUs (every process's). */
typedef struct bench_memory {
    int64_t host, gpu;
} bench_memory;

void bench_memory_mark(bench_memory *m);

/* Bytes more than at *before (host and GPU growth, each at least 0), or -1
 * where host memory cannot be read. */
int64_t bench_memory_growth(const bench_memory *before);

/* A point measured elsewhere (e.g. Faiss), drawn for comparison. */
typedef struct bench_anchor {
    char label[128];
    double recall, qps;
} bench_anchor;

/* The names of the columns of results.csv, in order, and of the keys of each
 * object of results.json. */
extern const char bench_csv_header[];

/* Read FILE.csv of label,recall,qps lines.  A first line whose recall is not a
 * number is a header; blank lines and lines starting with '#' are skipped; a
 * label holding commas is double-quoted ("" is a quote).  recall must lie in
 * [0, 1] and qps be > 0.  On success *out (free() it) holds *n anchors.
 * Returns CLI_EXIT_OK, or CLI_EXIT_FAIL after naming the file and line. */
int bench_anchors_read(const char *path, bench_anchor **out, size_t *n);

/* Write DIR/results.csv and DIR/results.json for n points of dataset,
 * each atomically (temporary file, fsync, rename).  Returns a CLI exit code. */
int bench_results_write(const char *dir, const char *dataset, const bench_point *points,
                        size_t n);

/* Write DIR/plot.gp and run gnuplot on it to draw DIR/plot.png (1000 x 700)
 * (bench_plot.c): recall k@k on a logit scale against QPS (log scale); for
 * each index (and mode, when both ran) its Pareto frontier as a line and
 * every point as a mark, in the order the points come; one point series per
 * anchor label.  If gnuplot is not on PATH, warns and returns CLI_EXIT_OK
 * without drawing; a failing gnuplot gives CLI_EXIT_FAIL.  title names the
 * dataset. */
int bench_plot(const char *dir, const char *title, int64_t k, const bench_point *points,
               size_t n, const bench_anchor *anchors, size_t nanchors);

/* An output file being written under a temporary name beside its path:
 * open, write to f, then commit (flush, fsync, close, rename). */
typedef struct bench_file {
    FILE *f;
    char path[4096], tmp[4096 + 16];
} bench_file;

int bench_file_open(bench_file *bf, const char *dir, const char *name);
int bench_file_commit(bench_file *bf);

/* dir + "/" + name into out (size bytes); 0 if it does not fit. */
int bench_path(char *out, size_t size, const char *dir, const char *name);

#endif
