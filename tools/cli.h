/* tools/cli.h: what the simil subcommands share: the option parser, checked
 * number and choice parsing, error reporting with exit codes, the progress
 * line, a monotonic clock, and the recall measures of docs/datasets.md.
 *
 * Every message goes to stderr as "simil <command>: <message>"; the command
 * name comes from cli_set_command(), which main() calls once. */
#ifndef SIMIL_TOOLS_CLI_H
#define SIMIL_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "simil/simil.h"

#if defined(__GNUC__)
#define CLI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CLI_PRINTF(f, a)
#endif

/* Exit statuses of the tool. */
enum { CLI_EXIT_OK = 0, CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2 };

/* ---- commands ---- */

typedef int (*cli_command_fn)(int argc, char **argv);

int cmd_gen(int argc, char **argv);
int cmd_build(int argc, char **argv);
int cmd_search(int argc, char **argv);
int cmd_gt(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_kmeans(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_knn_graph(int argc, char **argv);
int cmd_path(int argc, char **argv);

/* Name used in messages: "search" gives "simil search: ...". */
void cli_set_command(const char *name);

/* ---- options ---- */

typedef enum cli_kind {
    CLI_FLAG,   /* no value; dest is an int, set to 1 */
    CLI_STRING, /* dest is a const char *, pointing into argv */
    CLI_INT,    /* dest is an int64_t, checked against [min, max] */
    CLI_LIST    /* repeatable; dest is a cli_list, each value appended */
} cli_kind;

/* The values of a repeatable option, in order, pointing into argv. */
enum { CLI_LIST_MAX = 64 };
typedef struct cli_list {
    const char *values[CLI_LIST_MAX];
    int count;
} cli_list;

/* One option of a command.  A table ends with an entry whose name is NULL.
 * Values come as "--name V", "--name=V", "-s V" or "-sV". */
typedef struct cli_opt {
    const char *name;  /* long name without the dashes */
    char short_name;   /* 0 for none */
    cli_kind kind;
    void *dest;        /* left untouched when the option is absent */
    int required;
    int64_t min, max;  /* CLI_INT only */
} cli_opt;

/* Parse argv[1..argc) (argv[0] is the command name).  "-h" and "--help" print
 * usage to stdout.  positional receives exactly npositional operands.
 * Returns 1 when the command should go on; otherwise 0, with *exit_code set
 * to 0 after --help or to CLI_EXIT_USAGE after reporting the mistake. */
int cli_parse(int argc, char **argv, const cli_opt *opts, const char *usage,
              const char **positional, int npositional, int *exit_code);

/* Parse a whole decimal integer in [min, max]; "10x", "" and " 1" fail.
 * what names the value in the message.  Returns 1 on success, else reports
 * a usage error and returns 0. */
int cli_parse_int(const char *what, const char *text, int64_t min, int64_t max,
                  int64_t *out);

/* 1 if text is one of the NULL-terminated choices, else reports a usage
 * error naming option and the choices, and returns 0. */
int cli_check_choice(const char *option, const char *text, const char *const *choices);

/* 1 if text is "auto", "cpu", "gpu" or "gpu:N", else a usage error and 0. */
int cli_check_device(const char *option, const char *text);

/* 1 if path ends in one of the NULL-terminated suffixes, else a usage error
 * and 0. */
int cli_check_suffix(const char *option, const char *path, const char *const *suffixes);

/* ---- search parameters (cli_params.c) ---- */

/* The search parameters a command was given (--param NAME=VALUE, and
 * shorthands such as --nprobe), over the library's defaults. */
typedef struct cli_params {
    simil_search_params *params;
    const char *given[CLI_LIST_MAX];  /* names set, in order (the library's strings) */
    int ngiven;
} cli_params;

/* Start from the defaults; CLI_EXIT_OK, or CLI_EXIT_FAIL (reported). */
int cli_params_init(cli_params *cp);
void cli_params_free(cli_params *cp);

/* Set name to value.  option names what the user typed, for messages.  A
 * usage error (returns 0) for an unknown name, a bad value, or a setting
 * given twice; else 1. */
int cli_params_set(cli_params *cp, const char *option, const char *name, const char *value);

/* Every "NAME=VALUE[,NAME=VALUE...]" of the list (the values of one
 * repeatable option), as cli_params_set does. */
int cli_params_set_all(cli_params *cp, const char *option, const cli_list *items);

/* Say on stderr which of the settings given index does not use (they are
 * ignored). */
void cli_params_warn_unused(const cli_params *cp, const simil_index *index);

/* The settings given, as JSON members ("\"params\": {...}, ") or as text
 * ("  nprobe: 8") on stdout. */
void cli_params_print_json(const cli_params *cp);
void cli_params_print_text(const cli_params *cp);

/* usage followed by the help of every search parameter, from the library's
 * table, into out (size bytes; cut short if it does not fit). */
void cli_params_usage(const char *usage, char *out, size_t size);

/* ---- errors ---- */

/* Report a usage mistake and return CLI_EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) CLI_PRINTF(1, 2);

/* Report something doubtful that does not stop the command. */
void cli_warn(const char *fmt, ...) CLI_PRINTF(1, 2);

/* Report a runtime failure and return CLI_EXIT_FAIL. */
int cli_error(const char *fmt, ...) CLI_PRINTF(1, 2);

/* Report a failed library call from simil_last_error(), with a hint where
 * one helps, and return CLI_EXIT_FAIL.  path, if not NULL, is the file the
 * call worked on, prefixed when the library's message does not name it. */
int cli_fail(simil_status status, const char *path);

/* ---- JSON ---- */

/* "key": "s" on f, s escaped as JSON wants, then sep (", " or "}"...). */
void cli_json_string(FILE *f, const char *key, const char *s, const char *sep);

/* ---- progress, time ---- */

/* Install the progress line on stderr, if stderr is a terminal; with log
 * set, progress goes to any stderr, as a line every few seconds and one at
 * the end of each stage where stderr is not a terminal (a log file). */
void cli_progress_install(int log);

/* Seconds on a monotonic clock. */
double cli_now(void);

/* The process's peak resident host memory in bytes (VmHWM of
 * /proc/self/status), or 0 where it cannot be read. */
double cli_peak_memory(void);

/* Median of n >= 1 values; reorders v. */
double cli_median(double *v, int n);

/* ---- files ---- */

/* Read a whole matrix file as float32; reports failure as cli_fail() does. */
int cli_read_float(const char *path, int64_t first, int64_t count, simil_matrix *out);

/* Read every row of a source (simil_source_open: a file or gen:...) as a
 * float32 matrix, whose data the caller frees with free(). */
int cli_read_source(const char *spec, simil_matrix *out);

/* ---- ann-benchmarks files ---- */

/* 1 if path names a whole ann-benchmarks file (FILE.hdf5 or FILE.h5, without
 * :DATASET), which holds train, test, neighbors and distances. */
int cli_is_ann_file(const char *path);

/* path + ":" + dataset into out when path names a whole ann-benchmarks file,
 * and that is returned; otherwise path itself. */
const char *cli_ann_dataset(const char *path, const char *dataset, char *out, size_t size);

/* The metric to build with: option (the text of --metric, NULL when not
 * given), else the one the data file at path declares (ann-benchmarks'
 * "distance" attribute), else l2.  An option that contradicts the file gets
 * a warning.  Returns a CLI exit code, having reported what failed. */
int cli_resolve_metric(const char *option, const char *path, simil_metric *metric);

/* Warn when the file at path declares another metric than the index's. */
void cli_check_metric(const char *path, simil_metric metric);

/* ---- ground truth and recall (cli_recall.c) ---- */

/* The true neighbours of nq queries, nearest first, with their distances
 * where known, in ann-benchmarks' units: the Euclidean distance (l2), 1 -
 * cosine similarity (cosine) or the negated inner product (ip). */
typedef struct cli_truth {
    int64_t nq, cols;
    int64_t *ids;       /* nq x cols; -1 for none */
    double *distances;  /* nq x cols, or NULL when unknown */
} cli_truth;

void cli_truth_free(cli_truth *t);

/* Read true ids (.ivecs, .npy, FILE.hdf5:neighbors), nq rows of at least k.
 * From an ann-benchmarks file, also its "distances" dataset when the file
 * declares metric.  Returns a CLI exit code, having named what failed. */
int cli_truth_read(const char *path, int64_t nq, int64_t k, simil_metric metric, cli_truth *t);

/* The same from a matrix already read (int32 or int64 ids). */
int cli_truth_take(const char *path, const simil_matrix *m, int64_t nq, int64_t k,
                   cli_truth *t);

/* out (nq x k): the exact distance from each query to the base vector
 * numbered ids[q * k + j], +inf for an id outside base.  float32 matrices. */
void cli_exact_distances(simil_metric metric, const simil_matrix *base,
                         const simil_matrix *queries, int64_t k, const int64_t *ids,
                         double *out);

/* Fill in t->distances, if unknown, from the base vectors. */
int cli_truth_distances(cli_truth *t, simil_metric metric, const simil_matrix *base,
                        const simil_matrix *queries);

/* The recall measures, named as in the GPU paper and Faiss. */
typedef struct cli_recall_result {
    double one_at_1;  /* 1-recall@1: the true nearest neighbour ranked first */
    double one_at_k;  /* 1-recall@k: the true nearest neighbour among the k found */
    double k_at_k;    /* recall k@k: the share of the true k nearest found */
    int by_distance;  /* 1: counted by distance, as ann-benchmarks; 0: by id */
} cli_recall_result;

/* Recall of nq x k found ids against truth (truth->cols >= k).  With
 * found_distances (exact, nq x k, cli_exact_distances) and true distances,
 * a result counts when its distance is at most the true one it stands for
 * plus 1e-3 (ann-benchmarks): ties count.  Otherwise ids are compared.
 * Returns 0, or -1 if out of memory. */
int cli_recall(int64_t nq, int64_t k, const int64_t *found, const double *found_distances,
               const cli_truth *truth, cli_recall_result *r);

#endif
