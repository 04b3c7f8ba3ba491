/* tools/cli.c: helpers shared by the simil subcommands (see cli.h): the
 * option parser, checked numbers, error messages and exit codes, the
 * progress line on a terminal, the clock, and the recall measures. */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *cli_command = "";

void cli_set_command(const char *name) { cli_command = name; }

/* ---- errors ---- */

static void cli_vreport(const char *fmt, va_list ap)
{
    fprintf(stderr, "simil%s%s: ", *cli_command ? " " : "", cli_command);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_vreport(fmt, ap);
    va_end(ap);
    fprintf(stderr, "Try 'simil%s%s --help'.\n", *cli_command ? " " : "", cli_command);
    return CLI_EXIT_USAGE;
}

void cli_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "simil%s%s: warning: ", *cli_command ? " " : "", cli_command);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_vreport(fmt, ap);
    va_end(ap);
    return CLI_EXIT_FAIL;
}

int cli_fail(simil_status status, const char *path)
{
    const char *msg = simil_last_error();
    int device = status == SIMIL_ERR_NO_DEVICE || status == SIMIL_ERR_DEVICE;
    if (!msg || !*msg) msg = simil_status_name(status);
    if (path && !device && !strstr(msg, path))
        cli_error("%s: %s", path, msg);
    else
        cli_error("%s", msg);
    /* the library names devices as its API does; the tool's words for that */
    if (status == SIMIL_ERR_NO_DEVICE || strstr(msg, "(device \"cpu\")"))
        cli_error("hint: use --device cpu");
    return CLI_EXIT_FAIL;
}

/* ---- numbers and choices ---- */

int cli_parse_int(const char *what, const char *text, int64_t min, int64_t max,
                  int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = (*text && !isspace((unsigned char)*text)) ? strtoll(text, &end, 10) : 0;
    if (!end || end == text || *end) {
        cli_usage_error("%s: '%s' is not an integer", what, text);
        return 0;
    }
    if (errno == ERANGE || v < min || v > max) {
        cli_usage_error("%s: %s is out of range [%" PRId64 ", %" PRId64 "]", what, text, min,
                        max);
        return 0;
    }
    *out = (int64_t)v;
    return 1;
}

int cli_check_choice(const char *option, const char *text, const char *const *choices)
{
    char list[256] = "";
    for (const char *const *c = choices; *c; c++) {
        if (strcmp(text, *c) == 0) return 1;
        if (strlen(list) + strlen(*c) + 3 < sizeof list) {
            if (*list) strcat(list, ", ");
            strcat(list, *c);
        }
    }
    cli_usage_error("%s: '%s' is not one of %s", option, text, list);
    return 0;
}

/* The forms of include/simil/index.h: auto, cpu, gpu, gpu:N, gpus, gpu:0,1,...,
 * cpu:N, each list optionally ending in /rR.  The library checks the rest
 * (how many GPUs there are, replicas that divide the list). */
/* "/rR" at p, R >= 1, ending the string; or the end of the string. */
static int cli_replicas_end(const char *p)
{
    if (*p == '\0') return 1;
    if (p[0] != '/' || p[1] != 'r' || !isdigit((unsigned char)p[2])) return 0;
    for (p += 2; isdigit((unsigned char)*p); p++) {}
    return *p == '\0';
}

int cli_check_device(const char *option, const char *text)
{
    if (!strcmp(text, "auto") || !strcmp(text, "cpu") || !strcmp(text, "gpu")) return 1;
    const char *p = NULL;
    if (!strncmp(text, "gpus", 4)) {
        p = text + 4;
    } else if (!strncmp(text, "gpu:", 4) || !strncmp(text, "cpu:", 4)) {
        /* one number for cpu:N, a comma-separated list for gpu: */
        const int list = text[0] == 'g';
        p = text + 4;
        do {
            if (!isdigit((unsigned char)*p)) {
                p = NULL;
                break;
            }
            while (isdigit((unsigned char)*p)) p++;
        } while (list && *p == ',' && p++);
    }
    if (p != NULL && cli_replicas_end(p) && strlen(text) < 48) return 1;
    cli_usage_error("%s: '%s' is not a device: use auto, cpu, gpu, gpu:N, gpus, gpu:0,1,... or "
                    "cpu:N (lists may end in /rR for R replicas)",
                    option, text);
    return 0;
}

static int cli_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

int cli_check_suffix(const char *option, const char *path, const char *const *suffixes)
{
    char list[256] = "";
    for (const char *const *s = suffixes; *s; s++) {
        if (cli_ends_with(path, *s)) return 1;
        if (strlen(list) + strlen(*s) + 3 < sizeof list) {
            if (*list) strcat(list, ", ");
            strcat(list, *s);
        }
    }
    cli_usage_error("%s: '%s' must end in %s", option, path, list);
    return 0;
}

/* ---- options ---- */

/* Store value into the option's destination.  spelled is the option as the
 * user wrote it, for messages. */
static int cli_store(const cli_opt *o, const char *spelled, const char *value)
{
    switch (o->kind) {
    case CLI_FLAG: *(int *)o->dest = 1; return 1;
    case CLI_STRING: *(const char **)o->dest = value; return 1;
    case CLI_INT: return cli_parse_int(spelled, value, o->min, o->max, (int64_t *)o->dest);
    case CLI_LIST: {
        cli_list *list = o->dest;
        if (list->count == CLI_LIST_MAX) {
            cli_usage_error("%s: at most %d are allowed", spelled, CLI_LIST_MAX);
            return 0;
        }
        list->values[list->count++] = value;
        return 1;
    }
    }
    return 0;
}

/* Find the option named by arg ("--name[=v]" or "-s[v]"); *inline_value is
 * the text after '=' or after the short letter, or NULL. */
static const cli_opt *cli_find(const cli_opt *opts, const char *arg, const char **inline_value)
{
    *inline_value = NULL;
    if (arg[1] == '-') {
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        for (const cli_opt *o = opts; o->name; o++)
            if (strlen(o->name) == len && !strncmp(o->name, name, len)) {
                if (eq) *inline_value = eq + 1;
                return o;
            }
        return NULL;
    }
    for (const cli_opt *o = opts; o->name; o++)
        if (o->short_name && o->short_name == arg[1]) {
            if (arg[2]) *inline_value = arg + 2;
            return o;
        }
    return NULL;
}

/* Handle the option at argv[*i], advancing *i past a separate value. */
static int cli_parse_option(int argc, char **argv, int *i, const cli_opt *opts,
                            const cli_opt **found)
{
    const char *arg = argv[*i], *value;
    const cli_opt *o = cli_find(opts, arg, &value);
    char spelled[64];
    if (!o) {
        cli_usage_error("unknown option '%s'", arg);
        return 0;
    }
    if (arg[1] == '-')
        snprintf(spelled, sizeof spelled, "--%s", o->name);
    else
        snprintf(spelled, sizeof spelled, "-%c", o->short_name);
    if (o->kind == CLI_FLAG && value) {
        cli_usage_error("option '%s' takes no value", spelled);
        return 0;
    }
    if (o->kind != CLI_FLAG && !value) {
        if (*i + 1 >= argc) {
            cli_usage_error("option '%s' needs a value", spelled);
            return 0;
        }
        value = argv[++*i];
    }
    *found = o;
    return cli_store(o, spelled, value);
}

int cli_parse(int argc, char **argv, const cli_opt *opts, const char *usage,
              const char **positional, int npositional, int *exit_code)
{
    unsigned char seen[64] = {0};
    int npos = 0, only_operands = 0;
    *exit_code = CLI_EXIT_USAGE;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!only_operands && (!strcmp(arg, "--help") || !strcmp(arg, "-h"))) {
            fputs(usage, stdout);
            *exit_code = CLI_EXIT_OK;
            return 0;
        }
        if (!only_operands && !strcmp(arg, "--")) {
            only_operands = 1;
        } else if (!only_operands && arg[0] == '-' && arg[1]) {
            const cli_opt *o = NULL;
            if (!cli_parse_option(argc, argv, &i, opts, &o)) return 0;
            if (o - opts < (long)sizeof seen) seen[o - opts] = 1;
        } else if (npos < npositional) {
            positional[npos++] = arg;
        } else {
            cli_usage_error("unexpected argument '%s'", arg);
            return 0;
        }
    }
    for (const cli_opt *o = opts; o->name; o++)
        if (o->required && o - opts < (long)sizeof seen && !seen[o - opts]) {
            cli_usage_error("missing option --%s", o->name);
            return 0;
        }
    if (npos < npositional) {
        cli_usage_error("expected %d operand%s, got %d", npositional,
                        npositional == 1 ? "" : "s", npos);
        return 0;
    }
    return 1;
}

/* ---- JSON ---- */

void cli_json_string(FILE *f, const char *key, const char *s, const char *sep)
{
    fprintf(f, "\"%s\": \"", key);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fprintf(f, "\"%s", sep);
}

/* ---- time and progress ---- */

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cli_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_peak_memory(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lf kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib * 1024.0;
}

double cli_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cli_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The stage being reported, and where it started, for the rate; lines: 1
 * where the reports go to a log (not a terminal) as whole lines, one every
 * CLI_PROGRESS_LOG_S seconds and each stage's end, printed last at printed. */
enum { CLI_PROGRESS_LOG_S = 10 };
static struct {
    char stage[64];
    double t0, printed;
    int64_t done0, last;
    int lines;
} cli_prog;

static void cli_format_count(char *buf, size_t size, double v)
{
    if (v >= 1e6)
        snprintf(buf, size, "%.1fM", v / 1e6);
    else if (v >= 1e4)
        snprintf(buf, size, "%.1fk", v / 1e3);
    else if (v >= 10)
        snprintf(buf, size, "%.0f", v);
    else /* k-means iterations of a loaded machine: 0.2/s, not 0/s */
        snprintf(buf, size, "%.2g", v);
}

static void cli_format_seconds(char *buf, size_t size, double s)
{
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, size, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(buf, size, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, size, "%lds", t);
}

static void cli_progress(const char *stage, int64_t done, int64_t total, void *user)
{
    double now = cli_now();
    char rate_s[32] = "-", eta_s[32] = "-";
    (void)user;
    if (strncmp(stage, cli_prog.stage, sizeof cli_prog.stage - 1) || done < cli_prog.last) {
        snprintf(cli_prog.stage, sizeof cli_prog.stage, "%s", stage);
        cli_prog.t0 = now;
        cli_prog.done0 = done;
    }
    cli_prog.last = done;
    if (cli_prog.lines && done < total && now - cli_prog.printed < CLI_PROGRESS_LOG_S) return;
    cli_prog.printed = now;
    if (now > cli_prog.t0 && done > cli_prog.done0) {
        double rate = (double)(done - cli_prog.done0) / (now - cli_prog.t0);
        cli_format_count(rate_s, sizeof rate_s, rate);
        cli_format_seconds(eta_s, sizeof eta_s, (double)(total - done) / rate);
    }
    /* a terminal's line is rewritten in place, a log's lines follow each other */
    fprintf(stderr, "%s%s %" PRId64 "/%" PRId64 " (%.0f%%) %s/s ETA %s%s",
            cli_prog.lines ? "" : "\r", stage, done, total,
            total > 0 ? 100.0 * (double)done / (double)total : 100.0, rate_s, eta_s,
            cli_prog.lines ? "\n" : "   ");
    if (done >= total) {
        if (!cli_prog.lines) fputc('\n', stderr);
        cli_prog.stage[0] = '\0';
    }
    fflush(stderr);
}

void cli_progress_install(int log)
{
    cli_prog.lines = !isatty(STDERR_FILENO);
    if (!cli_prog.lines || log) simil_set_progress(cli_progress, NULL);
}

/* ---- files ---- */

int cli_read_float(const char *path, int64_t first, int64_t count, simil_matrix *out)
{
    simil_status st = simil_matrix_read_float(path, first, count, out);
    return st == SIMIL_OK ? CLI_EXIT_OK : cli_fail(st, path);
}

int cli_read_source(const char *spec, simil_matrix *out)
{
    simil_source *s;
    simil_status st = simil_source_open(&s, spec);
    if (st != SIMIL_OK) return cli_fail(st, spec);
    const int64_t rows = simil_source_rows(s), dim = simil_source_dim(s);
    int rc = CLI_EXIT_OK;
    float *x = NULL;
    if ((uint64_t)rows > SIZE_MAX / sizeof(float) / (uint64_t)dim ||
        !(x = malloc(sizeof(float) * (size_t)(rows * dim) + 1)))
        rc = cli_error("%s: %" PRId64 " x %" PRId64 " floats do not fit in memory", spec, rows,
                       dim);
    if (!rc && (st = simil_source_read(s, 0, rows, x)) != SIMIL_OK) rc = cli_fail(st, spec);
    simil_source_close(s);
    if (rc) {
        free(x);
        return rc;
    }
    simil_matrix m = {rows, dim, SIMIL_DTYPE_FLOAT32, x};
    *out = m;
    return CLI_EXIT_OK;
}

/* ---- ann-benchmarks files ---- */

int cli_is_ann_file(const char *path)
{
    return cli_ends_with(path, ".hdf5") || cli_ends_with(path, ".h5");
}

const char *cli_ann_dataset(const char *path, const char *dataset, char *out, size_t size)
{
    if (!path || !cli_is_ann_file(path)) return path;
    if (snprintf(out, size, "%s:%s", path, dataset) >= (int)size) return path;
    return out;
}

int cli_resolve_metric(const char *option, const char *path, simil_metric *metric)
{
    simil_metric declared = SIMIL_METRIC_L2;
    int has = 0;
    if (option && simil_metric_parse(option, metric) != SIMIL_OK)
        return cli_usage_error("--metric: '%s' is not l2, ip or cosine", option);
    simil_status st = path ? simil_dataset_metric(path, &declared, &has) : SIMIL_OK;
    if (st != SIMIL_OK) return cli_fail(st, path);
    if (!option) *metric = has ? declared : SIMIL_METRIC_L2;
    else if (has && *metric != declared)
        cli_warn("--metric %s contradicts %s, which declares %s distances; using %s", option,
                 path, simil_metric_name(declared), simil_metric_name(*metric));
    return CLI_EXIT_OK;
}

void cli_check_metric(const char *path, simil_metric metric)
{
    simil_metric declared;
    int has = 0;
    if (path && simil_dataset_metric(path, &declared, &has) == SIMIL_OK && has &&
        declared != metric)
        cli_warn("the index measures %s, but %s is meant for %s", simil_metric_name(metric), path,
                 simil_metric_name(declared));
}
