/* tools/bench_plot.c: the recall-QPS plot of "simil bench" (see bench.h),
 * drawn the way ann-benchmarks draws: recall on a logit axis, which spreads
 * 0.9, 0.99 and 0.999 evenly where a linear axis crowds them against 1, QPS
 * on a log axis, and for each index its Pareto frontier (the points no other
 * point of the same index beats on both recall and QPS) as a line, with the
 * other points as faint marks.  The plot is a generated gnuplot script (kept
 * as plot.gp, to be edited and rerun) drawn by a gnuplot child process, since
 * simil links no plotting library. */
#define _XOPEN_SOURCE 700

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

enum { BENCH_PLOT_WIDTH = 1000, BENCH_PLOT_HEIGHT = 700 };

/* Recall is drawn between the lowest tick at or below the lowest recall and
 * 1 - 1e-4; recall of 1 (or above 0.9999) sits on the right edge, whose tick
 * says so. */
static const double gp_ticks[] = {0.01, 0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95,
                                  0.98, 0.99, 0.995, 0.999, 0.9999};
enum { GP_NTICKS = sizeof gp_ticks / sizeof gp_ticks[0] };

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

/* The series a point belongs to: its index, and its mode when the run
 * measured both modes. */
static void gp_series_name(const bench_point *p, int both_modes, char *out, size_t size)
{
    if (snprintf(out, size, "%s%s%s%s", p->index, both_modes ? " (" : "",
                 both_modes ? p->mode : "", both_modes ? ")" : "") < 0)
        out[0] = '\0';
}

static int gp_same_series(const bench_point *a, const bench_point *b, int both_modes)
{
    return !strcmp(a->index, b->index) && (!both_modes || !strcmp(a->mode, b->mode));
}

/* Axis ranges that hold every point: recall from a tick at or below the
 * lowest, QPS between powers of ten. */
static void gp_ranges(const bench_point *points, size_t n, const bench_anchor *anchors,
                      size_t nanchors, int *first_tick, double *y0, double *y1)
{
    double rmin = 1, qmin = INFINITY, qmax = 0;
    for (size_t i = 0; i < n + nanchors; i++) {
        double r = i < n ? points[i].recall.k_at_k : anchors[i - n].recall;
        double q = i < n ? points[i].qps : anchors[i - n].qps;
        if (r < rmin) rmin = r;
        if (q > 0 && q < qmin) qmin = q;
        if (q > qmax) qmax = q;
    }
    *first_tick = 0;
    while (*first_tick + 1 < GP_NTICKS - 1 && gp_ticks[*first_tick + 1] <= rmin) ++*first_tick;
    if (qmax <= 0) qmin = qmax = 1;
    *y0 = pow(10, floor(log10(qmin) - 0.05));
    *y1 = pow(10, ceil(log10(qmax) + 0.05));
}

static int gp_cmp_recall_down(const void *pa, const void *pb)
{
    const bench_point *a = *(const bench_point *const *)pa, *b = *(const bench_point *const *)pb;
    if (a->recall.k_at_k != b->recall.k_at_k) return a->recall.k_at_k < b->recall.k_at_k ? 1 : -1;
    return (a->qps < b->qps) - (a->qps > b->qps);
}

/* Points of the series of points[first] as two datablocks: $F<id>, its
 * Pareto frontier in increasing recall, and $P<id>, all its points. */
static void gp_series_blocks(FILE *f, size_t id, const bench_point *points, size_t n,
                             size_t first, int both_modes)
{
    const bench_point **mine = malloc(n * sizeof *mine);
    size_t m = 0;
    for (size_t i = 0; mine && i < n; i++)
        if (gp_same_series(&points[i], &points[first], both_modes)) mine[m++] = &points[i];
    fprintf(f, "$P%zu << EOD\n", id);
    for (size_t i = 0; i < m; i++) fprintf(f, "%.6f %.3f\n", mine[i]->recall.k_at_k, mine[i]->qps);
    fputs("EOD\n", f);
    /* by recall, best first: a point is on the frontier when it is faster
     * than every point of higher recall */
    if (mine) qsort(mine, m, sizeof *mine, gp_cmp_recall_down);
    size_t kept = 0;
    double fastest = -1;
    for (size_t i = 0; i < m; i++)
        if (mine[i]->qps > fastest) {
            fastest = mine[i]->qps;
            mine[kept++] = mine[i];
        }
    fprintf(f, "$F%zu << EOD\n", id);
    for (size_t i = kept; i-- > 0;)
        fprintf(f, "%.6f %.3f\n", mine[i]->recall.k_at_k, mine[i]->qps);
    fputs("EOD\n", f);
    free(mine);
}

static void gp_anchor_block(FILE *f, size_t id, const bench_anchor *a, size_t n,
                            const char *label)
{
    fprintf(f, "$A%zu << EOD\n", id);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(a[i].label, label)) fprintf(f, "%.6f %.3f\n", a[i].recall, a[i].qps);
    fputs("EOD\n", f);
}

static void gp_header(FILE *f, const char *title, int64_t k, int first_tick, double y0,
                      double y1)
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
    fputs("\n# recall on a logit axis; recall of 1 is drawn at 1 - 1e-4, the right edge\n"
          "clip(r) = r > 0.9999 ? 0.9999 : (r < 0.0001 ? 0.0001 : r)\n"
          "logit(r) = log10(clip(r) / (1 - clip(r)))\n",
          f);
    fprintf(f, "set xlabel 'recall %" PRId64 "@%" PRId64 " (logit scale)'\n", k, k);
    fputs("set xtics (", f);
    for (int t = first_tick; t < GP_NTICKS; t++) {
        char label[16];
        snprintf(label, sizeof label, t == GP_NTICKS - 1 ? ">=%g" : "%g", gp_ticks[t]);
        fprintf(f, "%s'%s' logit(%g)", t > first_tick ? ", " : "", label, gp_ticks[t]);
    }
    fputs(")\n", f);
    fputs("set ylabel 'queries per second (log scale)'\n"
          "set logscale y\nset format y '%.0s%c'\nset grid xtics ytics mytics\n"
          "set key below left Left reverse maxcols 3 width 2\n",
          f);
    fprintf(f, "set xrange [logit(%g) - 0.05:logit(0.9999) + 0.05]\nset yrange [%g:%g]\n",
            gp_ticks[first_tick], y0, y1);
}

/* Write the whole script: data blocks, then one plot command. */
static void gp_script(FILE *f, const char *title, int64_t k, const bench_point *points,
                      size_t n, const bench_anchor *anchors, size_t nanchors)
{
    static const int shapes[] = {5, 9, 11, 13, 4, 6, 8, 10, 12, 14};
    int first_tick, both_modes = 0;
    double y0, y1;
    size_t series = 0, colour = 0;
    for (size_t i = 1; i < n; i++) both_modes |= strcmp(points[i].mode, points[0].mode) != 0;
    gp_ranges(points, n, anchors, nanchors, &first_tick, &y0, &y1);
    gp_header(f, title, k, first_tick, y0, y1);
    for (size_t i = 0; i < n; i++) {
        size_t first = 0;
        while (!gp_same_series(&points[first], &points[i], both_modes)) first++;
        if (first == i) gp_series_blocks(f, i, points, n, i, both_modes);
    }
    for (size_t i = 0; i < nanchors; i++) {
        size_t first = 0;
        while (strcmp(anchors[first].label, anchors[i].label)) first++;
        if (first == i) gp_anchor_block(f, i, anchors, nanchors, anchors[i].label);
    }
    fputs("plot", f);
    for (size_t i = 0; i < n; i++) {
        size_t first = 0;
        char name[300];
        while (!gp_same_series(&points[first], &points[i], both_modes)) first++;
        if (first != i) continue;
        colour++;
        gp_series_name(&points[i], both_modes, name, sizeof name);
        fprintf(f,
                "%s \\\n    $P%zu using (logit($1)):2 with points pt 6 ps 0.9 lc %zu notitle,"
                " \\\n    $F%zu using (logit($1)):2 with linespoints lw 2 pt 7 ps 1.2 lc %zu "
                "title ",
                series++ ? "," : "", i, colour, i, colour);
        gp_string(f, name);
    }
    for (size_t i = 0, a = 0; i < nanchors; i++) {
        size_t first = 0;
        while (strcmp(anchors[first].label, anchors[i].label)) first++;
        if (first != i) continue;
        fprintf(f, "%s \\\n    $A%zu using (logit($1)):2 with points pt %d ps 1.8 lc %zu title ",
                series++ ? "," : "", i, shapes[a++ % (sizeof shapes / sizeof *shapes)],
                ++colour);
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
