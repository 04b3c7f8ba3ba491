/* tools/bench_report.h: what "simil bench" writes and draws: the results
 * files (results.csv, results.json), the anchor points read from a CSV file,
 * and the recall-QPS plot drawn by gnuplot.  cmd_bench.c measures; this part
 * only formats what it measured. */
#ifndef SIMIL_TOOLS_BENCH_REPORT_H
#define SIMIL_TOOLS_BENCH_REPORT_H

#include <stddef.h>
#include <stdint.h>

/* One measured point of a sweep: one index at one setting of the search
 * parameters. */
typedef struct bench_point {
    char index[128];       /* normalized description, e.g. "IVF1024,Flat" */
    char params[128];      /* e.g. "nprobe=16", or "" for the index's defaults */
    int64_t k;
    double build_seconds;  /* train + add */
    int64_t memory_bytes;  /* size of the saved index file; -1 if unknown */
    double qps, r_at_1, recall_at_k;
    char backend[128];     /* simil_backend_name() */
    char device[128];      /* the GPU's or CPU's model name */
} bench_point;

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

/* Write DIR/plot.gp and run gnuplot on it to draw DIR/plot.png (1000 x 700):
 * recall@k against QPS (log scale), one line per index in the order the
 * points come, one point series per anchor label.  If gnuplot is not on PATH,
 * warns and returns CLI_EXIT_OK without drawing; a failing gnuplot gives
 * CLI_EXIT_FAIL.  title names the dataset. */
int bench_plot(const char *dir, const char *title, int64_t k, const bench_point *points,
               size_t n, const bench_anchor *anchors, size_t nanchors);

/* dir + "/" + name into out (size bytes); 0 if it does not fit. */
int bench_path(char *out, size_t size, const char *dir, const char *name);

#endif
