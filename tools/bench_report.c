/* tools/bench_report.c: the files "simil bench" leaves in its output folder
 * (see bench_report.h).  Results are written through a temporary file that
 * is fsynced and renamed, so a reader never sees half a file; the plot is a
 * generated gnuplot script (kept as plot.gp, to be edited and rerun) drawn by
 * a gnuplot child process, since simil links no plotting library. */
#define _XOPEN_SOURCE 700

#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

const char bench_csv_header[] = "dataset,index,params,k,build_seconds,memory_bytes,qps,"
                                "one_recall_at_1,one_recall_at_k,recall_k_at_k,recall_by,"
                                "backend,device";

enum { BENCH_PLOT_WIDTH = 1000, BENCH_PLOT_HEIGHT = 700 };

int bench_path(char *out, size_t size, const char *dir, const char *name)
{
    int len = snprintf(out, size, "%s/%s", dir, name);
    return len > 0 && (size_t)len < size;
}

/* ---- atomic files ---- */

/* An output file being written under a temporary name beside its path. */
typedef struct bench_file {
    FILE *f;
    char path[4096], tmp[4096 + 16];
} bench_file;

static int bench_file_open(bench_file *bf, const char *dir, const char *name)
{
    if (!bench_path(bf->path, sizeof bf->path, dir, name))
        return cli_error("%s/%s: path too long", dir, name);
    snprintf(bf->tmp, sizeof bf->tmp, "%s.tmp-XXXXXX", bf->path);
    int fd = mkstemp(bf->tmp);
    if (fd < 0) return cli_error("cannot create a file in %s: %s", dir, strerror(errno));
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    if (!(bf->f = fdopen(fd, "w"))) {
        close(fd);
        unlink(bf->tmp);
        return cli_error("%s: %s", bf->tmp, strerror(errno));
    }
    return CLI_EXIT_OK;
}

/* Flush, fsync and close the temporary file, then rename it to its path. */
static int bench_file_commit(bench_file *bf)
{
    int ok = !ferror(bf->f) && fflush(bf->f) == 0 && fsync(fileno(bf->f)) == 0;
    int err = errno;
    ok = fclose(bf->f) == 0 && ok;
    if (ok && rename(bf->tmp, bf->path) == 0) return CLI_EXIT_OK;
    if (ok) err = errno;
    unlink(bf->tmp);
    return cli_error("cannot write %s: %s", bf->path, strerror(err ? err : EIO));
}

/* ---- results ---- */

/* A CSV field, quoted when it holds a comma, quote or line break. */
static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* "key": "escaped s", with sep after it. */
static void json_field(FILE *f, const char *key, const char *s, const char *sep)
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

static void csv_row(FILE *f, const char *dataset, const bench_point *p)
{
    csv_field(f, dataset);
    fputc(',', f);
    csv_field(f, p->index);
    fputc(',', f);
    csv_field(f, p->params);
    fprintf(f, ",%" PRId64 ",%.6f,", p->k, p->build_seconds);
    if (p->memory_bytes >= 0) fprintf(f, "%" PRId64, p->memory_bytes);
    fprintf(f, ",%.1f,%.6f,%.6f,%.6f,%s,", p->qps, p->recall.one_at_1, p->recall.one_at_k,
            p->recall.k_at_k, p->recall.by_distance ? "distance" : "id");
    csv_field(f, p->backend);
    fputc(',', f);
    csv_field(f, p->device);
    fputc('\n', f);
}

static void json_object(FILE *f, const char *dataset, const bench_point *p)
{
    fputs("  {", f);
    json_field(f, "dataset", dataset, ", ");
    json_field(f, "index", p->index, ", ");
    json_field(f, "params", p->params, ", ");
    fprintf(f, "\"k\": %" PRId64 ", \"build_seconds\": %.6f, ", p->k, p->build_seconds);
    if (p->memory_bytes >= 0) fprintf(f, "\"memory_bytes\": %" PRId64 ", ", p->memory_bytes);
    else fputs("\"memory_bytes\": null, ", f);
    fprintf(f,
            "\"qps\": %.1f, \"one_recall_at_1\": %.6f, \"one_recall_at_k\": %.6f, "
            "\"recall_k_at_k\": %.6f, \"recall_by\": \"%s\", ",
            p->qps, p->recall.one_at_1, p->recall.one_at_k, p->recall.k_at_k,
            p->recall.by_distance ? "distance" : "id");
    json_field(f, "backend", p->backend, ", ");
    json_field(f, "device", p->device, "}");
}

int bench_results_write(const char *dir, const char *dataset, const bench_point *points,
                        size_t n)
{
    bench_file bf;
    int rc = bench_file_open(&bf, dir, "results.csv");
    if (rc) return rc;
    fprintf(bf.f, "%s\n", bench_csv_header);
    for (size_t i = 0; i < n; i++) csv_row(bf.f, dataset, &points[i]);
    if ((rc = bench_file_commit(&bf))) return rc;

    if ((rc = bench_file_open(&bf, dir, "results.json"))) return rc;
    fputs("[\n", bf.f);
    for (size_t i = 0; i < n; i++) {
        json_object(bf.f, dataset, &points[i]);
        fputs(i + 1 < n ? ",\n" : "\n", bf.f);
    }
    fputs("]\n", bf.f);
    return bench_file_commit(&bf);
}

/* ---- anchors ---- */

/* Parse a whole number field of s (leading and trailing blanks allowed). */
static int anchor_number(const char *s, double *out)
{
    char *end;
    while (*s == ' ' || *s == '\t') s++;
    if (!*s) return 0;
    errno = 0;
    *out = strtod(s, &end);
    while (*end == ' ' || *end == '\t') end++;
    return end != s && !*end && errno != ERANGE && isfinite(*out);
}

/* Split one line into label, recall and qps text; the label is unquoted
 * into label.  Returns NULL, or what is wrong. */
static const char *anchor_split(char *line, char *label, size_t size, char **fields)
{
    char *p = line;
    size_t len = 0;
    if (*p == '"') {
        for (p++;; p++) {
            if (!*p) return "unterminated quoted label";
            if (*p == '"' && p[1] != '"') break;
            if (*p == '"') p++;
            if (len + 1 >= size) return "label too long";
            label[len++] = *p;
        }
        p++;
    } else {
        for (; *p && *p != ','; p++) {
            if (len + 1 >= size) return "label too long";
            label[len++] = *p;
        }
    }
    label[len] = '\0';
    for (int i = 0; i < 2; i++) {
        if (*p != ',') return "want 3 fields: label,recall,qps";
        *p++ = '\0';
        fields[i] = p;
        p += strcspn(p, ",");
    }
    return *p ? "want 3 fields: label,recall,qps" : NULL;
}

/* Check one non-blank line and append its anchor; *header says whether a
 * header line may still come. */
static int anchor_line(const char *path, long lineno, char *line, int *header,
                       bench_anchor *a)
{
    char *fields[2];
    const char *why = anchor_split(line, a->label, sizeof a->label, fields);
    if (!why && !anchor_number(fields[0], &a->recall)) {
        if (*header) {
            *header = 0;
            return -1;
        }
        why = "recall is not a number";
    }
    *header = 0;
    if (!why && (a->recall < 0 || a->recall > 1)) why = "recall is outside [0, 1]";
    if (!why && (!anchor_number(fields[1], &a->qps) || a->qps <= 0))
        why = "qps is not a number > 0";
    if (why) return cli_error("%s:%ld: %s", path, lineno, why);
    return CLI_EXIT_OK;
}

int bench_anchors_read(const char *path, bench_anchor **out, size_t *n)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0, size = 0;
    long lineno = 0;
    int header = 1, rc = CLI_EXIT_OK;
    *out = NULL;
    *n = 0;
    if (!f) return cli_error("%s: %s", path, strerror(errno));
    while (!rc && getline(&line, &cap, f) >= 0) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[strspn(line, " \t")] || line[0] == '#') continue;
        if (*n == size) {
            size_t grow = size ? 2 * size : 16;
            bench_anchor *more = realloc(*out, grow * sizeof *more);
            if (!more) {
                rc = cli_error("out of memory reading %s", path);
                break;
            }
            *out = more;
            size = grow;
        }
        int r = anchor_line(path, lineno, line, &header, &(*out)[*n]);
        if (r == CLI_EXIT_OK) ++*n;
        else if (r > 0) rc = r;
    }
    if (!rc && ferror(f)) rc = cli_error("%s: read error", path);
    free(line);
    fclose(f);
    if (rc) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

/* ---- plot ---- */

/* A gnuplot string in single quotes (where '' is a quote). */
static void gp_string(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s == '\n' || *s == '\r' ? ' ' : *s, f);
    }
    fputc('\'', f);
}

/* Axis ranges that hold every point: recall from a multiple of 0.05 below
 * the lowest up to 1, QPS between powers of ten. */
static void gp_ranges(const bench_point *points, size_t n, const bench_anchor *anchors,
                      size_t nanchors, double *x0, double *y0, double *y1)
{
    double rmin = 1, qmin = INFINITY, qmax = 0;
    for (size_t i = 0; i < n + nanchors; i++) {
        double r = i < n ? points[i].recall.k_at_k : anchors[i - n].recall;
        double q = i < n ? points[i].qps : anchors[i - n].qps;
        if (r < rmin) rmin = r;
        if (q > 0 && q < qmin) qmin = q;
        if (q > qmax) qmax = q;
    }
    *x0 = floor((rmin - 0.02) * 20) / 20;
    if (*x0 < 0) *x0 = 0;
    if (qmax <= 0) qmin = qmax = 1;
    *y0 = pow(10, floor(log10(qmin) - 0.05));
    *y1 = pow(10, ceil(log10(qmax) + 0.05));
}

/* Points of index name (in their order) as a datablock; $P<id>. */
static void gp_index_block(FILE *f, size_t id, const bench_point *points, size_t n,
                           const char *name)
{
    fprintf(f, "$P%zu << EOD\n", id);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(points[i].index, name))
            fprintf(f, "%.6f %.3f\n", points[i].recall.k_at_k, points[i].qps);
    fputs("EOD\n", f);
}

static void gp_anchor_block(FILE *f, size_t id, const bench_anchor *a, size_t n,
                            const char *label)
{
    fprintf(f, "$A%zu << EOD\n", id);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(a[i].label, label)) fprintf(f, "%.6f %.3f\n", a[i].recall, a[i].qps);
    fputs("EOD\n", f);
}

static void gp_header(FILE *f, const char *title, int64_t k, double x0, double y0, double y1)
{
    fputs("# Recall-QPS plot written by 'simil bench'.  Redraw: gnuplot plot.gp\n"
          "if (!exists('outfile')) outfile = 'plot.png'\n"
          "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n", f);
    fprintf(f, "    set terminal pngcairo size %d,%d noenhanced font 'sans,11'\n",
            BENCH_PLOT_WIDTH, BENCH_PLOT_HEIGHT);
    fprintf(f, "} else {\n    set terminal png size %d,%d noenhanced\n}\n", BENCH_PLOT_WIDTH,
            BENCH_PLOT_HEIGHT);
    fputs("set output outfile\nset title ", f);
    gp_string(f, title);
    fprintf(f, "\nset xlabel 'recall %" PRId64 "@%" PRId64 "'\n", k, k);
    fputs("set ylabel 'queries per second (log scale)'\n"
          "set logscale y\nset format y '%.0s%c'\nset grid xtics ytics mytics\n"
          "set key below left Left reverse maxcols 3 width 2\n",
          f);
    fprintf(f, "set xrange [%.2f:1.005]\nset yrange [%g:%g]\n", x0, y0, y1);
}

/* Write the whole script: data blocks, then one plot command. */
static void gp_script(FILE *f, const char *title, int64_t k, const bench_point *points,
                      size_t n, const bench_anchor *anchors, size_t nanchors)
{
    double x0, y0, y1;
    size_t series = 0;
    gp_ranges(points, n, anchors, nanchors, &x0, &y0, &y1);
    gp_header(f, title, k, x0, y0, y1);
    for (size_t i = 0; i < n; i++) {
        size_t first = 0;
        while (strcmp(points[first].index, points[i].index)) first++;
        if (first == i) gp_index_block(f, i, points, n, points[i].index);
    }
    for (size_t i = 0; i < nanchors; i++) {
        size_t first = 0;
        while (strcmp(anchors[first].label, anchors[i].label)) first++;
        if (first == i) gp_anchor_block(f, i, anchors, nanchors, anchors[i].label);
    }
    fputs("plot", f);
    for (size_t i = 0; i < n; i++) {
        size_t first = 0;
        while (strcmp(points[first].index, points[i].index)) first++;
        if (first != i) continue;
        fprintf(f, "%s \\\n    $P%zu using 1:2 with linespoints lw 2 pt 7 ps 1.2 title ",
                series++ ? "," : "", i);
        gp_string(f, points[i].index);
    }
    for (size_t i = 0, a = 0; i < nanchors; i++) {
        size_t first = 0;
        while (strcmp(anchors[first].label, anchors[i].label)) first++;
        if (first != i) continue;
        static const int shapes[] = {5, 9, 11, 13, 4, 6, 8, 10, 12, 14};
        fprintf(f, "%s \\\n    $A%zu using 1:2 with points pt %d ps 1.8 title ",
                series++ ? "," : "", i, shapes[a++ % (sizeof shapes / sizeof *shapes)]);
        gp_string(f, anchors[i].label);
    }
    fputs("\n", f);
}

/* Absolute path of gnuplot on PATH into out, or 0 if there is none.  An
 * empty PATH entry means the current folder, as for execvp. */
static int gp_find(char *out, size_t size)
{
    static const char name[] = "/gnuplot";
    const char *path = getenv("PATH");
    char cwd[2048];
    size_t ncwd = getcwd(cwd, sizeof cwd) ? strlen(cwd) : 0;
    for (const char *p = path; p; p = strchr(p, ':') ? strchr(p, ':') + 1 : NULL) {
        size_t len = strcspn(p, ":"), at = 0;
        const char *dir = len ? p : ".";
        if (!len) len = 1;
        if (dir[0] != '/') {
            if (!ncwd || ncwd + 1 >= size) continue;
            memcpy(out, cwd, ncwd);
            out[ncwd] = '/';
            at = ncwd + 1;
        }
        if (at + len + sizeof name > size) continue;
        memcpy(out + at, dir, len);
        memcpy(out + at + len, name, sizeof name);
        if (access(out, X_OK) == 0) return 1;
    }
    return 0;
}

/* Run gnuplot in dir on plot.gp, drawing into plot.png.tmp. */
static int gp_run(const char *gnuplot, const char *dir)
{
    int status;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return cli_error("cannot start gnuplot: %s", strerror(errno));
    if (pid == 0) {
        char *argv[] = {"gnuplot", "-e", "outfile = 'plot.png.tmp'", "plot.gp", NULL};
        if (chdir(dir) == 0) execv(gnuplot, argv);
        _exit(127);
    }
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return cli_error("waiting for gnuplot: %s", strerror(errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return cli_error("gnuplot failed on %s/plot.gp (%s %d)", dir,
                         WIFEXITED(status) ? "exit status" : "signal",
                         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    return CLI_EXIT_OK;
}

int bench_plot(const char *dir, const char *title, int64_t k, const bench_point *points,
               size_t n, const bench_anchor *anchors, size_t nanchors)
{
    char gnuplot[4096], tmp[4096], png[4096];
    bench_file bf;
    struct stat sb;
    int rc = bench_file_open(&bf, dir, "plot.gp");
    if (rc) return rc;
    gp_script(bf.f, title, k, points, n, anchors, nanchors);
    if ((rc = bench_file_commit(&bf))) return rc;
    if (!gp_find(gnuplot, sizeof gnuplot)) {
        fprintf(stderr, "simil bench: warning: gnuplot is not on PATH (Debian package "
                        "gnuplot-nox): plot.png not drawn; %s/plot.gp draws it later\n",
                dir);
        return CLI_EXIT_OK;
    }
    if (!bench_path(tmp, sizeof tmp, dir, "plot.png.tmp") ||
        !bench_path(png, sizeof png, dir, "plot.png"))
        return cli_error("%s: path too long", dir);
    rc = gp_run(gnuplot, dir);
    if (!rc && (stat(tmp, &sb) != 0 || sb.st_size == 0))
        rc = cli_error("gnuplot wrote no picture to %s", tmp);
    if (!rc && rename(tmp, png) != 0) rc = cli_error("%s: %s", png, strerror(errno));
    if (rc) unlink(tmp);
    return rc;
}
